package apply

import (
	"context"
	"fmt"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/pgname"
)

// Snapshot units. The relay copies each relation's rows at the slot's
// consistent point as SNAPSHOT batches numbered 0, 1, 2 ... and then writes
// a SNAPSHOT_END carrying the batch count; commit_lsn of all of them is the
// consistent point. Every stream transaction that follows commits after it.
//
// Each batch is one target transaction: COPY of its rows plus the
// snapshot_progress row (next_batch = batch + 1), so a redelivered batch is
// recognised by its number and skipped. SNAPSHOT_END marks the relation done
// and records its visibility boundary. Snapshot units do not move the
// checkpoint's commit LSN: that stays the stream's position, so "applied past
// LSN X" never becomes true merely because a snapshot finished.

func (a *Applier) processSnapshot(ctx context.Context, u *unit, cur Cursor) error {
	rel := u.env.Boundary.SnapshotRelation
	batch := u.env.Boundary.ChunkIndex
	st := a.progressOf(rel)
	if st.done || batch < st.nextBatch {
		return a.skipUnit(ctx, u, cur)
	}
	if batch > st.nextBatch {
		return fmt.Errorf("%w: flow %q (source %q): snapshot of %s continues with batch %d at log offset %d but batch %d was never applied; "+
			"the transport lost snapshot data: %s",
			ErrSequence, a.cfg.Flow, a.cfg.SourceID, rel, batch, u.offset, st.nextBatch, shell.Resnapshot(a.cfg.ConfigPath))
	}
	for i, r := range u.env.Rows {
		if r.Op != pb.Op_OP_INSERT || envRelName(u.env, r) != rel {
			return fmt.Errorf("%w: flow %q: snapshot batch %d of %s at log offset %d holds row %d for %s (%s); the relay writes only inserts of the named relation",
				ErrSequence, a.cfg.Flow, batch, rel, u.offset, i, envRelName(u.env, r), r.Op)
		}
	}
	f, err := a.trySnapshot(ctx, u, st, cur)
	if err != nil || f == nil {
		return err
	}
	return a.quarantine(ctx, u, f, cur)
}

func envRelName(e *pb.Envelope, r *pb.Row) string {
	if int(r.RelationIndex) >= len(e.Relations) {
		return ""
	}
	return relationName(e.Relations[r.RelationIndex])
}

// relationName is a relation's name as the relay keys snapshot units and as
// messages and the quarantine print it: pgname.Name's text form.
func relationName(rel *pb.Relation) string {
	return pgname.Name{Schema: rel.Schema, Name: rel.Name}.String()
}

func (a *Applier) progressOf(rel string) snapshotState {
	if st, ok := a.progress[rel]; ok {
		return *st
	}
	return snapshotState{}
}

// trySnapshot applies one snapshot batch.
func (a *Applier) trySnapshot(ctx context.Context, u *unit, st snapshotState, cur Cursor) (*failure, error) {
	rel := u.env.Boundary.SnapshotRelation
	lsn := u.env.CommitLsn
	n := len(u.env.Rows)
	tx, err := a.t.Begin(ctx)
	if err != nil {
		return nil, a.targetErr(ctx, lsn, err)
	}
	defer tx.Rollback(ctx)
	if err := tx.Copy(ctx, 0, u.env); err != nil {
		return a.asFailure(ctx, lsn, err)
	}
	next := st
	next.nextBatch++
	next.rows += int64(n)
	return a.commitSnapshot(ctx, tx, u, rel, next, int64(n), cur)
}

func (a *Applier) processSnapshotEnd(ctx context.Context, u *unit, cur Cursor) error {
	rel := u.env.Boundary.SnapshotRelation
	st := a.progressOf(rel)
	if st.done {
		return a.skipUnit(ctx, u, cur)
	}
	if u.env.Boundary.ChunkIndex != st.nextBatch {
		return fmt.Errorf("%w: flow %q (source %q): snapshot of %s ends after %d batches (log offset %d) but %d were applied; "+
			"the transport lost snapshot data: %s",
			ErrSequence, a.cfg.Flow, a.cfg.SourceID, rel, u.env.Boundary.ChunkIndex, u.offset, st.nextBatch, shell.Resnapshot(a.cfg.ConfigPath))
	}
	f, err := a.trySnapshotEnd(ctx, u, st, cur)
	if err != nil || f == nil {
		return err
	}
	return a.quarantine(ctx, u, f, cur)
}

// trySnapshotEnd marks a relation's snapshot complete.
func (a *Applier) trySnapshotEnd(ctx context.Context, u *unit, st snapshotState, cur Cursor) (*failure, error) {
	rel := u.env.Boundary.SnapshotRelation
	tx, err := a.t.Begin(ctx)
	if err != nil {
		return nil, a.targetErr(ctx, u.env.CommitLsn, err)
	}
	defer tx.Rollback(ctx)
	next := st
	next.done, next.boundaryLSN = true, u.env.CommitLsn
	if f, err := a.commitSnapshot(ctx, tx, u, rel, next, 0, cur); f != nil || err != nil {
		return f, err
	}
	a.log.Info("apply: snapshot complete", "relation", rel, "batches", next.nextBatch, "rows", next.rows,
		"boundary_lsn", envelope.FormatLSN(next.boundaryLSN))
	return nil, nil
}

// commitSnapshot commits snapshot unit u with its relation's progress
// next (commit).
func (a *Applier) commitSnapshot(ctx context.Context, tx TargetTx, u *unit, rel string, next snapshotState, rows int64, cur Cursor) (*failure, error) {
	return a.commit(ctx, tx, txnCommit{units: []*unit{u}, applied: []*unit{u},
		checkpoint: CheckpointUpdate{MovesPosition: true, Offset: u.offset, RowsApplied: rows},
		snapshot: &SnapshotProgress{Relation: rel, NextBatch: next.nextBatch, Done: next.done,
			BoundaryLSN: next.boundaryLSN, Rows: next.rows}}, cur)
}

// skipUnit counts a redelivered snapshot unit. One statement, so it commits
// atomically on its own; the cursor follows.
func (a *Applier) skipUnit(ctx context.Context, u *unit, cur Cursor) error {
	if err := a.t.CountSkipped(ctx, 1); err != nil {
		return a.targetErr(ctx, u.env.CommitLsn, err)
	}
	a.mu.Lock()
	a.cp.TxnsSkipped++
	a.stats.TxnsSkipped++
	a.mu.Unlock()
	return a.commitCursor(cur, u.offset)
}
