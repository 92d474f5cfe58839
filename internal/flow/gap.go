package flow

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/segmentlog"
)

// A sink that lost part of the stream (its cursor past the local log's
// retention, or its target restored from a backup older than the log)
// cannot be brought back by applying: what it missed is gone from the log.
// It is brought back by copying every table again, while the flow and the
// other sinks keep running (`trellara reseed --all-tables`):
//
//  1. a Replace reseed of every table is recorded on the sink's target
//     (apply.PrepareReseed): from here on its applier writes each table's
//     stream rows only to the table's shadow, never to the table that
//     missed changes;
//  2. the target's checkpoint is moved to the entry before the first one
//     the log still holds (apply.AcceptGap), and the sink's cursor there
//     (segmentlog.ResetCursor), so its applier reads on;
//  3. each table is copied as any reseed is (watermarked chunks into the
//     shadow, the handoff, a verify).
//
// A crash between the steps is resumed by running the command again: the
// reseeds are found, and steps 2 and 3 are idempotent.

// streamGap is what a sink lost: the log starts at Oldest, and the sink
// needs Need.
type streamGap struct {
	Need, Oldest  uint64
	PastRetention bool
	log           *segmentlog.Log
	closeLog      bool
}

// close closes the log sinkGap opened.
func (g *streamGap) close() {
	if g.closeLog {
		g.log.Close()
	}
}

func (g *streamGap) String() string {
	if g.PastRetention {
		return fmt.Sprintf("is past the local log's retention (its cursor needs offset %d, the log starts at %d)", g.Need, g.Oldest)
	}
	return fmt.Sprintf("has a target checkpoint behind the local log (the target needs offset %d, the log starts at %d: restored from a backup?)", g.Need, g.Oldest)
}

// reseedAllCommand copies every table of sink s again.
func (f *Flow) reseedAllCommand(s config.Sink) string {
	if len(f.Sinks()) > 1 {
		return shell.Trellara("reseed", f.ConfigPath, "--sink", s.Name, "--all-tables")
	}
	return shell.Trellara("reseed", f.ConfigPath, "--all-tables")
}

// sinkGap reports whether sink s lost part of the stream. Only the local
// log is checked: a broker's retention is the cluster's.
func (f *Flow) sinkGap(ctx context.Context, s config.Sink, tgt *pgx.Conn) (*streamGap, error) {
	if f.broker != nil {
		return nil, nil
	}
	g := &streamGap{log: f.Log}
	if g.log == nil {
		if _, err := os.Stat(f.logDir()); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		l := f.Cfg.Transport.Local
		lg, err := segmentlog.OpenReadOnly(f.logDir(), segmentlog.Options{SegmentBytesMax: int64(l.SegmentBytesMax), Logger: f.Logger})
		if errors.Is(err, segmentlog.ErrNoDurableEnd) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("flow %s: open the local log read-only: %w", f.Cfg.Flow, err)
		}
		g.log, g.closeLog = lg, true
	}
	keep := false
	defer func() {
		if !keep && g.closeLog {
			g.log.Close()
		}
	}()
	g.Oldest = g.log.FirstOffset()
	off, _, err := g.log.CursorOffset(s.Cursor())
	var pr *segmentlog.PastRetentionError
	switch {
	case errors.As(err, &pr):
		g.Need, g.Oldest, g.PastRetention = pr.Offset, pr.FirstOffset, true
	case err != nil:
		return nil, err
	default:
		st, err := apply.ReadStatus(ctx, tgt, s.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
		if err != nil {
			return nil, fmt.Errorf("flow %s: sink %s: read the target's checkpoint: %w", f.Cfg.Flow, s.Name, err)
		}
		if !st.Found {
			return nil, nil
		}
		g.Need = 0
		if st.Checkpoint.HasOffset {
			g.Need = st.Checkpoint.Offset + 1
		}
		if g.Need >= g.Oldest || g.Need >= off {
			// The log holds what the target needs, or the cursor is not
			// ahead of it (nothing was read past what the target holds).
			return nil, nil
		}
	}
	keep = true
	return g, nil
}

// bridgeGap records a Replace reseed of every table, then moves the
// target's checkpoint and the sink's cursor to the first transaction the
// log still holds (the comment at the top of this file).
func (f *Flow) bridgeGap(ctx context.Context, src, tgt *pgx.Conn, s config.Sink, tables []config.TableName, g *streamGap) error {
	for _, t := range tables {
		if _, err := apply.PrepareReseed(ctx, src, tgt, apply.ReseedOptions{Flow: f.Cfg.Flow, SourceID: f.Cfg.Source.ID,
			Schema: s.Target.Schema, Table: t, Target: t, Replace: true, Command: f.reseedAllCommand(s), ConfigPath: f.ConfigPath}); err != nil {
			return fmt.Errorf("flow %s: sink %s %s; recording the reseed of %s failed, so nothing was moved: %w (or recover with: %s)",
				f.Cfg.Flow, s.Name, g, t, err, f.resnapshot())
		}
	}
	at, err := transactionStart(ctx, g.log, g.Oldest)
	if err != nil {
		return fmt.Errorf("flow %s: sink %s: find the first whole transaction at or after log offset %d: %w", f.Cfg.Flow, s.Name, g.Oldest, err)
	}
	if err := apply.AcceptGap(ctx, tgt, s.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID, at); err != nil {
		return err
	}
	if err := g.log.ResetCursor(s.Cursor(), at); err != nil {
		return fmt.Errorf("flow %s: sink %s: move its cursor to log offset %d: %w", f.Cfg.Flow, s.Name, at, err)
	}
	f.Logger.Warn("sink lost part of the stream: every table is copied again, and its applier reads on from the log's oldest transaction",
		"flow", f.Cfg.Flow, "sink", s.Name, "needed_offset", g.Need, "resume_offset", at, "tables", len(tables))
	return nil
}

// transactionStart returns the first offset at or after from where a
// transaction starts: not a later chunk of one whose first chunks
// retention removed (the applier would refuse it as an incomplete
// sequence). The skipped chunks belong to the gap the reseed covers.
func transactionStart(ctx context.Context, lg *segmentlog.Log, from uint64) (uint64, error) {
	end := lg.NextOffset()
	r := lg.NewReader(from)
	defer r.Close()
	for at := from; at < end; {
		off, payload, err := r.Next(ctx)
		if err != nil {
			return 0, err
		}
		env, err := envelope.Decode(payload)
		if err != nil {
			return 0, fmt.Errorf("entry at log offset %d: %w", off, err)
		}
		if b := env.Boundary; b == nil || b.Kind != pb.UnitKind_UNIT_KIND_CHUNK || b.ChunkIndex == 0 {
			return off, nil
		}
		at = off + 1
	}
	return end, nil
}
