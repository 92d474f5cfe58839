package apply

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/lsn"
)

// DB is what the catalog and status helpers need from a target or source
// connection. *pgx.Conn, *pgxpool.Pool and pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaVersion is the version of the tables below. Part of the target
// schema contract: bump it, and add a migration in EnsureSchema, when a
// column changes meaning.
const schemaVersion = 1

// schemaLockKey serialises EnsureSchema across processes: concurrent
// CREATE ... IF NOT EXISTS of the same object can still fail on the catalog's
// unique indexes.
const schemaLockKey = 0x7472656c6c617261 // "trellara"

// schemaDDL creates the Trellara-owned tables. %[1]s is the quoted schema.
// Sent as one simple-protocol query, so it runs as one implicit transaction.
const schemaDDL = `
SELECT pg_advisory_xact_lock(%[2]d);
CREATE SCHEMA IF NOT EXISTS %[1]s;

-- Which version of these tables this is, for future migrations.
CREATE TABLE IF NOT EXISTS %[1]s.meta (key text PRIMARY KEY, value text NOT NULL);
INSERT INTO %[1]s.meta VALUES ('apply_schema_version', '%[3]d') ON CONFLICT (key) DO NOTHING;

-- One row per (flow, source): the last source transaction applied, written
-- in the same target transaction as that transaction's rows.
CREATE TABLE IF NOT EXISTS %[1]s.checkpoints (
    flow          text        NOT NULL,
    source_id     text        NOT NULL,
    commit_lsn    pg_lsn      NOT NULL DEFAULT '0/0',
    end_lsn       pg_lsn      NOT NULL DEFAULT '0/0',
    log_offset    bigint,
    applied_at    timestamptz,
    txns_applied  bigint      NOT NULL DEFAULT 0,
    txns_skipped  bigint      NOT NULL DEFAULT 0,
    rows_applied  bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (flow, source_id)
);

-- Per relation: how far its initial snapshot has been copied, and the
-- visibility boundary (the slot's consistent point) once it is complete.
CREATE TABLE IF NOT EXISTS %[1]s.snapshot_progress (
    flow          text        NOT NULL,
    source_id     text        NOT NULL,
    relation      text        NOT NULL,
    next_batch    bigint      NOT NULL DEFAULT 0,
    done          boolean     NOT NULL DEFAULT false,
    boundary_lsn  pg_lsn,
    rows          bigint      NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow, source_id, relation)
);

-- Units that could not be applied, with the reason and the envelope itself,
-- so they can be inspected and replayed. replayed_at is set in the target
-- transaction that finally applies the unit.
CREATE TABLE IF NOT EXISTS %[1]s.quarantine (
    id             bigserial   PRIMARY KEY,
    flow           text        NOT NULL,
    source_id      text        NOT NULL,
    unit_key       text        NOT NULL,
    unit           text        NOT NULL,
    commit_lsn     pg_lsn      NOT NULL,
    end_lsn        pg_lsn      NOT NULL,
    commit_time    timestamptz,
    log_offset     bigint      NOT NULL,
    relation       text        NOT NULL DEFAULT '',
    error          text        NOT NULL,
    sqlstate       text        NOT NULL DEFAULT '',
    envelope       bytea       NOT NULL,
    attempts       integer     NOT NULL DEFAULT 1,
    quarantined_at timestamptz NOT NULL DEFAULT now(),
    replayed_at    timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS quarantine_open_unit
    ON %[1]s.quarantine (flow, source_id, unit_key) WHERE replayed_at IS NULL;
` + barrierTableDDL + holdTableDDL

// barrierTableDDL creates the barriers table: one row per DDL barrier a
// sink applied, written in the target transaction that runs the barrier
// (its DDL, its first rows, the checkpoint), so the row is the sink's
// acknowledgement of the barrier's propagation contract (docs/SCHEMA.md).
// ddl_at is the clock when the barrier's target DDL started and commit_at
// the clock just before COMMIT: the table's lock, and with it the
// visibility pause readers see, spans ddl_at..commit_at (and the commit).
// A hold barrier (capture stopped publishing the relation) is released by
// the handoff of the reseed that copies the relation again.
const barrierTableDDL = `
CREATE TABLE IF NOT EXISTS %[1]s.barriers (
    flow        text        NOT NULL,
    source_id   text        NOT NULL,
    id          text        NOT NULL,
    relation    text        NOT NULL,
    commit_lsn  pg_lsn      NOT NULL,
    kinds       text[]      NOT NULL,
    ddl         text[]      NOT NULL DEFAULT '{}',
    ddl_at      timestamptz NOT NULL,
    commit_at   timestamptz,
    released_at timestamptz,
    PRIMARY KEY (flow, source_id, id)
);
`

// EnsureSchema creates the Trellara-owned schema and its tables on the
// target if they do not exist. It is idempotent and safe to run from several
// processes at once. Run calls it; init and preflight may call it earlier.
func EnsureSchema(ctx context.Context, db DB, schema string) error {
	if schema == "" {
		schema = defaultSchema
	}
	qs := pgx.Identifier{schema}.Sanitize()
	// Nothing to create is the common case; checking first lets a role
	// without CREATE on the database run once an administrator has created
	// the schema (CREATE SCHEMA IF NOT EXISTS checks the privilege first).
	var present bool
	var later bool
	err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL
		AND to_regclass($3) IS NOT NULL AND to_regclass($4) IS NOT NULL, to_regclass($5) IS NOT NULL AND to_regclass($6) IS NOT NULL`,
		qs+".meta", qs+".checkpoints", qs+".snapshot_progress", qs+".quarantine", qs+".barriers", qs+".verify_holds").Scan(&present, &later)
	if err != nil {
		return fmt.Errorf("apply: look up schema %q on the target: %w", schema, err)
	}
	if present && later {
		return nil
	}
	q := fmt.Sprintf(schemaDDL, qs, int64(schemaLockKey), schemaVersion)
	if present {
		// A schema from before barriers or verify holds were recorded: add
		// their tables only (no CREATE SCHEMA, which needs CREATE on the
		// database).
		q = fmt.Sprintf("SELECT pg_advisory_xact_lock(%[2]d);"+barrierTableDDL+holdTableDDL, qs, int64(schemaLockKey))
	}
	for attempt := 0; ; attempt++ {
		_, err := db.Exec(ctx, q)
		if err == nil {
			return nil
		}
		// CREATE ... IF NOT EXISTS is not safe against a concurrent
		// creator that does not take our lock (or one that was killed
		// mid-way and whose backend is still finishing): the loser gets a
		// duplicate error although the object now exists. Run it again;
		// the second time it finds everything in place.
		var pe *pgconn.PgError
		if attempt == 0 && errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P06" || pe.Code == "42P07" || pe.Code == "42710") {
			continue
		}
		return fmt.Errorf("apply: create schema %q on the target: %w", schema, err)
	}
}

// stateSQL holds the statements on the Trellara tables, rendered once for
// the configured schema.
type stateSQL struct {
	initCheckpoint   string
	readCheckpoint   string
	applyCheckpoint  string
	skipCheckpoint   string
	readProgress     string
	upsertProgress   string
	readOpenQuar     string
	markReplayed     string
	recordQuarantine string
}

func newStateSQL(schema string) stateSQL {
	s := pgx.Identifier{schema}.Sanitize()
	return stateSQL{
		initCheckpoint: `INSERT INTO ` + s + `.checkpoints (flow, source_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		readCheckpoint: `SELECT commit_lsn::text, end_lsn::text, log_offset, applied_at, txns_applied, txns_skipped, rows_applied
			FROM ` + s + `.checkpoints WHERE flow = $1 AND source_id = $2`,
		// commit_lsn and end_lsn are NULL for units that do not move the
		// stream position (snapshot batches): coalesce keeps the old value.
		applyCheckpoint: `UPDATE ` + s + `.checkpoints SET
			commit_lsn = coalesce($3::pg_lsn, commit_lsn), end_lsn = coalesce($4::pg_lsn, end_lsn),
			log_offset = $5::bigint, applied_at = now(),
			txns_applied = txns_applied + $6::bigint, txns_skipped = txns_skipped + $7::bigint,
			rows_applied = rows_applied + $8::bigint
			WHERE flow = $1 AND source_id = $2 RETURNING applied_at`,
		skipCheckpoint: `UPDATE ` + s + `.checkpoints SET txns_skipped = txns_skipped + $3::bigint
			WHERE flow = $1 AND source_id = $2 RETURNING applied_at`,
		readProgress: `SELECT relation, next_batch, done, boundary_lsn::text, rows
			FROM ` + s + `.snapshot_progress WHERE flow = $1 AND source_id = $2 ORDER BY relation`,
		upsertProgress: `INSERT INTO ` + s + `.snapshot_progress AS p
			(flow, source_id, relation, next_batch, done, boundary_lsn, rows, updated_at)
			VALUES ($1, $2, $3, $4::bigint, $5::boolean, $6::pg_lsn, $7::bigint, now())
			ON CONFLICT (flow, source_id, relation) DO UPDATE SET next_batch = excluded.next_batch,
			done = excluded.done, boundary_lsn = excluded.boundary_lsn, rows = excluded.rows, updated_at = now()`,
		readOpenQuar: `SELECT id, unit_key FROM ` + s + `.quarantine
			WHERE flow = $1 AND source_id = $2 AND replayed_at IS NULL`,
		markReplayed: `UPDATE ` + s + `.quarantine SET replayed_at = now() WHERE id = $1::bigint AND replayed_at IS NULL`,
		// A unit that fails again on a later run updates its open row rather
		// than piling up duplicates.
		recordQuarantine: `INSERT INTO ` + s + `.quarantine AS q
			(flow, source_id, unit_key, unit, commit_lsn, end_lsn, commit_time, log_offset, relation, error, sqlstate, envelope)
			VALUES ($1, $2, $3, $4, $5::pg_lsn, $6::pg_lsn, $7::timestamptz, $8::bigint, $9, $10, $11, $12::bytea)
			ON CONFLICT (flow, source_id, unit_key) WHERE replayed_at IS NULL DO UPDATE SET
			error = excluded.error, sqlstate = excluded.sqlstate, relation = excluded.relation,
			log_offset = excluded.log_offset, envelope = excluded.envelope,
			attempts = q.attempts + 1, quarantined_at = now()
			RETURNING id`,
	}
}

// parseLSN parses PostgreSQL's pg_lsn text form ("16/B374D848") as read
// back from the target's state tables.
func parseLSN(s string) (uint64, error) {
	v, err := lsn.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("apply: %w", err)
	}
	return uint64(v), nil
}
