package apply

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// compactMinUnits: folding pays only when several source transactions
// share the target transaction; a single one goes row by row, which also
// keeps its failures attributed to the exact statement.
const compactMinUnits = 2

// netUnit marks statements written from a folded batch: a failure cannot be
// attributed to one source transaction, so it is reported as unit -1 and
// the applier retries the batch one transaction at a time.
const netUnit = -2

// deferredUnit is a TRANSACTION unit whose rows wait for the batch to fold.
type deferredUnit struct {
	ui  int
	env *pb.Envelope
}

// targetTypes returns the target's column types for p's columns, by name,
// as unmodified, schema-qualified type names (domains, enums and arrays
// included).
func (t *pgTarget) targetTypes(ctx context.Context, p *relPlan) ([]string, error) {
	if t.types == nil {
		t.types = map[*relPlan][]string{}
	}
	if ty, ok := t.types[p]; ok {
		return ty, nil
	}
	// The cast target is the type itself without its modifier: an explicit
	// cast to varchar(3) or char(3) would silently truncate, while the
	// assignment into the column enforces the modifier exactly as the
	// row-by-row path does (and raises the same errors). Qualified type
	// names also avoid the SQL keywords "character" and "bit", which mean
	// char(1) and bit(1).
	rows, err := t.conn.Query(ctx, `SELECT a.attname, quote_ident(n.nspname) || '.' || quote_ident(ty.typname)
		FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid JOIN pg_namespace n ON n.oid = ty.typnamespace
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, p.target)
	if err != nil {
		return nil, err
	}
	byName := map[string]string{}
	for rows.Next() {
		var n, ty string
		if err := rows.Scan(&n, &ty); err != nil {
			rows.Close()
			return nil, err
		}
		byName[n] = ty
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]string, len(p.names))
	for i, n := range p.names {
		ty, ok := byName[n]
		if !ok {
			return nil, &unitError{fmt.Sprintf("target table %s has no column %s", p.target, n)}
		}
		out[i] = ty
	}
	t.types[p] = out
	return out, nil
}

// textArray is one column of a set-based statement: text values, NULL
// kept; value(r) is r's value in the column. A FlatArray is encoded by pgx
// directly; a plain slice goes through its reflection-based slice wrapper.
// The strings alias the values' bytes (valueString).
func textArray(rows []*netRow, value func(*netRow) *pb.Value) pgtype.FlatArray[pgtype.Text] {
	out := make(pgtype.FlatArray[pgtype.Text], len(rows))
	for i, r := range rows {
		if v := value(r); v.GetKind() == pb.ValueKind_VALUE_KIND_TEXT {
			out[i] = pgtype.Text{String: valueString(v), Valid: true}
		}
	}
	return out
}

// arrayArg is one column of a set-based statement, for a target column of
// type ty (targetTypes): the argument and its SQL array type. Integer
// columns get their values as binary integers, converted here once,
// saving the target a text array and a text-to-integer conversion per
// value; any other column, or a value the conversion does not take
// exactly as the target would, goes as text (textArray), which the target
// converts, reporting what it refuses as the row-by-row path does.
func arrayArg(rows []*netRow, value func(*netRow) *pb.Value, ty string) (string, any) {
	var a any
	ok := false
	switch ty {
	case "pg_catalog.int2":
		a, ok = intArray(rows, value, 16, func(n int64, valid bool) pgtype.Int2 { return pgtype.Int2{Int16: int16(n), Valid: valid} })
	case "pg_catalog.int4":
		a, ok = intArray(rows, value, 32, func(n int64, valid bool) pgtype.Int4 { return pgtype.Int4{Int32: int32(n), Valid: valid} })
	case "pg_catalog.int8":
		a, ok = intArray(rows, value, 64, func(n int64, valid bool) pgtype.Int8 { return pgtype.Int8{Int64: n, Valid: valid} })
	}
	if ok {
		return ty + "[]", a
	}
	return "text[]", textArray(rows, value)
}

// intArray is textArray for an integer column of the given bits: false
// when a value is not a plain decimal integer in range (signed digits,
// what the source's integer output gives), which the text path then
// leaves to the target.
func intArray[T any](rows []*netRow, value func(*netRow) *pb.Value, bits int, mk func(int64, bool) T) (pgtype.FlatArray[T], bool) {
	out := make(pgtype.FlatArray[T], len(rows))
	for i, r := range rows {
		v := value(r)
		if v.GetKind() != pb.ValueKind_VALUE_KIND_TEXT {
			out[i] = mk(0, false)
			continue
		}
		n, err := strconv.ParseInt(valueString(v), 10, bits)
		if err != nil {
			return nil, false
		}
		out[i] = mk(n, true)
	}
	return out, true
}

// applyDeferred writes the deferred units: folded into set-based statements
// when compact allows it, row by row otherwise.
func (x *pgTx) applyDeferred(ctx context.Context) error {
	units := x.deferred
	x.deferred = nil
	// A reseed replacing a table writes that table's rows one by one into
	// its shadow table: no folding while one runs.
	if len(units) >= compactMinUnits && !x.rs.anyReplace() {
		envs := make([]*pb.Envelope, len(units))
		for i, u := range units {
			envs[i] = u.env
		}
		stmts, folds, ok := x.t.takePrefolded(envs)
		if ok {
			x.t.prefoldsUsed.Add(1)
		} else if b, ok := compact(envs); ok {
			folds = true
			var err error
			if stmts, err = x.t.netStmts(b, func(p *relPlan) ([]string, error) { return x.t.targetTypes(ctx, p) }); err != nil {
				return err
			}
		}
		if folds {
			x.folded += len(units)
			if err := x.queueNet(ctx, stmts); err != nil {
				return err
			}
			return x.reseedPasses(ctx, units)
		}
	}
	for _, u := range units {
		if _, _, err := x.applyRows(ctx, u.ui, u.env); err != nil {
			return err
		}
	}
	return x.reseedPasses(ctx, units)
}

// reseedPasses runs the reseed bookkeeping for units, in order, after
// their rows were queued.
func (x *pgTx) reseedPasses(ctx context.Context, units []deferredUnit) error {
	for _, u := range units {
		if err := x.reseedPass(ctx, u.ui, u.env); err != nil {
			return err
		}
	}
	return nil
}

// netStmt is one set-based statement of a folded batch.
type netStmt struct {
	meta stmtMeta
	sql  string
	args []any
}

// queueNet queues a folded batch's statements (netStmts).
func (x *pgTx) queueNet(ctx context.Context, stmts []netStmt) error {
	if !x.genericPlans {
		x.genericPlans = true
		if err := x.queue(ctx, stmtMeta{unit: -1}, sqlGenericPlans); err != nil {
			return err
		}
	}
	for _, s := range stmts {
		if err := x.queue(ctx, s.meta, s.sql, s.args...); err != nil {
			return err
		}
	}
	return nil
}

// prefolded is a batch folded ahead (Applier.prefold): its envelopes and
// their statements (folds false: compact refused them), built with the
// current plans (resetPrepared drops it).
type prefolded struct {
	envs  []*pb.Envelope
	stmts []netStmt
	folds bool
}

// errTypesUnknown: a prefold met a relation whose target types are not
// loaded yet; loading them needs the connection, which is busy then.
var errTypesUnknown = errors.New("target types not loaded")

// prefoldEnvs folds envs ahead and keeps the result for the next Flush.
// It never uses the connection: a relation whose target types are not
// loaded yet leaves the folding to Flush.
func (t *pgTarget) prefoldEnvs(envs []*pb.Envelope) {
	t.pre = nil
	if t.reseeds.anyReplace() {
		return
	}
	pre := &prefolded{envs: envs}
	if b, ok := compact(envs); ok {
		stmts, err := t.netStmts(b, func(p *relPlan) ([]string, error) {
			if ty, ok := t.types[p]; ok {
				return ty, nil
			}
			return nil, errTypesUnknown
		})
		if err != nil {
			return
		}
		pre.stmts, pre.folds = stmts, true
	}
	t.pre = pre
}

// takePrefolded returns the prefolded statements for envs: ok only when
// they were built for exactly these envelopes, in this order. Either way
// the prefold is used up.
func (t *pgTarget) takePrefolded(envs []*pb.Envelope) (stmts []netStmt, folds, ok bool) {
	pre := t.pre
	t.pre = nil
	if pre == nil || len(pre.envs) != len(envs) {
		return nil, false, false
	}
	for i, e := range envs {
		if pre.envs[i] != e {
			return nil, false, false
		}
	}
	return pre.stmts, pre.folds, true
}

// netStmts writes, per table, one DELETE for deleted and replaced rows,
// one INSERT for inserted and replaced rows, and one UPDATE per set of
// sent columns (a SELECT for updates that send only the key and unchanged
// TOAST). Each must affect (or find) exactly as many rows as it names:
// anything else is a divergence, reported as unit -1, and the applier
// applies the batch again one transaction at a time, row by row, which
// names the row. typesOf gives a plan's target column types (targetTypes).
func (t *pgTarget) netStmts(b *netBatch, typesOf func(*relPlan) ([]string, error)) ([]netStmt, error) {
	var out []netStmt
	for _, nt := range b.tables {
		p := t.plan(nt.rel)
		types, err := typesOf(p)
		if err != nil {
			if errors.Is(err, errTypesUnknown) {
				return nil, err
			}
			return nil, &Refusal{Unit: -1, Relation: p.source, Err: err}
		}
		var dels, ins []*netRow
		updates := map[string][]*netRow{}
		var masks []string
		for _, k := range nt.order {
			r := nt.rows[k]
			switch r.op {
			case netDelete:
				dels = append(dels, r)
			case netInsert:
				ins = append(ins, r)
			case netReplace:
				dels = append(dels, r)
				ins = append(ins, r)
			case netUpdate:
				m := updateMask(nt, r)
				if _, ok := updates[m]; !ok {
					masks = append(masks, m)
				}
				updates[m] = append(updates[m], r)
			}
		}
		alias := func(i int) string { return pgx.Identifier{fmt.Sprintf("c%d", i)}.Sanitize() }
		// The arrays are unnested in a select list, in lockstep (they
		// have one element per row each): an unnest in FROM is a
		// function scan, which stores every row in a tuplestore first.
		// value(r, j, c) is row r's value in column c, cols[j].
		unnest := func(rows []*netRow, cols []int, value func(r *netRow, j, c int) *pb.Value) (string, string, []any) {
			parts, args := make([]string, len(cols)), make([]any, len(cols))
			for j, c := range cols {
				var arrayType string
				arrayType, args[j] = arrayArg(rows, func(r *netRow) *pb.Value { return value(r, j, c) }, types[c])
				parts[j] = fmt.Sprintf("unnest($%d::%s) AS %s", j+1, arrayType, alias(c))
			}
			return "(SELECT " + strings.Join(parts, ", ") + ")", "v", args
		}
		keyWhere := func() string {
			w := make([]string, len(nt.key))
			for j, c := range nt.key {
				w[j] = fmt.Sprintf("t.%s = v.%s::%s", p.cols[c], alias(c), types[c])
			}
			return strings.Join(w, " AND ")
		}
		if len(dels) > 0 {
			fn, al, args := unnest(dels, nt.key, func(r *netRow, j, _ int) *pb.Value { return r.oldKey[j] })
			sql := fmt.Sprintf("DELETE FROM %s AS t USING %s AS %s WHERE %s", p.target, fn, al, keyWhere())
			out = append(out, netStmt{meta: stmtMeta{unit: netUnit, relation: p.source, expectRows: int64(len(dels)), op: "DELETE"}, sql: sql, args: args})
		}
		if len(ins) > 0 {
			all := make([]int, len(p.cols))
			sel := make([]string, len(p.cols))
			for i := range all {
				all[i] = i
				sel[i] = fmt.Sprintf("v.%s::%s", alias(i), types[i])
			}
			fn, al, args := unnest(ins, all, func(r *netRow, _, c int) *pb.Value { return r.vals[c] })
			sql := fmt.Sprintf("INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %s AS %s",
				p.target, strings.Join(p.cols, ", "), strings.Join(sel, ", "), fn, al)
			out = append(out, netStmt{meta: stmtMeta{unit: netUnit, relation: p.source, expectRows: int64(len(ins)), op: "INSERT"}, sql: sql, args: args})
		}
		for _, m := range masks {
			rows := updates[m]
			var set []string
			cols := append([]int(nil), nt.key...)
			for c := range p.cols {
				if m[c] == '1' && !isKey(nt, c) {
					set = append(set, fmt.Sprintf("%s = v.%s::%s", p.cols[c], alias(c), types[c]))
					cols = append(cols, c)
				}
			}
			fn, al, args := unnest(rows, cols, func(r *netRow, _, c int) *pb.Value { return r.vals[c] })
			// Only the key and unchanged TOAST: nothing to write, but the
			// rows must exist, as row by row checks with SELECT 1.
			sql := fmt.Sprintf("SELECT 1 FROM %s AS t, %s AS %s WHERE %s", p.target, fn, al, keyWhere())
			if len(set) > 0 {
				sql = fmt.Sprintf("UPDATE %s AS t SET %s FROM %s AS %s WHERE %s", p.target, strings.Join(set, ", "), fn, al, keyWhere())
			}
			out = append(out, netStmt{meta: stmtMeta{unit: netUnit, relation: p.source, expectRows: int64(len(rows)), op: "UPDATE"}, sql: sql, args: args})
		}
	}
	return out, nil
}

// updateMask marks the columns an update sends ('1') and those it leaves
// as unchanged TOAST ('0'); rows with the same mask share a statement.
func updateMask(nt *netTable, r *netRow) string {
	m := make([]byte, len(r.vals))
	for i, v := range r.vals {
		if v.GetKind() == pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
			m[i] = '0'
		} else {
			m[i] = '1'
		}
	}
	return string(m)
}

func isKey(nt *netTable, c int) bool {
	for _, k := range nt.key {
		if k == c {
			return true
		}
	}
	return false
}
