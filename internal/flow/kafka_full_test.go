//go:build full

package flow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/pgtest"
)

// buildFull compiles trellara-full (build tag full) for child processes.
func buildFull(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "trellara-full")
	cmd := exec.Command("go", "build", "-tags", "full", "-o", out, "github.com/trellara/trellara/cmd/trellara-full")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build trellara-full: %v\n%s", err, b)
	}
	return out
}

// kafkaFlowConfig is a development flow over transport.kafka.
// kafka holds extra transport.kafka lines (e.g. the mode).
func kafkaFlowConfig(src, dst *pgtest.Cluster, brokers []string, kafka ...string) string {
	return fmt.Sprintf(`version: 2
environment: development
flow: kflow
source:
  id: src1
  database_url: '%s'
  owns_slot: true
  tables: [public.orders, public.line_items, public.counters]
transport:
  kafka:
    brokers: [%s]
    profile: development
    state_dir: state
%starget:
  database_url: '%s'
  create_tables: true
run: {evaluate: true}
`, src.URL("postgres"), strings.Join(brokers, ", "), indent(kafka), dst.URL("postgres"))
}

// kafkaHarness runs trellara-full against one source, one target and a
// three-broker kfake cluster that lives in the test process, so it
// outlives every child it kills.
type kafkaHarness struct {
	t        *testing.T
	bin, dir string
	cfg      string
	src, dst *pgtest.Cluster
	kc       *kfake.Cluster
	next     int // next workload transaction id
	rng      *rand.Rand
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

func newKafkaHarness(t *testing.T, kafka ...string) *kafkaHarness {
	pgtest.Require(t)
	h := &kafkaHarness{t: t, bin: buildFull(t), dir: t.TempDir(), rng: rand.New(rand.NewPCG(18, 4)), next: 1}
	h.src = pgtest.Start(t, pgtest.Options{})
	h.dst = pgtest.Start(t, pgtest.Options{})
	h.src.Exec(t, crashSchema)
	kc, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	h.kc = kc
	h.cfg = filepath.Join(h.dir, "trellara.yml")
	if err := os.WriteFile(h.cfg, []byte(kafkaFlowConfig(h.src, h.dst, kc.ListenAddrs(), kafka...)), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *kafkaHarness) cmd(args ...string) *exec.Cmd {
	c := exec.Command(h.bin, args...)
	c.Dir = h.dir
	return c
}

// workload commits n transactions on the source.
func (h *kafkaHarness) workload(n int) {
	h.t.Helper()
	ctx := context.Background()
	conn := h.src.Connect(ctx)
	defer conn.Close(ctx)
	for i := 0; i < n; i++ {
		if err := workloadTxn(ctx, conn, h.next, h.rng); err != nil {
			h.t.Fatal(err)
		}
		h.next++
	}
}

// runVerify is `run --local --verify --format json`; it must end CONVERGED.
func (h *kafkaHarness) runVerify() map[string]any {
	h.t.Helper()
	out, err := h.cmd("run", "--config", h.cfg, "--local", "--verify", "--format", "json").Output()
	var stderr []byte
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		stderr = ee.Stderr
	}
	if err != nil {
		h.t.Fatalf("run --local --verify: %v\n%s\n%s", err, out, stderr)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		h.t.Fatalf("run output: %v\n%s", err, out)
	}
	v, _ := res["verify"].(map[string]any)
	if v == nil || v["verdict"] != "CONVERGED" {
		h.t.Fatalf("run --local --verify did not end CONVERGED:\n%s", out)
	}
	if tr, _ := res["transport"].(map[string]any); tr == nil || tr["kind"] != "kafka" {
		h.t.Fatalf("run used transport %v, want kafka", res["transport"])
	}
	return res
}

// same checks that every source transaction is on the target exactly
// once: each transaction bumps a counter, so a lost one leaves a counter
// short and a doubled one leaves it long.
func (h *kafkaHarness) same() {
	h.t.Helper()
	ctx := context.Background()
	q := `SELECT (SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM counters),
	             (SELECT count(*) FROM orders), (SELECT count(*) FROM line_items)`
	read := func(c *pgtest.Cluster) string {
		conn := c.Connect(ctx)
		defer conn.Close(ctx)
		var counters string
		var orders, items int64
		if err := conn.QueryRow(ctx, q).Scan(&counters, &orders, &items); err != nil {
			h.t.Fatal(err)
		}
		return fmt.Sprintf("counters %s; %d orders; %d line items", counters, orders, items)
	}
	s, d := read(h.src), read(h.dst)
	if s != d {
		h.t.Fatalf("target differs from source:\nsource %s\ntarget %s", s, d)
	}
	if want := fmt.Sprintf("%d orders", h.next-1); !strings.Contains(d, want) {
		h.t.Fatalf("target %s, want %s", d, want)
	}
}

// targetOrders counts the target's orders.
func (h *kafkaHarness) targetOrders() int {
	h.t.Helper()
	ctx := context.Background()
	conn := h.dst.Connect(ctx)
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
		return -1 // not created yet
	}
	return n
}

// confirmedFlush is the slot's confirmed_flush_lsn, as text.
func (h *kafkaHarness) confirmedFlush(conn *pgx.Conn) string {
	var lsn string
	if err := conn.QueryRow(context.Background(),
		"SELECT coalesce(confirmed_flush_lsn::text, '') FROM pg_replication_slots WHERE slot_name = 'trellara_kflow'").Scan(&lsn); err != nil {
		h.t.Fatal(err)
	}
	return lsn
}

// killOnProduce starts `run --local` and SIGKILLs it from inside the
// cluster when its relay's first produce request arrives. written decides
// whether the cluster then writes the request's records (the relay dies
// after its records are in the topic, before it could acknowledge the
// slot) or drops them (the relay dies before they are durable). Before a
// dropped request is killed, the relay is given until its slot moves (or
// 10 s): a relay that acknowledged the source before the cluster
// acknowledged the records has moved it by then.
func (h *kafkaHarness) killOnProduce(written bool) {
	h.t.Helper()
	child := h.cmd("run", "--config", h.cfg, "--local")
	if err := child.Start(); err != nil {
		h.t.Fatal(err)
	}
	var fired atomic.Bool
	conn := h.src.Connect(context.Background())
	defer conn.Close(context.Background())
	before := h.confirmedFlush(conn)
	// The relay is the cluster's only producer.
	h.kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !written {
			h.kc.SleepControl(func() {
				for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && h.confirmedFlush(conn) == before; {
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
		fired.Store(true)
		_ = child.Process.Signal(syscall.SIGKILL)
		_, _ = child.Process.Wait()
		if written {
			h.kc.DropControl()
			return nil, nil, false // the cluster writes the records
		}
		return nil, errors.New("relay killed"), true // connection closed, nothing written
	})
	err := child.Wait()
	if !fired.Load() {
		h.t.Fatalf("run --local ended (%v) without producing", err)
	}
}

// killOnOffsetCommit starts `run --local` and SIGKILLs it from inside the
// cluster when its applier commits a group offset after it has applied
// something (the target holds more orders than before the run): the
// applier dies between its target commit and its group-offset commit,
// and the commit is never answered. The restart resumes from the
// target's checkpoint, which is ahead of the group offset.
func (h *kafkaHarness) killOnOffsetCommit() {
	h.t.Helper()
	ctx := context.Background()
	dst := h.dst.Connect(ctx)
	defer dst.Close(ctx)
	orders := func() int64 {
		var n int64
		if err := dst.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
			h.t.Error(err)
		}
		return n
	}
	// A run that applies and commits its group offset before the control
	// sees the applied rows gives the kill no moment to land: each such
	// run is reported, and the workload is extended for another attempt.
	for attempt := 1; ; attempt++ {
		before := orders()
		child := h.cmd("run", "--config", h.cfg, "--local")
		if err := child.Start(); err != nil {
			h.t.Fatal(err)
		}
		var fired atomic.Bool
		h.kc.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
			if fired.Load() || orders() == before {
				return nil, nil, false // a rewind before applying: let it through
			}
			fired.Store(true)
			_ = child.Process.Signal(syscall.SIGKILL)
			_, _ = child.Process.Wait()
			h.kc.DropControl()
			return nil, errors.New("applier killed"), true
		})
		err := child.Wait()
		if fired.Load() {
			return
		}
		h.kc.DropControl()
		msg := fmt.Sprintf("attempt %d: run --local ended (%v) without committing a group offset after applying (orders %d before, %d after)",
			attempt, err, before, orders())
		if attempt == 3 {
			h.t.Fatal(msg)
		}
		h.t.Log(msg)
		h.workload(10)
	}
}

// TestKafkaFlowEndToEnd: source → relay → Kafka (three kfake brokers) →
// applier → target through the trellara-full CLI. A first run snapshots
// and ends CONVERGED; a restarted run resumes from the topic and the
// target checkpoint and applies each new transaction once; a relay killed
// after its records are in the topic, before it acknowledged the slot,
// and one killed before its records were written, each restart to
// CONVERGED with nothing lost and nothing applied twice.
func TestKafkaFlowEndToEnd(t *testing.T) {
	h := newKafkaHarness(t)
	h.workload(40)
	h.runVerify()
	h.same()
	if _, err := os.Stat(filepath.Join(h.dir, "state", "snapshot.done")); err != nil {
		t.Fatalf("state_dir holds no snapshot marker: %v", err)
	}

	// Restart: the second run resumes, nothing is published or applied twice.
	h.workload(40)
	res := h.runVerify()
	h.same()
	tr, _ := res["this_run"].(map[string]any)
	if n, _ := tr["transactions_applied"].(float64); n < 40 {
		t.Fatalf("the restarted run applied %v transactions, want the 40 new ones (and its fences)", tr)
	}

	t.Run("relay killed after produce, before slot acknowledgement", func(t *testing.T) {
		h.t = t
		h.workload(40)
		h.killOnProduce(true)
		h.runVerify()
		h.same()
	})
	t.Run("relay killed before its records are durable", func(t *testing.T) {
		h.t = t
		h.workload(40)
		h.killOnProduce(false)
		h.runVerify()
		h.same()
	})
	t.Run("applier killed between target commit and group-offset commit", func(t *testing.T) {
		h.t = t
		h.workload(40)
		h.killOnOffsetCommit()
		h.runVerify()
		h.same()
	})
}

// TestKafkaPartitionedFlow: the same loop in partitioned mode (three data
// partitions and the manifest partition). Each run ends CONVERGED with
// every counter exact: after a snapshot; after the relay is killed when
// its first produce request (chunks, before any manifest) is written;
// after the applier is killed between its target commit and its
// group-offset commit; and after broker faults injected through kfake
// (acknowledgements lost after the write, NOT_LEADER_FOR_PARTITION, and
// every partition's leader moved) during a run.
func TestKafkaPartitionedFlow(t *testing.T) {
	h := newKafkaHarness(t, "mode: partitioned", "partitions: 3")
	h.workload(30)
	res := h.runVerify()
	h.same()
	if tr, _ := res["transport"].(map[string]any); !strings.Contains(fmt.Sprint(tr["broker"]), "partitioned mode") {
		t.Fatalf("transport = %v, want partitioned mode", tr)
	}
	t.Run("relay killed after its chunks are written, before the manifests", func(t *testing.T) {
		h.t = t
		h.workload(30)
		h.killOnProduce(true)
		h.runVerify()
		h.same()
	})
	t.Run("applier killed between target commit and group-offset commit", func(t *testing.T) {
		h.t = t
		h.workload(30)
		h.killOnOffsetCommit()
		h.runVerify()
		h.same()
	})
	t.Run("broker faults: ambiguous acknowledgement, broker errors, leader moves", func(t *testing.T) {
		h.t = t
		h.workload(30)
		topic := "trellara.kflow"
		lost := h.kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut, Count: 3})
		h.kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 3})
		h.kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.NotLeaderForPartition, Count: 3})
		for p := int32(0); p <= 3; p++ {
			if err := h.kc.MoveTopicPartition(topic, p, (h.kc.LeaderFor(topic, p)+1)%3); err != nil {
				t.Fatal(err)
			}
		}
		h.runVerify()
		h.same()
		if lost.Hits() == 0 {
			t.Fatal("no acknowledgement was lost: the fault never fired")
		}
		// A restart after the faults converges too.
		h.workload(10)
		h.runVerify()
		h.same()
	})
}

// TestKafkaServiceRoles: the long-running service over Kafka in
// partitioned mode, as two processes, `run --role relay` and `run --role
// applier`. Transactions committed before and while they run reach the
// target exactly once; the applier's /metrics keep the contract's three
// labels; `status --format json` shows the topic's partitions, their high
// watermarks, the group's lag per partition (0 once caught up) and the
// produce acknowledgement beside the slot. After SIGTERM, a verify run
// ends CONVERGED.
func TestKafkaServiceRoles(t *testing.T) {
	h := newKafkaHarness(t, "mode: partitioned", "partitions: 3")
	relayPort, applierPort := freePort(t), freePort(t)
	b, err := os.ReadFile(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(string(b), "run: {evaluate: true}",
		fmt.Sprintf(`run: {evaluate: true, listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}}`, relayPort, applierPort), 1)
	if err := os.WriteFile(h.cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	h.workload(20)
	var children []*exec.Cmd
	for _, role := range []string{"relay", "applier"} {
		c := h.cmd("run", "--config", h.cfg, "--role", role)
		c.Stderr = &prefixWriter{t: t, prefix: role + ": "}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, c)
	}
	defer func() {
		for _, c := range children {
			_ = c.Process.Kill()
			_, _ = c.Process.Wait()
		}
	}()
	// Wait until the group has no lag and the target holds every order
	// (bounded, so a stuck service fails with what status last said).
	var st map[string]any
	waitCaughtUp := func() {
		for start := time.Now(); ; {
			sc := h.cmd("status", "--config", h.cfg, "--format", "json")
			var serr bytes.Buffer
			sc.Stderr = &serr
			out, err := sc.Output()
			if len(out) == 0 {
				t.Logf("status stderr: %s", serr.String())
			}
			if err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) { // exit 1 is a problem report, still JSON
					t.Fatalf("status: %v\n%s", err, out)
				}
			}
			if err := json.Unmarshal(out, &st); err != nil {
				t.Fatalf("status output: %v\n%s", err, out)
			}
			if kafkaCaughtUp(st) && h.targetOrders() == h.next-1 {
				return
			}
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("the service did not catch up to %d orders; status says:\n%s", h.next-1, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitCaughtUp() // the snapshot
	h.workload(20)
	waitCaughtUp() // streamed through the relay, the topic and the applier
	k := st["kafka"].(map[string]any)
	if hw := k["partitions"].([]any)[0].(map[string]any)["high_watermark"].(float64); hw < 20 {
		t.Fatalf("the manifest partition holds %v records; the 20 streamed transactions did not go through the topic", hw)
	}
	parts := k["partitions"].([]any)
	if len(parts) != 4 || k["mode"] != "partitioned" || k["topic"] != "trellara.kflow" {
		t.Fatalf("status kafka = %v, want topic trellara.kflow with 4 partitions in partitioned mode", k)
	}
	if k["produce_acked_commit_lsn"] == "" || k["slot_confirmed_flush_lsn"] == "" {
		t.Fatalf("status kafka shows no produce acknowledgement or slot position: %v", k)
	}
	for role, port := range map[string]int{"applier": applierPort, "relay": relayPort} {
		_, metrics := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		for _, label := range []string{`service="` + role + `"`, `source_id="src1"`, `dataset_id="kflow"`} {
			if !strings.Contains(metrics, label) {
				t.Fatalf("%s /metrics lack %s", role, label)
			}
		}
	}
	for _, c := range children {
		_ = c.Process.Signal(syscall.SIGTERM)
		if err := c.Wait(); err != nil {
			t.Fatalf("%s after SIGTERM: %v", strings.Join(c.Args[1:], " "), err)
		}
	}
	children = nil
	h.same()
	h.runVerify()
}

// kafkaCaughtUp: status shows the default group with lag 0 on the
// manifest partition of a topic that holds records.
func kafkaCaughtUp(st map[string]any) bool {
	k, _ := st["kafka"].(map[string]any)
	if k == nil {
		return false
	}
	parts, _ := k["partitions"].([]any)
	groups, _ := k["consumer_groups"].([]any)
	if len(parts) == 0 || len(groups) == 0 {
		return false
	}
	if hw, _ := parts[0].(map[string]any)["high_watermark"].(float64); hw == 0 {
		return false
	}
	g := groups[0].(map[string]any)
	for _, p := range g["partitions"].([]any) {
		pm := p.(map[string]any)
		if pm["partition"].(float64) == 0 && pm["lag"].(float64) != 0 {
			return false
		}
	}
	return true
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// prefixWriter logs a child's stderr through t.
type prefixWriter struct {
	t      *testing.T
	prefix string
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(p), nil
}

// TestKafkaEditionVersion: the full edition's --version names what it
// carries beyond the default edition, the Kafka transport's two modes.
func TestKafkaEditionVersion(t *testing.T) {
	if v := buildinfo.String(); !strings.Contains(v, "full edition: Kafka transport (strict and partitioned modes)") {
		t.Fatalf("--version says %q; the full edition must name the Kafka transport and its modes", v)
	}
}

// A Kafka flow at rest (its slot inactive, no local lock to tell) verifies
// without a fence: CONVERGED when caught up, again and again, and BEHIND
// naming the one transaction committed since.
func TestKafkaVerifyAtRest(t *testing.T) {
	h := newKafkaHarness(t)
	h.workload(10)
	h.runVerify()
	verify := func() (map[string]any, int) {
		t.Helper()
		out, err := h.cmd("verify", "--config", h.cfg, "--format", "json").Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var res map[string]any
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("verify output: %v\n%s", err, out)
		}
		return res, code
	}
	pending := func(res map[string]any) map[string]any {
		wm, _ := res["watermark"].(map[string]any)
		p, _ := wm["pending"].(map[string]any)
		return p
	}
	for i := range 3 {
		if res, code := verify(); code != 0 || res["verdict"] != "CONVERGED" || pending(res)["transactions"] != float64(0) {
			t.Fatalf("verify %d of the Kafka flow at rest: exit %d, want CONVERGED with nothing pending: %v", i+1, code, res)
		}
	}
	h.workload(1)
	res, code := verify()
	if p := pending(res); code != 3 || res["verdict"] != "BEHIND" || p["transactions"] != float64(1) || p["in_slot"] != float64(1) {
		t.Fatalf("verify after one committed transaction at rest: exit %d, want BEHIND with 1 pending at the source: %v", code, res)
	}
	h.runVerify()
}
