package apply

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/lsn"
)

// A DDL barrier's propagation contract (docs/SCHEMA.md) ends on each sink
// with a row in the barriers table (barrierTableDDL), written in the
// target transaction that runs the barrier: its DDL, its first rows and
// the checkpoint commit with it or not at all.

// carriesDDLEvents reports whether env is a barrier unit of any kind: a
// target DDL (envelope.IsBarrier) or a change with none to run (a reseed
// takeover, a hold).
func carriesDDLEvents(env *pb.Envelope) bool { return len(env.GetDdlEvents()) > 0 }

// recordBarriers writes the barriers table's row of every relation env's
// DDL events name, in this transaction, before the barrier's DDL runs
// (ddl_at is the clock then). commitBarriers stamps commit_at.
func (x *pgTx) recordBarriers(ctx context.Context, env *pb.Envelope) error {
	type rec struct {
		kinds, ddl []string
	}
	var order []string
	byRel := map[string]*rec{}
	for _, d := range env.DdlEvents {
		r := byRel[d.Relation]
		if r == nil {
			r = &rec{ddl: []string{}}
			byRel[d.Relation] = r
			order = append(order, d.Relation)
		}
		r.kinds = append(r.kinds, d.Kind)
		if d.Detail != "" && d.Column != "" {
			r.ddl = append(r.ddl, d.Detail)
		}
	}
	t := x.t
	for _, rel := range order {
		id := envelope.BarrierID(rel, env.CommitLsn)
		if _, err := x.tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{t.cfg.Schema}.Sanitize()+`.barriers
			(flow, source_id, id, relation, commit_lsn, kinds, ddl, ddl_at) VALUES ($1, $2, $3, $4, $5::pg_lsn, $6, $7, clock_timestamp())
			ON CONFLICT (flow, source_id, id) DO NOTHING`,
			t.cfg.Flow, t.cfg.SourceID, id, rel, lsn.Format(env.CommitLsn), byRel[rel].kinds, byRel[rel].ddl); err != nil {
			return fmt.Errorf("apply: record DDL barrier %s at commit LSN %s on the target: %w", id, envelope.FormatLSN(env.CommitLsn), err)
		}
		x.barrierIDs = append(x.barrierIDs, id)
	}
	return nil
}

// commitBarriers stamps commit_at on the barriers this transaction
// recorded, as its last statement before COMMIT.
func (x *pgTx) commitBarriers(ctx context.Context) error {
	if len(x.barrierIDs) == 0 {
		return nil
	}
	t := x.t
	_, err := x.tx.Exec(ctx, `UPDATE `+pgx.Identifier{t.cfg.Schema}.Sanitize()+`.barriers SET commit_at = clock_timestamp()
		WHERE flow = $1 AND source_id = $2 AND id = ANY($3) AND commit_at IS NULL`, t.cfg.Flow, t.cfg.SourceID, x.barrierIDs)
	if err != nil {
		return fmt.Errorf("apply: record the commit of DDL barriers %v on the target: %w", x.barrierIDs, err)
	}
	return nil
}

// BarrierAck is one barrier a sink applied, as its barriers row records.
type BarrierAck struct {
	ID        string
	Relation  string
	CommitLSN uint64
	Kinds     []string
	DDL       []string
	DDLAt     time.Time
	// CommitAt is zero for a row written before commit_at was stamped.
	CommitAt   time.Time
	ReleasedAt time.Time
}

// VisibilityPause is how long the barrier's target transaction held its
// table from its DDL to its commit.
func (b BarrierAck) VisibilityPause() time.Duration {
	if b.CommitAt.IsZero() {
		return 0
	}
	return b.CommitAt.Sub(b.DDLAt)
}

// ListBarriers returns the flow's most recent barriers on the target,
// newest first, at most limit; none when the table does not exist.
func ListBarriers(ctx context.Context, db DB, schema, flow, sourceID string, limit int) ([]BarrierAck, error) {
	if schema == "" {
		schema = defaultSchema
	}
	qs := pgx.Identifier{schema}.Sanitize()
	var present bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, qs+".barriers").Scan(&present); err != nil {
		return nil, err
	}
	if !present {
		return nil, nil
	}
	rows, err := db.Query(ctx, `SELECT id, relation, commit_lsn::text, kinds, ddl, ddl_at, commit_at, released_at
		FROM `+qs+`.barriers WHERE flow = $1 AND source_id = $2 ORDER BY commit_lsn DESC, id LIMIT $3`, flow, sourceID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []BarrierAck
	for rows.Next() {
		var b BarrierAck
		var at string
		var commitAt, releasedAt *time.Time
		if err := rows.Scan(&b.ID, &b.Relation, &at, &b.Kinds, &b.DDL, &b.DDLAt, &commitAt, &releasedAt); err != nil {
			return nil, err
		}
		if b.CommitLSN, err = parseLSN(at); err != nil {
			return nil, err
		}
		if commitAt != nil {
			b.CommitAt = *commitAt
		}
		if releasedAt != nil {
			b.ReleasedAt = *releasedAt
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// HeldTables returns the relations a hold barrier holds on the target
// (recorded, not yet released by a reseed's handoff), with the barrier.
func HeldTables(ctx context.Context, db DB, schema, flow, sourceID string) (map[string]BarrierAck, error) {
	if schema == "" {
		schema = defaultSchema
	}
	qs := pgx.Identifier{schema}.Sanitize()
	var present bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, qs+".barriers").Scan(&present); err != nil {
		return nil, err
	}
	out := map[string]BarrierAck{}
	if !present {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT id, relation, commit_lsn::text, ddl_at FROM `+qs+`.barriers
		WHERE flow = $1 AND source_id = $2 AND $3 = ANY(kinds) AND released_at IS NULL ORDER BY commit_lsn`, flow, sourceID, envelope.HoldKind)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var b BarrierAck
		var at string
		if err := rows.Scan(&b.ID, &b.Relation, &at, &b.DDLAt); err != nil {
			return nil, err
		}
		if b.CommitLSN, err = parseLSN(at); err != nil {
			return nil, err
		}
		b.Kinds = []string{envelope.HoldKind}
		if _, ok := out[b.Relation]; !ok {
			out[b.Relation] = b
		}
	}
	return out, rows.Err()
}
