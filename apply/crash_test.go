package apply

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// TestCrashTargetKilled: the target server is SIGKILLed while Run is
// applying (most batches folded: keyed tables, deletes, rewrites under the
// same key, unchanged TOAST, rare key changes); after crash recovery a new
// applier resumes from a cursor that lags behind (so part of the log is
// redelivered) and every source transaction ends up applied exactly once.
func TestCrashTargetKilled(t *testing.T) {
	c, conn := target(t, pgtest.Options{}) // fsync on: crash recovery must find what was committed
	exec(t, conn, commerceDDL)
	const seed, n = 77, 2000
	t.Logf("workload seed %d, %d transactions", seed, n)
	g := newCommerce(seed)
	payloads := g.generate(t, n)

	cur := &recCursor{}
	a := newApplier(t, conn, func(c *Config) { c.MaxBatchTxns = 16 })
	src := &pacedSource{memSource: memSource{payloads: payloads}, burst: 10, pause: 5 * time.Millisecond}
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		errc <- a.Run(ctx, src, cur, nil)
	}()

	// Kill once a good part of the workload is in, while more is arriving.
	deadline := time.Now().Add(time.Minute)
	for a.Stats().TxnsApplied < n/4 {
		if time.Now().After(deadline) {
			t.Fatal("apply made no progress")
		}
		time.Sleep(2 * time.Millisecond)
	}
	c.Kill()
	err := <-errc
	if !IsTransient(err) {
		t.Fatalf("Run after the target was killed = %v, want a *TransientError", err)
	}
	before := a.Stats()
	t.Logf("killed after %d txns applied in this run (%d folded); Run returned: %v", before.TxnsApplied, before.FoldedTxns, err)
	checkFolding(t, before)

	c.Restart()
	conn2 := connect(t, c.URL("target"))
	st := readStatus(t, conn2)
	// The kill can land after the server committed a batch but before the
	// reply reached the applier: then the target holds that one batch (at
	// most MaxBatchTxns transactions) beyond what the applier saw commit.
	if got, saw := st.Checkpoint, before.Checkpoint; got.TxnsApplied < saw.TxnsApplied || got.TxnsApplied > saw.TxnsApplied+16 ||
		got.CommitLSN < saw.CommitLSN || (got.TxnsApplied == saw.TxnsApplied) != (got.CommitLSN == saw.CommitLSN) {
		t.Errorf("after crash recovery the checkpoint is %+v; the applier last committed %+v", got, saw)
	}
	checkInvariant(t, conn2)

	// Resume 40 units before the cursor, as a transport whose cursor write
	// was lost would.
	resume := uint64(0)
	if last, ok := cur.last(); ok && last >= 40 {
		resume = last - 40
	}
	if last, ok := cur.last(); ok && last > st.Checkpoint.Offset {
		t.Errorf("cursor %d is past the target checkpoint offset %d", last, st.Checkpoint.Offset)
	}
	// Small batches, paced: most of them fold, as in the first run.
	a2 := newApplier(t, conn2, func(c *Config) { c.MaxBatchTxns = 16 })
	src2 := &pacedSource{memSource: memSource{payloads: payloads[resume:], base: resume}, burst: 10, pause: time.Millisecond}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel2()
	if err := a2.Run(ctx2, src2, cur, nil); !errors.Is(err, errDrained) {
		t.Fatal(err)
	}
	t.Logf("resumed run: %d txns applied (%d folded), %d skipped", a2.Stats().TxnsApplied, a2.Stats().FoldedTxns, a2.Stats().TxnsSkipped)
	checkFolding(t, a2.Stats())

	if got := queryInt(t, conn2, "SELECT count(*) FROM applied_log"); got != n {
		t.Errorf("applied_log has %d rows, want %d", got, n)
	}
	if dup := queryInt(t, conn2, "SELECT count(*) FROM (SELECT txn FROM applied_log GROUP BY txn HAVING count(*) <> 1) d"); dup != 0 {
		t.Errorf("%d transactions applied more than once", dup)
	}
	if got := queryInt(t, conn2, "SELECT count(DISTINCT txn) FROM applied_log"); got != n {
		t.Errorf("%d distinct transactions applied, want %d", got, n)
	}
	checkInvariant(t, conn2)
	if got := queryString(t, conn2, actualOrdersSQL); got != g.expected() {
		t.Error("orders differ from the model after crash and resume")
	}
	st = readStatus(t, conn2)
	lastLSN := g.lsn
	if st.Checkpoint.TxnsApplied != n || st.Checkpoint.CommitLSN != lastLSN || st.Checkpoint.Offset != n-1 ||
		st.Checkpoint.RowsApplied != int64(g.rows) {
		t.Errorf("final checkpoint %+v, want %d txns, %d rows, commit LSN %d, offset %d", st.Checkpoint, n, g.rows, lastLSN, n-1)
	}
	if s := a2.Stats(); s.TxnsSkipped == 0 && resume < st.Checkpoint.Offset {
		t.Errorf("the resumed run skipped nothing although it started at offset %d", resume)
	}
}
