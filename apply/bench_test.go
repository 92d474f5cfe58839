package apply

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
)

// BenchmarkApply applies a pgbench-like (TPC-B) workload: each source
// transaction updates an account, a teller and a branch and inserts a
// history row. The target runs with fsync on, as in production. Reported:
// source transactions and rows per second, and source transactions per
// target transaction (the batching achieved).
func BenchmarkApply(b *testing.B) {
	const n = 5000
	conn, payloads := tpcb(b, n)
	for _, batch := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("txns=%d/batch=%d", n, batch), func(b *testing.B) {
			benchApply(b, conn, payloads, func(c *Config) { c.MaxBatchTxns = batch })
		})
	}
}

// BenchmarkApplySyncCommit compares synchronous and asynchronous target
// commits (Config.SynchronousCommit) on the TPC-B workload, with small
// and with the default batches, each in ABBA order (on, off, off, on) so that a machine
// getting slower or faster during the run does not favour either.
func BenchmarkApplySyncCommit(b *testing.B) {
	const n = 20000
	conn, payloads := tpcb(b, n)
	// batch=16 is a stream arriving a few transactions at a time, where
	// every target commit counts; 1024 is a backlog drained in large
	// target transactions.
	for _, batch := range []int{16, defaultMaxBatchTxns} {
		for i, mode := range []string{SyncCommitOn, SyncCommitOff, SyncCommitOff, SyncCommitOn} {
			b.Run(fmt.Sprintf("batch=%d/%d/txns=%d/synchronous_commit=%s", batch, i+1, n, mode), func(b *testing.B) {
				benchApply(b, conn, payloads, func(c *Config) { c.MaxBatchTxns, c.SynchronousCommit = batch, mode })
			})
		}
	}
}

// BenchmarkApplyFolded is BenchmarkApplySyncCommit's backlog (default
// batches) with a history table that has a primary key, as the end-to-end
// benchmark's (internal/flow) has: every batch is folded (compact.go),
// where pgbench's keyless history makes BenchmarkApplySyncCommit apply
// row by row.
func BenchmarkApplyFolded(b *testing.B) {
	const n = 20000
	conn, payloads := tpcbKeyed(b, n, true)
	for i, mode := range []string{SyncCommitOn, SyncCommitOff, SyncCommitOff, SyncCommitOn} {
		b.Run(fmt.Sprintf("%d/txns=%d/synchronous_commit=%s", i+1, n, mode), func(b *testing.B) {
			benchApply(b, conn, payloads, func(c *Config) { c.SynchronousCommit = mode })
			// The first batch may be a lone transaction (the read-ahead
			// not filled yet), which goes row by row.
			if a := lastBenchStats; a.FoldedTxns < a.TxnsApplied*9/10 {
				b.Fatalf("only %d of %d transactions folded", a.FoldedTxns, a.TxnsApplied)
			}
		})
	}
}

// tpcb starts a target holding pgbench's tables (scale 1) and returns n
// source transactions of pgbench's TPC-B script.
func tpcb(b testing.TB, n int) (*pgx.Conn, [][]byte) { return tpcbKeyed(b, n, false) }

// tpcbKeyed is tpcb, with a primary key on history when keyed.
func tpcbKeyed(b testing.TB, n int, keyed bool) (*pgx.Conn, [][]byte) {
	_, conn := target(b, pgtest.Options{})
	hisDDL := "CREATE TABLE history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))"
	if keyed {
		hisDDL = "CREATE TABLE history (hid int PRIMARY KEY, tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))"
	}
	const accounts, tellers, branches = 100000, 100, 10
	exec(b, conn,
		"CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84))",
		"CREATE TABLE tellers (tid int PRIMARY KEY, bid int, tbalance int, filler char(84))",
		"CREATE TABLE branches (bid int PRIMARY KEY, bbalance int, filler char(88))",
		hisDDL,
		fmt.Sprintf("INSERT INTO accounts SELECT g, (g - 1) / %d + 1, 0, '' FROM generate_series(1, %d) g", accounts/branches, accounts),
		fmt.Sprintf("INSERT INTO tellers SELECT g, (g - 1) / %d + 1, 0, '' FROM generate_series(1, %d) g", tellers/branches, tellers),
		fmt.Sprintf("INSERT INTO branches SELECT g, 0, '' FROM generate_series(1, %d) g", branches),
		"VACUUM ANALYZE")
	if err := EnsureSchema(context.Background(), conn, ""); err != nil {
		b.Fatal(err)
	}
	acc := relation("public", "accounts", 'd', "aid*", "bid", "abalance", "filler")
	tel := relation("public", "tellers", 'd', "tid*", "bid", "tbalance", "filler")
	bra := relation("public", "branches", 'd', "bid*", "bbalance", "filler")
	his := relation("public", "history", 'd', "tid", "bid", "aid", "delta", "mtime", "filler")
	if keyed {
		his = relation("public", "history", 'd', "hid*", "tid", "bid", "aid", "delta", "mtime", "filler")
	}

	rng := rand.New(rand.NewPCG(1, 2))
	abal, tbal, bbal := map[int]int{}, map[int]int{}, map[int]int{}
	payloads := make([][]byte, n)
	none := pb.OldTuple_OLD_TUPLE_NONE
	for i := range payloads {
		aid, tid, bid := 1+rng.IntN(accounts), 1+rng.IntN(tellers), 1+rng.IntN(branches)
		delta := rng.IntN(10001) - 5000
		abal[aid] += delta
		tbal[tid] += delta
		bbal[bid] += delta
		s := strconv.Itoa
		payloads[i] = newTxn(uint64(0x1000000+i*128)).
			update(acc, none, nil, vals(s(aid), s((aid-1)/(accounts/branches)+1), s(abal[aid]), "")).
			update(tel, none, nil, vals(s(tid), s((tid-1)/(tellers/branches)+1), s(tbal[tid]), "")).
			update(bra, none, nil, vals(s(bid), s(bbal[bid]), "")).
			insert(his, hisVals(keyed, i, vals(s(tid), s(bid), s(aid), s(delta), "2026-11-30 12:00:00", ""))...).encode(b)
	}

	return conn, payloads
}

// hisVals is a history row, with its key first when keyed.
func hisVals(keyed bool, i int, row []*pb.Value) []*pb.Value {
	if !keyed {
		return row
	}
	return append([]*pb.Value{tv(strconv.Itoa(i + 1))}, row...)
}

// lastBenchStats are the Stats of benchApply's last applier.
var lastBenchStats Stats

// benchApply applies payloads from an empty checkpoint b.N times. A run
// ends once the cursor is at the last unit: with asynchronous commits that
// includes the flush of the last ones.
func benchApply(b *testing.B, conn *pgx.Conn, payloads [][]byte, mod func(*Config)) {
	n := len(payloads)
	var elapsed, selfCPU time.Duration
	var backendCPU float64
	var targetTxns int64
	backend := conn.PgConn().PID()
	for range b.N {
		b.StopTimer()
		exec(b, conn, "DELETE FROM trellara.checkpoints WHERE flow = '"+testFlow+"'", "TRUNCATE history", "CHECKPOINT")
		a := newApplier(b, conn, mod)
		cur := &recCursor{}
		b.StartTimer()
		start, self0, back0 := time.Now(), pgtest.SelfCPU(), pgtest.ProcCPU(int(backend))
		if err := drain(b, a, cur, 0, payloads); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		selfCPU += pgtest.SelfCPU() - self0
		backendCPU += pgtest.ProcCPU(int(backend)) - back0
		if last, ok := cur.last(); !ok || last != uint64(n-1) {
			b.Fatalf("cursor ended at %d (%v), want %d", last, ok, n-1)
		}
		lastBenchStats = a.Stats()
		targetTxns += lastBenchStats.TargetTxns
	}
	secs := elapsed.Seconds()
	b.ReportMetric(float64(n*b.N)/secs, "txns/s")
	b.ReportMetric(float64(4*n*b.N)/secs, "rows/s")
	b.ReportMetric(float64(n*b.N)/float64(targetTxns), "txns/target-txn")
	b.ReportMetric(0, "ns/op")
	// CPU, not wall time, compares runs on a loaded machine: this process
	// (the applier) and the target's backend serving its connection.
	b.ReportMetric(float64(selfCPU.Milliseconds())/float64(b.N), "applier-cpu-ms/op")
	b.ReportMetric(backendCPU*1000/float64(b.N), "backend-cpu-ms/op")
}
