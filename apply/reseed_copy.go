package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/pgcatalog"
	"github.com/trellara/trellara/pgname"
)

// ReseedOptions describe one table's reseed (Reseed).
type ReseedOptions struct {
	Flow, SourceID string
	// Schema is the target's Trellara schema (Config.Schema).
	Schema string
	// Table is the source table; Target the target table it maps to.
	Table, Target pgname.Name
	// ChunkRows bounds the rows of one chunk.
	ChunkRows int
	// Wait bounds the wait for the flow's applier to act on one
	// watermark; the error then says the flow must be running.
	Wait time.Duration
	// Command resumes this reseed; recorded for status and repair-plan.
	Command string
	// ConfigPath is the flow's config, named in error messages.
	ConfigPath string
	// Progress, when set, is told about every merged chunk.
	Progress func(ReseedProgress)
	// Replace: the table's schema changed at the source in a way capture
	// blocked on. The shadow table is created from the source's current
	// definition, and the applier writes the table's rows only to it
	// until the handoff replaces the target table (reseed.go).
	Replace bool
	// Recorded, when set, is called once the reseed is recorded on the
	// target and before its first watermark (on a resume too): a Replace
	// reseed lets capture take over the blocked change there.
	Recorded func(id int64) error
	// BeforeStage, when set, is called with each chunk after its rows were
	// read from the source (COPY text format) and before they are staged
	// on the target; tests force an order between the two with it.
	BeforeStage func(window int64, rows []byte)
}

// ReseedProgress reports one step of a reseed.
type ReseedProgress struct {
	ID       int64
	Relation string
	Phase    string // "chunk" (a chunk merged) or "handoff"
	Chunks   int64
	Rows     int64
}

// ReseedResult is a reseed that reached its handoff.
type ReseedResult struct {
	ID       int64  `json:"id"`
	Relation string `json:"relation"`
	Target   string `json:"target"`
	// Resumed: an unfinished reseed of the table was continued.
	Resumed bool  `json:"resumed"`
	Chunks  int64 `json:"chunks"`
	Rows    int64 `json:"rows"`
}

// ErrReseedBusy: another reseed process holds the table.
var ErrReseedBusy = errors.New("apply: another reseed of this table is running")

// Reseed copies o.Table again into its target table while the flow's
// applier keeps applying the stream (reseed.go), and returns once the
// shadow table has been swapped in. It resumes an unfinished reseed of the
// table from its last merged chunk. src is a source connection, tgt a
// target connection; neither may be in a transaction.
func Reseed(ctx context.Context, src, tgt *pgx.Conn, o ReseedOptions) (*ReseedResult, error) {
	if o.Schema == "" {
		o.Schema = defaultSchema
	}
	if o.ChunkRows <= 0 {
		o.ChunkRows = 10000
	}
	if o.Wait <= 0 {
		o.Wait = 5 * time.Minute
	}
	rel := o.Table.String()
	st, resumed, unlock, err := holdReseed(ctx, src, tgt, o)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if o.Recorded != nil && st.Status == ReseedCopying {
		if err := o.Recorded(st.ID); err != nil {
			return nil, err
		}
	}
	res := &ReseedResult{ID: st.ID, Relation: rel, Target: o.Target.String(), Resumed: resumed}
	d := &reseedDriver{src: src, tgt: tgt, o: o, st: st, res: res}
	if st.Status == ReseedCopying {
		// Written again on a resume: the applier ignores a begin it knows,
		// and a process that died before writing it needs it.
		if _, err := EmitWatermark(ctx, src, Watermark{ID: st.ID, Phase: PhaseBegin}); err != nil {
			return nil, err
		}
		for d.st.Status == ReseedCopying {
			for !d.st.Copied {
				if err := d.chunk(ctx); err != nil {
					return nil, err
				}
			}
			at, err := EmitWatermark(ctx, src, Watermark{ID: st.ID, Phase: PhaseHandoff})
			if err != nil {
				return nil, err
			}
			// The applier refuses the handoff while a row waits for a
			// value the stream left out (a primary-key change of a row
			// with an unchanged TOAST value, into a range already
			// copied): it clears copied, and another last chunk reads
			// those rows.
			if err := d.waitFor(ctx, at, PhaseHandoff, func(s *ReseedState) bool { return s.Status != ReseedCopying || !s.Copied }); err != nil {
				return nil, err
			}
		}
		if o.Progress != nil {
			o.Progress(ReseedProgress{ID: st.ID, Relation: rel, Phase: "handoff", Chunks: d.st.Chunks, Rows: d.st.Rows})
		}
	}
	res.Chunks, res.Rows = d.st.Chunks, d.st.Rows
	return res, nil
}

// holdReseed takes the table's reseed lock on the target (one reseed
// process per table) and returns its unfinished reseed, recording a new
// one when there is none; unlock releases the lock.
func holdReseed(ctx context.Context, src, tgt *pgx.Conn, o ReseedOptions) (st *ReseedState, resumed bool, unlock func(), err error) {
	rel := o.Table.String()
	if err := EnsureSchema(ctx, tgt, o.Schema); err != nil {
		return nil, false, nil, err
	}
	if err := EnsureReseedTable(ctx, tgt, o.Schema); err != nil {
		return nil, false, nil, err
	}
	lock := "trellara.reseed/" + o.Schema + "/" + o.Flow + "/" + o.SourceID + "/" + rel
	var ok bool
	if err := tgt.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, lock).Scan(&ok); err != nil {
		return nil, false, nil, err
	}
	if !ok {
		return nil, false, nil, fmt.Errorf("%w (%s, flow %q): wait for it to finish, or stop it and run the command again to resume", ErrReseedBusy, rel, o.Flow)
	}
	unlock = func() {
		_, _ = tgt.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, lock)
	}
	if st, resumed, err = findReseed(ctx, tgt, o); err == nil && st == nil {
		st, err = createReseed(ctx, src, tgt, o)
	}
	if err != nil {
		unlock()
		return nil, false, nil, err
	}
	return st, resumed, unlock, nil
}

// PrepareReseed records o.Table's reseed on the target (its row in
// reseeds, its shadow, stage and keys tables) without writing a watermark,
// or finds its unfinished one; Reseed continues it. A sink that lost part
// of the stream records a Replace reseed of every table this way before
// its applier reads on past the gap (AcceptGap), so the applier writes no
// table from then on but the shadows.
func PrepareReseed(ctx context.Context, src, tgt *pgx.Conn, o ReseedOptions) (*ReseedState, error) {
	if o.Schema == "" {
		o.Schema = defaultSchema
	}
	st, _, unlock, err := holdReseed(ctx, src, tgt, o)
	if err != nil {
		return nil, err
	}
	unlock()
	return st, nil
}

// AcceptGap moves the target's checkpoint of the flow to log offset
// oldest-1, so its applier resumes at oldest, the first entry the log
// still holds, and never asks for what retention removed. The
// transactions in between are lost to this target: only a reseed of every
// table (PrepareReseed with Replace, before this) makes it whole again.
// It never moves the checkpoint back.
func AcceptGap(ctx context.Context, tgt DB, schema, flow, sourceID string, oldest uint64) error {
	if schema == "" {
		schema = defaultSchema
	}
	if oldest == 0 {
		return nil
	}
	_, err := tgt.Exec(ctx, `UPDATE `+pgx.Identifier{schema}.Sanitize()+`.checkpoints SET log_offset = $3::bigint
		WHERE flow = $1 AND source_id = $2 AND (log_offset IS NULL OR log_offset < $3::bigint)`, flow, sourceID, int64(oldest-1))
	if err != nil {
		return fmt.Errorf("apply: flow %q (source %q): move the target's checkpoint to log offset %d: %w", flow, sourceID, oldest-1, err)
	}
	return nil
}

// FinishReseed records the verify verdict of a handed-off reseed.
func FinishReseed(ctx context.Context, tgt DB, schema, flow, sourceID string, id int64, converged bool) error {
	if schema == "" {
		schema = defaultSchema
	}
	status := ReseedDiverged
	if converged {
		status = ReseedConverged
	}
	_, err := tgt.Exec(ctx, `UPDATE `+pgx.Identifier{schema}.Sanitize()+`.reseeds SET status = $4, updated_at = now()
		WHERE flow = $1 AND source_id = $2 AND id = $3`, flow, sourceID, id, status)
	return err
}

// findReseed returns the table's unfinished reseed, if any.
func findReseed(ctx context.Context, tgt *pgx.Conn, o ReseedOptions) (*ReseedState, bool, error) {
	all, err := ListReseeds(ctx, tgt, o.Schema, o.Flow, o.SourceID)
	if err != nil {
		return nil, false, err
	}
	for i := range all {
		if all[i].Relation == o.Table.String() {
			return &all[i], true, nil
		}
	}
	return nil, false, nil
}

// sourceShape reads the table's published columns and primary key.
func sourceShape(ctx context.Context, src *pgx.Conn, t pgname.Name) (cols, key []string, err error) {
	err = src.QueryRow(ctx, `SELECT
		array(SELECT attname::text FROM pg_attribute WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped
		      AND attgenerated = '' ORDER BY attnum),
		array(SELECT a.attname::text FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n)
		      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		      WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY k.n)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`,
		t.Schema, t.Name).Scan(&cols, &key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, fmt.Errorf("apply: reseed %s: no such table on the source", t)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("apply: reseed %s: read its columns on the source: %w", t, err)
	}
	if len(key) == 0 {
		return nil, nil, fmt.Errorf("%w: %s has none on the source; chunks are primary-key ranges", errNoKey, t)
	}
	return cols, key, nil
}

// createReseed records a new reseed and creates its shadow, stage and keys
// tables on the target, in one target transaction.
func createReseed(ctx context.Context, src, tgt *pgx.Conn, o ReseedOptions) (*ReseedState, error) {
	cols, key, err := sourceShape(ctx, src, o.Table)
	if err != nil {
		return nil, err
	}
	target := o.Target.Sanitize()
	// A view or a foreign key on the target table would have to be
	// dropped with it at the handoff: refuse before copying anything.
	var deps []string
	if err := tgt.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT d), '{}') FROM (
		SELECT c.oid::regclass::text AS d FROM pg_depend dp JOIN pg_rewrite r ON r.oid = dp.objid
		       JOIN pg_class c ON c.oid = r.ev_class
		 WHERE dp.refobjid = to_regclass($1) AND dp.classid = 'pg_rewrite'::regclass AND c.oid <> to_regclass($1)
		UNION ALL
		SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' AND confrelid = to_regclass($1)
		       AND conrelid <> to_regclass($1)) x`, target).Scan(&deps); err != nil {
		return nil, fmt.Errorf("apply: reseed %s: inspect target table %s: %w", o.Table, o.Target, err)
	}
	if len(deps) > 0 {
		return nil, fmt.Errorf("apply: reseed %s: target table %s is used by %s (views or foreign keys); the handoff replaces the table, "+
			"so drop or detach them first and recreate them after the reseed", o.Table, o.Target, strings.Join(deps, ", "))
	}
	var exists bool
	if err := tgt.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, target).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("apply: reseed %s: target table %s does not exist; create it first (trellara preflight --create-target-tables)", o.Table, o.Target)
	}
	tx, err := tgt.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	qs := pgx.Identifier{o.Schema}.Sanitize()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLockKey)); err != nil {
		return nil, err
	}
	var id int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) + 1 FROM `+qs+`.reseeds WHERE flow = $1 AND source_id = $2`,
		o.Flow, o.SourceID).Scan(&id); err != nil {
		return nil, err
	}
	shadow, stage, keys := reseedTables(o.Schema, id)
	toast := reseedToastTable(o.Schema, id)
	colList, keyList := identList(cols), identList(key)
	// The shadow table has the target table's definition, or for a
	// Replace reseed the source's current one.
	createShadow := fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)", shadow, target)
	if o.Replace {
		defs, err := pgcatalog.ReadTables(ctx, src, []pgname.Name{o.Table})
		if err != nil {
			return nil, err
		}
		def := defs[0]
		def.Schema, def.Name = o.Schema, "reseed_"+strconv.FormatInt(id, 10)+"_shadow"
		createShadow = def.CreateSQL()
	}
	prep := []string{
		fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s, %s", shadow, stage, keys, toast),
		createShadow,
		fmt.Sprintf("CREATE TABLE %s AS SELECT %s FROM %s WITH NO DATA", stage, colList, shadow),
		fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s bigint", stage, windowColumn),
		fmt.Sprintf("CREATE INDEX ON %s (%s)", stage, windowColumn),
		fmt.Sprintf("CREATE TABLE %s AS SELECT %s FROM %s WITH NO DATA", keys, keyList, shadow),
		fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s bigint NOT NULL", keys, windowColumn),
		fmt.Sprintf("CREATE INDEX ON %s (%s)", keys, keyList),
	}
	for _, q := range append(prep, toastTableDDL(o.Schema, id, cols, key)...) {
		if _, err := tx.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("apply: reseed %s: prepare the target (%s): %w", o.Table, q, err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+qs+`.reseeds (flow, source_id, id, relation, target_schema, target_name, columns, key_columns, command, replace)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, o.Flow, o.SourceID, id, o.Table.String(), o.Target.Schema, o.Target.Name,
		cols, key, o.Command, o.Replace); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return &ReseedState{ID: id, Relation: o.Table.String(), TargetSchema: o.Target.Schema, TargetName: o.Target.Name,
		Columns: cols, KeyColumns: key, Status: ReseedCopying, Command: o.Command, Replace: o.Replace}, nil
}

func identList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(out, ", ")
}

// literal quotes s as an SQL string literal (standard_conforming_strings
// on, PostgreSQL's default since 9.1); its type is taken from the column
// it is compared with.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func literals(vals []string) string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = literal(v)
	}
	return strings.Join(out, ", ")
}

type reseedDriver struct {
	src, tgt *pgx.Conn
	o        ReseedOptions
	st       *ReseedState
	res      *ReseedResult
}

// chunk copies the next primary-key range: low watermark, the rows as one
// statement sees them, staged on the target, high watermark; then it waits
// for the applier to merge it.
func (d *reseedDriver) chunk(ctx context.Context) error {
	o, st := d.o, d.st
	keyList := identList(st.KeyColumns)
	from := pgx.Identifier{o.Table.Schema, o.Table.Name}.Sanitize()
	where := "true"
	if st.ResumeKey != nil {
		where = fmt.Sprintf("(%s) > (%s)", keyList, literals(st.ResumeKey))
	}
	// The chunk's upper key, read before the window: the range is fixed,
	// the rows in it are read inside the window.
	texts := make([]string, len(st.KeyColumns))
	for i, k := range st.KeyColumns {
		texts[i] = pgx.Identifier{k}.Sanitize() + "::text"
	}
	q := fmt.Sprintf("SELECT ARRAY[%s] FROM %s WHERE %s ORDER BY %s OFFSET %d LIMIT 1",
		strings.Join(texts, ", "), from, where, keyList, d.o.ChunkRows-1)
	var upper []string
	if err := d.src.QueryRow(ctx, q).Scan(&upper); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("apply: reseed %s: find the next chunk on the source: %w", o.Table, err)
	}
	last := upper == nil
	if !last {
		where += fmt.Sprintf(" AND (%s) <= (%s)", keyList, literals(upper))
	}
	// Rows waiting on the target for a value the stream left out, in the
	// ranges already copied (reseed.go, toastValues), are read again with
	// this chunk. They were written by stream changes the applier applied
	// before now, so before the low watermark: the chunk's snapshot sees
	// them.
	if st.ResumeKey != nil {
		waiting, err := d.waitingKeys(ctx)
		if err != nil {
			return err
		}
		if len(waiting) > 0 {
			where = fmt.Sprintf("(%s) OR (%s) IN (%s)", where, keyList, strings.Join(waiting, ", "))
		}
	}
	qs := pgx.Identifier{o.Schema}.Sanitize()
	var w int64
	if err := d.tgt.QueryRow(ctx, `UPDATE `+qs+`.reseeds SET last_window = last_window + 1, updated_at = now()
		WHERE flow = $1 AND source_id = $2 AND id = $3 RETURNING last_window`, o.Flow, o.SourceID, st.ID).Scan(&w); err != nil {
		return err
	}
	if _, err := EmitWatermark(ctx, d.src, Watermark{ID: st.ID, Phase: PhaseLow, Window: w}); err != nil {
		return err
	}
	if err := d.waitVisible(ctx, PhaseLow); err != nil {
		return err
	}
	var buf bytes.Buffer
	colList := identList(st.Columns)
	if _, err := d.src.PgConn().CopyTo(ctx, &buf, fmt.Sprintf("COPY (SELECT %s FROM %s WHERE %s ORDER BY %s) TO STDOUT",
		colList, from, where, keyList)); err != nil {
		return fmt.Errorf("apply: reseed %s: copy chunk (window %d) from the source: %w", o.Table, w, err)
	}
	if o.BeforeStage != nil {
		o.BeforeStage(w, buf.Bytes())
	}
	_, stage, _ := reseedTables(o.Schema, st.ID)
	tx, err := d.tgt.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, &buf, fmt.Sprintf("COPY %s (%s) FROM STDIN", stage, colList)); err != nil {
		return fmt.Errorf("apply: reseed %s: stage chunk (window %d) on the target: %w", o.Table, w, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE `+stage+` SET `+windowColumn+` = $1 WHERE `+windowColumn+` IS NULL`, w); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	at, err := EmitWatermark(ctx, d.src, Watermark{ID: st.ID, Phase: PhaseHigh, Window: w, Upper: upper, Last: last})
	if err != nil {
		return err
	}
	if err := d.waitFor(ctx, at, PhaseHigh, func(s *ReseedState) bool { return s.MergedWindow >= w || s.Status != ReseedCopying }); err != nil {
		return err
	}
	if d.st.Status != ReseedCopying {
		return fmt.Errorf("apply: reseed %d of %s is %s, not %s, while its chunks were being copied", st.ID, o.Table, d.st.Status, ReseedCopying)
	}
	if o.Progress != nil {
		o.Progress(ReseedProgress{ID: st.ID, Relation: o.Table.String(), Phase: "chunk", Chunks: d.st.Chunks, Rows: d.st.Rows})
	}
	return nil
}

// waitingKeysMax bounds the waiting rows one chunk reads again; the rest
// wait for the next chunk.
const waitingKeysMax = 10000

// waitingKeys returns, as SQL row literals, the keys of the rows waiting
// in the toast table at or below the last merged key.
func (d *reseedDriver) waitingKeys(ctx context.Context) ([]string, error) {
	keyList := identList(d.st.KeyColumns)
	texts := make([]string, len(d.st.KeyColumns))
	for i, k := range d.st.KeyColumns {
		texts[i] = pgx.Identifier{k}.Sanitize() + "::text"
	}
	toast := reseedToastTable(d.o.Schema, d.st.ID)
	var present bool
	if err := d.tgt.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, toast).Scan(&present); err != nil || !present {
		return nil, err // none yet: a reseed recorded by an older version, its applier not restarted
	}
	rows, err := d.tgt.Query(ctx, fmt.Sprintf("SELECT ARRAY[%s] FROM %s WHERE (%s) <= (%s) ORDER BY %s LIMIT %d", strings.Join(texts, ", "),
		toast, keyList, literals(d.st.ResumeKey), keyList, waitingKeysMax))
	if err != nil {
		return nil, fmt.Errorf("apply: reseed %d of %s: read the rows waiting for a TOAST value on the target: %w", d.st.ID, d.o.Table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k []string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, "("+literals(k)+")")
	}
	return out, rows.Err()
}

// waitFor polls the reseed's row until done reports true; the applier
// moves it when it applies the watermark written at LSN at.
func (d *reseedDriver) waitFor(ctx context.Context, at uint64, phase string, done func(*ReseedState) bool) error {
	deadline := time.Now().Add(d.o.Wait)
	pause := 20 * time.Millisecond
	for {
		all, err := ListReseeds(ctx, d.tgt, d.o.Schema, d.o.Flow, d.o.SourceID)
		if err != nil {
			return err
		}
		var st *ReseedState
		for i := range all {
			if all[i].ID == d.st.ID {
				st = &all[i]
			}
		}
		if st == nil {
			return fmt.Errorf("apply: reseed %d of %s disappeared from %s.reseeds on the target", d.st.ID, d.o.Table, d.o.Schema)
		}
		d.st = st
		if done(st) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("apply: reseed %d of %s: the flow's applier did not apply the %s watermark at LSN %s within %s; "+
				"the flow must be running while a reseed copies (%s, or the service); once it runs, run the reseed again to resume",
				d.st.ID, d.o.Table, phase, envelope.FormatLSN(at), d.o.Wait, shell.Trellara("run", d.o.ConfigPath))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// waitVisible returns once every source transaction whose commit record
// precedes the watermark just written is visible to a new snapshot: the
// chunk read next must see every change the stream brings before that
// watermark (DBLog's rule). PostgreSQL writes a commit record before it
// makes the commit visible, and with synchronous replication the gap is
// unbounded (a commit waits for the standby, visible to logical decoding
// and not yet to a snapshot), so a chunk read right after the watermark
// could carry a row older than the one the stream already applied to T,
// on a key the merge does not exclude.
//
// One statement, after the watermark committed, takes a snapshot S and
// assigns a transaction id N. A transaction that committed before the
// watermark got its id before N; at S it was either visible already, or
// in S's in-progress list, or at or past S's xmax (a commit in progress
// above the latest completed id is in no list). The wait is for all of
// those to end: none of them in the in-progress list of a new snapshot,
// whose xmax has passed N. It is bounded by Options.Wait.
func (d *reseedDriver) waitVisible(ctx context.Context, phase string) error {
	var xip []string
	var xmax, n string
	if err := d.src.QueryRow(ctx, `SELECT array(SELECT pg_snapshot_xip(s)::text), pg_snapshot_xmax(s)::text, pg_current_xact_id()::text
		FROM pg_current_snapshot() s`).Scan(&xip, &xmax, &n); err != nil {
		return fmt.Errorf("apply: reseed %d of %s: read the source transactions in progress at the %s watermark: %w", d.st.ID, d.o.Table, phase, err)
	}
	deadline := time.Now().Add(d.o.Wait)
	pause := 5 * time.Millisecond
	for {
		var running []string
		if err := d.src.QueryRow(ctx, `SELECT array(SELECT x::text FROM pg_snapshot_xip(c) x
			WHERE x = ANY($1::xid8[]) OR (x >= $2::xid8 AND x < $3::xid8) ORDER BY x) || CASE WHEN pg_snapshot_xmax(c) > $3::xid8 THEN '{}'::text[] ELSE ARRAY[$3::text] END
			FROM pg_current_snapshot() c`, xip, xmax, n).Scan(&running); err != nil {
			return fmt.Errorf("apply: reseed %d of %s: wait for the source transactions in progress at the %s watermark: %w", d.st.ID, d.o.Table, phase, err)
		}
		if len(running) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("apply: reseed %d of %s: source transactions %s were in progress when the %s watermark was written and did not end within %s; "+
				"the next chunk must see them (a commit waiting for a synchronous standby, or a long transaction: see pg_stat_activity.backend_xid on the source); "+
				"once they end, run the reseed again to resume: %s", d.st.ID, d.o.Table, strings.Join(running, ", "), phase, d.o.Wait, d.o.Command)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// DropReseeds forgets the unfinished reseeds of the flow on the target
// (copying, or swapped and not verified): their rows in the reseeds table
// and their shadow, stage, keys and toast tables. A cleanup that starts the
// flow over calls it inside its own target transaction: an unfinished
// reseed belongs to the stream the cleanup discards, and resuming it on a
// new stream would merge two histories. Finished reseeds stay as history,
// and keep their ids: a handed-off table keeps its shadow's index names
// (reseed_<id>_shadow_pkey), so an id is never reused.
func DropReseeds(ctx context.Context, tx DB, schema, flow, sourceID string) error {
	if schema == "" {
		schema = defaultSchema
	}
	rs, err := ListReseeds(ctx, tx, schema, flow, sourceID)
	if err != nil {
		return fmt.Errorf("apply: flow %q (source %q): list its reseeds: %w", flow, sourceID, err)
	}
	for _, r := range rs {
		shadow, stage, keys := reseedTables(schema, r.ID)
		if _, err := tx.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s, %s", shadow, stage, keys, reseedToastTable(schema, r.ID))); err != nil {
			return fmt.Errorf("apply: flow %q: drop the tables of reseed %d of %s: %w", flow, r.ID, r.Relation, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+pgx.Identifier{schema}.Sanitize()+`.reseeds WHERE flow = $1 AND source_id = $2 AND id = $3`, flow, sourceID, r.ID); err != nil {
			return fmt.Errorf("apply: flow %q (source %q): forget reseed %d of %s: %w", flow, sourceID, r.ID, r.Relation, err)
		}
	}
	return nil
}
