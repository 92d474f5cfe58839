package apply

import (
	"context"
	"fmt"
	"time"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/hoptrace"
	"github.com/trellara/trellara/internal/mutation"
)

// txnCommit is what a target transaction commits besides its data.
type txnCommit struct {
	// units are the units the transaction covers, in log order; for a
	// chunk sequence, its final chunk. The cursor moves to the last one's
	// offset. A refusal at COMMIT is blamed on units[0] when it is alone.
	units []*unit
	// applied are those of units whose data the transaction holds (the
	// rest were redeliveries). Their open quarantine rows close with it;
	// the source transactions among them (TRANSACTION units, the final
	// chunk of a sequence) go to Config.Applied.
	applied []*unit
	// checkpoint is the change to the checkpoint row.
	checkpoint CheckpointUpdate
	// snapshot, for a snapshot unit, is its relation's new progress row.
	snapshot *SnapshotProgress
	// messages counts the logical decoding messages passed over.
	messages int
}

// commit ends target transaction tx, which holds the data of c's units,
// and then moves the transport cursor. Every path that applies units ends
// here: a batch of transactions (tryTxns), a chunk sequence (applyChunks),
// a snapshot unit (commitSnapshot) and a refused unit passed over
// (dropRefused, under mutation.DropRefused). Only skipUnit, which counts
// a redelivery with one statement of its own and moves no position, does
// without it.
//
// The order is the applier's correctness argument, so it is written once:
//
//  1. The snapshot progress row, the checkpoint row and the closing of
//     replayed quarantine rows are written in tx, with the data. The
//     target then holds a unit together with the record that it holds it,
//     or neither, so a redelivery is recognised however the process dies.
//     This is the one place the checkpoint is written.
//  2. Flush sends what the target deferred (pipelined and folded
//     statements), so a refusal is found, and blamed on its unit, while
//     the transaction can still be rolled back and the unit isolated.
//  3. COMMIT.
//  4. Then the in-memory checkpoint and the counters: they describe what
//     the target holds, and a failed COMMIT holds nothing.
//  5. Last the cursor. Moved before COMMIT, a crash in between would leave
//     the cursor past units the target never got: a gap
//     (mutation.CursorBeforeCommit). Moved after, the same crash only
//     redelivers units the checkpoint recognises and skips. When the
//     target commits asynchronously (FlushReporter), COMMIT returning
//     is not yet durable: the cursor moves over the units once the
//     target has flushed the commit (advance, durable.go). Moved at
//     COMMIT, a target crash would lose units the cursor had passed
//     (mutation.CursorBeforeFlush).
//
// It returns a failure when the target refused the data (nothing is
// committed; the caller isolates or quarantines the unit and rolls tx
// back), an error for anything else, and (nil, nil) once the transaction
// and the cursor have committed.
func (a *Applier) commit(ctx context.Context, tx TargetTx, c txnCommit, cur Cursor) (*failure, error) {
	lsn := c.units[0].env.CommitLsn
	last := c.units[len(c.units)-1]
	var err error
	if c.snapshot != nil {
		err = tx.SetProgress(ctx, *c.snapshot)
	}
	if err == nil {
		err = tx.SetCheckpoint(ctx, c.checkpoint)
	}
	for _, u := range c.applied {
		if len(a.openQuar) == 0 {
			break // no key to build
		}
		if id, ok := a.openQuar[u.key()]; ok && err == nil {
			err = tx.MarkReplayed(ctx, id)
		}
	}
	if err == nil {
		err = tx.Flush(ctx)
	}
	if err != nil {
		return a.asFailure(ctx, lsn, err)
	}
	if a.mutated(mutation.CursorBeforeCommit) {
		if err := a.commitCursor(cur, last.offset); err != nil {
			return nil, err
		}
	}
	at, err := tx.Commit(ctx)
	if err != nil {
		return a.commitFailure(ctx, c.units, err)
	}

	if hoptrace.On() {
		for _, u := range c.applied {
			hoptrace.Stamp(hoptrace.Committed, u.env.CommitLsn)
		}
	}
	up := c.checkpoint
	a.mu.Lock()
	a.cp.apply(up, at)
	a.stats.TxnsApplied += up.TxnsApplied
	a.stats.TxnsSkipped += up.TxnsSkipped
	a.stats.RowsApplied += up.RowsApplied
	a.stats.MessagesIgnored += int64(c.messages)
	a.stats.TargetTxns++
	for _, u := range c.applied {
		if envelope.IsBarrier(u.env) {
			a.stats.DDLBarriers++
		}
		switch u.kind() {
		case pb.UnitKind_UNIT_KIND_SNAPSHOT:
			a.stats.SnapshotBatches++
		case pb.UnitKind_UNIT_KIND_CHUNK:
			a.stats.ChunkedTxns++
		}
	}
	a.mu.Unlock()
	if p := c.snapshot; p != nil {
		a.progress[p.Relation] = &snapshotState{nextBatch: p.NextBatch, done: p.Done, boundaryLSN: p.BoundaryLSN, rows: p.Rows}
	}
	var times []int64
	for _, u := range c.applied {
		if len(a.openQuar) > 0 {
			delete(a.openQuar, u.key())
		}
		if k := u.kind(); a.cfg.Applied != nil && (k == pb.UnitKind_UNIT_KIND_TRANSACTION || k == pb.UnitKind_UNIT_KIND_CHUNK) {
			times = append(times, u.env.CommitTimeUnixMicros)
		}
	}
	if len(times) > 0 {
		a.cfg.Applied(times)
	}
	return nil, a.advance(ctx, cur, last.offset)
}

// commitFailure classifies a failed COMMIT. A deferred constraint is refused
// data that no single statement can be blamed for; with one unit it is that
// unit's.
func (a *Applier) commitFailure(ctx context.Context, units []*unit, err error) (*failure, error) {
	f, err := a.asFailure(ctx, units[0].env.CommitLsn, err)
	if f != nil && f.unit < 0 && len(units) == 1 {
		f.unit = 0
	}
	return f, err
}

// commitCursor moves the transport cursor to offset. It only moves
// forward: a redelivered unit below the last committed offset (a
// transport that replays older entries) is skipped at the target and
// leaves the cursor where it is. Under Run the cursor's own commit runs
// on the cursor writer's goroutine (cursorWriter), which may lag behind
// offset but never passes it.
func (a *Applier) commitCursor(cur Cursor, offset uint64) error {
	if cur == nil || (a.cursorSet && offset <= a.cursorAt) {
		return nil
	}
	if w := a.cw; w != nil && w.cur == cur {
		if err := w.post(offset); err != nil {
			return err
		}
	} else if err := cur.Commit(offset); err != nil {
		return a.cursorErr(offset, err)
	}
	a.cursorAt, a.cursorSet = offset, true
	return nil
}

// cursorErr is the error of a failed cursor commit at offset.
func (a *Applier) cursorErr(offset uint64, err error) error {
	return fmt.Errorf("apply: flow %q: commit transport cursor at offset %d (the target already holds these units; "+
		"after a restart they are redelivered and skipped): %w", a.cfg.Flow, offset, err)
}

// apply changes cp as the checkpoint row changes when a target
// transaction with update up commits at the target's clock at (schema.go,
// applyCheckpoint and skipCheckpoint).
func (cp *Checkpoint) apply(up CheckpointUpdate, at time.Time) {
	if up.MovesPosition {
		if up.MovesLSN {
			cp.CommitLSN, cp.EndLSN = up.CommitLSN, up.EndLSN
		}
		cp.Offset, cp.HasOffset = up.Offset, true
		if !at.IsZero() {
			cp.AppliedAt = at
		}
	}
	cp.TxnsApplied += up.TxnsApplied
	cp.TxnsSkipped += up.TxnsSkipped
	cp.RowsApplied += up.RowsApplied
}
