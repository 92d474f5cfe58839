package apply

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
)

// stopInPoll is the target's FlushReporter with a stop landing in the
// middle of a flush poll: once armed, the next WALPositions cancels Run's
// context, and if the poll's own context ends with it, the connection is
// closed, as pgx closes a connection whose query's context ends while the
// query runs.
type stopInPoll struct {
	FlushReporter
	armed atomic.Bool
	stop  context.CancelFunc
	conn  *pgx.Conn
}

func (s *stopInPoll) WALPositions(ctx context.Context) (uint64, uint64, error) {
	if s.armed.CompareAndSwap(true, false) {
		s.stop()
		if err := ctx.Err(); err != nil {
			s.conn.Close(context.Background())
			return 0, 0, err
		}
	}
	return s.FlushReporter.WALPositions(ctx)
}

// TestStopDuringFlushPollLeavesCursorAtTarget: asynchronous commits that
// the target's WAL writer has not flushed yet, and a stop that lands
// while the idle applier polls the flush position. Run must still make
// them durable and move the cursor over every unit, so a stopped flow's
// cursor is where its target is (what `run --local` and its tests
// check). Mutation: poll with Run's own context (the poll fails with the
// stop, Run returns without its settling Sync) → the cursor stays behind.
func TestStopDuringFlushPollLeavesCursorAtTarget(t *testing.T) {
	// A slow WAL writer keeps the commits unflushed; autovacuum off keeps
	// any other commit from flushing them.
	c, conn := target(t, pgtest.Options{Settings: map[string]string{"wal_writer_delay": "10s", "autovacuum": "off"}})
	exec(t, conn, commerceDDL)
	const n = 40
	payloads := newCommerce(91).generate(t, n)

	cur := &recCursor{}
	a := newApplier(t, conn, func(c *Config) { c.MaxBatchTxns, c.SynchronousCommit = 8, SyncCommitOff })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	poll := &stopInPoll{FlushReporter: a.flush.fr, stop: cancel, conn: conn}
	a.flush.fr = poll
	src := &gatedSource{payloads: payloads, more: make(chan struct{}, 1)}
	src.limit.Store(n)
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx, src, cur, nil) }()
	deadline := time.Now().Add(time.Minute)
	for a.Stats().TxnsApplied < n {
		if time.Now().After(deadline) {
			t.Fatalf("applied %d of %d transactions in a minute", a.Stats().TxnsApplied, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if last, ok := cur.last(); ok && last == n-1 {
		t.Fatal("the target flushed every commit before the stop: nothing was pending, and the test cannot see a cursor left behind")
	}
	poll.armed.Store(true)
	err := <-errc
	t.Logf("Run after a stop in the flush poll: %v", err)
	if last, ok := cur.last(); !ok || last != n-1 {
		t.Errorf("cursor after the stop: %d (set %v), want %d: the stopped applier left it behind what its target committed", last, ok, n-1)
	}
	if st := readStatus(t, connect(t, c.URL("target"))); st.Checkpoint.TxnsApplied != n {
		t.Errorf("the target's checkpoint counts %d transactions, want %d", st.Checkpoint.TxnsApplied, n)
	}
}
