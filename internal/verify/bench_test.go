package verify

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/internal/pgtest"
)

// benchRows is the table size: 1M by default, TRELLARA_BENCH_ROWS for the
// issue's 10M figure (that run spends most of its time generating rows).
func benchRows(b *testing.B) int {
	s := os.Getenv("TRELLARA_BENCH_ROWS")
	if s == "" {
		return 1_000_000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("TRELLARA_BENCH_ROWS=%q: want a positive integer", s)
	}
	return n
}

// benchSettings give each server enough shared_buffers to keep the table
// cached, so the benchmark measures hashing, not the disk.
var benchSettings = map[string]string{"shared_buffers": "1GB", "max_worker_processes": "8"}

// BenchmarkVerify verifies an identical table on two servers and, in the
// same run, times SELECT count(*) on the source, the cheapest possible full
// read, to report how close verify comes to it. Metrics:
//
//	src-rows/s, dst-rows/s          rows hashed per second of scan time, per side
//	src-rows/cpu-s, dst-rows/cpu-s  rows per CPU second of that side's backend
//	                                (one-core only; Linux /proc): the speed one
//	                                core gives, however busy the machine is
//	verify-s                        wall time of Verify
//	count-s                         wall time of SELECT count(*) on the source
//	                                (server defaults)
//	verify/count                    verify-s over count-s
//	count-both-s                    wall time of SELECT count(*) on both sides at
//	                                once (server defaults): the cheapest full read
//	                                of the two tables verify reads, on the same
//	                                cores
//	verify/count-both               verify-s over count-both-s: the ratio issue
//	                                33 bounds at 3 ("count(*) wall on both sides")
//	src-cpu/count-cpu               (one-core only) CPU of the source's
//	                                verify backend over the CPU of a one-core
//	                                SELECT count(*) on the same table: the
//	                                ratio without the machine's load in it
//
// Sub-benchmarks by Options.ParallelWorkers, on one connection per side:
// one-core (-1, parallel query off), server-default (0: PostgreSQL may
// give the totals query 2 workers) and parallel-2 (2, also for the bucket
// aggregate); and by Options.Connections with parallel query off:
// connections-2 and connections-4 (page ranges over 2 or 4 connections per
// side sharing one snapshot). Those hash in SQL (Options.SQLRowHash); the
// c-* sub-benchmarks hash with the trellara extension's C row hash
// (trellara_verify_buckets), which both servers preload and both
// databases have: c-one-core and c-connections-2. Both sides share this
// machine's cores, so rows/s per side is what one side gets while the
// other runs too.
func BenchmarkVerify(b *testing.B) {
	rows := benchRows(b)
	srcC := startWithExtension(b, benchSettings)
	dstC := startWithExtension(b, benchSettings)
	ddl := `CREATE TABLE public.ledger (id bigint PRIMARY KEY, account int NOT NULL, amount numeric(12,2) NOT NULL,
		memo text, created timestamptz NOT NULL)`
	fill := fmt.Sprintf(`INSERT INTO public.ledger SELECT g, g %% 10007, (g %% 100000) / 100.0, 'memo ' || g,
		TIMESTAMPTZ '2025-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, %d) g`, rows)
	start := time.Now()
	for _, c := range []*pgtest.Cluster{srcC, dstC} {
		// VACUUM sets hint bits and the visibility map, as on a settled
		// production table; count(*) would otherwise pay for it first.
		c.Exec(b, `CREATE EXTENSION trellara`, ddl, fill, `VACUUM ANALYZE public.ledger`)
	}
	b.Logf("generated %d rows per side in %s", rows, time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	src, dst := srcC.Connect(ctx), dstC.Connect(ctx)
	for _, bc := range []struct {
		name         string
		workers, cns int
		native       bool
	}{{"one-core", -1, 1, false}, {"server-default", 0, 1, false}, {"parallel-2", 2, 1, false}, {"connections-2", -1, 2, false},
		{"connections-4", -1, 4, false}, {"c-one-core", -1, 1, true}, {"c-connections-2", -1, 2, true}} {
		b.Run(bc.name, func(b *testing.B) {
			var srcRate, dstRate, verifyS, countS, bothS, srcCPU, dstCPU, countCPU float64
			for i := 0; i < b.N; i++ {
				s0, d0 := backendCPU(src), backendCPU(dst)
				t0 := time.Now()
				r, err := Verify(ctx, src, dst, Options{Tables: []string{"public.ledger"}, ParallelWorkers: bc.workers, Connections: bc.cns, SQLRowHash: !bc.native})
				if err != nil {
					b.Fatal(err)
				}
				if (r.native == [2]int{1, 1}) != bc.native {
					b.Fatalf("tables hashed in C: %v, want C: %v", r.native, bc.native)
				}
				verifyS += time.Since(t0).Seconds()
				srcCPU += backendCPU(src) - s0
				dstCPU += backendCPU(dst) - d0
				if r.Verdict != Converged || r.Tables[0].SourceRows != int64(rows) {
					b.Fatalf("verdict %s, %d rows", r.Verdict, r.Tables[0].SourceRows)
				}
				srcRate += r.SourceRowsPerSecond
				dstRate += r.TargetRowsPerSecond
				countS += timeCount(b, src)
				bothS += timeCountBoth(b, src, dst)
				countCPU += oneCoreCountCPU(b, src)
			}
			n := float64(b.N)
			b.ReportMetric(srcRate/n, "src-rows/s")
			b.ReportMetric(dstRate/n, "dst-rows/s")
			if bc.workers < 0 && bc.cns == 1 && srcCPU > 0 && dstCPU > 0 {
				b.ReportMetric(float64(rows)*n/srcCPU, "src-rows/cpu-s")
				b.ReportMetric(float64(rows)*n/dstCPU, "dst-rows/cpu-s")
				if countCPU > 0 {
					b.ReportMetric(srcCPU/countCPU, "src-cpu/count-cpu")
				}
			}
			b.ReportMetric(verifyS/n, "verify-s")
			b.ReportMetric(countS/n, "count-s")
			b.ReportMetric(verifyS/countS, "verify/count")
			b.ReportMetric(bothS/n, "count-both-s")
			b.ReportMetric(verifyS/bothS, "verify/count-both")
		})
	}
}

// timeCount times SELECT count(*) on the benchmark table, with the server's
// own parallel settings: what an operator would compare verify against.
func timeCount(b *testing.B, conn *pgx.Conn) float64 {
	var n int64
	t0 := time.Now()
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM public.ledger").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0).Seconds()
}

// timeCountBoth times SELECT count(*) on the benchmark table on both
// sides at once, to the later of the two answers.
func timeCountBoth(b *testing.B, src, dst *pgx.Conn) float64 {
	t0 := time.Now()
	errs := make(chan error, 1)
	go func() {
		var n int64
		errs <- dst.QueryRow(context.Background(), "SELECT count(*) FROM public.ledger").Scan(&n)
	}()
	var n int64
	err := src.QueryRow(context.Background(), "SELECT count(*) FROM public.ledger").Scan(&n)
	if derr := <-errs; err == nil {
		err = derr
	}
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(t0).Seconds()
}

// oneCoreCountCPU is the CPU time of SELECT count(*) on the benchmark
// table with parallel query off, so the backend does all of it.
func oneCoreCountCPU(b *testing.B, conn *pgx.Conn) float64 {
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL max_parallel_workers_per_gather = 0"); err != nil {
		b.Fatal(err)
	}
	var n int64
	c0 := backendCPU(conn)
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM public.ledger").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return backendCPU(conn) - c0
}

// backendCPU is the CPU time, in seconds, the server process behind conn
// has used (pgtest.ProcCPU), or 0 where that cannot be read.
func backendCPU(conn *pgx.Conn) float64 {
	return pgtest.ProcCPU(int(conn.PgConn().PID()))
}
