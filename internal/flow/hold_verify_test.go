package flow_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
)

// hotWorkload commits, until stopped, transactions that keep every key of
// a 300-row table changing: an UPDATE, a DELETE and re-INSERT of another
// key, an update beside a TOAST value, in one transaction each.
func hotWorkload(t *testing.T, url string) (stop func() int) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var n int
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Errorf("workload: %v", err)
			return
		}
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewPCG(11, 7))
		for {
			select {
			case <-done:
				return
			default:
			}
			k, j := 1+rng.IntN(300), 1+rng.IntN(300)
			if _, err := conn.Exec(context.Background(), fmt.Sprintf(`BEGIN;
UPDATE hot SET amount = amount + 1 WHERE id = %[1]d;
DELETE FROM hot WHERE id = %[2]d;
INSERT INTO hot (id, amount, note) VALUES (%[2]d, %[3]d, 'again') ON CONFLICT (id) DO NOTHING;
UPDATE hot SET note = note || '' WHERE id = %[1]d;
COMMIT`, k, j, rng.IntN(1000))); err != nil {
				t.Errorf("workload: %v", err)
				return
			}
			n++
		}
	}()
	return func() int { close(done); wg.Wait(); return n }
}

// A verify beside a running applier, under writes that touch every key
// all the time, compares the target exactly at its source snapshot's LSN
// (the applier holds there: apply.HoldToken), so it is CONVERGED, with
// source LSN and target checkpoint equal — in run --local --verify and in
// a standalone verify beside the service. On 0335858 such a workload made
// run --local --verify DIVERGED (rows differ in 2 of 64 buckets) on a
// healthy flow.
// Mutation: the applier ignoring the hold fence (holdAt returning at
// once) — DIVERGED, red.
func TestVerifyUnderHotWritesIsExact(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE hot (id int PRIMARY KEY, amount int NOT NULL, note text, body text)`,
		`INSERT INTO hot SELECT g, g, 'n' || g, CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 300) END FROM generate_series(1, 300) g`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	run := cliRunner(t, bin, dir)
	relayPort, applierPort := freePort(t), freePort(t)
	body := fmt.Sprintf(`version: 2
flow: hot
source:
  id: src1
  database_url: %q
  owns_slot: true
  tables: [public.hot]
transport:
  local: {dir: %s}
target:
  database_url: %q
  create_tables: true
run:
  evaluate: true
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, src.URL("postgres"), filepath.Join(dir, "data"), dst.URL("postgres"), relayPort, applierPort)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := hotWorkload(t, src.URL("postgres"))
	for i := range 3 {
		out, code := run("run", "--config", cfg, "--local", "--verify")
		if code != 0 || !strings.Contains(out, "CONVERGED") {
			stop()
			t.Fatalf("run --local --verify %d under hot writes: exit %d\n%s", i+1, code, out)
		}
		if !exactWatermark(out) {
			t.Errorf("run --local --verify %d: the target was not compared at the source snapshot's LSN:\n%s", i+1, out)
		}
	}
	svc := exec.Command(bin, "run", "--config", cfg)
	svc.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "service.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	svc.Stdout, svc.Stderr = logf, logf
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Process.Signal(syscall.SIGTERM); _ = svc.Wait() }()
	// The service listens once it holds the flow: from then on verify
	// runs beside it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(logf.Name()); strings.Contains(string(b), "listening") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the service did not start listening within 1m")
		}
	}
	for i := range 2 {
		out, code := run("verify", "--config", cfg, "--wait", "120s")
		if code != 0 || !exactWatermark(out) {
			stop()
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("verify %d beside the service under hot writes: exit %d\n%s\nservice:\n%s", i+1, code, out, b)
		}
	}
	if n := stop(); n < 100 {
		t.Fatalf("the workload committed only %d transactions: the test proved little", n)
	}
}

// exactWatermark reads verify's text watermark line: source LSN and
// target checkpoint equal.
func exactWatermark(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		var a, b string
		if n, _ := fmt.Sscanf(l, "watermark: source LSN %s compared, target checkpoint %s before", &a, &b); n == 2 {
			return a == b
		}
	}
	return false
}
