package apply

import (
	"context"
	"fmt"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/mutation"
	"github.com/trellara/trellara/internal/shell"
)

// Chunk sequences (strict mode). The relay publishes a source transaction
// larger than its chunk bound as CHUNK units with chunk_index 0 ..
// chunk_count-1, consecutive in the log, all with the transaction's xid,
// commit LSN and end LSN, rows numbered by their position in the whole
// transaction. The applier applies the whole sequence in one target
// transaction of its own:
//
//	chunk 0      BEGIN; apply its rows; release it; read the next entry
//	chunk k      the same transaction, index k: apply, release, read on
//	chunk n-1    apply; checkpoint (commit LSN, offset of chunk n-1); COMMIT;
//	             then the transport cursor at chunk n-1's offset
//
// Only one chunk is in memory: the reader does not fetch the next entry
// until the current chunk's statements have been sent (unit.release), and
// the sequence keeps only the headers of the chunks it applied
// (chunkHead). A
// reader of the target sees all of the transaction or none of it, and the
// checkpoint and cursor move only after the final chunk commits.
//
// Sequencing rules, in the order they are checked:
//
//   - a chunk whose commit LSN is at or below the checkpoint is a
//     redelivery and is skipped (counted once, at the final chunk, which
//     also moves the cursor);
//   - a sequence must start at chunk 0;
//   - a sequence cut short by chunk 0 of the same transaction means the
//     relay crashed mid-publish and republished the transaction whole
//     (relay.ResumeFrom): the partial copy is rolled back and the
//     applier starts over from the new chunk 0;
//   - a sequence cut short by anything else, or a chunk that does not
//     continue it (index, xid, LSNs, chunk count, total rows, row
//     numbering), is ErrSequence naming the log offsets.
//
// Quarantine: when the target refuses a row of chunk k, the whole target
// transaction rolls back and the quarantine row records the transaction
// (unit "transaction", key on the commit LSN, so a later successful
// replay marks it), the failing chunk's log offset and the failing
// chunk's envelope bytes; the error names the chunk and the offset of
// chunk 0, where a replay starts. The cursor stays before chunk 0.

// processChunks applies the chunk sequence that first starts, restarting
// when the relay republished it.
func (a *Applier) processChunks(ctx context.Context, f feed, first *unit, cur Cursor) error {
	for u := first; u != nil; {
		var err error
		if u, err = a.applyChunks(ctx, f, u, cur); err != nil {
			return err
		}
	}
	return nil
}

// applyChunks applies one chunk sequence starting at first. It returns a
// non-nil unit when the sequence was abandoned for a fresh copy of the
// same transaction starting at that unit.
func (a *Applier) applyChunks(ctx context.Context, f feed, first *unit, cur Cursor) (*unit, error) {
	fb := first.env.Boundary
	if first.env.CommitLsn <= a.cp.CommitLSN && !a.mutated(mutation.SkipDedupe) {
		first.release()
		if fb.ChunkIndex+1 < fb.ChunkCount {
			return nil, nil
		}
		return nil, a.skipUnit(ctx, first, cur)
	}
	if fb.ChunkIndex != 0 {
		return nil, fmt.Errorf("%w: flow %q (source %q): log offset %d holds chunk %d of %d of the transaction at commit LSN %s, "+
			"but no chunk 0 precedes it; the transport lost part of a large transaction: %s",
			ErrSequence, a.cfg.Flow, a.cfg.SourceID, first.offset, fb.ChunkIndex, fb.ChunkCount,
			envelope.FormatLSN(first.env.CommitLsn), shell.Resnapshot(a.cfg.ConfigPath))
	}
	if len(first.env.Rows) > 0 && first.env.Rows[0].Seq != 0 {
		return nil, a.chunkSeqErr(first, first, fmt.Sprintf("its first row is number %d, not 0", first.env.Rows[0].Seq))
	}
	lsn := first.env.CommitLsn
	tx, err := a.t.Begin(ctx)
	if err != nil {
		return nil, a.targetErr(ctx, lsn, err)
	}
	defer func() { tx.Rollback(ctx) }() // no-op after Commit; tx may be replaced below

	var rows, msgs int
	var seen uint64 // rows of the transaction received so far
	u := first
	for {
		seen += uint64(len(u.env.Rows))
		n, m, err := tx.Apply(ctx, 0, u.env)
		if err == nil {
			// Send this chunk's statements now, so nothing of it is
			// needed once the next chunk is read.
			err = tx.Flush(ctx)
		}
		if err != nil {
			fl, err := a.asFailure(ctx, lsn, err)
			if err != nil {
				return nil, err
			}
			tx.Rollback(ctx)
			return nil, a.quarantineChunk(ctx, first, u, fl, cur)
		}
		rows += n
		msgs += m
		b := u.env.Boundary
		if b.ChunkIndex+1 == b.ChunkCount {
			break
		}
		if a.mutated(mutation.SplitChunks) {
			if _, err := tx.Commit(ctx); err != nil {
				return nil, a.targetErr(ctx, lsn, err)
			}
			if tx, err = a.t.Begin(ctx); err != nil {
				return nil, a.targetErr(ctx, lsn, err)
			}
		}
		u.release()
		// Keep only the headers of what was applied: the rows of chunk 0
		// (first, kept for the checks and errors) and of this chunk are
		// garbage before the reader decodes the next one.
		if u == first {
			first = chunkHead(first)
		}
		u = chunkHead(u)
		it := f.one(ctx)
		if it.err != nil {
			return nil, it.err
		}
		next := it.u
		nb := next.env.GetBoundary()
		switch {
		case next.kind() == pb.UnitKind_UNIT_KIND_CHUNK && next.env.CommitLsn == lsn && nb.ChunkIndex == 0:
			a.log.Info("apply: chunk sequence republished by the relay; discarding the partial copy",
				"commit_lsn", envelope.FormatLSN(lsn), "partial_from_offset", first.offset, "partial_chunks", b.ChunkIndex+1,
				"restart_offset", next.offset)
			return next, nil
		case next.kind() != pb.UnitKind_UNIT_KIND_CHUNK || next.env.CommitLsn != lsn:
			next.release()
			return nil, a.chunkSeqErr(first, u, fmt.Sprintf("log offset %d holds %s", next.offset, describeUnit(next)))
		case nb.ChunkIndex != b.ChunkIndex+1 || nb.ChunkCount != b.ChunkCount || nb.TotalRows != b.TotalRows ||
			next.env.Xid != first.env.Xid || next.env.EndLsn != first.env.EndLsn:
			next.release()
			return nil, a.chunkSeqErr(first, u, fmt.Sprintf("log offset %d holds %s, which does not continue it", next.offset, describeUnit(next)))
		case len(next.env.Rows) > 0 && next.env.Rows[0].Seq != seen:
			next.release()
			return nil, a.chunkSeqErr(first, u, fmt.Sprintf("log offset %d holds %s, whose first row is number %d but the chunks before it carry %d rows",
				next.offset, describeUnit(next), next.env.Rows[0].Seq, seen))
		}
		u = next
	}
	if total := u.env.Boundary.TotalRows; seen != total {
		return nil, a.chunkSeqErr(first, u, fmt.Sprintf("the chunks carry %d rows but the transaction has %d", seen, total))
	}

	fl, err := a.commit(ctx, tx, txnCommit{units: []*unit{u}, applied: []*unit{u}, messages: msgs,
		checkpoint: CheckpointUpdate{MovesPosition: true, MovesLSN: true, CommitLSN: lsn, EndLSN: u.env.EndLsn,
			Offset: u.offset, TxnsApplied: 1, RowsApplied: int64(rows)}}, cur)
	if fl != nil {
		// Refused at the checkpoint or at COMMIT (a deferred constraint):
		// blamed on the final chunk.
		tx.Rollback(ctx)
		return nil, a.quarantineChunk(ctx, first, u, fl, cur)
	}
	u.release()
	return nil, err
}

// chunkHead is the part of an applied chunk a sequence keeps: its offset
// and the envelope's header (xid, LSNs, commit time, boundary), without
// rows, relations or payload.
func chunkHead(u *unit) *unit {
	e := u.env
	return &unit{offset: u.offset, env: &pb.Envelope{SourceId: e.SourceId, Xid: e.Xid, CommitLsn: e.CommitLsn, EndLsn: e.EndLsn,
		CommitTimeUnixMicros: e.CommitTimeUnixMicros, Boundary: e.Boundary}}
}

// quarantineChunk records the transaction of a refused chunk: the failing
// chunk's envelope and offset, under the transaction's key.
func (a *Applier) quarantineChunk(ctx context.Context, first, failed *unit, f *failure, cur Cursor) error {
	b := failed.env.Boundary
	f.err = fmt.Errorf("chunk %d of %d (the transaction's chunks start at log offset %d): %w",
		b.ChunkIndex, b.ChunkCount, first.offset, f.err)
	return a.quarantine(ctx, failed, f, cur)
}

// chunkSeqErr is ErrSequence for a chunk sequence that cannot be completed.
func (a *Applier) chunkSeqErr(first, last *unit, why string) error {
	b := last.env.Boundary
	return fmt.Errorf("%w: flow %q (source %q): the chunks of the transaction at commit LSN %s start at log offset %d and "+
		"stop after chunk %d of %d at log offset %d: %s. The transaction was not applied (its partial copy was rolled back); "+
		"the transport lost part of it: %s",
		ErrSequence, a.cfg.Flow, a.cfg.SourceID, envelope.FormatLSN(first.env.CommitLsn), first.offset,
		b.ChunkIndex, b.ChunkCount, last.offset, why, shell.Resnapshot(a.cfg.ConfigPath))
}

// describeUnit names a unit in sequence errors.
func describeUnit(u *unit) string {
	b := u.env.GetBoundary()
	switch u.kind() {
	case pb.UnitKind_UNIT_KIND_CHUNK:
		return fmt.Sprintf("chunk %d of %d of the transaction at commit LSN %s (xid %d)",
			b.ChunkIndex, b.ChunkCount, envelope.FormatLSN(u.env.CommitLsn), u.env.Xid)
	case pb.UnitKind_UNIT_KIND_SNAPSHOT, pb.UnitKind_UNIT_KIND_SNAPSHOT_END:
		return fmt.Sprintf("a %s unit of %s", u.kindName(), b.SnapshotRelation)
	default:
		return fmt.Sprintf("the transaction at commit LSN %s", envelope.FormatLSN(u.env.CommitLsn))
	}
}
