package flow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/segmentlog"
)

// proc is one trellara service process of the test, restartable.
type proc struct {
	t    *testing.T
	name string
	bin  string
	args []string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	runs int
}

func (p *proc) start() {
	p.t.Helper()
	p.runs++
	logf, err := os.Create(filepath.Join(p.dir, fmt.Sprintf("%s.%d.log", p.name, p.runs)))
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(c *exec.Cmd, f *os.File, done chan struct{}) { _ = c.Wait(); f.Close(); close(done) }(p.cmd, logf, p.done)
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Errorf("%s did not exit on %v", p.name, sig)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// logs returns every run's output, for a failure message.
func (p *proc) logs() string {
	var b strings.Builder
	for i := 1; i <= p.runs; i++ {
		data, _ := os.ReadFile(filepath.Join(p.dir, fmt.Sprintf("%s.%d.log", p.name, i)))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 8 {
			lines = lines[len(lines)-8:]
		}
		fmt.Fprintf(&b, "--- %s run %d (last lines)\n%s\n", p.name, i, strings.Join(lines, "\n"))
	}
	return b.String()
}

// One slot, one relay process and two applier processes into two targets:
// each process is SIGKILLed at random and restarted on its own while a
// workload commits; one applier is stopped for a while and the other keeps
// applying, the log keeps what the stopped one has not read, and it
// catches up when started. Both targets end CONVERGED with every
// transaction applied exactly once, and the source holds one slot.
func TestSeparateServicesTwoSinks(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, crashSchema)
	dst.CreateDB(t, "reporting")
	dst.CreateDB(t, "search")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	body := fmt.Sprintf(`version: 2
flow: fanout
source:
  id: src1
  database_url: %q
  owns_slot: true
  tables: [public.orders, public.line_items, public.counters]
transport:
  local: {dir: %s}
sinks:
  reporting:
    target: {database_url: %q, create_tables: true}
    listen: "127.0.0.1:%d"
  search:
    target: {database_url: %q, create_tables: true, schema: trellara_meta}
    listen: "127.0.0.1:%d"
run:
  listen: {relay: "127.0.0.1:%d"}
`, src.URL("postgres"), filepath.Join(dir, "data"), dst.URL("reporting"), freePort(t), dst.URL("search"), freePort(t), freePort(t))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	relayP := &proc{t: t, name: "relay", bin: bin, dir: dir, args: []string{"run", "--config", cfg, "--role", "relay"}}
	reporting := &proc{t: t, name: "reporting", bin: bin, dir: dir, args: []string{"run", "--config", cfg, "--role", "applier", "--sink", "reporting"}}
	search := &proc{t: t, name: "search", bin: bin, dir: dir, args: []string{"run", "--config", cfg, "--role", "applier", "--sink", "search"}}
	procs := []*proc{relayP, reporting, search}
	defer func() {
		for _, p := range procs {
			p.signal(syscall.SIGKILL)
		}
		if t.Failed() {
			for _, p := range procs {
				t.Log(p.logs())
			}
		}
	}()
	for _, p := range procs {
		p.start()
	}

	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TRELLARA_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (rerun with TRELLARA_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 17))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		wrng := rand.New(rand.NewPCG(seed, 18))
		conn, err := pgx.Connect(ctx, src.URL("postgres"))
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		for i := 1; i <= 5000 && ctx.Err() == nil; i++ {
			if err := workloadTxn(ctx, conn, i, wrng); err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			mu.Lock()
			committed = i
			mu.Unlock()
			time.Sleep(time.Duration(1+wrng.IntN(3)) * time.Millisecond)
		}
	}()
	stopWorkload := func() int {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return committed
	}

	// counters reads the sum of the counters on a target (-1 before the
	// table exists there).
	counters := func(db string) int64 {
		c, err := pgx.Connect(context.Background(), dst.URL(db))
		if err != nil {
			return -1
		}
		defer c.Close(context.Background())
		var n int64 = -1
		_ = c.QueryRow(context.Background(), `SELECT coalesce(sum(n), 0) FROM counters`).Scan(&n)
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("both targets to apply", func() bool { return counters("reporting") > 0 && counters("search") > 0 })

	// SIGKILL each process at random moments; each restarts on its own.
	kills := 6
	if testing.Short() {
		kills = 3
	}
	for k := 0; k < kills; k++ {
		p := procs[rng.IntN(len(procs))]
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		p.signal(syscall.SIGKILL)
		t.Logf("kill %d: %s", k, p.name)
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		p.start()
	}

	// One applier stopped for a while: the other keeps flowing, and the
	// log keeps what the stopped one has not read.
	search.signal(syscall.SIGTERM)
	stoppedAt := counters("search")
	before := counters("reporting")
	waitFor("reporting to keep applying while search is stopped", func() bool { return counters("reporting") > before+50 })
	if n := counters("search"); n != stoppedAt {
		t.Fatalf("search target moved from %d to %d while its applier was stopped", stoppedAt, n)
	}
	// The log, read from here as any other process reads it: the stopped
	// sink's cursor stays where it stopped, registered and retained, while
	// the other sink's moves past it (cursors move after the target's
	// flush, so this is waited for).
	var rc, sc segmentlog.CursorStats
	var first uint64
	waitFor("reporting's cursor to pass the stopped sink's", func() bool {
		log, err := segmentlog.OpenReadOnly(filepath.Join(dir, "data", "log"), segmentlog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close()
		rc, sc = segmentlog.CursorStats{}, segmentlog.CursorStats{}
		for _, c := range log.Stats().Cursors {
			switch c.Name {
			case "applier.reporting":
				rc = c
			case "applier.search":
				sc = c
			}
		}
		first = log.FirstOffset()
		return rc.Offset > sc.Offset
	})
	if sc.Name == "" || sc.Offset < first || sc.PastRetention || sc.LagOffsets == 0 {
		t.Fatalf("stopped sink's cursor %+v (reporting %+v, log starts at %d): want it registered, lagging and retained", sc, rc, first)
	}
	if n := counters("search"); n != stoppedAt {
		t.Fatalf("search target moved from %d to %d while its applier was stopped", stoppedAt, n)
	}
	search.start()

	total := stopWorkload()
	t.Logf("%d source transactions committed", total)
	waitFor("both targets to catch up", func() bool {
		return counters("reporting") == int64(total) && counters("search") == int64(total)
	})
	// verify runs beside the services: their appliers apply its fence.
	out, err := exec.Command(bin, "verify", "--config", cfg, "--format", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	for _, p := range procs {
		p.signal(syscall.SIGTERM)
	}
	var vr struct {
		Sinks []struct {
			Sink   string `json:"sink"`
			Result struct {
				Verdict string `json:"verdict"`
			} `json:"result"`
		} `json:"sinks"`
	}
	if err := json.Unmarshal(out, &vr); err != nil {
		t.Fatalf("verify output: %v\n%s", err, out)
	}
	if len(vr.Sinks) != 2 || vr.Sinks[0].Sink != "reporting" || vr.Sinks[1].Sink != "search" {
		t.Fatalf("verify reported %+v, want reporting and search", vr.Sinks)
	}
	for _, s := range vr.Sinks {
		if s.Result.Verdict != "CONVERGED" {
			t.Errorf("sink %s: %s\n%s", s.Sink, s.Result.Verdict, out)
		}
	}
	// Exactly once on each target: every count equals the source's.
	sctx := context.Background()
	for _, db := range []string{"reporting", "search"} {
		c, err := pgx.Connect(sctx, dst.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{`SELECT sum(n) FROM counters`, `SELECT count(*) FROM orders`, `SELECT count(*) FROM line_items`,
			`SELECT count(*) FROM orders WHERE note LIKE '%updated%'`} {
			var s, d int64
			if err := src.Connect(sctx).QueryRow(sctx, q).Scan(&s); err != nil {
				t.Fatal(err)
			}
			if err := c.QueryRow(sctx, q).Scan(&d); err != nil {
				t.Fatal(err)
			}
			if s != d {
				t.Errorf("%s: %s: source %d, target %d", db, q, s, d)
			}
		}
		c.Close(sctx)
	}
	var slots int
	if err := src.Connect(sctx).QueryRow(sctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&slots); err != nil || slots != 1 {
		t.Errorf("the source holds %d replication slots (%v), want 1", slots, err)
	}
	st, err := exec.Command(bin, "status", "--config", cfg).CombinedOutput()
	if err != nil || !bytes.Contains(st, []byte("sink          reporting")) || !bytes.Contains(st, []byte("sink          search")) {
		t.Errorf("status does not show both sinks: %v\n%s", err, st)
	}
}
