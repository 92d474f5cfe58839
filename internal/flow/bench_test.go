package flow_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/hoptrace"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

// The benchmarks in this file compare Trellara with a physical or native
// baseline on the same WAL. Their rules (docs/EVIDENCE.md, "Method"):
//
//   - ABBA order: baseline, Trellara, Trellara, baseline, repeated
//     TRELLARA_BENCH_ROUNDS times (default 1), so a cache that warms or a
//     neighbour that starts loading the machine favours neither side.
//   - Every run decodes the identical history: each run gets its own slot,
//     copied from (relay) or created at (end to end) the same point before
//     the backlog was written.
//   - Every run is printed (a "run" line) and the range of each side and of
//     the per-pair ratio is reported; nothing is averaged away.
//   - Sizes come from the environment (TRELLARA_BENCH_TXNS, ..._SCALE);
//     benchmarks never run in `make test` (go test runs no benchmark
//     without -bench) and assert no timing.

// benchEnv reads a positive integer from the environment, or def.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// abbaOrder is the run order for rounds ABBA rounds: false is the
// baseline (A), true is Trellara (B).
func abbaOrder(rounds int) []bool {
	var order []bool
	for i := 0; i < rounds; i++ {
		order = append(order, false, true, true, false)
	}
	return order
}

// abbaResult collects the seconds of every run of one ABBA series.
type abbaResult struct {
	baseline, trellara []float64
}

func (r *abbaResult) add(isTrellara bool, secs float64) {
	if isTrellara {
		r.trellara = append(r.trellara, secs)
	} else {
		r.baseline = append(r.baseline, secs)
	}
}

// ratios returns, per ABBA pair (A B, then B A), baseline seconds over
// Trellara seconds: above 1 means Trellara was faster.
func (r *abbaResult) ratios() []float64 {
	var out []float64
	for i := range r.trellara {
		if i < len(r.baseline) {
			out = append(out, r.baseline[i]/r.trellara[i])
		}
	}
	return out
}

func minMax(xs []float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// report logs the range of both rates (n units per run: "txn", "rows")
// and of the per-pair ratio and reports the worst ratio as the
// benchmark's metric (the claim a range supports is its low end).
func (r *abbaResult) report(b *testing.B, baseName, name string, n int, unit string) {
	b.Helper()
	rate := func(secs []float64) []float64 {
		var out []float64
		for _, s := range secs {
			out = append(out, float64(n)/s)
		}
		return out
	}
	bl, bh := minMax(rate(r.baseline))
	tl, th := minMax(rate(r.trellara))
	rl, rh := minMax(r.ratios())
	b.Logf("range over %d runs each: %s %.0f–%.0f %s/s, %s %.0f–%.0f %s/s, %s/%s per pair %.2f–%.2f",
		len(r.trellara), baseName, bl, bh, unit, name, tl, th, unit, name, baseName, rl, rh)
	b.ReportMetric(bl, baseName+"_min_"+unit+"/s")
	b.ReportMetric(tl, name+"_min_"+unit+"/s")
	b.ReportMetric(rl, "ratio_min")
	b.ReportMetric(rh, "ratio_max")
}

func currentLSN(b *testing.B, c *pgtest.Cluster) uint64 {
	var s string
	if err := c.Connect(context.Background()).QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		b.Fatal(err)
	}
	v, _ := lsn.Parse(s)
	return uint64(v)
}

// recvlogicalOptions turns the relay's pgoutput options into
// pg_recvlogical -o arguments, so both consumers ask the walsender for
// exactly the same stream.
func recvlogicalOptions(cfg relay.Options) []string {
	var args []string
	for _, a := range relay.PluginArgs(cfg) {
		name, value, _ := strings.Cut(a, " ")
		value = strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(value, "'"), "'"), "''", "'")
		args = append(args, "-o", name+"="+value)
	}
	return args
}

// BenchmarkRelayVsRecvlogical drains the same pgoutput history with
// pg_recvlogical (the walsender's own output rate written to a file: the
// physical ceiling) and with the relay into the fsync'd local segment log,
// in ABBA order. Each run reads from its own copy of one slot created
// before the backlog, so every run decodes the identical WAL from the
// identical position with the identical options (pgoutput proto_version 2,
// the same publication, messages and streaming on: relay.PluginArgs for
// both).
//
// Durability: the relay fsyncs every published batch before it confirms it
// (fsync: always, the only mode). pg_recvlogical fsyncs its file at most
// once per --fsync-interval (1 s here, its most frequent setting) and on
// exit, so the baseline holds the weaker guarantee and the comparison
// favours it.
//
// TRELLARA_BENCH_TXNS sizes the backlog (make bench: 100,000).
func BenchmarkRelayVsRecvlogical(b *testing.B) {
	pgtest.Require(b)
	recv := filepath.Join(pgtestBin(b), "pg_recvlogical")
	if _, err := os.Stat(recv); err != nil {
		b.Skip("pg_recvlogical not installed beside the server")
	}
	c := pgtest.Start(b, pgtest.Options{})
	c.Exec(b, pgtest.TPCBSchema)
	ctx := context.Background()
	conn := c.Connect(ctx)
	c.Exec(b, `SELECT pg_create_logical_replication_slot('base', 'pgoutput')`)
	txns := pgtest.BenchTxns()
	rounds := benchEnv("TRELLARA_BENCH_ROUNDS", 1)
	pgtest.RunTPCB(b, c, txns, 4)
	end := currentLSN(b, c)
	var baseLSN string
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'base'`).Scan(&baseLSN); err != nil {
		b.Fatal(err)
	}
	cfg := relay.Options{SourceID: "bench", Publication: "pub", ProtocolVersion: 2, Streaming: true}
	opts := recvlogicalOptions(cfg)
	b.Logf("%d transactions, %d ABBA round(s), every run from slot position %s to %s, pgoutput options %v",
		txns, rounds, baseLSN, pglogrepl.LSN(end), relay.PluginArgs(cfg))

	var res abbaResult
	b.ResetTimer()
	for i, isRelay := range abbaOrder(rounds) {
		slot := fmt.Sprintf("run%d", i)
		c.Exec(b, fmt.Sprintf(`SELECT pg_copy_logical_replication_slot('base', '%s')`, slot))
		var at string
		if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&at); err != nil || at != baseLSN {
			b.Fatalf("slot %s starts at %s, not at the base slot's %s (%v)", slot, at, baseLSN, err)
		}
		dir := b.TempDir()
		var secs float64
		var detail string
		if isRelay {
			secs, detail = runRelayOnce(b, c, cfg, slot, dir, end)
		} else {
			out := filepath.Join(dir, "recvlogical.out")
			args := append([]string{"-d", c.URL("postgres"), "--slot", slot, "--start", "--endpos", pglogrepl.LSN(end).String(),
				"--fsync-interval", "1", "-f", out, "--no-loop"}, opts...)
			t0 := time.Now()
			if o, err := exec.Command(recv, args...).CombinedOutput(); err != nil {
				b.Fatalf("pg_recvlogical: %v\n%s", err, o)
			}
			secs = time.Since(t0).Seconds()
			st, err := os.Stat(out)
			if err != nil {
				b.Fatal(err)
			}
			detail = fmt.Sprintf("%d bytes written, fsync every 1 s and on exit", st.Size())
		}
		c.Exec(b, fmt.Sprintf(`SELECT pg_drop_replication_slot('%s')`, slot))
		res.add(isRelay, secs)
		name := "pg_recvlogical"
		if isRelay {
			name = "relay"
		}
		b.Logf("run %d %-14s %6.2fs %8.0f txn/s (%s)", i+1, name, secs, float64(txns)/secs, detail)
	}
	b.StopTimer()
	res.report(b, "recvlogical", "relay", txns, "txn")
}

// runRelayOnce streams slot into a fresh local log in dir until the
// durable position reaches end; the timing includes opening the log and
// connecting, as pg_recvlogical's includes its process start and connect.
func runRelayOnce(b *testing.B, c *pgtest.Cluster, cfg relay.Options, slot, dir string, end uint64) (float64, string) {
	ctx := context.Background()
	t0 := time.Now()
	log, _, err := segmentlog.Open(dir, segmentlog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	rc, err := relay.Connect(ctx, c.ReplicationURL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close(ctx)
	var durable uint64
	cfg.Slot = slot
	cfg.Assembler = capture.AssemblerOptions{SpillDir: dir}
	cfg.OnDurable = func(e uint64) { durable = e }
	cfg.Stop = func() bool { return durable >= end }
	s, err := relay.NewSession(rc, transport.Local{Log: log}, relay.Resume{}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Run(ctx); err != nil {
		b.Fatal(err)
	}
	secs := time.Since(t0).Seconds()
	st := s.Stats()
	return secs, fmt.Sprintf("%d units, %d envelope bytes, fsync always", st.Published, st.Bytes)
}

func pgtestBin(b *testing.B) string {
	if v := os.Getenv("TRELLARA_PG_BIN"); v != "" {
		return v
	}
	out, err := exec.Command("bash", "-c", "ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1").Output()
	if err != nil {
		b.Skip("no PostgreSQL bin directory")
	}
	return string(bytes.TrimSpace(out))
}

// The end-to-end workload is pgbench's TPC-B at a scale factor with
// pgbench's own proportions (100,000 accounts, 10 tellers and 1 branch per
// unit of scale), in the schema of pgtest.TPCBSchema plus a marker table.
// history.mtime is stamped with clock_timestamp() as the row is written,
// microseconds before its commit; the targets add applied_at, stamped as
// the row is applied. Source and targets run on one machine, so one clock.
func e2eSourceSchema(scale int) string {
	return fmt.Sprintf(`
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE tellers (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE branches (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE history (id bigserial PRIMARY KEY, aid int, tid int, bid int, delta int, mtime timestamptz DEFAULT clock_timestamp(), filler text);
CREATE TABLE bench_marker (id int PRIMARY KEY);
INSERT INTO accounts SELECT g, 0, repeat('a', 80) FROM generate_series(1, %d) g;
INSERT INTO tellers SELECT g, 0, repeat('t', 80) FROM generate_series(1, %d) g;
INSERT INTO branches SELECT g, 0, repeat('b', 80) FROM generate_series(1, %d) g;
CREATE PUBLICATION pub FOR TABLE accounts, tellers, branches, history, bench_marker;`, 100000*scale, 10*scale, scale)
}

// e2eTargetSettings are every end-to-end target's settings, native or
// Trellara alike. wal_retrieve_retry_interval only spaces the PostgreSQL 15
// launcher's worker starts (5 s by default, for all subscriptions of a
// cluster); lowered so ENABLE starts the apply worker at once and the
// native time is apply time, not a launcher wait.
var e2eTargetSettings = pgtest.Options{Settings: map[string]string{"wal_retrieve_retry_interval": "100ms"}}

const e2eTargetSchema = `
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE tellers (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE branches (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE history (id bigserial PRIMARY KEY, aid int, tid int, bid int, delta int, mtime timestamptz, filler text, applied_at timestamptz DEFAULT clock_timestamp());
CREATE TABLE bench_marker (id int PRIMARY KEY);`

// e2eScript is one TPC-B transaction at scale :scale; :phase (a number)
// tags the history row so a latency phase reads back only its own rows.
const e2eScript = `\set aid random(1, 100000 * :scale)
\set tid random(1, 10 * :scale)
\set bid random(1, :scale)
\set delta random(-5000, 5000)
BEGIN;
UPDATE accounts SET balance = balance + :delta WHERE id = :aid;
UPDATE tellers SET balance = balance + :delta WHERE id = :tid;
UPDATE branches SET balance = balance + :delta WHERE id = :bid;
INSERT INTO history (aid, tid, bid, delta, filler) VALUES (:aid, :tid, :bid, :delta, 'phase ' || :phase);
END;
`

// pgbenchE2E runs e2eScript on src with 4 clients; extra selects the
// length (-t per client, or -T with a rate -R).
func pgbenchE2E(b *testing.B, src *pgtest.Cluster, scale, phase int, extra ...string) {
	b.Helper()
	script := filepath.Join(b.TempDir(), "tpcb.sql")
	if err := os.WriteFile(script, []byte(e2eScript), 0o644); err != nil {
		b.Fatal(err)
	}
	args := append([]string{"-n", "-c", "4", "-j", "2", "-f", script, "-D", "scale=" + strconv.Itoa(scale), "-D", "phase=" + strconv.Itoa(phase)}, extra...)
	args = append(args, src.URL("postgres"))
	if out, err := exec.Command(filepath.Join(src.BinDir(), "pgbench"), args...).CombinedOutput(); err != nil {
		b.Fatalf("pgbench: %v\n%s", err, out)
	}
}

// nativeTarget is a subscriber that has finished its initial copy and is
// disabled, its slot parked before the backlog.
type nativeTarget struct {
	c   *pgtest.Cluster
	sub string
}

// newNativeTarget subscribes a fresh cluster to pub with copy_data (the
// subscription's own initial copy), waits for every table to be ready, and
// disables the subscription.
func newNativeTarget(b *testing.B, src *pgtest.Cluster, name string) nativeTarget {
	b.Helper()
	ctx := context.Background()
	t := pgtest.Start(b, e2eTargetSettings)
	t.Exec(b, e2eTargetSchema)
	t.Exec(b, fmt.Sprintf(`CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION pub WITH (slot_name = '%s')`, name, src.URL("postgres"), name))
	conn := t.Connect(ctx)
	waitFor(b, "native initial copy of "+name, func() bool {
		var pending int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'`).Scan(&pending)
		return err == nil && pending == 0
	})
	t.Exec(b, fmt.Sprintf(`ALTER SUBSCRIPTION %s DISABLE`, name))
	waitFor(b, "native apply worker of "+name+" to stop", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_subscription WHERE subname = $1 AND pid IS NOT NULL`, name).Scan(&n)
		return err == nil && n == 0
	})
	return nativeTarget{c: t, sub: name}
}

// trellaraTarget is a fresh cluster with a Trellara flow that has taken its
// initial snapshot (its slot parked before the backlog).
type trellaraTarget struct {
	c   *pgtest.Cluster
	cfg string
}

func newTrellaraTarget(b *testing.B, bin string, src *pgtest.Cluster, flow string) trellaraTarget {
	b.Helper()
	t := pgtest.Start(b, e2eTargetSettings)
	t.Exec(b, e2eTargetSchema)
	cfg := writeTrellaraConfig(b, b.TempDir(), flow, src, t, "  owns_slot: true\n")
	if out, err := exec.Command(bin, "run", "--config", cfg, "--local").CombinedOutput(); err != nil {
		b.Fatalf("trellara first run (slot and snapshot) for %s: %v\n%s", flow, err, out)
	}
	return trellaraTarget{c: t, cfg: cfg}
}

// writeTrellaraConfig writes the config of an end-to-end flow from src to
// target into dir (its log in dir/data) and returns its path; captureLines
// are the source lines that choose the capture path.
func writeTrellaraConfig(b *testing.B, dir, flow string, src, target *pgtest.Cluster, captureLines string) string {
	b.Helper()
	cfg := filepath.Join(dir, "trellara.yml")
	body := fmt.Sprintf(`version: 2
flow: %s
source:
  id: bench
  database_url: %q
%s  tables: [public.accounts, public.tellers, public.branches, public.history, public.bench_marker]
transport:
  local: {dir: %s, fsync: always}
target:
  database_url: %q
run:
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, flow, src.URL("postgres"), captureLines, filepath.Join(dir, "data"), target.URL("postgres"), freePort(b), freePort(b))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	return cfg
}

func waitFor(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitMarker polls target for marker row id every 10 ms (the same poll for
// both sides) and returns when it is visible.
func waitMarker(b *testing.B, conn *pgx.Conn, id int, what string) {
	b.Helper()
	ctx := context.Background()
	waitFor(b, fmt.Sprintf("marker %d on %s", id, what), func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM bench_marker WHERE id = $1`, id).Scan(&n)
		return err == nil && n == 1
	})
}

// sameBalances fails b unless target holds the source's history count and
// branch balances: a fast run that applied the wrong thing is not a result.
func sameBalances(b *testing.B, src, target *pgtest.Cluster, what string) {
	b.Helper()
	ctx := context.Background()
	q := `SELECT (SELECT count(*) FROM history)::text || ' ' || (SELECT coalesce(sum(balance * id), 0) FROM branches)::text || ' ' || (SELECT coalesce(sum(balance * id), 0) FROM tellers)::text`
	var want, got string
	if err := src.Connect(ctx).QueryRow(ctx, q).Scan(&want); err != nil {
		b.Fatal(err)
	}
	if err := target.Connect(ctx).QueryRow(ctx, q).Scan(&got); err != nil {
		b.Fatal(err)
	}
	if want != got {
		b.Fatalf("%s: target has (history rows, branch and teller checksums) %s, source %s", what, got, want)
	}
}

// BenchmarkApplyVsNativeReplication is the end-to-end catch-up (make
// bench-e2e): a pgbench TPC-B backlog at TRELLARA_BENCH_SCALE (default 10)
// of TRELLARA_BENCH_TXNS transactions (default 20,000; make bench-e2e
// 100,000), applied by native logical replication and by `trellara run
// --local`, in ABBA order, each run into its own fresh target cluster with
// default settings.
//
// Before the backlog, every consumer is made ready on its own: each native
// subscriber takes its own initial copy (copy_data) and is disabled; each
// Trellara flow takes its initial snapshot with a first `run --local`. Then
// the backlog and one final marker row are committed on the source, so
// every consumer faces the identical WAL.
//
// A native run is timed from ALTER SUBSCRIPTION ENABLE to the marker row
// being visible on its target; a Trellara run from starting the process to
// the marker row being visible on its target (process start, connect and
// resume included), with the same 10 ms poll. Each side commits on the
// target as shipped: the native apply worker with the subscription's
// default synchronous_commit = off, Trellara with its default
// target.synchronous_commit (off, with a cursor that moves only over what
// the target has flushed).
func BenchmarkApplyVsNativeReplication(b *testing.B) {
	pgtest.Require(b)
	bin := trellaraBin(b)
	txns := pgtest.BenchTxns()
	scale := benchEnv("TRELLARA_BENCH_SCALE", 10)
	rounds := benchEnv("TRELLARA_BENCH_ROUNDS", 1)
	order := abbaOrder(rounds)
	src := pgtest.Start(b, pgtest.Options{})
	src.Exec(b, e2eSourceSchema(scale))

	natives := map[int]nativeTarget{}
	trels := map[int]trellaraTarget{}
	for i, isTrellara := range order {
		if isTrellara {
			trels[i] = newTrellaraTarget(b, bin, src, fmt.Sprintf("e2e%d", i))
		} else {
			natives[i] = newNativeTarget(b, src, fmt.Sprintf("native%d", i))
		}
	}
	pgbenchE2E(b, src, scale, 0, "-t", strconv.Itoa(txns/4))
	src.Exec(b, `INSERT INTO bench_marker VALUES (1)`)
	end := currentLSN(b, src)
	b.Logf("backlog: %d TPC-B transactions at scale %d (%d accounts), source WAL end %s, %d ABBA round(s)",
		txns/4*4, scale, 100000*scale, pglogrepl.LSN(end), rounds)
	txns = txns / 4 * 4

	runE2E(b, order, "trellara", txns, func(i int) (float64, string, cpuRun) {
		tt := trels[i]
		return timeTrellaraRun(b, src, tt.c, trellaraCmd(bin, i+1, "run", "--config", tt.cfg, "--local"), i+1)
	}, func(i int) (float64, string, cpuRun) {
		return timeNativeRun(b, src, natives[i], i+1)
	})
}

// runE2E times the runs of an end-to-end benchmark in order (true: the
// Trellara side, named name; false: native), each through its function
// given the run's index, then logs every run and reports both ranges.
func runE2E(b *testing.B, order []bool, name string, txns int, trellara, native func(i int) (float64, string, cpuRun)) {
	b.Helper()
	var res abbaResult
	var cpus cpuResult
	b.ResetTimer()
	for i, isTrellara := range order {
		run, side := native, "native"
		if isTrellara {
			run, side = trellara, name
		}
		secs, detail, cpu := run(i)
		res.add(isTrellara, secs)
		cpus.add(isTrellara, cpu)
		logE2ERun(b, i+1, side, secs, txns, detail, cpu)
	}
	b.StopTimer()
	res.report(b, "native", name, txns, "txn")
	cpus.report(b, "native", name, txns)
}

// timeTrellaraRun starts cmd (a `trellara run --local` of a flow into
// target) and times it from the start to marker row 1 being visible on
// target; then it waits for the process to exit and checks the target's
// history and balances against src. CPU is the source's, the target's and
// the process's (wait4) over the run.
func timeTrellaraRun(b *testing.B, src, target *pgtest.Cluster, cmd *exec.Cmd, run int) (float64, string, cpuRun) {
	b.Helper()
	conn := target.Connect(context.Background())
	src0, tgt0 := clusterCPU(b, src), clusterCPU(b, target)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	var tl *cpuTimeline
	if timelineOn() {
		tl = startTimeline(b, src, target, func() int {
			if cmd.Process == nil {
				return 0
			}
			return cmd.Process.Pid
		})
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waitMarker(b, conn, 1, "trellara target")
	secs := time.Since(t0).Seconds()
	timeline := ""
	if tl != nil {
		timeline = "; " + tl.finish()
	}
	if err := <-exited; err != nil {
		b.Fatalf("trellara run --local: %v\n%s", err, out.String())
	}
	if dir := os.Getenv("TRELLARA_BENCH_PERF"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("trellara-run%d.log", run)), out.Bytes(), 0o644)
	}
	detail := fmt.Sprintf("process exited after %.2fs%s", time.Since(t0).Seconds(), timeline)
	ps := cmd.ProcessState
	// The process's exit ends its sessions: read once their backends are
	// reaped (settledClusterCPU).
	cpu := cpuRun{source: settledClusterCPU(b, src) - src0, target: settledClusterCPU(b, target) - tgt0,
		trellara: (ps.UserTime() + ps.SystemTime()).Seconds()}
	sameBalances(b, src, target, "trellara run "+strconv.Itoa(run))
	return secs, detail, cpu
}

// logE2ERun prints one end-to-end run's line (scripts read it).
func logE2ERun(b *testing.B, run int, name string, secs float64, txns int, detail string, cpu cpuRun) {
	b.Helper()
	b.Logf("run %d %-8s %6.2fs %8.0f txn/s (%s; %s)", run, name, secs, float64(txns)/secs, detail, cpu.format(txns))
}

// timeNativeRun enables nt's subscription and times it to marker row 1
// being visible on its target, disables it and checks the target's
// history and balances against src.
func timeNativeRun(b *testing.B, src *pgtest.Cluster, nt nativeTarget, run int) (float64, string, cpuRun) {
	b.Helper()
	conn := nt.c.Connect(context.Background())
	src0, tgt0 := clusterCPU(b, src), clusterCPU(b, nt.c)
	var tl *cpuTimeline
	if timelineOn() {
		tl = startTimeline(b, src, nt.c, func() int { return 0 })
	}
	t0 := time.Now()
	nt.c.Exec(b, fmt.Sprintf(`ALTER SUBSCRIPTION %s ENABLE`, nt.sub))
	waitMarker(b, conn, 1, "native target")
	secs := time.Since(t0).Seconds()
	detail := "subscription synchronous_commit off (default)"
	if tl != nil {
		detail += "; " + tl.finish()
	}
	cpu := cpuRun{source: clusterCPU(b, src) - src0, target: clusterCPU(b, nt.c) - tgt0}
	nt.c.Exec(b, fmt.Sprintf(`ALTER SUBSCRIPTION %s DISABLE`, nt.sub))
	sameBalances(b, src, nt.c, "native run "+strconv.Itoa(run))
	return secs, detail, cpu
}

// BenchmarkSteadyLatency measures commit-to-apply latency under a steady
// source rate (TRELLARA_BENCH_RATE txn/s, default 500, for
// TRELLARA_BENCH_SECONDS, default 30), for native logical replication and
// for the Trellara service (`trellara run`, relay and applier), one at a
// time in ABBA order, each with its own target. Before a phase starts, its
// consumer is running and has caught up (a marker row); its latencies are
// read back from its own phase's history rows only: applied_at (target
// clock_timestamp() at apply) − mtime (source clock_timestamp() as the row
// was written; commit follows within the transaction). Both clusters run
// on this machine, so both stamps come from one clock.
func BenchmarkSteadyLatency(b *testing.B) {
	pgtest.Require(b)
	bin := trellaraBin(b)
	scale := benchEnv("TRELLARA_BENCH_SCALE", 10)
	rates, err := benchRates(os.Getenv("TRELLARA_BENCH_RATE"))
	if err != nil {
		b.Fatal(err)
	}
	seconds := benchEnv("TRELLARA_BENCH_SECONDS", 30)
	rounds := benchEnv("TRELLARA_BENCH_ROUNDS", 1)
	ctx := context.Background()
	src := pgtest.Start(b, pgtest.Options{})
	src.Exec(b, e2eSourceSchema(scale))
	nt := newNativeTarget(b, src, "native")
	tt := newTrellaraTarget(b, bin, src, "latency")
	nconn, tconn := nt.c.Connect(ctx), tt.c.Connect(ctx)

	phase := 0
	for _, rate := range rates {
		b.Run(fmt.Sprintf("rate-%d", rate), func(b *testing.B) {
			var p50s, p99s abbaResult
			b.ResetTimer()
			for i, isTrellara := range abbaOrder(rounds) {
				phase++
				marker := phase
				src.Exec(b, fmt.Sprintf(`INSERT INTO bench_marker VALUES (%d)`, marker))
				var target *pgtest.Cluster
				var stop func()
				var hops string
				name := "native"
				if isTrellara {
					name, target = "trellara", tt.c
					cmd := exec.Command(bin, "run", "--config", tt.cfg)
					hops = filepath.Join(b.TempDir(), "hops")
					cmd.Env = append(os.Environ(), "TRELLARA_HOPTRACE="+hops)
					var out bytes.Buffer
					cmd.Stdout, cmd.Stderr = &out, &out
					if err := cmd.Start(); err != nil {
						b.Fatal(err)
					}
					stop = func() {
						_ = cmd.Process.Signal(syscall.SIGTERM)
						if err := cmd.Wait(); err != nil {
							b.Fatalf("trellara run (service) did not stop cleanly: %v\n%s", err, out.String())
						}
					}
					waitMarker(b, tconn, marker, "trellara target")
				} else {
					target = nt.c
					nt.c.Exec(b, `ALTER SUBSCRIPTION native ENABLE`)
					stop = func() { nt.c.Exec(b, `ALTER SUBSCRIPTION native DISABLE`) }
					waitMarker(b, nconn, marker, "native target")
				}
				// Caught up: the phase's own transactions start now (the
				// hop breakdown leaves out the catch-up before it).
				t0 := time.Now()
				pgbenchE2E(b, src, scale, phase, "-R", strconv.Itoa(rate), "-T", strconv.Itoa(seconds))
				src.Exec(b, fmt.Sprintf(`INSERT INTO bench_marker VALUES (%d)`, 100+marker))
				waitMarker(b, target.Connect(ctx), 100+marker, name+" target")
				stop()
				lat := latencies(b, target, fmt.Sprintf("phase %d", phase))
				if len(lat) == 0 {
					b.Fatalf("%s: no rows of phase %d on the target", name, phase)
				}
				p50, p99 := lat[len(lat)*50/100], lat[len(lat)*99/100]
				b.Logf("run %d %-8s %d txns at %d txn/s: commit-to-apply p50 %.2f ms, p99 %.2f ms, max %.1f ms",
					i+1, name, len(lat), rate, p50*1e3, p99*1e3, lat[len(lat)-1]*1e3)
				p50s.add(isTrellara, p50*1e3)
				p99s.add(isTrellara, p99*1e3)
				b.Logf("run %d %-8s histogram: %s", i+1, name, histogram(lat))
				if hops != "" {
					b.Logf("run %d %-8s hops: %s", i+1, name, hopBreakdown(b, hops, t0))
				}
			}
			b.StopTimer()
			for _, side := range []struct {
				name string
				ms   []float64
				p99  []float64
			}{{"native", p50s.baseline, p99s.baseline}, {"trellara", p50s.trellara, p99s.trellara}} {
				l50, h50 := minMax(side.ms)
				l99, h99 := minMax(side.p99)
				b.Logf("range %-8s p50 %.2f–%.2f ms, p99 %.2f–%.2f ms", side.name, l50, h50, l99, h99)
				b.ReportMetric(h50, side.name+"_p50_max_ms")
				b.ReportMetric(h99, side.name+"_p99_max_ms")
			}
			// Latency: the ratio is Trellara over native per ABBA pair
			// (above 1: Trellara slower); the worst pair is the claim.
			inv := func(r []float64) []float64 {
				out := make([]float64, len(r))
				for i, v := range r {
					out[i] = 1 / v
				}
				return out
			}
			r50l, r50h := minMax(inv(p50s.ratios()))
			r99l, r99h := minMax(inv(p99s.ratios()))
			b.Logf("range trellara/native per pair: p50 %.2f–%.2f×, p99 %.2f–%.2f×", r50l, r50h, r99l, r99h)
			b.ReportMetric(r50h, "p50_ratio_max")
			b.ReportMetric(r99h, "p99_ratio_max")
		})
	}
	// Each consumer sat out the other's phases: let both catch up, then
	// check that both applied the whole history.
	src.Exec(b, `INSERT INTO bench_marker VALUES (1000)`)
	nt.c.Exec(b, `ALTER SUBSCRIPTION native ENABLE`)
	waitMarker(b, nconn, 1000, "native target")
	if out, err := exec.Command(bin, "run", "--config", tt.cfg, "--local").CombinedOutput(); err != nil {
		b.Fatalf("trellara run --local (final catch-up): %v\n%s", err, out)
	}
	waitMarker(b, tconn, 1000, "trellara target")
	sameBalances(b, src, nt.c, "native")
	sameBalances(b, src, tt.c, "trellara")
}

// benchRates parses TRELLARA_BENCH_RATE: txn/s, or a comma list of them
// (each rate its own ABBA series on the same clusters); 500 when unset.
func benchRates(v string) ([]int, error) {
	if v == "" {
		return []int{500}, nil
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("TRELLARA_BENCH_RATE=%q: want txn/s or a comma list of them, such as 500,2000", v)
		}
		out = append(out, n)
	}
	return out, nil
}

// histogram renders sorted latencies (seconds) as counts per bucket.
func histogram(lat []float64) string {
	bounds := []float64{0.25e-3, 0.5e-3, 1e-3, 2e-3, 4e-3, 8e-3, 16e-3, 32e-3}
	counts := make([]int, len(bounds)+1)
	for _, v := range lat {
		i := sort.SearchFloat64s(bounds, v)
		counts[i]++
	}
	var sb strings.Builder
	for i, n := range counts {
		if i < len(bounds) {
			fmt.Fprintf(&sb, "≤%gms %d · ", bounds[i]*1e3, n)
		} else {
			fmt.Fprintf(&sb, ">%gms %d", bounds[i-1]*1e3, n)
		}
	}
	return sb.String()
}

// hopBreakdown reads a TRELLARA_HOPTRACE file (internal/hoptrace) and
// returns the p50 and p99 of each hop's time since the one before, over
// the transactions committed at or after since that passed every hop.
func hopBreakdown(b *testing.B, path string, since time.Time) string {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("unreadable: %v", err)
	}
	at := map[uint64]map[hoptrace.Hop]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		l, err1 := strconv.ParseUint(f[1], 10, 64)
		t, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if at[l] == nil {
			at[l] = map[hoptrace.Hop]int64{}
		}
		if _, dup := at[l][hoptrace.Hop(f[0])]; !dup {
			at[l][hoptrace.Hop(f[0])] = t
		}
	}
	d := make([][]float64, len(hoptrace.Hops))
	for _, m := range at {
		if len(m) != len(hoptrace.Hops) || m[hoptrace.Commit] < since.UnixNano() {
			continue
		}
		for i := 1; i < len(hoptrace.Hops); i++ {
			d[i] = append(d[i], float64(m[hoptrace.Hops[i]]-m[hoptrace.Hops[i-1]])/1e6)
		}
		d[0] = append(d[0], float64(m[hoptrace.Committed]-m[hoptrace.Commit])/1e6)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d txns", len(d[0]))
	for i := range d {
		if len(d[i]) == 0 {
			continue
		}
		sort.Float64s(d[i])
		name := "commit→committed"
		if i > 0 {
			name = "→" + string(hoptrace.Hops[i])
		}
		fmt.Fprintf(&sb, " · %s p50 %.3f p99 %.3f ms", name, d[i][len(d[i])/2], d[i][len(d[i])*99/100])
	}
	return sb.String()
}

// latencies returns the sorted apply − write seconds of one phase's rows.
func latencies(b *testing.B, c *pgtest.Cluster, phase string) []float64 {
	b.Helper()
	ctx := context.Background()
	rows, err := c.Connect(ctx).Query(ctx, `SELECT extract(epoch FROM applied_at - mtime)::float8 FROM history WHERE filler = $1`, phase)
	if err != nil {
		b.Fatal(err)
	}
	ds, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		b.Fatal(err)
	}
	sort.Float64s(ds)
	return ds
}

// trellaraBin is the CLI the end-to-end benchmarks run: TRELLARA_BIN (make
// bench-e2e passes the built bin/trellara) or a fresh build.
// trellaraCmd is the command of the trellara process of a benchmark's
// run (1-based): bin with args, or, with TRELLARA_BENCH_PERF=<dir>, the
// same under `perf record -g` writing <dir>/trellara-run<run>.data (a CPU
// profile with call graphs; the process's CPU then includes perf's own).
func trellaraCmd(bin string, run int, args ...string) *exec.Cmd {
	if dir := os.Getenv("TRELLARA_BENCH_PERF"); dir != "" {
		pre := []string{"record", "-g", "-q", "-o", filepath.Join(dir, fmt.Sprintf("trellara-run%d.data", run)), "--", bin}
		return exec.Command("perf", append(pre, args...)...)
	}
	return exec.Command(bin, args...)
}

func trellaraBin(b testing.TB) string {
	if v := os.Getenv("TRELLARA_BIN"); v != "" {
		if _, err := os.Stat(v); err != nil {
			b.Fatalf("TRELLARA_BIN=%s: %v (run make build)", v, err)
		}
		abs, err := filepath.Abs(v)
		if err != nil {
			b.Fatal(err)
		}
		return abs
	}
	out := filepath.Join(b.TempDir(), "trellara")
	cmd := exec.Command("go", "build", "-o", out, "github.com/trellara/trellara/cmd/trellara")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, o)
	}
	return out
}

// TestABBAOrderAndRatios pins the benchmark bookkeeping: the run order is
// A B B A per round, and ratio i pairs the i-th baseline run with the i-th
// Trellara run (run 1 with run 2, run 4 with run 3).
func TestABBAOrderAndRatios(t *testing.T) {
	got := fmt.Sprint(abbaOrder(2))
	if want := "[false true true false false true true false]"; got != want {
		t.Fatalf("abbaOrder(2) = %s, want %s", got, want)
	}
	var r abbaResult
	for i, isTrellara := range abbaOrder(1) {
		r.add(isTrellara, []float64{4, 2, 1, 8}[i])
	}
	if got, want := fmt.Sprint(r.ratios()), "[2 8]"; got != want {
		t.Fatalf("ratios = %s, want %s (run 1 over run 2, run 4 over run 3)", got, want)
	}
}
