package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/pgcatalog"
)

// Tables returns the flow's source tables: source.tables, then the tables
// of source.schemas the flow knows (schemaTablesKnown).
func (f *Flow) Tables() []config.TableName {
	return append(append([]config.TableName(nil), f.Cfg.Source.Tables...), f.schemaTablesKnown()...)
}

// tableStrings renders tables in config.TableName's text form, which
// config.ParseTableName reads back to the same tables.
func tableStrings(tables []config.TableName) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.String()
	}
	return out
}

// gatedSourceTables reads the configured tables' definitions from the
// source and refuses, naming each fix, when one fails the identity gate
// (pgcatalog.TableDef.IdentityGate, the rule preflight reports). Run calls it
// before it creates a publication or target tables: a published table
// without a replica identity makes the source reject every UPDATE and
// DELETE on it.
func (f *Flow) gatedSourceTables(ctx context.Context, src *pgx.Conn) ([]pgcatalog.TableDef, error) {
	if err := f.resolveTables(ctx, src); err != nil {
		return nil, err
	}
	defs, err := pgcatalog.ReadTables(ctx, src, f.Tables())
	if err != nil {
		return nil, fmt.Errorf("flow %s: %w", f.Cfg.Flow, err)
	}
	var refused []error
	for _, d := range defs {
		if e := d.IdentityGate(); e != nil {
			refused = append(refused, e)
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("flow %s: refusing to publish tables whose updates and deletes cannot be identified "+
			"(once published, the source would reject every UPDATE and DELETE on them); nothing was created or changed on the source. "+
			"Fix each on the source, then run again (%s checks every table):\n%w",
			f.Cfg.Flow, shell.Trellara("preflight", f.ConfigPath), errors.Join(refused...))
	}
	return defs, nil
}

// targetTableExists reports whether t exists on the target.
func targetTableExists(ctx context.Context, q pgxQuerier, t config.TableName) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p'))`, t.Schema, t.Name).Scan(&ok)
	return ok, err
}

type pgxQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// copiedTables is the flow's durable record of the target tables its
// snapshot wrote into: the snapshot_progress rows on the target. The
// applier writes a relation's row in the same target transaction as the
// relation's first copied rows, so a table without one holds no row this
// flow copied.
func (f *Flow) copiedTables(ctx context.Context, q pgxQuerier, sk config.Sink) (map[config.TableName]bool, error) {
	out := map[config.TableName]bool{}
	progress := pgx.Identifier{sk.Target.Schema, "snapshot_progress"}.Sanitize()
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, progress).Scan(&exists); err != nil {
		return nil, fmt.Errorf("flow %s: look up %s on the target: %w", f.Cfg.Flow, progress, err)
	}
	if !exists {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT relation FROM `+progress+` WHERE flow = $1 AND source_id = $2`, f.Cfg.Flow, f.Cfg.Source.ID)
	if err != nil {
		return nil, fmt.Errorf("flow %s: read %s on the target: %w", f.Cfg.Flow, progress, err)
	}
	rels, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("flow %s: read %s on the target: %w", f.Cfg.Flow, progress, err)
	}
	for _, r := range rels {
		t, err := config.ParseTableName(r)
		if err != nil {
			// Not a name this version writes: the table is then treated as
			// holding rows the flow did not copy, which refuses the next
			// snapshot with the TRUNCATE to run: safe, never a duplicate.
			f.Logger.Warn("snapshot progress names a relation that does not parse; it is not emptied by cleanup",
				"flow", f.Cfg.Flow, "relation", r, "err", err)
			continue
		}
		out[t] = true
	}
	return out, nil
}

// refuseFilledTargets runs before a new initial snapshot. The snapshot
// copies every source row, so a target table that already holds rows would
// end up with them twice (or the snapshot quarantined on the table's key).
// Rows this flow copied earlier are emptied by run --cleanup; any other rows
// belong to someone else, and only the operator may remove them.
func (f *Flow) refuseFilledTargets(ctx context.Context) error {
	for _, sk := range f.Sinks() {
		if err := f.refuseFilledTarget(ctx, sk); err != nil {
			return err
		}
	}
	return nil
}

func (f *Flow) refuseFilledTarget(ctx context.Context, sk config.Sink) error {
	tgt, err := f.ConnectSink(ctx, sk)
	if err != nil {
		return err
	}
	defer tgt.Close(context.Background())
	ours, foreign, err := f.filledTargets(ctx, tgt, sk)
	if err != nil {
		return err
	}
	if len(foreign) > 0 {
		return fmt.Errorf("flow %s: %s; nothing was created on the source. %s. Then run again",
			f.Cfg.Flow, foreignRowsProblem(foreign), f.foreignRowsFix(foreign))
	}
	if len(ours) > 0 {
		return fmt.Errorf("flow %s: %s; nothing was created on the source. Recover: %s",
			f.Cfg.Flow, ourRowsProblem(ours), f.ourRowsFix())
	}
	return nil
}

// filledTargets lists the configured target tables that hold rows before
// an initial snapshot: ours were copied by an earlier snapshot of this flow
// (run --cleanup empties them), foreign were not (only the operator may
// remove them). Preflight reports the same lists before anything runs.
func (f *Flow) filledTargets(ctx context.Context, tgt *pgx.Conn, sk config.Sink) (ours, foreign []config.TableName, err error) {
	copied, err := f.copiedTables(ctx, tgt, sk)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range f.Tables() {
		exists, err := targetTableExists(ctx, tgt, t)
		if err != nil {
			return nil, nil, fmt.Errorf("flow %s: look up target table %s: %w", f.Cfg.Flow, t, err)
		}
		if !exists {
			continue
		}
		var filled bool
		if err := tgt.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+t.Sanitize()+`)`).Scan(&filled); err != nil {
			return nil, nil, fmt.Errorf("flow %s: read target table %s: %w", f.Cfg.Flow, t, err)
		}
		switch {
		case !filled:
		case copied[t]:
			ours = append(ours, t)
		default:
			foreign = append(foreign, t)
		}
	}
	return ours, foreign, nil
}

func foreignRowsProblem(tables []config.TableName) string {
	return fmt.Sprintf("target table %s already holds rows this flow did not copy; the initial snapshot copies every source row, "+
		"so they would be duplicated", strings.Join(tableStrings(tables), ", "))
}

func (f *Flow) foreignRowsFix(tables []config.TableName) string {
	return fmt.Sprintf("If those rows may go, empty the table on the target: %s; or remove it from source.tables in %s",
		truncateSQL(tables), shell.Quote(f.ConfigPath))
}

func ourRowsProblem(tables []config.TableName) string {
	return fmt.Sprintf("target table %s holds rows an earlier snapshot of this flow copied, but the flow's slot and local state are gone",
		strings.Join(tableStrings(tables), ", "))
}

func (f *Flow) ourRowsFix() string {
	return shell.Trellara("run", f.ConfigPath, "--cleanup") + " (it empties exactly those tables), then run again"
}

func truncateSQL(tables []config.TableName) string { return "TRUNCATE " + sanitizedList(tables) }

// sanitizedList renders tables for SQL, comma-separated.
func sanitizedList(tables []config.TableName) string {
	q := make([]string, len(tables))
	for i, t := range tables {
		q[i] = t.Sanitize()
	}
	return strings.Join(q, ", ")
}

// cleanupTarget removes the flow's footprint on the target in one
// transaction: it empties the configured tables the flow's snapshot copied
// into (copiedTables) and deletes the flow's checkpoint, snapshot progress
// and quarantine rows. Left behind, copied rows would be duplicated by the
// next snapshot, and the old progress would make its batches look like
// redeliveries. It returns the tables it emptied.
func (f *Flow) cleanupTarget(ctx context.Context, sk config.Sink) ([]config.TableName, error) {
	tgt, err := f.ConnectSink(ctx, sk)
	if err != nil {
		return nil, fmt.Errorf("flow %s: cleanup of the target's flow state: %w", f.Cfg.Flow, err)
	}
	defer tgt.Close(context.Background())
	tx, err := tgt.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("flow %s: cleanup on the target: %w", f.Cfg.Flow, err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	copied, err := f.copiedTables(ctx, tx, sk)
	if err != nil {
		return nil, err
	}
	var empty []config.TableName
	for _, t := range f.Tables() {
		if !copied[t] {
			continue
		}
		exists, err := targetTableExists(ctx, tx, t)
		if err != nil {
			return nil, fmt.Errorf("flow %s: look up target table %s: %w", f.Cfg.Flow, t, err)
		}
		if exists {
			empty = append(empty, t)
		}
	}
	if len(empty) > 0 {
		if _, err := tx.Exec(ctx, truncateSQL(empty)); err != nil {
			return nil, fmt.Errorf("flow %s: cleanup: empty the target tables this flow copied (%s): %w",
				f.Cfg.Flow, strings.Join(tableStrings(empty), ", "), err)
		}
	}
	schema := pgx.Identifier{sk.Target.Schema}.Sanitize()
	for _, table := range []string{"checkpoints", "snapshot_progress", "quarantine", "barriers"} {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+"."+table).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			continue
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s.%s WHERE flow = $1 AND source_id = $2`, schema, table),
			f.Cfg.Flow, f.Cfg.Source.ID); err != nil {
			return nil, fmt.Errorf("flow %s: cleanup of %s.%s on the target: %w", f.Cfg.Flow, schema, table, err)
		}
	}
	if err := apply.DropReseeds(ctx, tx, sk.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID); err != nil {
		return nil, fmt.Errorf("flow %s: cleanup: %w", f.Cfg.Flow, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("flow %s: cleanup on the target: commit: %w", f.Cfg.Flow, err)
	}
	return empty, nil
}
