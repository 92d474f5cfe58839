package flow_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
)

// The pgbench loop on the extension path: a fresh flow takes its initial
// snapshot with TPC-B running, then its service runs while TPC-B goes on,
// SIGKILLed 4 times at random moments, and the decoder worker is
// terminated once (pg_terminate_backend; the server restarts it). From the
// end of the initial snapshot on, a reader on the target checks TPC-B's
// invariant in every snapshot it takes: the
// balances of accounts, tellers and branches and the deltas of history all
// sum to the same number, which only a half-applied transaction breaks.
// At the end `run --local --verify` is CONVERGED, an independent md5 of
// every table is equal on both sides, and no read was torn.
//
// Mutation: the applier committing each row on its own (no transaction
// boundary at the target) is seen by the reader as a torn read, and a
// sidecar that acknowledges before the log's fsync loses the transactions
// in flight at a SIGKILL: verify DIVERGED and the md5 differ.
func TestExtensionPgbenchLoopWithKills(t *testing.T) {
	pgtest.Require(t)
	tables := "public.accounts, public.tellers, public.branches, public.history"
	src, sock := extSource(t, map[string]string{"trellara.tables": tables})
	src.Exec(t, e2eSourceSchema(1))
	target := pgtest.Start(t, pgtest.Options{NoFsync: true})
	target.Exec(t, `CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, filler text)`,
		`CREATE TABLE tellers (id int PRIMARY KEY, balance bigint NOT NULL, filler text)`,
		`CREATE TABLE branches (id int PRIMARY KEY, balance bigint NOT NULL, filler text)`,
		`CREATE TABLE history (id bigserial PRIMARY KEY, aid int, tid int, bid int, delta int, mtime timestamptz, filler text)`)
	as := serverUser(t, src)
	bin := as.copyBin(t, trellaraBin(t))
	dir := as.tempDir(t)
	cfg := writeExtFlow(t, as, dir, "extbench", tables, src, target, fmt.Sprintf("  capture: extension\n  socket: %s\n", sock))

	// TPC-B throughout, at a steady rate.
	script := filepath.Join(t.TempDir(), "tpcb.sql")
	if err := os.WriteFile(script, []byte(e2eScript), 0o644); err != nil {
		t.Fatal(err)
	}
	bench := exec.Command(pgbenchPath(src), "-n", "-c", "4", "-j", "2", "-f", script, "-D", "scale=1", "-D", "phase=1",
		"-T", "45", "-R", "150", src.URL("postgres"))
	benchOut := &strings.Builder{}
	bench.Stdout, bench.Stderr = benchOut, benchOut
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	benchDone := make(chan error, 1)
	go func() { benchDone <- bench.Wait() }()

	run := func(args ...string) (string, error) {
		cmd := as.command(bin, append([]string{"run", "--config", cfg}, args...)...)
		stop := time.AfterFunc(5*time.Minute, func() { _ = cmd.Process.Kill() })
		out, err := cmd.CombinedOutput()
		stop.Stop()
		return string(out), err
	}
	if out, err := run("--local", "--verify"); err != nil || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("first run --local --verify (the initial snapshot under TPC-B): %v\n%s", err, out)
	}

	// The reader: TPC-B's invariant in each target snapshot, from the end
	// of the initial snapshot on (during it the target fills table by
	// table: each table appears whole at its own handoff).
	var reads, torn atomic.Int64
	var tornExample atomic.Value
	rctx, stopReader := context.WithCancel(context.Background())
	var rwg sync.WaitGroup
	rwg.Add(1)
	conn := target.Connect(context.Background())
	// On every way out, a failure included, the reader stops before its
	// connection is closed and the target server stops (cleanups run last
	// registered first).
	t.Cleanup(func() { stopReader(); rwg.Wait() })
	go func() {
		defer rwg.Done()
		for rctx.Err() == nil {
			var a, te, b, h int64
			err := pgx.BeginTxFunc(rctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
				return tx.QueryRow(rctx, `SELECT (SELECT coalesce(sum(balance), 0) FROM accounts), (SELECT coalesce(sum(balance), 0) FROM tellers),
					(SELECT coalesce(sum(balance), 0) FROM branches), (SELECT coalesce(sum(delta), 0) FROM history)`).Scan(&a, &te, &b, &h)
			})
			if err != nil {
				time.Sleep(20 * time.Millisecond) // tables replaced at a handoff, or the reader stopping
				continue
			}
			reads.Add(1)
			if a != te || te != b || b != h {
				torn.Add(1)
				tornExample.Store(fmt.Sprintf("accounts %d, tellers %d, branches %d, history %d", a, te, b, h))
			}
			time.Sleep(15 * time.Millisecond)
		}
	}()

	logPath := filepath.Join(dir, "service.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	startService := func() *exec.Cmd {
		svc := as.command(bin, "run", "--config", cfg)
		svc.Stdout, svc.Stderr = logf, logf
		if err := svc.Start(); err != nil {
			t.Fatal(err)
		}
		return svc
	}
	svc := startService()
	t.Cleanup(func() { _ = svc.Process.Kill(); _, _ = svc.Process.Wait() })
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	sc := src.Connect(context.Background())
	defer sc.Close(context.Background())
	for i := range 5 {
		time.Sleep(time.Duration(1500+rng.Intn(3500)) * time.Millisecond)
		if i == 2 {
			// The decoder worker, once: the server restarts it, and the
			// sidecar reconnects to the new one. Right after a SIGKILL of
			// the service the worker may itself be restarting (it exits
			// when its sidecar goes), so wait for one to be there.
			var n int
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
				err := sc.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'trellara decoder'`).Scan(&n)
				if err != nil || n > 1 || (n == 0 && time.Now().After(deadline)) {
					t.Fatalf("terminate the decoder worker: %d terminated (%v)", n, err)
				}
				if n == 1 {
					break
				}
			}
			t.Logf("decoder worker terminated")
			continue
		}
		if err := svc.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = svc.Process.Wait()
		t.Logf("SIGKILL of the service (capture from the extension's socket, and the applier)")
		svc = startService()
	}
	if err := <-benchDone; err != nil {
		t.Fatalf("pgbench: %v\n%s", err, benchOut)
	}
	_ = svc.Process.Signal(syscall.SIGTERM)
	_, _ = svc.Process.Wait()
	out, err := run("--local", "--verify")
	stopReader()
	rwg.Wait()
	if err != nil || !strings.Contains(out, "CONVERGED") {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("final run --local --verify: %v\n%s\nservice log (tail):\n%s", err, out, tail(string(b), 40))
	}
	for _, table := range []string{"accounts", "tellers", "branches", "history"} {
		sum := func(c *pgtest.Cluster) string {
			conn := c.Connect(context.Background())
			defer conn.Close(context.Background())
			var s string
			if err := conn.QueryRow(context.Background(), fmt.Sprintf(`SELECT md5(string_agg(format('%%s|%%s', id, balance), ',' ORDER BY id)) FROM %s`,
				map[bool]string{true: "(SELECT id, delta AS balance FROM history) h", false: table}[table == "history"])).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		if s, d := sum(src), sum(target); s != d {
			t.Fatalf("%s: source md5 %s, target md5 %s", table, s, d)
		}
	}
	if reads.Load() == 0 || torn.Load() != 0 {
		ex, _ := tornExample.Load().(string)
		t.Fatalf("target reads: %d, torn: %d (%s)", reads.Load(), torn.Load(), ex)
	}
	var txns int64
	if err := sc.QueryRow(context.Background(), `SELECT count(*) FROM history`).Scan(&txns); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d TPC-B transactions, %d target reads, 0 torn", txns, reads.Load())
}

// pgbenchPath is the server's own pgbench, or PostgreSQL 15's client
// package's for a server that ships none (the matrix's 16-18): pgbench
// speaks the same protocol to every major.
func pgbenchPath(src *pgtest.Cluster) string {
	if p := filepath.Join(src.BinDir(), "pgbench"); fileExists(p) {
		return p
	}
	return "/usr/lib/postgresql/15/bin/pgbench"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
