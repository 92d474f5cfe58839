package apply

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
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
			"the transport lost snapshot data: reseed the table with `trellara reseed --config %s --table %s`",
			ErrSequence, a.cfg.Flow, a.cfg.SourceID, rel, batch, u.offset, st.nextBatch, a.cfg.ConfigPath, rel)
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
	return a.quarantine(ctx, u, f)
}

func envRelName(e *pb.Envelope, r *pb.Row) string {
	if int(r.RelationIndex) >= len(e.Relations) {
		return ""
	}
	rel := e.Relations[r.RelationIndex]
	return rel.Schema + "." + rel.Name
}

func (a *Applier) progressOf(rel string) snapshotState {
	if st, ok := a.progress[rel]; ok {
		return *st
	}
	return snapshotState{}
}

// trySnapshot applies one snapshot batch with COPY.
func (a *Applier) trySnapshot(ctx context.Context, u *unit, st snapshotState, cur Cursor) (*failure, error) {
	rel := u.env.Boundary.SnapshotRelation
	lsn := u.env.CommitLsn
	n := len(u.env.Rows)
	tx, err := a.conn.Begin(ctx)
	if err != nil {
		return nil, a.targetErr(ctx, lsn, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if n > 0 {
		p := a.plan(u.env.Relations[u.env.Rows[0].RelationIndex])
		buf := a.copyBuf[:0]
		for _, r := range u.env.Rows {
			buf = appendCopyRow(buf, r.NewTuple)
		}
		if cap(buf) <= copyBufKeepMax {
			a.copyBuf = buf
		}
		if _, err := a.conn.PgConn().CopyFrom(ctx, bytes.NewReader(buf), p.copySQL); err != nil {
			return a.stmtErr(ctx, u, 0, rel, err)
		}
	}
	next := st
	next.nextBatch++
	next.rows += int64(n)
	at, f, err := a.stateBatch(ctx, tx, u, rel, next, int64(n))
	if f != nil || err != nil {
		return f, err
	}
	if err := tx.Commit(ctx); err != nil {
		return a.commitErr(ctx, []*unit{u}, err)
	}
	a.committedSnapshot(u, rel, next, at, int64(n))
	return nil, a.commitCursor(cur, u.offset)
}

// copyBufKeepMax bounds the COPY buffer kept between batches; a larger one
// is used once and left to the garbage collector.
const copyBufKeepMax = 8 << 20

func (a *Applier) processSnapshotEnd(ctx context.Context, u *unit, cur Cursor) error {
	rel := u.env.Boundary.SnapshotRelation
	st := a.progressOf(rel)
	if st.done {
		return a.skipUnit(ctx, u, cur)
	}
	if u.env.Boundary.ChunkIndex != st.nextBatch {
		return fmt.Errorf("%w: flow %q (source %q): snapshot of %s ends after %d batches (log offset %d) but %d were applied; "+
			"the transport lost snapshot data: reseed the table with `trellara reseed --config %s --table %s`",
			ErrSequence, a.cfg.Flow, a.cfg.SourceID, rel, u.env.Boundary.ChunkIndex, u.offset, st.nextBatch, a.cfg.ConfigPath, rel)
	}
	f, err := a.trySnapshotEnd(ctx, u, st, cur)
	if err != nil || f == nil {
		return err
	}
	return a.quarantine(ctx, u, f)
}

// trySnapshotEnd marks a relation's snapshot complete.
func (a *Applier) trySnapshotEnd(ctx context.Context, u *unit, st snapshotState, cur Cursor) (*failure, error) {
	rel := u.env.Boundary.SnapshotRelation
	tx, err := a.conn.Begin(ctx)
	if err != nil {
		return nil, a.targetErr(ctx, u.env.CommitLsn, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	next := st
	next.done, next.boundaryLSN = true, u.env.CommitLsn
	at, f, err := a.stateBatch(ctx, tx, u, rel, next, 0)
	if f != nil || err != nil {
		return f, err
	}
	if err := tx.Commit(ctx); err != nil {
		return a.commitErr(ctx, []*unit{u}, err)
	}
	a.committedSnapshot(u, rel, next, at, 0)
	a.log.Info("apply: snapshot complete", "relation", rel, "batches", next.nextBatch, "rows", next.rows,
		"boundary_lsn", envelope.FormatLSN(next.boundaryLSN))
	return nil, a.commitCursor(cur, u.offset)
}

// stateBatch writes snapshot progress and the checkpoint in tx.
func (a *Applier) stateBatch(ctx context.Context, tx pgx.Tx, u *unit, rel string, next snapshotState, rows int64) (*time.Time, *failure, error) {
	var boundary any
	if next.done {
		boundary = formatLSN(next.boundaryLSN)
	}
	for _, q := range []string{a.sql.upsertProgress, a.sql.applyCheckpoint, a.sql.markReplayed} {
		if err := a.prepare(ctx, q); err != nil {
			return nil, nil, a.targetErr(ctx, u.env.CommitLsn, err)
		}
	}
	pl := &pipeline{a: a, tx: tx, units: []*unit{u}}
	f, err := pl.queue(ctx, stmtMeta{unit: -1}, a.sql.upsertProgress, a.cfg.Flow, a.cfg.SourceID, rel,
		int64(next.nextBatch), next.done, boundary, next.rows)
	if f == nil && err == nil {
		f, err = pl.queue(ctx, stmtMeta{unit: -1, returnsAt: true}, a.sql.applyCheckpoint, a.cfg.Flow, a.cfg.SourceID,
			nil, nil, int64(u.offset), int64(0), int64(0), rows)
	}
	if id, ok := a.openQuar[u.key()]; ok && f == nil && err == nil {
		f, err = pl.queue(ctx, stmtMeta{unit: -1}, a.sql.markReplayed, id)
	}
	if f == nil && err == nil {
		f, err = pl.flush(ctx)
	}
	return pl.at, f, err
}

func (a *Applier) committedSnapshot(u *unit, rel string, next snapshotState, at *time.Time, rows int64) {
	st := next
	a.progress[rel] = &st
	delete(a.openQuar, u.key())
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cp.Offset, a.cp.HasOffset = u.offset, true
	if at != nil {
		a.cp.AppliedAt = *at
	}
	a.cp.RowsApplied += rows
	a.stats.RowsApplied += rows
	if u.kind() == pb.UnitKind_UNIT_KIND_SNAPSHOT {
		a.stats.SnapshotBatches++
	}
	a.stats.TargetTxns++
}

// skipUnit counts a redelivered snapshot unit. One statement, so it commits
// atomically on its own; the cursor follows.
func (a *Applier) skipUnit(ctx context.Context, u *unit, cur Cursor) error {
	if _, err := a.conn.Exec(ctx, a.sql.skipCheckpoint, a.cfg.Flow, a.cfg.SourceID, int64(1)); err != nil {
		return a.targetErr(ctx, u.env.CommitLsn, err)
	}
	a.mu.Lock()
	a.cp.TxnsSkipped++
	a.stats.TxnsSkipped++
	a.mu.Unlock()
	return a.commitCursor(cur, u.offset)
}
