package apply

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Status is what the target records about a flow: its checkpoint, snapshot
// progress and quarantine. It is read from the target tables, so it is the
// evidence, not this process's memory.
type Status struct {
	// Found is false when the flow has never started on this target; the
	// checkpoint is then zero.
	Found      bool
	Checkpoint Checkpoint
	Snapshots  []SnapshotProgress
	// QuarantineOpen counts units waiting for repair; QuarantineTotal
	// includes those replayed since.
	QuarantineOpen  int64
	QuarantineTotal int64
	// Quarantine lists open entries, oldest first, at most
	// quarantineListMax of them.
	Quarantine []QuarantineEntry
}

// SnapshotProgress is one relation's initial copy.
type SnapshotProgress struct {
	Relation    string
	NextBatch   uint32
	Done        bool
	BoundaryLSN uint64
	Rows        int64
	// Ready: the snapshot is complete and the stream has applied a
	// transaction at or past its boundary, so the table reflects the source
	// as of the checkpoint. Until then the table is not a consistent copy.
	Ready bool
}

// QuarantineEntry is one open quarantine row (without the envelope bytes).
type QuarantineEntry struct {
	ID            int64
	Unit          string
	CommitLSN     uint64
	EndLSN        uint64
	Offset        uint64
	Relation      string
	Error         string
	SQLState      string
	Attempts      int
	QuarantinedAt time.Time
}

// quarantineListMax bounds the entries Status carries.
const quarantineListMax = 100

// Status reads this applier's flow status from the target over the
// applier's own connection. The connection belongs to Run while it is in
// progress, so Status then returns ErrRunning: use ReadStatus with another
// connection to watch a running applier.
func (a *Applier) Status(ctx context.Context) (*Status, error) {
	if a.pg == nil {
		return nil, errors.New("apply: Status needs a PostgreSQL target; this applier was made with NewWithTarget")
	}
	if !a.running.CompareAndSwap(false, true) {
		return nil, ErrRunning
	}
	defer a.running.Store(false)
	return ReadStatus(ctx, a.pg.conn, a.cfg.Schema, a.cfg.Flow, a.cfg.SourceID)
}

// ReadStatus reads a flow's status from the target. It uses its own
// connection (db), so it can run while an Applier is applying.
func ReadStatus(ctx context.Context, db DB, schema, flow, sourceID string) (*Status, error) {
	if schema == "" {
		schema = defaultSchema
	}
	q := newStateSQL(schema)
	s := pgx.Identifier{schema}.Sanitize()
	wrap := func(err error) error {
		return fmt.Errorf("apply: read status of flow %q (source %q) from %s: %w", flow, sourceID, s, err)
	}
	st := &Status{Checkpoint: Checkpoint{Flow: flow, SourceID: sourceID}}
	cp := &st.Checkpoint
	var commit, end string
	var offset *int64
	var at *time.Time
	err := db.QueryRow(ctx, q.readCheckpoint, flow, sourceID).Scan(&commit, &end, &offset, &at,
		&cp.TxnsApplied, &cp.TxnsSkipped, &cp.RowsApplied)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, wrap(err)
	default:
		st.Found = true
		if cp.CommitLSN, err = parseLSN(commit); err != nil {
			return nil, wrap(err)
		}
		if cp.EndLSN, err = parseLSN(end); err != nil {
			return nil, wrap(err)
		}
		if offset != nil {
			cp.Offset, cp.HasOffset = uint64(*offset), true
		}
		if at != nil {
			cp.AppliedAt = *at
		}
	}

	rows, err := db.Query(ctx, q.readProgress, flow, sourceID)
	if err != nil {
		return nil, wrap(err)
	}
	for rows.Next() {
		var p SnapshotProgress
		var next int64
		var boundary *string
		if err := rows.Scan(&p.Relation, &next, &p.Done, &boundary, &p.Rows); err != nil {
			rows.Close()
			return nil, wrap(err)
		}
		p.NextBatch = uint32(next)
		if boundary != nil {
			if p.BoundaryLSN, err = parseLSN(*boundary); err != nil {
				rows.Close()
				return nil, wrap(err)
			}
		}
		p.Ready = p.Done && cp.CommitLSN >= p.BoundaryLSN
		st.Snapshots = append(st.Snapshots, p)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}

	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE replayed_at IS NULL), count(*) FROM `+s+`.quarantine
		WHERE flow = $1 AND source_id = $2`, flow, sourceID).Scan(&st.QuarantineOpen, &st.QuarantineTotal); err != nil {
		return nil, wrap(err)
	}
	rows, err = db.Query(ctx, `SELECT id, unit, commit_lsn::text, end_lsn::text, log_offset, relation, error, sqlstate,
		attempts, quarantined_at FROM `+s+`.quarantine
		WHERE flow = $1 AND source_id = $2 AND replayed_at IS NULL ORDER BY id LIMIT $3`, flow, sourceID, quarantineListMax)
	if err != nil {
		return nil, wrap(err)
	}
	for rows.Next() {
		var e QuarantineEntry
		var commit, end string
		var offset int64
		if err := rows.Scan(&e.ID, &e.Unit, &commit, &end, &offset, &e.Relation, &e.Error, &e.SQLState,
			&e.Attempts, &e.QuarantinedAt); err != nil {
			rows.Close()
			return nil, wrap(err)
		}
		e.Offset = uint64(offset)
		if e.CommitLSN, err = parseLSN(commit); err != nil {
			rows.Close()
			return nil, wrap(err)
		}
		if e.EndLSN, err = parseLSN(end); err != nil {
			rows.Close()
			return nil, wrap(err)
		}
		st.Quarantine = append(st.Quarantine, e)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	return st, nil
}
