package flow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/pgtest"
)

// snapshotTables are the tables both sides copy: pgbench's three tables
// with a primary key. pgbench_history (no primary key) is left out of the
// publication and of the flow on both sides.
var snapshotTables = []string{"pgbench_accounts", "pgbench_branches", "pgbench_tellers"}

// BenchmarkSnapshotVsTablesync measures the initial copy of the same data
// by native logical replication's initial table synchronisation
// (tablesync: CREATE SUBSCRIPTION ... WITH (copy_data = true), the
// baseline, A) and by Trellara's initial snapshot (`trellara run --local`
// on a new owns_slot flow, B), in ABBA order (native, trellara, trellara,
// native per round; TRELLARA_BENCH_ROUNDS rounds, default 1).
//
// Data: one source cluster with the pgbench schema at scale
// TRELLARA_BENCH_SNAPSHOT_SCALE (default 50: 5,000,000 pgbench_accounts
// rows, 500 tellers, 50 branches, about 750 MB with indexes), made by
// `pgbench -i` once, then 2,000 pgbench TPC-B transactions so that
// abalance is not all zero, VACUUM ANALYZE and a CHECKPOINT. The copied
// tables are pgbench_accounts, pgbench_branches and pgbench_tellers (the
// ones with a primary key; pgbench_history has none and is left out on
// both sides). Nothing writes to the source during the runs.
//
// Every run copies into a fresh, empty database (`pgbench -i -I dtp`:
// the tables and their primary keys, no rows) on a target cluster of its
// side (one for native, one for Trellara, shared by that side's runs);
// the database is dropped once the run is checked, so disk use stays at
// one copy per side.
//
// A native run is timed from CREATE SUBSCRIPTION (connecting to the
// source and creating the slot included) until every table of the
// subscription is in state 'r' in pg_subscription_rel (a 10 ms poll); a
// Trellara run from starting the process (slot and publication creation
// included) until every table is ready in the same sense: its snapshot
// applied and the stream applied past its boundary (status's "ready",
// apply.ReadStatus, a 10 ms poll). The process then goes on to its fence
// and exits once that is applied and the target has flushed what it
// committed asynchronously; the exit time is in the run's line, and the
// process must exit successfully. After the clock stops, each run's target
// must hold the source's row count and row checksum (sum of
// hashtext(row::text)) per table and pgbench_accounts' sum(abalance); then
// the native subscription is dropped (with its slot) and the Trellara flow
// is removed with `run --cleanup` (slot and publication), and the source
// must hold no replication slot before the next run.
//
// Settings: every cluster runs pgtest's defaults and the PostgreSQL
// server defaults for logical replication — in particular
// max_sync_workers_per_subscription = 2 (at most two tables copy at once
// natively) and max_logical_replication_workers = 4 — and the
// subscription runs with its defaults (binary = false, streaming off);
// the settings used are logged. Both target clusters get the
// e2eTargetSettings every end-to-end target gets
// (wal_retrieve_retry_interval 100 ms, which only spaces the launcher's
// worker starts, so it can only help the native side). Trellara runs
// with its defaults (local transport, fsync always).
//
// Per run a "run" line gives the seconds, rows/s and the CPU of source,
// target and the trellara process; then the range of each side's rate
// and of the per-pair ratio native seconds / Trellara seconds (above 1:
// Trellara faster), reported as ratio_min and ratio_max. No timing is
// asserted.
func BenchmarkSnapshotVsTablesync(b *testing.B) {
	pgtest.Require(b)
	bin := trellaraBin(b)
	scale := benchEnv("TRELLARA_BENCH_SNAPSHOT_SCALE", 50)
	rounds := benchEnv("TRELLARA_BENCH_ROUNDS", 1)
	ctx := context.Background()

	src := pgtest.Start(b, pgtest.Options{})
	pgbench := filepath.Join(src.BinDir(), "pgbench")
	load := time.Now()
	if out, err := exec.Command(pgbench, "-i", "-q", "-s", strconv.Itoa(scale), src.URL("postgres")).CombinedOutput(); err != nil {
		b.Fatalf("pgbench -i -s %d: %v\n%s", scale, err, out)
	}
	if out, err := exec.Command(pgbench, "-n", "-c", "4", "-j", "2", "-t", "500", src.URL("postgres")).CombinedOutput(); err != nil {
		b.Fatalf("pgbench (abalance updates): %v\n%s", err, out)
	}
	sconn := src.Connect(ctx)
	for _, s := range []string{
		`VACUUM ANALYZE`,
		`CREATE PUBLICATION pub FOR TABLE ` + strings.Join(snapshotTables, ", "),
		`CHECKPOINT`,
	} {
		if _, err := sconn.Exec(ctx, s); err != nil {
			b.Fatalf("source: %s: %v", s, err)
		}
	}
	want, rows := snapshotSums(b, sconn)
	var bytesTotal int64
	if err := sconn.QueryRow(ctx, `SELECT sum(pg_total_relation_size(t))::bigint FROM unnest($1::regclass[]) t`, snapshotTables).Scan(&bytesTotal); err != nil {
		b.Fatal(err)
	}
	b.Logf("source: pgbench scale %d, %d rows in %s (%.0f MB with indexes), loaded in %.0fs; %d ABBA round(s); every copy must hold: %s",
		scale, rows, strings.Join(snapshotTables, ", "), float64(bytesTotal)/1e6, time.Since(load).Seconds(), rounds, want)

	natC := pgtest.Start(b, e2eTargetSettings)
	trelC := pgtest.Start(b, e2eTargetSettings)
	b.Logf("native settings (target): %s", showSettings(b, natC, "server_version", "max_sync_workers_per_subscription",
		"max_logical_replication_workers", "max_worker_processes", "wal_retrieve_retry_interval", "shared_buffers", "synchronous_commit", "fsync"))
	b.Logf("source settings: %s", showSettings(b, src, "max_wal_senders", "max_replication_slots", "shared_buffers", "fsync"))
	b.Logf("trellara target settings: %s", showSettings(b, trelC, "shared_buffers", "synchronous_commit", "fsync"))

	runs := rowRuns{rows: int(rows)}
	b.ResetTimer()
	for i, isTrellara := range abbaOrder(rounds) {
		run := i + 1
		db := fmt.Sprintf("snap%d", run)
		var secs float64
		var detail string
		var cpu cpuRun
		side := "native"
		if isTrellara {
			side = "trellara"
			snapshotTargetDB(b, trelC, db)
			secs, detail, cpu = snapshotTrellaraRun(b, bin, src, trelC, db, run, want)
		} else {
			snapshotTargetDB(b, natC, db)
			secs, detail, cpu = snapshotNativeRun(b, src, natC, db, run, want)
		}
		noSlotsLeft(b, sconn, side, run)
		runs.add(b, run, isTrellara, secs, detail, cpu)
	}
	b.StopTimer()

	runs.report(b)
}

// rowRuns records the runs of a benchmark counted in rows (the snapshot,
// the large transaction): each run's line as it ends, both sides' ranges
// and CPU at the end.
type rowRuns struct {
	rows int
	res  abbaResult
	cpus cpuResult
}

func (r *rowRuns) add(b *testing.B, run int, isTrellara bool, secs float64, detail string, cpu cpuRun) {
	b.Helper()
	side := "native"
	if isTrellara {
		side = "trellara"
	}
	r.res.add(isTrellara, secs)
	r.cpus.add(isTrellara, cpu)
	b.Logf("run %d %-8s %6.2fs %8.0f rows/s (%s; cpu: total %.2f s = source %.2f + target %.2f + trellara %.2f)",
		run, side, secs, float64(r.rows)/secs, detail, cpu.total(), cpu.source, cpu.target, cpu.trellara)
}

func (r *rowRuns) report(b *testing.B) {
	b.Helper()
	r.res.report(b, "native", "trellara", r.rows, "rows")
	r.cpus.reportTotal(b, "native", "trellara")
}

// snapshotTargetDB creates database db on c with pgbench's tables and
// primary keys and no rows.
func snapshotTargetDB(b *testing.B, c *pgtest.Cluster, db string) {
	b.Helper()
	c.Exec(b, "CREATE DATABASE "+db)
	if out, err := exec.Command(filepath.Join(c.BinDir(), "pgbench"), "-i", "-I", "dtp", c.URL(db)).CombinedOutput(); err != nil {
		b.Fatalf("pgbench -i -I dtp on %s: %v\n%s", db, err, out)
	}
}

// dropSnapshotDB drops a run's target database (its copy) once checked.
func dropSnapshotDB(b *testing.B, c *pgtest.Cluster, db string) {
	b.Helper()
	c.Exec(b, "DROP DATABASE "+db+" WITH (FORCE)")
}

// snapshotSums returns, per copied table, its row count and row checksum
// (and pgbench_accounts' sum(abalance)), and the total row count.
func snapshotSums(b *testing.B, conn *pgx.Conn) (string, int64) {
	b.Helper()
	ctx := context.Background()
	var parts []string
	var total int64
	for _, t := range snapshotTables {
		var n int64
		var sum, extra string
		extraSQL := "''"
		if t == "pgbench_accounts" {
			extraSQL = "'sum(abalance) ' || coalesce(sum(abalance), 0)::text"
		}
		q := fmt.Sprintf(`SELECT count(*), coalesce(sum(hashtext(x::text)), 0)::text, %s FROM %s x`, extraSQL, t)
		if err := conn.QueryRow(ctx, q).Scan(&n, &sum, &extra); err != nil {
			b.Fatalf("checksum of %s: %v", t, err)
		}
		total += n
		parts = append(parts, strings.TrimSpace(fmt.Sprintf("%s %d rows hash %s %s", t, n, sum, extra)))
	}
	return strings.Join(parts, "; "), total
}

// checkSnapshotCopy fails b unless database db on target holds what the
// source held (want, from snapshotSums).
func checkSnapshotCopy(b *testing.B, target *pgtest.Cluster, db, want, what string) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, target.URL(db))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if got, _ := snapshotSums(b, conn); got != want {
		b.Fatalf("%s: target holds %s; source %s", what, got, want)
	}
}

// noSlotsLeft fails b if a run left a replication slot on the source.
func noSlotsLeft(b *testing.B, sconn *pgx.Conn, side string, run int) {
	b.Helper()
	var slots []string
	rows, err := sconn.Query(context.Background(), `SELECT slot_name::text FROM pg_replication_slots`)
	if err == nil {
		slots, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		b.Fatal(err)
	}
	if len(slots) > 0 {
		b.Fatalf("after %s run %d the source still has replication slots %v", side, run, slots)
	}
}

// showSettings renders the named settings of c as "name=value ...".
func showSettings(b *testing.B, c *pgtest.Cluster, names ...string) string {
	b.Helper()
	ctx := context.Background()
	conn := c.Connect(ctx)
	var parts []string
	for _, n := range names {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", n).Scan(&v); err != nil {
			b.Fatal(err)
		}
		parts = append(parts, n+"="+v)
	}
	return strings.Join(parts, " ")
}

// snapshotNativeRun subscribes database db on target to pub with
// copy_data and times it to every table being ready ('r'); then checks
// the copy, drops the subscription (and its slot) and the database.
func snapshotNativeRun(b *testing.B, src, target *pgtest.Cluster, db string, run int, want string) (float64, string, cpuRun) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, target.URL(db))
	if err != nil {
		b.Fatal(err)
	}
	sub := fmt.Sprintf("tablesync%d", run)
	src0, tgt0 := clusterCPU(b, src), clusterCPU(b, target)
	t0 := time.Now()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION pub WITH (copy_data = true)`, sub, src.URL("postgres"))); err != nil {
		b.Fatalf("native run %d: CREATE SUBSCRIPTION: %v", run, err)
	}
	// copiedAt: first seen in SYNCDONE ('s': the table's copy committed)
	// or ready; readyAt: first seen ready ('r': handed to the apply worker).
	copiedAt, readyAt := map[string]float64{}, map[string]float64{}
	waitFor(b, "native tablesync of "+sub, func() bool {
		rows, err := conn.Query(ctx, `SELECT r.srrelid::regclass::text, r.srsubstate::text FROM pg_subscription_rel r
JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = $1`, sub)
		if err != nil {
			return false
		}
		type rel struct{ name, state string }
		rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rel, error) {
			var x rel
			return x, r.Scan(&x.name, &x.state)
		})
		if err != nil {
			return false
		}
		now := time.Since(t0).Seconds()
		for _, r := range rels {
			if _, seen := copiedAt[r.name]; !seen && (r.state == "s" || r.state == "r") {
				copiedAt[r.name] = now
			}
			if _, seen := readyAt[r.name]; !seen && r.state == "r" {
				readyAt[r.name] = now
			}
		}
		return len(rels) == len(snapshotTables) && len(readyAt) == len(snapshotTables)
	})
	secs := time.Since(t0).Seconds()
	cpu := cpuRun{source: settledClusterCPU(b, src) - src0, target: settledClusterCPU(b, target) - tgt0}
	checkSnapshotCopy(b, target, db, want, "native run "+strconv.Itoa(run))
	if _, err := conn.Exec(ctx, `DROP SUBSCRIPTION `+sub); err != nil {
		b.Fatalf("native run %d: DROP SUBSCRIPTION: %v", run, err)
	}
	conn.Close(ctx)
	dropSnapshotDB(b, target, db)
	names := make([]string, 0, len(readyAt))
	for n := range readyAt {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return readyAt[names[i]] < readyAt[names[j]] })
	var ready []string
	for _, n := range names {
		ready = append(ready, fmt.Sprintf("%s %.2fs (copied %.2fs)", strings.TrimPrefix(n, "pgbench_"), readyAt[n], copiedAt[n]))
	}
	return secs, "tablesync, ready: " + strings.Join(ready, ", "), cpu
}

// snapshotFlowConfig writes a run --local flow of snapshotTables from src
// to database db of target into dir (its log in dir/data): the local flow
// config of the memory and large-transaction benchmarks.
func snapshotFlowConfig(b *testing.B, dir, flow string, src, target *pgtest.Cluster, db string) string {
	b.Helper()
	var tables []string
	for _, t := range snapshotTables {
		tables = append(tables, "public."+t)
	}
	return localFlowConfig(b, dir, flow, "bench", src.URL("postgres"), target.URL(db), tables...)
}

// snapshotTrellaraRun runs a new flow into database db on target with
// `run --local` and times it from the start to the process's successful
// exit; then checks the copy, removes the flow (`run --cleanup`: slot,
// publication, local state) and drops the database.
func snapshotTrellaraRun(b *testing.B, bin string, src, target *pgtest.Cluster, db string, run int, want string) (float64, string, cpuRun) {
	b.Helper()
	dir, err := os.MkdirTemp("", "trellara-snapbench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	flow := fmt.Sprintf("snap%d", run)
	cfg := snapshotFlowConfig(b, dir, flow, src, target, db)
	cmd := trellaraCmd(bin, run, "run", "--config", cfg, "--local", "--format", "json", "--verbose")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, target.URL(db))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	src0, tgt0 := clusterCPU(b, src), clusterCPU(b, target)
	t0 := time.Now()
	exited := startProcess(b, cmd)
	// Ready as native's tables are in state 'r': every table's snapshot
	// applied and the stream applied past its boundary (apply.ReadStatus,
	// what status reports), polled every 10 ms.
	var exitErr error
	done := false
	for !done {
		select {
		case exitErr = <-exited:
			done = true
		case <-time.After(10 * time.Millisecond):
		}
		if st, err := apply.ReadStatus(ctx, conn, "", flow, "bench"); err == nil && len(st.Snapshots) == len(snapshotTables) {
			ready := true
			for _, p := range st.Snapshots {
				ready = ready && p.Ready
			}
			if ready {
				break
			}
		}
	}
	secs := time.Since(t0).Seconds()
	if !done {
		exitErr = <-exited
	}
	exitSecs := time.Since(t0).Seconds()
	if exitErr != nil {
		b.Fatalf("trellara run %d: run --local: %v\n%s\n%s", run, exitErr, stdout.String(), stderr.String())
	}
	if dir := os.Getenv("TRELLARA_BENCH_PERF"); dir != "" {
		times := fmt.Sprintf("started %s, ready %s, exited %s\n", t0.UTC().Format(time.RFC3339Nano),
			t0.Add(time.Duration(secs*1e9)).UTC().Format(time.RFC3339Nano), t0.Add(time.Duration(exitSecs*1e9)).UTC().Format(time.RFC3339Nano))
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("trellara-run%d.log", run)), append([]byte(times), append(stdout.Bytes(), stderr.Bytes()...)...), 0o644)
	}
	ps := cmd.ProcessState
	cpu := cpuRun{source: settledClusterCPU(b, src) - src0, target: settledClusterCPU(b, target) - tgt0,
		trellara: (ps.UserTime() + ps.SystemTime()).Seconds()}
	detail := fmt.Sprintf("every table ready, process exited after %.2fs", exitSecs)
	var out struct {
		DurationSecs float64 `json:"duration_seconds"`
		ThisRun      struct {
			RowsApplied int64 `json:"rows_applied"`
		} `json:"this_run"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err == nil {
		detail += fmt.Sprintf(", run reports %.2fs, %d rows applied", out.DurationSecs, out.ThisRun.RowsApplied)
	}
	checkSnapshotCopy(b, target, db, want, "trellara run "+strconv.Itoa(run))
	if o, err := exec.Command(bin, "run", "--config", cfg, "--cleanup").CombinedOutput(); err != nil {
		b.Fatalf("trellara run %d: run --cleanup: %v\n%s", run, err, o)
	}
	dropSnapshotDB(b, target, db)
	return secs, detail, cpu
}
