package apply

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// TestHalfAppliedNeverVisible: while Run applies a few thousand generated
// multi-table transactions in batches (most of them folded: keyed tables,
// deletes, rewrites under the same key, unchanged TOAST, rare key changes),
// a concurrent reader checks an invariant that holds only between whole
// source transactions, over and over. It must never see it broken. The cursor, meanwhile, checks that
// every offset it is given is already committed at the target.
func TestHalfAppliedNeverVisible(t *testing.T) {
	c, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, commerceDDL)
	if err := EnsureSchema(context.Background(), conn, ""); err != nil {
		t.Fatal(err)
	}
	const seed, n = 20261130, 3000
	t.Logf("workload seed %d, %d transactions", seed, n)
	g := newCommerce(seed)
	payloads := g.generate(t, n)

	reader := connect(t, c.URL("target"))
	checker := connect(t, c.URL("target"))
	cur := &recCursor{check: func(off uint64) error {
		// Called by Run right after a commit: the target must already hold
		// the unit at this offset.
		var logged *int64
		if err := checker.QueryRow(context.Background(), `SELECT log_offset FROM trellara.checkpoints WHERE flow = $1`, testFlow).Scan(&logged); err != nil {
			return err
		}
		if logged == nil || uint64(*logged) < off {
			return fmt.Errorf("cursor asked to commit offset %d while the target's checkpoint is at %v", off, logged)
		}
		return nil
	}}

	done := make(chan struct{})
	var wg sync.WaitGroup
	var samples, violations int
	states := map[int64]bool{}
	var readErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			var bad, applied int64
			if err := reader.QueryRow(context.Background(), invariantSQL, testFlow).Scan(&bad, &applied); err != nil {
				readErr = err
				return
			}
			samples++
			if bad != 0 {
				violations++
			}
			states[applied] = true
		}
	}()

	a := newApplier(t, conn, func(c *Config) { c.MaxBatchTxns = 64 })
	src := &pacedSource{memSource: memSource{payloads: payloads}, burst: 15, pause: 12 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	err := a.Run(ctx, src, cur, nil)
	elapsed := time.Since(start)
	close(done)
	wg.Wait()
	if !errors.Is(err, errDrained) {
		t.Fatalf("Run = %v", err)
	}
	if readErr != nil {
		t.Fatal(readErr)
	}
	s := a.Stats()
	t.Logf("applied %d txns (%d rows, %d of the txns folded, %d folds refused) in %d target txns over %v; reader took %d samples, saw %d distinct states",
		s.TxnsApplied, s.RowsApplied, s.FoldedTxns, s.FoldsRefused, s.TargetTxns, elapsed.Round(time.Millisecond), samples, len(states))
	if violations != 0 {
		t.Errorf("reader saw a half-applied transaction in %d of %d samples", violations, samples)
	}
	if samples < 500 || len(states) < 20 {
		t.Errorf("only %d samples over %d states: the reader did not overlap the apply enough to prove anything", samples, len(states))
	}
	if s.TxnsApplied != n || s.TargetTxns >= n {
		t.Errorf("stats = %+v, want %d txns in fewer target transactions", s, n)
	}
	checkFolding(t, s)
	checkInvariant(t, conn)
	if got := queryString(t, conn, actualOrdersSQL); got != g.expected() {
		t.Error("orders differ from the model after apply")
	}
	cur.mu.Lock()
	defer cur.mu.Unlock()
	for i := 1; i < len(cur.offsets); i++ {
		if cur.offsets[i] <= cur.offsets[i-1] {
			t.Fatalf("cursor went from %d to %d", cur.offsets[i-1], cur.offsets[i])
		}
	}
	if last := cur.offsets[len(cur.offsets)-1]; last != n-1 {
		t.Errorf("cursor ended at %d, want %d", last, n-1)
	}
}
