package flow_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

// The long-running service: health endpoints, contract metrics, replication
// while it runs, a bad SIGHUP reload refused without disruption, and a
// SIGTERM drain that leaves the slot confirmed exactly at what is durable.
func TestServiceHealthMetricsReloadDrain(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{})
	dst := pgtest.Start(t, pgtest.Options{})
	src.Exec(t, crashSchema)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	relayPort, applierPort := freePort(t), freePort(t)
	writeCfg := func(extra string) {
		body := fmt.Sprintf(`version: 2
flow: svc
source:
  id: src1
  database_url: %q
  owns_slot: true
  tables: [public.orders, public.line_items, public.counters]
transport:
  local: {dir: %s, fsync: always, retention: {max_bytes: 1GiB}}
target:
  database_url: %q
  create_tables: true
run:
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
%s`, src.URL("postgres"), filepath.Join(dir, "data"), dst.URL("postgres"), relayPort, applierPort, extra)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg("")
	cmd := exec.Command(bin, "run", "--config", cfg)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addrs := make(chan [2]string, 4)
	// Every stderr line is a JSON log record; records are kept by message.
	var (
		logMu    sync.Mutex
		records  = map[string][]map[string]any{}
		notJSON  []string
		stderrOK = make(chan struct{})
	)
	go func() {
		defer close(stderrOK)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec map[string]any
			logMu.Lock()
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				notJSON = append(notJSON, sc.Text())
			} else {
				msg, _ := rec["msg"].(string)
				records[msg] = append(records[msg], rec)
			}
			logMu.Unlock()
			if rec["msg"] == "listening" {
				addrs <- [2]string{rec["component"].(string), rec["addr"].(string)}
			}
			t.Log(sc.Text())
		}
	}()
	endpoints := map[string]string{}
	for len(endpoints) < 2 {
		select {
		case a := <-addrs:
			endpoints[a[0]] = "http://" + a[1]
		case <-time.After(60 * time.Second):
			t.Fatalf("service did not start listening (%v)", endpoints)
		}
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitReady := func() {
		for i := 0; ; i++ {
			r, _ := get(endpoints["relay"] + "/readyz")
			a, _ := get(endpoints["applier"] + "/readyz")
			if r == 200 && a == 200 {
				return
			}
			if i > 600 {
				t.Fatalf("not ready: relay %d applier %d", r, a)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReady()
	if code, _ := get(endpoints["relay"] + "/livez"); code != 200 {
		t.Fatalf("/livez %d", code)
	}

	// Replication while it runs.
	ctx := context.Background()
	conn := src.Connect(ctx)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 1; i <= 50; i++ {
		if err := workloadTxn(ctx, conn, i, rng); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		_ = dst.Connect(ctx).QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n)
		if n == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("target has %d of 50 orders", n)
		}
		time.Sleep(100 * time.Millisecond)
	}

	checkServiceMetrics(t, endpoints, get, records, &logMu)

	// A bad reload is refused; the service keeps replicating.
	writeCfg("bogus_key: 1\n")
	_ = cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(500 * time.Millisecond)
	waitReady()
	// A good reload restarts the components and they come back ready.
	writeCfg("")
	_ = cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(500 * time.Millisecond)
	waitReady()

	// Drain.
	if err := workloadTxn(ctx, conn, 51, rng); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-stderrOK: // the process closed stderr: it is exiting
	case <-time.After(30 * time.Second):
		t.Fatal("service did not stop on SIGTERM")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("service exit after SIGTERM: %v", err)
	}
	si, err := relay.LookupSlot(ctx, conn, "trellara_svc")
	if err != nil || !si.Exists {
		t.Fatalf("slot: %v %+v", err, si)
	}

	// Logs: JSON only; the version at startup; the shutdown line names the
	// LSN the slot was confirmed at, in X/X form.
	if len(notJSON) > 0 {
		t.Errorf("stderr lines that are not JSON log records: %q", notJSON)
	}
	start := records["trellara starting"]
	if len(start) != 1 || start[0]["version"] == "" || start[0]["version"] == nil || start[0]["go_version"] != runtime.Version() {
		t.Errorf("startup records %v: want one with version, commit and go_version", start)
	}
	down := records["shut down"]
	if len(down) != 1 {
		t.Fatalf("shutdown records %v", down)
	}
	if got := down[0]["confirmed_lsn"]; got != lsn.Format(si.ConfirmedFlush) {
		t.Errorf("shutdown line confirmed_lsn %v, slot confirmed_flush_lsn %s", got, lsn.Format(si.ConfirmedFlush))
	}
	if got, _ := down[0]["checkpoint_lsn"].(string); !regexp.MustCompile(`^[0-9A-F]+/[0-9A-F]+$`).MatchString(got) {
		t.Errorf("shutdown line checkpoint_lsn %q, want X/X", got)
	}
	var n int
	_ = dst.Connect(ctx).QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	if n != 51 {
		t.Fatalf("target has %d of 51 orders after drain", n)
	}
	log, _, err := segmentlog.Open(filepath.Join(dir, "data", "log"), segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	res, err := relay.ResumeFrom(ctx, transport.Local{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if si.ConfirmedFlush > res.DurableEnd && si.ConfirmedFlush != 0 {
		// Idle advancement may confirm past the last transaction only when
		// nothing of ours was pending; the last unit is the fence-free
		// workload transaction, so compare with the server's view instead.
		t.Logf("slot confirmed %s, log durable end %s (idle advancement)", lsn.Format(si.ConfirmedFlush), lsn.Format(res.DurableEnd))
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

func (s sample) key() string {
	keys := make([]string, 0, len(s.labels))
	for k, v := range s.labels {
		keys = append(keys, k+"="+v)
	}
	slices.Sort(keys)
	return s.name + "{" + strings.Join(keys, ",") + "}"
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func parseMetrics(t *testing.T, body string) []sample {
	t.Helper()
	var out []sample
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unparsable /metrics line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[lp[1]] = lp[2]
		}
		out = append(out, s)
	}
	return out
}

func find(samples []sample, name string) (sample, bool) {
	for _, s := range samples {
		if s.name == name {
			return s, true
		}
	}
	return sample{}, false
}

// checkServiceMetrics: each port serves its own role's series with the
// contract labels; the process-level series and trellara_build_info only
// on the relay's; LSNs as *_lsn_bytes gauges that agree with /healthz;
// the apply-latency histogram holds every applied transaction; the
// source and target pollers report slot WAL and the quarantine count.
func checkServiceMetrics(t *testing.T, endpoints map[string]string, get func(string) (int, string),
	records map[string][]map[string]any, logMu *sync.Mutex) {
	t.Helper()
	var relayS, applierS []sample
	for i := 0; ; i++ {
		_, rb := get(endpoints["relay"] + "/metrics")
		_, ab := get(endpoints["applier"] + "/metrics")
		relayS, applierS = parseMetrics(t, rb), parseMetrics(t, ab)
		missing := ""
		for _, want := range []struct {
			samples []sample
			name    string
		}{
			{relayS, "trellara_relay_published_units_total"}, {relayS, "trellara_relay_slot_retained_wal_bytes"},
			{relayS, "trellara_relay_lag_bytes"}, {relayS, "trellara_log_retained_bytes"},
			{applierS, "trellara_applier_quarantine_open"}, {applierS, "trellara_applier_lag_seconds"},
			{applierS, "trellara_applier_lag_bytes"}, {applierS, "trellara_applier_checkpoint_lsn_bytes"},
		} {
			if _, ok := find(want.samples, want.name); !ok {
				missing = want.name
			}
		}
		if c, _ := find(applierS, "trellara_applier_apply_latency_seconds_count"); c.value < 50 {
			missing = "50 observations in trellara_applier_apply_latency_seconds"
		}
		if missing == "" {
			break
		}
		if i > 300 { // the pollers run every 10 s
			t.Fatalf("/metrics lacks %s:\nrelay:\n%s\napplier:\n%s", missing, rb, ab)
		}
		time.Sleep(200 * time.Millisecond)
	}

	seen := map[string]string{}
	for service, samples := range map[string][]sample{"relay": relayS, "applier": applierS} {
		for _, s := range samples {
			if other, ok := seen[s.key()]; ok {
				t.Errorf("%s is served on both the %s and the %s port", s.key(), other, service)
			}
			seen[s.key()] = service
			switch {
			case strings.Contains(s.name, "lsn") && !strings.HasSuffix(s.name, "_lsn_bytes"):
				t.Errorf("%s: an LSN is exported as *_lsn_bytes", s.name)
			case s.name == "trellara_build_info" || strings.HasPrefix(s.name, "go_") || strings.HasPrefix(s.name, "process_"):
				if service != "relay" {
					t.Errorf("%s on the %s port: process-level series belong to the relay's only", s.name, service)
				}
			case strings.HasPrefix(s.name, "trellara_"):
				want := map[string]string{"service": service, "source_id": "src1", "dataset_id": "svc"}
				if _, isHistogram := s.labels["le"]; isHistogram {
					want["le"] = s.labels["le"]
				}
				if !maps.Equal(s.labels, want) {
					t.Errorf("%s on the %s port has labels %v, want %v", s.name, service, s.labels, want)
				}
			}
		}
	}

	logMu.Lock()
	start := records["trellara starting"]
	logMu.Unlock()
	bi, ok := find(relayS, "trellara_build_info")
	if !ok || bi.value != 1 || bi.labels["go_version"] != runtime.Version() || bi.labels["commit"] == "" ||
		len(start) != 1 || bi.labels["version"] != start[0]["version"] {
		t.Errorf("trellara_build_info %+v (startup record %v)", bi, start)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if _, ok := find(relayS, name); !ok {
			t.Errorf("relay /metrics lacks %s", name)
		}
	}
	for _, name := range []string{"trellara_relay_published_units_total", "trellara_log_retained_bytes"} {
		if _, ok := find(applierS, name); ok {
			t.Errorf("applier /metrics serves the relay's %s", name)
		}
	}
	if _, ok := find(relayS, "trellara_applier_transactions_applied_total"); ok {
		t.Error("relay /metrics serves the applier's trellara_applier_transactions_applied_total")
	}

	// LSN gauges: exact byte offsets, the same positions /healthz prints.
	cp, _ := find(applierS, "trellara_applier_checkpoint_lsn_bytes")
	_, hz := get(endpoints["applier"] + "/healthz")
	var health map[string]any
	if err := json.Unmarshal([]byte(hz), &health); err != nil {
		t.Fatal(err)
	}
	if got := lsn.Format(uint64(cp.value)); cp.value == 0 || got != health["checkpoint_lsn"] {
		t.Errorf("trellara_applier_checkpoint_lsn_bytes %v = %s, /healthz checkpoint_lsn %v", cp.value, got, health["checkpoint_lsn"])
	}
	if ack, ok := find(relayS, "trellara_relay_acknowledged_lsn_bytes"); !ok || ack.value == 0 {
		t.Errorf("trellara_relay_acknowledged_lsn_bytes %+v", ack)
	}
	if q, _ := find(applierS, "trellara_applier_quarantine_open"); q.value != 0 {
		t.Errorf("quarantine open %v", q.value)
	}
	if sum, _ := find(applierS, "trellara_applier_apply_latency_seconds_sum"); sum.value <= 0 {
		t.Errorf("apply latency sum %v", sum.value)
	}
	if applied, _ := find(applierS, "trellara_applier_transactions_applied_total"); applied.value < 50 {
		t.Errorf("transactions applied %v, want at least 50", applied.value)
	}
}
