package flow_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
)

// largeTxnRowsDefault is BenchmarkLargeTxnVsNativeStreaming's transaction
// size when TRELLARA_BENCH_LARGE_ROWS is unset: issue 33's 4.5M rows
// (about 270 MB of row data, ≈ 400 MB of table per copy).
const largeTxnRowsDefault = 4_500_000

// largeTxnMarkerSQL is the marker table of the large-transaction
// benchmark: its row 1 is committed after the large transaction, so a
// target that shows it has applied the whole transaction.
const largeTxnMarkerSQL = `CREATE TABLE bench_marker (id int PRIMARY KEY)`

// bigChecksumSQL sums every column of big: the row count, the ids, n, a
// hash of the label and the timestamps, so a run that applied the wrong
// rows (or part of them) does not count.
const bigChecksumSQL = `SELECT count(*)::text || ' ' || coalesce(sum(id), 0)::text || ' ' || coalesce(sum(n), 0)::text ||
  ' ' || coalesce(sum(hashtext(label)::bigint), 0)::text || ' ' || coalesce(sum(extract(epoch FROM at)), 0)::text FROM big`

// BenchmarkLargeTxnVsNativeStreaming is the catch-up of one large
// transaction: TRELLARA_BENCH_LARGE_ROWS rows (default 4,500,000) committed
// into table big (memTableSQL, memInsertSQL) in ONE transaction on one
// source cluster, applied by native logical replication with a streaming
// subscription and by `trellara run --local`, in ABBA order (native,
// trellara, trellara, native per round; TRELLARA_BENCH_ROUNDS rounds,
// default 1), each run into its own fresh target cluster
// (e2eTargetSettings: defaults, wal_retrieve_retry_interval lowered so
// ENABLE starts the apply worker at once).
//
// Before the transaction every consumer is made ready on its own, so all
// decode the identical WAL from a position before it: each native run's
// target subscribes to publication pub (big and bench_marker) WITH
// (copy_data = false, streaming = on, enabled = false), which creates its
// slot at once; each Trellara run's flow (local transport, fsync always,
// as memFlowConfig, plus bench_marker) takes its initial, empty snapshot
// and its slot with a first `run --local`, as BenchmarkRunLocalMemory
// does. Then the transaction and one marker row are committed.
//
// Baseline configuration: the server's defaults (PostgreSQL 15 on the
// bench machine) except max_wal_size 32GB on the source (as
// BenchmarkRunLocalMemory: no checkpoint while the transaction is
// written), so logical_decoding_work_mem is its default 64MB (read back
// and logged) and the walsender streams the transaction to the apply
// worker whenever its decoded changes exceed that (each run's line logs
// the slot's stream and spill counts); the subscription keeps its
// defaults besides streaming (synchronous_commit off, binary off).
//
// A native run is timed from ALTER SUBSCRIPTION ENABLE to the marker
// being visible on its target (then disabled); a Trellara run from
// starting `trellara run --config F --local` (no --verify: verify time is
// not counted) to the marker being visible, with the same 10 ms poll
// (waitMarker); the process's exit time and its peak resident set (VmHWM,
// polled from /proc every 20 ms as runLocalPeak does) are logged with it.
// Every target's big is then checked against the source's (bigChecksumSQL),
// and dropped with its cluster stopped, so the disk holds at most one
// applied copy besides the source. CPU seconds of source, target and the
// trellara process are logged per run (cpuRun). No timing is asserted.
func BenchmarkLargeTxnVsNativeStreaming(b *testing.B) {
	pgtest.Require(b)
	bin := trellaraBin(b)
	rows := benchEnv("TRELLARA_BENCH_LARGE_ROWS", largeTxnRowsDefault)
	rounds := benchEnv("TRELLARA_BENCH_ROUNDS", 1)
	order := abbaOrder(rounds)
	ctx := context.Background()

	src := pgtest.Start(b, pgtest.Options{Settings: map[string]string{"max_wal_size": "32GB"}})
	src.Exec(b, memTableSQL, largeTxnMarkerSQL, `CREATE PUBLICATION pub FOR TABLE big, bench_marker`)
	sconn := src.Connect(ctx)
	var version, workMem string
	if err := sconn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('logical_decoding_work_mem')`).Scan(&version, &workMem); err != nil {
		b.Fatal(err)
	}

	targets := make([]largeTxnTarget, len(order))
	for i, isTrellara := range order {
		if isTrellara {
			targets[i] = newLargeTxnTrellara(b, bin, src, sconn, fmt.Sprintf("large%d", i))
		} else {
			targets[i] = newLargeTxnNative(b, src, fmt.Sprintf("native%d", i))
		}
	}

	start := currentLSN(b, src)
	t0 := time.Now()
	// Not src.Exec: its statements time out after a minute.
	if _, err := sconn.Exec(ctx, memInsertSQL(rows)); err != nil {
		b.Fatalf("insert %d rows: %v", rows, err)
	}
	insertSecs := time.Since(t0).Seconds()
	src.Exec(b, `INSERT INTO bench_marker VALUES (1)`)
	end := currentLSN(b, src)
	var want string
	if err := sconn.QueryRow(ctx, bigChecksumSQL).Scan(&want); err != nil {
		b.Fatal(err)
	}
	b.Logf("one transaction of %d rows (committed in %.1fs), %.0f MiB of WAL (%s to %s), then marker row 1; %d ABBA round(s)",
		rows, insertSecs, float64(end-start)/(1<<20), pglogrepl.LSN(start), pglogrepl.LSN(end), rounds)
	b.Logf("baseline: PostgreSQL %s, source logical_decoding_work_mem %s, max_wal_size 32GB; subscriptions WITH (copy_data = false, streaming = on), other options default; "+
		"trellara: run --local, local transport fsync always, no --verify; every target a fresh cluster with defaults and wal_retrieve_retry_interval 100ms", version, workMem)

	runs := rowRuns{rows: rows}
	var peaks []float64
	b.ResetTimer()
	for i, isTrellara := range order {
		tt := targets[i]
		var secs float64
		var detail string
		var cpu cpuRun
		side := "native"
		if isTrellara {
			side = "trellara"
			var peakMiB float64
			secs, peakMiB, detail, cpu = timeLargeTxnTrellara(b, bin, src, tt, i+1)
			peaks = append(peaks, peakMiB)
		} else {
			secs, detail, cpu = timeLargeTxnNative(b, src, tt)
		}
		tt.check(b, want, fmt.Sprintf("%s run %d", side, i+1))
		detail += "; " + slotStats(sconn, tt.slot)
		tt.drop(b)
		runs.add(b, i+1, isTrellara, secs, detail, cpu)
	}
	b.StopTimer()

	runs.report(b)
	_, peakMax := minMax(peaks)
	b.Logf("trellara peak RSS max %.0f MiB", peakMax)
	b.ReportMetric(peakMax, "peak_RSS_MiB_max")
}

// largeTxnTarget is one run's consumer, ready before the large
// transaction: a fresh target cluster with big and bench_marker, and
// either a disabled native subscription (sub) or a Trellara flow whose
// snapshot is taken (cfg, its log in dir/data). slot is its slot on the
// source.
type largeTxnTarget struct {
	c        *pgtest.Cluster
	sub      string
	cfg, dir string
	slot     string
}

// newLargeTxnNative subscribes a fresh cluster to pub without an initial
// copy, streaming on, disabled: its slot is created now, before the
// transaction.
func newLargeTxnNative(b *testing.B, src *pgtest.Cluster, name string) largeTxnTarget {
	b.Helper()
	t := pgtest.Start(b, e2eTargetSettings)
	t.Exec(b, memTableSQL, largeTxnMarkerSQL)
	t.Exec(b, fmt.Sprintf(`CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION pub WITH (slot_name = '%s', copy_data = false, streaming = on, enabled = false)`,
		name, src.URL("postgres"), name))
	return largeTxnTarget{c: t, sub: name, slot: name}
}

// newLargeTxnTrellara makes a fresh target cluster and a flow into it,
// and runs it once: the first run creates the slot and takes the
// (empty) snapshot, so the measured run carries only the transaction.
func newLargeTxnTrellara(b *testing.B, bin string, src *pgtest.Cluster, sconn *pgx.Conn, flow string) largeTxnTarget {
	b.Helper()
	t := pgtest.Start(b, e2eTargetSettings)
	t.Exec(b, memTableSQL, largeTxnMarkerSQL)
	dir := b.TempDir()
	cfg := localFlowConfig(b, dir, flow, "large", src.URL("postgres"), t.URL("postgres"), "public.big", "public.bench_marker")
	before := slotNames(b, sconn)
	if out, err := exec.Command(bin, "run", "--config", cfg, "--local").CombinedOutput(); err != nil {
		b.Fatalf("trellara first run (slot and snapshot) for %s: %v\n%s", flow, err, out)
	}
	var slot string
	for s := range slotNames(b, sconn) {
		if !before[s] {
			slot = s
		}
	}
	return largeTxnTarget{c: t, cfg: cfg, dir: dir, slot: slot}
}

// slotNames is the set of the source's replication slots.
func slotNames(b *testing.B, conn *pgx.Conn) map[string]bool {
	b.Helper()
	rows, err := conn.Query(context.Background(), `SELECT slot_name::text FROM pg_replication_slots`)
	if err != nil {
		b.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// timeLargeTxnNative enables the subscription and times it to the marker
// being visible on its target, then disables it.
func timeLargeTxnNative(b *testing.B, src *pgtest.Cluster, tt largeTxnTarget) (float64, string, cpuRun) {
	b.Helper()
	conn := tt.c.Connect(context.Background())
	src0, tgt0 := clusterCPU(b, src), clusterCPU(b, tt.c)
	t0 := time.Now()
	tt.c.Exec(b, fmt.Sprintf(`ALTER SUBSCRIPTION %s ENABLE`, tt.sub))
	waitMarker(b, conn, 1, "native target")
	secs := time.Since(t0).Seconds()
	cpu := cpuRun{source: clusterCPU(b, src) - src0, target: clusterCPU(b, tt.c) - tgt0}
	tt.c.Exec(b, fmt.Sprintf(`ALTER SUBSCRIPTION %s DISABLE`, tt.sub))
	return secs, "streaming on, synchronous_commit off (default)", cpu
}

// timeLargeTxnTrellara runs `bin run --config F --local` and times it from
// the start to the marker being visible on its target; it then waits for
// the process to exit. The process's VmHWM is polled every 20 ms while it
// runs (runLocalPeak): the last reading is its peak (perf's own, not the
// process's, under TRELLARA_BENCH_PERF).
func timeLargeTxnTrellara(b *testing.B, bin string, src *pgtest.Cluster, tt largeTxnTarget, run int) (float64, float64, string, cpuRun) {
	b.Helper()
	conn := tt.c.Connect(context.Background())
	src0, tgt0 := clusterCPU(b, src), clusterCPU(b, tt.c)
	cmd := trellaraCmd(bin, run, "run", "--config", tt.cfg, "--local")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	exited := startProcess(b, cmd)
	peak := samplePeak(cmd.Process.Pid)
	waitMarker(b, conn, 1, "trellara target")
	secs := time.Since(t0).Seconds()
	err := <-exited
	exitSecs := time.Since(t0).Seconds()
	peakKiB := peak()
	if err != nil {
		b.Fatalf("trellara run --local: %v\n%s", err, out.String())
	}
	ps := cmd.ProcessState
	cpu := cpuRun{source: settledClusterCPU(b, src) - src0, target: settledClusterCPU(b, tt.c) - tgt0,
		trellara: (ps.UserTime() + ps.SystemTime()).Seconds()}
	peakMiB := float64(peakKiB) / 1024
	if peakKiB == 0 {
		b.Fatalf("no VmHWM read for the trellara run --local child\n%s", out.String())
	}
	return secs, peakMiB, fmt.Sprintf("process exited after %.2fs, peak RSS %.0f MiB", exitSecs, peakMiB), cpu
}

// check fails b unless the target's big sums to the source's.
func (tt largeTxnTarget) check(b *testing.B, want, what string) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, tt.c.URL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, bigChecksumSQL).Scan(&got); err != nil {
		b.Fatal(err)
	}
	if got != want {
		b.Fatalf("%s: target big has (count, sum id, sum n, label hash, epoch sum) %s, source %s", what, got, want)
	}
}

// drop frees the run's disk: the subscription (and so its slot on the
// source), the target's copy of big, the flow's local log; then stops the
// target cluster (its directory goes at cleanup).
func (tt largeTxnTarget) drop(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, tt.c.URL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	if tt.sub != "" {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP SUBSCRIPTION %s`, tt.sub)); err != nil {
			b.Fatalf("drop subscription %s: %v", tt.sub, err)
		}
	}
	for _, q := range []string{`DROP TABLE big`, `CHECKPOINT`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close(ctx)
	if tt.dir != "" {
		if err := os.RemoveAll(filepath.Join(tt.dir, "data")); err != nil {
			b.Logf("remove the flow's log: %v", err)
		}
	}
	tt.c.Stop()
}

// slotStats is the source's decoding statistics of slot (PostgreSQL 14+):
// how much of the transaction the walsender streamed or spilled to disk.
func slotStats(conn *pgx.Conn, slot string) string {
	if slot == "" {
		return "slot stats: slot unknown"
	}
	var totalTxns, totalBytes, streamTxns, streamCount, streamBytes, spillTxns, spillCount, spillBytes int64
	err := conn.QueryRow(context.Background(), `SELECT total_txns, total_bytes, stream_txns, stream_count, stream_bytes, spill_txns, spill_count, spill_bytes
FROM pg_stat_replication_slots WHERE slot_name = $1`, slot).Scan(&totalTxns, &totalBytes, &streamTxns, &streamCount, &streamBytes, &spillTxns, &spillCount, &spillBytes)
	if err != nil {
		return "slot stats: " + strings.TrimSpace(err.Error())
	}
	return fmt.Sprintf("slot %s: decoded %d txns, %.0f MiB; streamed %d txn in %d chunks, %.0f MiB; spilled %d txn %d times, %.0f MiB",
		slot, totalTxns, float64(totalBytes)/(1<<20), streamTxns, streamCount, float64(streamBytes)/(1<<20), spillTxns, spillCount, float64(spillBytes)/(1<<20))
}
