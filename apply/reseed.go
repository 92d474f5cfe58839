package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// A reseed re-copies one table while the flow keeps running, in the style
// of Netflix DBLog: watermarked primary-key chunks (docs/SCHEMA.md,
// "Reseed"). Two processes take part. The reseed process (Reseed,
// reseed_copy.go) reads the source and stages each chunk on the target;
// the applier, which alone sees the stream in commit order, does the rest
// in its own target transactions, with the data and the checkpoint:
//
//   - while a reseed of T is active, every stream change to T is also
//     written to the shadow table: the row as T holds it after the change,
//     or its deletion;
//   - it keeps the keys of the rows the stream deleted from T;
//   - at a chunk's high watermark it merges the staged chunk into the
//     shadow table, except the keys the stream touched since the reseed
//     began (in the shadow table, or deleted): the shadow already holds a
//     value at least as new for those (mergeSQL says why this is more
//     than DBLog's window);
//   - at the handoff watermark it swaps the shadow table in for T.
//
// The watermarks are transactional logical messages with prefix
// ReseedPrefix, so nothing is written to a source table.

// ReseedPrefix is the logical-message prefix of a reseed watermark
// (capture re-checks its held tables at each).
const ReseedPrefix = envelope.ReseedPrefix

// Watermark phases.
const (
	PhaseBegin   = "begin"   // a reseed starts: the applier loads it
	PhaseLow     = "low"     // a chunk's window opens
	PhaseHigh    = "high"    // the window closes: merge the staged chunk
	PhaseHandoff = "handoff" // every chunk merged: swap the shadow table in
)

// Watermark is the content of a reseed message (JSON).
type Watermark struct {
	ID    int64  `json:"id"`
	Phase string `json:"phase"`
	// Window identifies one low/high pair; windows only grow.
	Window int64 `json:"window,omitempty"`
	// Upper, at the high watermark, is the chunk's last key in text form
	// (nil for the last chunk, which has no upper bound); Last marks the
	// last chunk.
	Upper []string `json:"upper,omitempty"`
	Last  bool     `json:"last,omitempty"`
}

// ParseWatermark recognises a reseed watermark row.
func ParseWatermark(r *pb.Row) (Watermark, bool) {
	if r.GetOp() != pb.Op_OP_MESSAGE || r.GetMessagePrefix() != ReseedPrefix {
		return Watermark{}, false
	}
	var w Watermark
	if err := json.Unmarshal(r.MessageContent, &w); err != nil || w.ID <= 0 {
		return Watermark{}, false
	}
	return w, true
}

// isHandoff reports whether env carries a handoff watermark. The applier
// applies such a unit in a target transaction of its own: statements of
// the same batch queued before the swap would otherwise go to the table
// being swapped out.
func isHandoff(env *pb.Envelope) bool {
	for _, r := range env.Rows {
		if w, ok := ParseWatermark(r); ok && w.Phase == PhaseHandoff {
			return true
		}
	}
	return false
}

// EmitWatermark writes w through the source's WAL and returns its LSN.
func EmitWatermark(ctx context.Context, src DB, w Watermark) (uint64, error) {
	b, err := json.Marshal(w)
	if err != nil {
		return 0, err
	}
	var s string
	if err := src.QueryRow(ctx, `SELECT pg_logical_emit_message(true, $1, $2)::text`, ReseedPrefix, string(b)).Scan(&s); err != nil {
		return 0, fmt.Errorf("apply: write reseed watermark %s of reseed %d on the source: %w", w.Phase, w.ID, err)
	}
	return parseLSN(s)
}

// Reseed states (reseeds.status).
const (
	ReseedCopying   = "copying"   // chunks being copied; the applier keeps the shadow table
	ReseedSwapped   = "swapped"   // the shadow table is the target table; verify pending
	ReseedConverged = "converged" // verified after the handoff
	ReseedDiverged  = "diverged"
)

// reseedDDL creates the reseeds table. %[1]s is the quoted schema.
const reseedDDL = `
SELECT pg_advisory_xact_lock(%[2]d);
CREATE TABLE IF NOT EXISTS %[1]s.reseeds (
    flow          text        NOT NULL,
    source_id     text        NOT NULL,
    id            bigint      NOT NULL,
    relation      text        NOT NULL,
    target_schema text        NOT NULL,
    target_name   text        NOT NULL,
    columns       text[]      NOT NULL,
    key_columns   text[]      NOT NULL,
    status        text        NOT NULL DEFAULT 'copying',
    last_window   bigint      NOT NULL DEFAULT 0,
    open_window   bigint,
    merged_window bigint      NOT NULL DEFAULT 0,
    resume_key    text[],
    copied        boolean     NOT NULL DEFAULT false,
    replace       boolean     NOT NULL DEFAULT false,
    chunks        bigint      NOT NULL DEFAULT 0,
    rows          bigint      NOT NULL DEFAULT 0,
    command       text        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow, source_id, id)
);
`

// EnsureReseedTable creates the reseeds table in schema if it is missing.
func EnsureReseedTable(ctx context.Context, db DB, schema string) error {
	if schema == "" {
		schema = defaultSchema
	}
	qs := pgx.Identifier{schema}.Sanitize()
	var present bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, qs+".reseeds").Scan(&present); err != nil {
		return fmt.Errorf("apply: look up %s.reseeds on the target: %w", schema, err)
	}
	if present {
		return nil
	}
	if _, err := db.Exec(ctx, fmt.Sprintf(reseedDDL, qs, int64(schemaLockKey))); err != nil {
		return fmt.Errorf("apply: create %s.reseeds on the target: %w", schema, err)
	}
	return nil
}

// reseedTables are the Trellara-owned tables of reseed id, quoted.
func reseedTables(schema string, id int64) (shadow, stage, keys string) {
	n := func(suffix string) string {
		return pgx.Identifier{schema, "reseed_" + strconv.FormatInt(id, 10) + "_" + suffix}.Sanitize()
	}
	return n("shadow"), n("stage"), n("keys")
}

// reseedToastTable is the reseed's table of rows waiting for an unchanged
// TOAST value (replace mode, shadowRow), quoted.
func reseedToastTable(schema string, id int64) string {
	return pgx.Identifier{schema, "reseed_" + strconv.FormatInt(id, 10) + "_toast"}.Sanitize()
}

// unchangedColumn lists, in a row of the toast table, the columns whose
// value the stream did not send (unchanged TOAST): the chunk's wins.
const unchangedColumn = "trellara_unchanged"

// windowColumn tags staged rows and recorded keys with their window.
const windowColumn = "trellara_window"

// reseedRun is an active reseed as the applier keeps it.
type reseedRun struct {
	id                     int64
	relation               string // source relation, config.TableName form
	targetSchema, targetNm string
	target                 string // quoted
	shadow, stage, keys    string // quoted
	toast                  string // quoted
	cols, key              []string
	openWindow             int64 // 0: no window open
	copied                 bool
	// replace: the reseed took over a blocked schema change, so T has the
	// old shape and the stream the new one: the applier stops writing T
	// and writes the stream's rows themselves into the shadow table,
	// which has the source's new shape.
	replace bool

	upsertSQL, deleteSQL, recordSQL, mergeSQL string
	// Replace mode's rows waiting for an unchanged TOAST value: settleSQL
	// drops the key's row once the shadow holds the key, dropToastSQL
	// drops it, toastMergeSQL merges the chunk's values into them.
	settleSQL, dropToastSQL, toastMergeSQL string
}

func newReseedRun(schema string, id int64, relation, ts, tn string, cols, key []string) *reseedRun {
	r := &reseedRun{id: id, relation: relation, targetSchema: ts, targetNm: tn, cols: cols, key: key,
		target: pgx.Identifier{ts, tn}.Sanitize()}
	r.shadow, r.stage, r.keys = reseedTables(schema, id)
	r.toast = reseedToastTable(schema, id)
	q := func(names []string, prefix string) string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = prefix + pgx.Identifier{n}.Sanitize()
		}
		return strings.Join(out, ", ")
	}
	params := func(from, n int) string {
		out := make([]string, n)
		for i := range out {
			out[i] = "$" + strconv.Itoa(from+i)
		}
		return strings.Join(out, ", ")
	}
	colList, keyList := q(cols, ""), q(key, "")
	var set []string
	for _, c := range cols {
		if !containsString(key, c) {
			qc := pgx.Identifier{c}.Sanitize()
			set = append(set, qc+" = EXCLUDED."+qc)
		}
	}
	conflict := "DO NOTHING"
	if len(set) > 0 {
		conflict = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	// The row as T holds it now: the change just applied to T, with any
	// unchanged TOAST value filled in by T itself.
	r.upsertSQL = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE (%s) = (%s) ON CONFLICT (%s) %s",
		r.shadow, colList, colList, r.target, keyList, params(1, len(key)), keyList, conflict)
	r.deleteSQL = fmt.Sprintf("DELETE FROM %s WHERE (%s) = (%s)", r.shadow, keyList, params(1, len(key)))
	r.recordSQL = fmt.Sprintf("INSERT INTO %s (%s, %s) VALUES (%s)", r.keys, windowColumn, keyList, params(1, len(key)+1))
	// The merge writes a chunk row only where the stream has not touched
	// its key since the reseed began: not in the shadow table (a key the
	// stream wrote is there with a value at least as new as the chunk's:
	// every change the chunk's snapshot saw committed before its high
	// watermark) and not deleted (the keys table keeps the stream's
	// deletions). That covers the window's keys, and also a change whose
	// commit precedes the low watermark in the WAL but was not yet visible
	// to the chunk's snapshot (PostgreSQL makes a commit visible a moment
	// after writing its record).
	//
	// A key waiting in the toast table (replace mode: the stream changed
	// the row but left a TOAST value out, and the shadow did not hold the
	// row) is touched too: toastMergeSQL writes it, with the stream's
	// values and the chunk's for the columns the stream left out.
	r.mergeSQL = fmt.Sprintf(`INSERT INTO %s (%s) SELECT %s FROM %s s WHERE s.%s = $1
		AND NOT EXISTS (SELECT 1 FROM %s k WHERE (%s) = (%s))
		AND NOT EXISTS (SELECT 1 FROM %s p WHERE (%s) = (%s))
		ON CONFLICT (%s) DO NOTHING RETURNING 1`,
		r.shadow, colList, q(cols, "s."), r.stage, windowColumn, r.keys, q(key, "k."), q(key, "s."),
		r.toast, q(key, "p."), q(key, "s."), keyList)
	pick := make([]string, len(cols))
	for i, c := range cols {
		qc := pgx.Identifier{c}.Sanitize()
		pick[i] = fmt.Sprintf("CASE WHEN %s = ANY(p.%s) THEN s.%s ELSE p.%s END", literal(c), unchangedColumn, qc, qc)
		if containsString(key, c) {
			pick[i] = "p." + qc
		}
	}
	r.toastMergeSQL = fmt.Sprintf(`WITH m AS (INSERT INTO %s (%s) SELECT %s FROM %s p JOIN %s s ON (%s) = (%s) WHERE s.%s = $1
		ON CONFLICT (%s) DO NOTHING)
		DELETE FROM %s p USING %s s WHERE (%s) = (%s) AND s.%s = $1`,
		r.shadow, colList, strings.Join(pick, ", "), r.toast, r.stage, q(key, "p."), q(key, "s."), windowColumn, keyList,
		r.toast, r.stage, q(key, "p."), q(key, "s."), windowColumn)
	r.settleSQL = fmt.Sprintf("DELETE FROM %s p WHERE (%s) = (%s) AND EXISTS (SELECT 1 FROM %s t WHERE (%s) = (%s))",
		r.toast, q(key, "p."), params(1, len(key)), r.shadow, q(key, "t."), params(1, len(key)))
	r.dropToastSQL = fmt.Sprintf("DELETE FROM %s WHERE (%s) = (%s)", r.toast, keyList, params(1, len(key)))
	return r
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// reseedSet maps a source relation to its active reseed.
type reseedSet map[string]*reseedRun

func (s reseedSet) byID(id int64) *reseedRun {
	for _, r := range s {
		if r.id == id {
			return r
		}
	}
	return nil
}

// loadReseeds reads the active reseeds of the flow (none when the table
// does not exist: no reseed ever ran against this target).
func (t *pgTarget) loadReseeds(ctx context.Context) (reseedSet, error) {
	rows, err := listReseeds(ctx, t.conn, t.cfg.Schema, t.cfg.Flow, t.cfg.SourceID, true)
	if err != nil {
		return nil, err
	}
	set := reseedSet{}
	for _, st := range rows {
		r := newReseedRun(t.cfg.Schema, st.ID, st.Relation, st.TargetSchema, st.TargetName, st.Columns, st.KeyColumns)
		r.openWindow, r.copied, r.replace = st.OpenWindow, st.Copied, st.Replace
		if err := ensureToastTable(ctx, t.conn, t.cfg.Schema, st); err != nil {
			return nil, err
		}
		set[r.relation] = r
	}
	return set, nil
}

// toastTableDDL creates a reseed's toast table (reseedToastTable): the
// shadow's columns without its constraints (a waiting row lacks the values
// the stream left out), the columns left out, and a unique key.
func toastTableDDL(schema string, id int64, cols, key []string) []string {
	shadow, _, _ := reseedTables(schema, id)
	toast := reseedToastTable(schema, id)
	index := pgx.Identifier{"reseed_" + strconv.FormatInt(id, 10) + "_toast_key"}.Sanitize()
	return []string{
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s AS SELECT %s FROM %s WITH NO DATA", toast, identList(cols), shadow),
		fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s text[] NOT NULL", toast, unchangedColumn),
		fmt.Sprintf("CREATE UNIQUE INDEX IF NOT EXISTS %s ON %s (%s)", index, toast, identList(key)),
	}
}

// ensureToastTable creates the toast table of a reseed recorded by a
// version that had none.
func ensureToastTable(ctx context.Context, db DB, schema string, st ReseedState) error {
	var present bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, reseedToastTable(schema, st.ID)).Scan(&present); err != nil || present {
		return err
	}
	for _, q := range toastTableDDL(schema, st.ID, st.Columns, st.KeyColumns) {
		if _, err := db.Exec(ctx, q); err != nil {
			return fmt.Errorf("apply: reseed %d of %s: create its toast table (%s): %w", st.ID, st.Relation, q, err)
		}
	}
	return nil
}

// ReseedState is one row of the reseeds table.
type ReseedState struct {
	ID           int64    `json:"id"`
	Relation     string   `json:"relation"`
	TargetSchema string   `json:"target_schema"`
	TargetName   string   `json:"target_name"`
	Columns      []string `json:"columns"`
	KeyColumns   []string `json:"key_columns"`
	Status       string   `json:"status"`
	OpenWindow   int64    `json:"open_window,omitempty"`
	MergedWindow int64    `json:"merged_window"`
	ResumeKey    []string `json:"resume_key,omitempty"`
	Copied       bool     `json:"copied"`
	Replace      bool     `json:"replace"`
	Chunks       int64    `json:"chunks"`
	Rows         int64    `json:"rows"`
	Command      string   `json:"command"`
}

// ListReseeds returns the flow's reseeds that are not finished (copying,
// or swapped and not yet verified), oldest first; none when no reseed ever
// ran against this target.
func ListReseeds(ctx context.Context, db DB, schema, flow, sourceID string) ([]ReseedState, error) {
	return listReseeds(ctx, db, schema, flow, sourceID, false)
}

func listReseeds(ctx context.Context, db DB, schema, flow, sourceID string, copyingOnly bool) ([]ReseedState, error) {
	if schema == "" {
		schema = defaultSchema
	}
	qs := pgx.Identifier{schema}.Sanitize()
	var present bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, qs+".reseeds").Scan(&present); err != nil {
		return nil, err
	}
	if !present {
		return nil, nil
	}
	statuses := []string{ReseedCopying, ReseedSwapped}
	if copyingOnly {
		statuses = statuses[:1]
	}
	rows, err := db.Query(ctx, `SELECT id, relation, target_schema, target_name, columns, key_columns, status,
		coalesce(open_window, 0), merged_window, resume_key, copied, replace, chunks, rows, command
		FROM `+qs+`.reseeds WHERE flow = $1 AND source_id = $2 AND status = ANY($3) ORDER BY id`, flow, sourceID, statuses)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ReseedState
	for rows.Next() {
		var s ReseedState
		if err := rows.Scan(&s.ID, &s.Relation, &s.TargetSchema, &s.TargetName, &s.Columns, &s.KeyColumns, &s.Status,
			&s.OpenWindow, &s.MergedWindow, &s.ResumeKey, &s.Copied, &s.Replace, &s.Chunks, &s.Rows, &s.Command); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// ownReseeds gives the transaction its own copy of the reseed set before
// it changes it; the target's copy is replaced only when the transaction
// commits, so a rolled-back transaction leaves it as it was.
func (x *pgTx) ownReseeds() {
	if x.rsOwned {
		return
	}
	c := make(reseedSet, len(x.rs))
	for k, r := range x.rs {
		cp := *r
		c[k] = &cp
	}
	x.rs, x.rsOwned = c, true
}

// reseedPass writes what the active reseeds need for env's rows, after
// the rows themselves were queued (so the shadow copies read T as the
// rows left it), in row order: shadow writes, window keys, merges at high
// watermarks, and the handoff.
func (x *pgTx) reseedPass(ctx context.Context, ui int, env *pb.Envelope) error {
	if len(x.rs) == 0 {
		// Only a begin watermark can matter.
		found := false
		for _, r := range env.Rows {
			if r.Op == pb.Op_OP_MESSAGE && r.MessagePrefix == ReseedPrefix {
				found = true
				break
			}
		}
		if !found {
			return nil
		}
	}
	for _, r := range env.Rows {
		switch r.Op {
		case pb.Op_OP_MESSAGE:
			if w, ok := ParseWatermark(r); ok {
				if err := x.watermark(ctx, env, w); err != nil {
					return err
				}
			}
		case pb.Op_OP_INSERT, pb.Op_OP_UPDATE, pb.Op_OP_DELETE:
			rel := env.Relations[r.RelationIndex]
			rs := x.rs[relationName(rel)]
			if rs == nil {
				continue
			}
			if err := x.shadowRow(ctx, ui, rs, rel, r); err != nil {
				return err
			}
		case pb.Op_OP_TRUNCATE:
			rel := env.Relations[r.RelationIndex]
			if rs := x.rs[relationName(rel)]; rs != nil {
				if err := x.reseedTruncate(ctx, rs); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// reseedTruncate empties the reseed's tables at a TRUNCATE of T. Every row
// T holds from here on reaches the shadow through the stream, so the copy
// goes on where it was, except for the open window: its chunk's snapshot
// may predate the TRUNCATE, and the copier may stage it after this
// transaction, so the window is voided (open_window = -window) and its high
// watermark merges nothing. A window whose low watermark follows the
// TRUNCATE reads a snapshot that sees it (waitVisible).
func (x *pgTx) reseedTruncate(ctx context.Context, rs *reseedRun) error {
	if err := x.queue(ctx, stmtMeta{unit: -1}, "TRUNCATE "+rs.shadow+", "+rs.stage+", "+rs.keys+", "+rs.toast); err != nil {
		return err
	}
	if rs.openWindow <= 0 {
		return nil
	}
	x.ownReseeds()
	rs = x.rs.byID(rs.id)
	rs.openWindow = -rs.openWindow
	x.t.log.Info("apply: TRUNCATE during a reseed; its open window merges nothing", "reseed", rs.id, "relation", rs.relation, "window", -rs.openWindow)
	return x.queueState(ctx, x.reseedRowSQL(`open_window = $4`), x.t.cfg.Flow, x.t.cfg.SourceID, rs.id, rs.openWindow)
}

// activateReseed starts applying the reseeds recorded on the target that
// match and are not active yet: at their begin watermark, or at the
// barrier of the blocked schema change a reseed took over, whichever the
// stream brings first.
func (x *pgTx) activateReseed(ctx context.Context, env *pb.Envelope, match func(ReseedState) bool) error {
	t := x.t
	if err := x.Flush(ctx); err != nil {
		return err
	}
	sts, err := listReseeds(ctx, x.tx, t.cfg.Schema, t.cfg.Flow, t.cfg.SourceID, true)
	if err != nil {
		return err
	}
	for _, st := range sts {
		if !match(st) || x.rs.byID(st.ID) != nil {
			continue
		}
		x.ownReseeds()
		r := newReseedRun(t.cfg.Schema, st.ID, st.Relation, st.TargetSchema, st.TargetName, st.Columns, st.KeyColumns)
		r.openWindow, r.copied, r.replace = st.OpenWindow, st.Copied, st.Replace
		if err := ensureToastTable(ctx, x.tx, t.cfg.Schema, st); err != nil {
			return err
		}
		x.rs[r.relation] = r
		t.log.Info("apply: reseed started", "reseed", st.ID, "relation", st.Relation, "replaces_table", st.Replace,
			"commit_lsn", envelope.FormatLSN(env.CommitLsn))
	}
	return nil
}

// replacing reports whether rows of relation skip the target table: a
// reseed replaces it.
func (x *pgTx) replacing(relation string) bool {
	r := x.rs[relation]
	return r != nil && r.replace
}

func (s reseedSet) anyReplace() bool {
	for _, r := range s {
		if r.replace {
			return true
		}
	}
	return false
}

// shadowRow mirrors one stream change to T into the shadow table and, in
// an open window, records its keys.
func (x *pgTx) shadowRow(ctx context.Context, ui int, rs *reseedRun, rel *pb.Relation, r *pb.Row) error {
	idx := make([]int, len(rs.key))
	for j, k := range rs.key {
		idx[j] = -1
		for i, c := range rel.Columns {
			if c.Name == k {
				idx[j] = i
			}
		}
		if idx[j] < 0 {
			return &Refusal{Unit: ui, Relation: rs.relation, Err: &unitError{fmt.Sprintf(
				"reseed %d of %s: the stream's rows no longer carry key column %s; run the reseed again once the table's shape is settled", rs.id, rs.relation, k)}}
		}
	}
	keyOf := func(tuple []*pb.Value) []any {
		if len(tuple) == 0 {
			return nil
		}
		out := make([]any, len(idx))
		for j, i := range idx {
			if i >= len(tuple) || tuple[i].GetKind() == pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
				return nil
			}
			out[j] = textArg(tuple[i])
		}
		return out
	}
	var oldKey, newKey []any
	if r.OldKind != pb.OldTuple_OLD_TUPLE_NONE {
		oldKey = keyOf(r.OldTuple)
	}
	if r.Op != pb.Op_OP_DELETE {
		newKey = keyOf(r.NewTuple)
	} else if oldKey == nil {
		return &Refusal{Unit: ui, Relation: rs.relation, Err: &unitError{fmt.Sprintf("reseed %d of %s: a DELETE carries no old key", rs.id, rs.relation)}}
	}
	if oldKey != nil && (newKey == nil || !sameArgs(oldKey, newKey)) {
		// A deletion (or a key moved away): the shadow loses the row, and
		// the key is kept so no chunk brings it back.
		if err := x.queueState(ctx, rs.recordSQL, append([]any{rs.openWindow}, oldKey...)...); err != nil {
			return err
		}
		if err := x.queueState(ctx, rs.deleteSQL, oldKey...); err != nil {
			return err
		}
		if rs.replace {
			if err := x.queueState(ctx, rs.dropToastSQL, oldKey...); err != nil {
				return err
			}
		}
	}
	if newKey == nil {
		return nil
	}
	if rs.replace {
		sql, args, unchanged := rs.upsertValues(rel, r)
		if !unchanged {
			if err := x.queueState(ctx, sql, args...); err != nil {
				return err
			}
			return x.queueState(ctx, rs.dropToastSQL, newKey...)
		}
		// The stream left a TOAST value out and T cannot give it (T has
		// the old shape, or missed changes): the shadow must not invent
		// one. A shadow that holds the row keeps its value; for one that
		// does not, the row waits in the toast table for its chunk.
		for _, st := range rs.toastValues(rel, r) {
			if err := x.queueState(ctx, st.sql, st.args...); err != nil {
				return err
			}
		}
		return x.queueState(ctx, rs.settleSQL, newKey...)
	}
	return x.queueState(ctx, rs.upsertSQL, newKey...)
}

// upsertValues writes the row's new values into the shadow table (replace
// mode: the target table has another shape). unchanged reports a column
// left out as unchanged TOAST: the statement is then not to be used
// (toastValues).
func (rs *reseedRun) upsertValues(rel *pb.Relation, r *pb.Row) (sql string, args []any, unchanged bool) {
	var cols, set []string
	for i, c := range rel.Columns {
		if i >= len(r.NewTuple) || !containsString(rs.cols, c.Name) {
			continue
		}
		if r.NewTuple[i].GetKind() == pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
			unchanged = true
			continue
		}
		q := pgx.Identifier{c.Name}.Sanitize()
		cols = append(cols, q)
		args = append(args, textArg(r.NewTuple[i]))
		if !containsString(rs.key, c.Name) {
			set = append(set, q+" = EXCLUDED."+q)
		}
	}
	params := make([]string, len(args))
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	keys := make([]string, len(rs.key))
	for i, k := range rs.key {
		keys[i] = pgx.Identifier{k}.Sanitize()
	}
	conflict := "DO NOTHING"
	if len(set) > 0 {
		conflict = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) %s", rs.shadow, strings.Join(cols, ", "),
		strings.Join(params, ", "), strings.Join(keys, ", "), conflict), args, unchanged
}

type stmt struct {
	sql  string
	args []any
}

// toastValues are the statements of a replace-mode row that left TOAST
// values out: the row waits in the toast table with the values it has
// (another such row of the key before the chunk merges adds its values;
// a column stays unchanged only if every one of them left it out), and
// a shadow that holds the row gets them; settleSQL, queued after, drops
// the waiting row again if the shadow held the key.
func (rs *reseedRun) toastValues(rel *pb.Relation, r *pb.Row) []stmt {
	var cols, set, unchanged, assign []string
	var args []any
	for i, c := range rel.Columns {
		if i >= len(r.NewTuple) || !containsString(rs.cols, c.Name) {
			continue
		}
		if r.NewTuple[i].GetKind() == pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
			unchanged = append(unchanged, c.Name)
			continue
		}
		q := pgx.Identifier{c.Name}.Sanitize()
		cols = append(cols, q)
		args = append(args, textArg(r.NewTuple[i]))
		if !containsString(rs.key, c.Name) {
			set = append(set, q+" = EXCLUDED."+q)
			assign = append(assign, fmt.Sprintf("%s = $%d", q, len(args)))
		}
	}
	params := make([]string, len(args))
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	keys, where := make([]string, len(rs.key)), make([]string, len(rs.key))
	for i, k := range rs.key {
		keys[i] = pgx.Identifier{k}.Sanitize()
		for j, c := range cols {
			if c == keys[i] {
				where[i] = fmt.Sprintf("%s = $%d", keys[i], j+1)
			}
		}
	}
	u := pgx.Identifier{unchangedColumn}.Sanitize()
	set = append(set, fmt.Sprintf("%[1]s = array(SELECT unnest(%[2]s.%[1]s) INTERSECT SELECT unnest(EXCLUDED.%[1]s))", u, rs.toast))
	wait := stmt{fmt.Sprintf("INSERT INTO %s (%s, %s) VALUES (%s, $%d) ON CONFLICT (%s) DO UPDATE SET %s", rs.toast,
		strings.Join(cols, ", "), u, strings.Join(params, ", "), len(args)+1, strings.Join(keys, ", "), strings.Join(set, ", ")),
		append(append([]any{}, args...), unchanged)}
	if len(assign) == 0 {
		return []stmt{wait}
	}
	return []stmt{wait, {fmt.Sprintf("UPDATE %s SET %s WHERE %s", rs.shadow, strings.Join(assign, ", "), strings.Join(where, " AND ")), args}}
}

func sameArgs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// queueState queues a prepared statement of the reseed bookkeeping.
func (x *pgTx) queueState(ctx context.Context, sql string, args ...any) error {
	if err := x.t.prepare(ctx, sql); err != nil {
		return err
	}
	return x.queue(ctx, stmtMeta{unit: -1}, sql, args...)
}

func (x *pgTx) reseedRowSQL(set string) string {
	return `UPDATE ` + pgx.Identifier{x.t.cfg.Schema}.Sanitize() + `.reseeds SET ` + set +
		`, updated_at = now() WHERE flow = $1 AND source_id = $2 AND id = $3`
}

// watermark acts on one reseed watermark, in stream order.
func (x *pgTx) watermark(ctx context.Context, env *pb.Envelope, w Watermark) error {
	t := x.t
	f, s := t.cfg.Flow, t.cfg.SourceID
	if w.Phase == PhaseBegin {
		// The reseed process committed its row before it wrote begin.
		return x.activateReseed(ctx, env, func(st ReseedState) bool { return st.ID == w.ID })
	}
	rs := x.rs.byID(w.ID)
	if rs == nil {
		return nil // another sink's reseed, or one already handed off
	}
	x.ownReseeds()
	rs = x.rs.byID(w.ID)
	switch w.Phase {
	case PhaseLow:
		rs.openWindow = w.Window
		return x.queueState(ctx, x.reseedRowSQL(`open_window = $4`), f, s, rs.id, w.Window)
	case PhaseHigh:
		if rs.openWindow == -w.Window {
			// Voided by a TRUNCATE (reseedTruncate): the rows of its range
			// are those the stream wrote since.
			rs.openWindow = 0
			rs.copied = w.Last
			var upper any
			if w.Upper != nil {
				upper = w.Upper
			}
			if err := x.queueState(ctx, x.reseedRowSQL(`open_window = NULL, merged_window = $4, resume_key = coalesce($5::text[], resume_key),
				copied = $6, chunks = chunks + 1`), f, s, rs.id, w.Window, upper, w.Last); err != nil {
				return err
			}
			return x.queueState(ctx, `DELETE FROM `+rs.stage+` WHERE `+windowColumn+` <= $1`, w.Window)
		}
		if rs.openWindow != w.Window {
			// A window whose low watermark this reseed replaced (the
			// process was restarted): its chunk is copied again.
			return nil
		}
		rs.openWindow = 0
		rs.copied = w.Last
		var upper any
		if w.Upper != nil {
			upper = w.Upper
		}
		// One statement: the merge ($1 is the window) and its record.
		sql := `WITH m AS (` + rs.mergeSQL + `) UPDATE ` + pgx.Identifier{t.cfg.Schema}.Sanitize() + `.reseeds SET
			rows = rows + (SELECT count(*) FROM m), open_window = NULL, merged_window = $1,
			resume_key = coalesce($5::text[], resume_key), copied = $6, chunks = chunks + 1, updated_at = now()
			WHERE flow = $2 AND source_id = $3 AND id = $4`
		if err := x.queueState(ctx, sql, w.Window, f, s, rs.id, upper, w.Last); err != nil {
			return err
		}
		if rs.replace {
			if err := x.queueState(ctx, rs.toastMergeSQL, w.Window); err != nil {
				return err
			}
		}
		return x.queueState(ctx, `DELETE FROM `+rs.stage+` WHERE `+windowColumn+` <= $1`, w.Window)
	case PhaseHandoff:
		if !rs.copied {
			t.log.Warn("apply: reseed handoff before its last chunk was merged; ignored", "reseed", rs.id, "relation", rs.relation)
			return nil
		}
		if rs.replace {
			// A row still waiting for a value the stream left out is not
			// in the shadow: the copier reads it with another last chunk.
			if err := x.Flush(ctx); err != nil {
				return err
			}
			var waiting bool
			if err := x.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+rs.toast+`)`).Scan(&waiting); err != nil {
				return err
			}
			if waiting {
				rs.copied = false
				t.log.Info("apply: reseed handoff deferred: rows wait for an unchanged TOAST value", "reseed", rs.id, "relation", rs.relation)
				return x.queueState(ctx, x.reseedRowSQL(`copied = false`), f, s, rs.id)
			}
		}
		return x.handoff(ctx, env, rs)
	}
	return nil
}

// handoff swaps the shadow table in for the target table in this
// transaction: a reader sees the old table or the new one, never neither
// and never a half-loaded one.
func (x *pgTx) handoff(ctx context.Context, env *pb.Envelope, rs *reseedRun) error {
	t := x.t
	if err := x.Flush(ctx); err != nil {
		return err
	}
	old := "trellara_reseed_" + strconv.FormatInt(rs.id, 10) + "_old"
	_, shadowName, _ := strings.Cut(rs.shadow, ".")
	oldName := pgx.Identifier{rs.targetSchema, old}.Sanitize()
	stmts := []string{
		fmt.Sprintf("ALTER TABLE %s RENAME TO %s", rs.target, pgx.Identifier{old}.Sanitize()),
		fmt.Sprintf("ALTER TABLE %s SET SCHEMA %s", rs.shadow, pgx.Identifier{rs.targetSchema}.Sanitize()),
		fmt.Sprintf("ALTER TABLE %s.%s RENAME TO %s", pgx.Identifier{rs.targetSchema}.Sanitize(), shadowName, pgx.Identifier{rs.targetNm}.Sanitize()),
	}
	// The readers of the old table keep their access: its grants, read
	// before the swap, are given on the new one after it.
	grants, err := tableGrants(ctx, x.tx, rs.target, rs.target)
	if err != nil {
		return fmt.Errorf("apply: reseed %d of %s: read the grants on the target table: %w", rs.id, rs.relation, err)
	}
	stmts = append(stmts, grants...)
	stmts = append(stmts,
		fmt.Sprintf("DROP TABLE %s", oldName),
		fmt.Sprintf("DROP TABLE %s, %s", rs.stage, rs.keys),
		fmt.Sprintf("DROP TABLE IF EXISTS %s", rs.toast))
	for _, q := range stmts {
		if _, err := x.tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("apply: reseed %d of %s: handoff at commit LSN %s: %s: %w", rs.id, rs.relation,
				envelope.FormatLSN(env.CommitLsn), q, err)
		}
	}
	if _, err := x.tx.Exec(ctx, x.reseedRowSQL(`status = '`+ReseedSwapped+`', open_window = NULL`), t.cfg.Flow, t.cfg.SourceID, rs.id); err != nil {
		return err
	}
	// A table held at a blocked schema change (envelope.HoldKind) is
	// released by the handoff that puts its new copy in place.
	if _, err := x.tx.Exec(ctx, `UPDATE `+pgx.Identifier{t.cfg.Schema}.Sanitize()+`.barriers SET released_at = clock_timestamp()
		WHERE flow = $1 AND source_id = $2 AND relation = $3 AND $4 = ANY(kinds) AND released_at IS NULL`,
		t.cfg.Flow, t.cfg.SourceID, rs.relation, envelope.HoldKind); err != nil {
		return fmt.Errorf("apply: reseed %d of %s: release its held table: %w", rs.id, rs.relation, err)
	}
	delete(x.rs, rs.relation)
	// Statements prepared against the old table: prepare again.
	if err := t.resetPrepared(ctx); err != nil {
		return err
	}
	t.log.Info("apply: reseed handed off", "reseed", rs.id, "relation", rs.relation, "commit_lsn", envelope.FormatLSN(env.CommitLsn))
	return nil
}

// tableGrants returns the GRANT statements that give on table to what
// from has granted (PUBLIC included), read from its ACL.
func tableGrants(ctx context.Context, db DB, from, to string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END, a.privilege_type, a.is_grantable
		FROM pg_class c, aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
		WHERE c.oid = $1::regclass AND a.grantee <> c.relowner`, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var grantee, priv string
		var grantable bool
		if err := rows.Scan(&grantee, &priv, &grantable); err != nil {
			return nil, err
		}
		q := fmt.Sprintf("GRANT %s ON %s TO %s", priv, to, grantee)
		if grantable {
			q += " WITH GRANT OPTION"
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// errNoKey: the table has no primary key to chunk by.
var errNoKey = errors.New("apply: reseed needs a primary key")
