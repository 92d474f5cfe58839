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
// Consecutive batches of a relation already read apply as one target
// transaction (within the applier's batch limits, MaxBatchRows and
// MaxBatchBytes): a COPY of each batch's rows plus the snapshot_progress
// row (next_batch = the last batch + 1), so a redelivered batch is
// recognised by its number and skipped. SNAPSHOT_END marks the relation done
// and records its visibility boundary. Snapshot units do not move the
// checkpoint's commit LSN: that stays the stream's position, so "applied past
// LSN X" never becomes true merely because a snapshot finished.

// processSnapshot applies a run of snapshot batches of one relation
// (fillSnapshots). When they are the relation's next batches in order they
// apply as one target transaction: a COPY per batch, then the progress row
// (next_batch past the last of them) and the checkpoint, so the target
// commits once per run instead of once per batch. Otherwise (a
// redelivery, a gap, a batch the relay could not have written), or when
// the target refuses the run, they apply one at a time, which skips,
// stops or quarantines exactly the batch concerned.
func (a *Applier) processSnapshot(ctx context.Context, run []*unit, cur Cursor) error {
	if len(run) > 1 && a.snapshotRunApplies(run) {
		f, err := a.trySnapshot(ctx, run, a.progressOf(run[0].env.Boundary.SnapshotRelation), cur)
		if err != nil || f == nil {
			return err
		}
		a.log.Debug("apply: snapshot run refused; applying its batches one at a time",
			"relation", run[0].env.Boundary.SnapshotRelation, "batches", len(run), "error", f.err)
	}
	for _, u := range run {
		if err := a.processSnapshotBatch(ctx, u, cur); err != nil {
			return err
		}
	}
	return nil
}

// snapshotRunApplies reports whether run is its relation's next batches,
// numbered in order, each holding only inserts of the relation.
func (a *Applier) snapshotRunApplies(run []*unit) bool {
	rel := run[0].env.Boundary.SnapshotRelation
	st := a.progressOf(rel)
	if st.done {
		return false
	}
	for i, u := range run {
		if u.env.Boundary.SnapshotRelation != rel || u.env.Boundary.ChunkIndex != st.nextBatch+uint32(i) || a.snapshotRowsErr(u) != nil {
			return false
		}
	}
	return true
}

// snapshotRowsErr is the error for a snapshot batch holding anything but
// inserts of the relation it names.
func (a *Applier) snapshotRowsErr(u *unit) error {
	rel := u.env.Boundary.SnapshotRelation
	// The relation's name is compared once per relation, not per row.
	named := make([]bool, len(u.env.Relations))
	for i, r := range u.env.Relations {
		named[i] = relationName(r) == rel
	}
	for i, r := range u.env.Rows {
		if r.Op != pb.Op_OP_INSERT || int(r.RelationIndex) >= len(named) || !named[r.RelationIndex] {
			return fmt.Errorf("%w: flow %q: snapshot batch %d of %s at log offset %d holds row %d for %s (%s); the relay writes only inserts of the named relation",
				ErrSequence, a.cfg.Flow, u.env.Boundary.ChunkIndex, rel, u.offset, i, envRelName(u.env, r), r.Op)
		}
	}
	return nil
}

// processSnapshotBatch applies one snapshot batch.
func (a *Applier) processSnapshotBatch(ctx context.Context, u *unit, cur Cursor) error {
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
	if err := a.snapshotRowsErr(u); err != nil {
		return err
	}
	f, err := a.trySnapshot(ctx, []*unit{u}, st, cur)
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

// trySnapshot applies run, the next batches of their relation from st,
// in one target transaction.
func (a *Applier) trySnapshot(ctx context.Context, run []*unit, st snapshotState, cur Cursor) (*failure, error) {
	rel := run[0].env.Boundary.SnapshotRelation
	tx, err := a.t.Begin(ctx)
	if err != nil {
		return nil, a.targetErr(ctx, run[0].env.CommitLsn, err)
	}
	defer tx.Rollback(ctx)
	var rows int64
	for i, u := range run {
		if err := tx.Copy(ctx, i, u.env); err != nil {
			return a.asFailure(ctx, u.env.CommitLsn, err)
		}
		rows += int64(len(u.env.Rows))
	}
	next := st
	next.nextBatch += uint32(len(run))
	next.rows += rows
	return a.commitSnapshot(ctx, tx, run, rel, next, rows, cur)
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
	if f, err := a.commitSnapshot(ctx, tx, []*unit{u}, rel, next, 0, cur); f != nil || err != nil {
		return f, err
	}
	a.log.Info("apply: snapshot complete", "relation", rel, "batches", next.nextBatch, "rows", next.rows,
		"boundary_lsn", envelope.FormatLSN(next.boundaryLSN))
	return nil, nil
}

// commitSnapshot commits snapshot units run (a run of batches, or one
// end marker) with their relation's progress next.
func (a *Applier) commitSnapshot(ctx context.Context, tx TargetTx, run []*unit, rel string, next snapshotState, rows int64, cur Cursor) (*failure, error) {
	return a.commit(ctx, tx, txnCommit{units: run, applied: run,
		checkpoint: CheckpointUpdate{MovesPosition: true, Offset: run[len(run)-1].offset, RowsApplied: rows},
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
