package sim

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/schemachange"
)

// Schema changes of public.accounts, one per change kind (package
// schemachange). A workload with Change set runs the first half of its
// history under the pinned shape (before) and, from transaction DriftAt
// on, writes accounts under the new shape (after). Whether the change
// flows through a DDL barrier or stops capture is the real package's
// decision (changeSpec.plan, under the flow's policy Workload.policy),
// never the simulator's: a compatible change (add_nullable_column,
// widen_type, increase_varchar) and a rename_column that the workload's
// schema.renames maps (Workload.Renames) flow, and every other kind (an
// unmapped rename too) stops capture at the first transaction under the
// new shape until a reseed of accounts takes it over (capture.ReseedKind),
// after which the target table is replaced at the reseed's handoff.
//
// Rows under the new shape carry values that do not fit the old one where
// the kind allows it (a balance past integer for widen_type, a note past
// varchar(40) for increase_varchar), or a column name the old one does not
// have (memo for a rename), so the simulated target refuses a row that
// reaches it before its DDL; after a rename it refuses a row under the old
// name.
//
// Not modelled: add_table (whole-schema capture decides it from source
// catalog facts the simulated source does not have: the flow's stream
// horizon and the table's creating transaction; covered against real
// servers in internal/flow) and drop_or_rename_table (its recovery is the
// full re-snapshot, not a reseed of the old name).

// changeSpec is one schema change of accounts.
type changeSpec struct {
	kind          schemachange.Kind
	before, after *tableDef
	// fill is the value a column added by the change holds in the rows
	// the source already had (its default); absent: NULL.
	fill map[string]val
	// renamed maps a new column name to the old one.
	renamed map[string]string
	// wide sets, in a row under the new shape, a value the old shape
	// cannot hold.
	wide func(id int, vals map[string]val)
}

func accountsWith(cols ...colDef) *tableDef {
	return &tableDef{name: tAccounts.name, oid: tAccounts.oid, cols: cols}
}

var (
	colID       = colDef{name: "id", typeOID: 20, key: true}
	colBalance  = colDef{name: "balance", typeOID: 20}
	colBalance4 = colDef{name: "balance", typeOID: 23}
	colNote     = colDef{name: "note", typeOID: 25}
)

// int4Max is the largest integer: a widened balance lies past it.
const int4Max = 1<<31 - 1

var changeSpecs = map[schemachange.Kind]*changeSpec{
	schemachange.AddNullableColumn: {before: tAccounts, after: tAccountsDrifted},
	schemachange.WidenType: {before: accountsWith(colID, colBalance4, colNote), after: tAccounts,
		wide: func(_ int, v map[string]val) {
			if n := parseNum(v["balance"]); n <= int4Max {
				v["balance"] = num(n + 4_000_000_000)
			}
		}},
	schemachange.IncreaseVarchar: {
		before: accountsWith(colID, colBalance, colDef{name: "note", typeOID: 1043, mod: 40 + 4}),
		after:  accountsWith(colID, colBalance, colDef{name: "note", typeOID: 1043, mod: 200 + 4}),
		wide: func(id int, v map[string]val) {
			v["note"] = text(fmt.Sprintf("wide-note-%d-%s", id, strings.Repeat("w", 80)))
		}},
	schemachange.RenameColumn: {before: tAccounts, after: accountsWith(colID, colBalance, colDef{name: "memo", typeOID: 25}),
		renamed: map[string]string{"memo": "note"}},
	schemachange.DropColumn: {before: tAccounts, after: accountsWith(colID, colBalance)},
	// SET NOT NULL alone produces no new shape in pgoutput; it is seen
	// together with a change that does (here a widening, which would flow
	// by itself).
	schemachange.SetNotNull: {before: accountsWith(colID, colBalance4, colNote),
		after: accountsWith(colID, colBalance, colDef{name: "note", typeOID: 25, notNull: true})},
	schemachange.PrimaryKeyChange:         {before: tAccounts, after: accountsWith(colID, colBalance, colDef{name: "note", typeOID: 25, key: true})},
	schemachange.NarrowOrIncompatibleType: {before: tAccounts, after: accountsWith(colID, colBalance4, colNote)},
	schemachange.AddColumnDefaultNotNull: {before: tAccounts,
		after: accountsWith(colID, colBalance, colNote, colDef{name: "tier", typeOID: 25, notNull: true, hasDefault: true}),
		fill:  map[string]val{"tier": text("basic")}},
}

func init() {
	for k, s := range changeSpecs {
		s.kind = k
	}
}

func parseNum(v val) int64 {
	var n int64
	fmt.Sscan(v.s, &n)
	return n
}

// simPolicy is the flow's policy for every simulated table: configured,
// strict mode.
var simPolicy = schemachange.Policy{Mode: schemachange.ModeStrict, Configured: true}

// factsOf is what the source catalog says about d's columns.
func factsOf(d *tableDef) map[string]schemachange.Facts {
	out := map[string]schemachange.Facts{}
	for _, c := range d.cols {
		out[c.name] = schemachange.Facts{TypeName: schemachange.TypeName(c.typeOID, c.typmod()), NotNull: c.key || c.notNull, HasDefault: c.hasDefault}
	}
	return out
}

// shapeOf is d's shape as capture builds it from the Relation message and
// the catalog.
func shapeOf(d *tableDef) schemachange.Shape {
	return capture.ShapeOf(d.name, capture.RelationFromPgoutput(pgRelation(d, 0)), factsOf(d))
}

func quotedName(d *tableDef) string { return pgx.Identifier{d.schema(), d.rel()}.Sanitize() }

// plan is the real classification of the change under p.
func (s *changeSpec) plan(p schemachange.Policy) *schemachange.Plan {
	return schemachange.NewPlan(quotedName(s.after), shapeOf(s.before), shapeOf(s.after), p)
}

// valuesOf names row's values (written under d).
func valuesOf(d *tableDef, row []val) map[string]val {
	out := map[string]val{}
	for i, c := range d.cols {
		if i < len(row) {
			out[c.name] = row[i]
		}
	}
	return out
}

// rowOf builds a row of d from named values (NULL where none).
func rowOf(d *tableDef, vals map[string]val) []val {
	row := make([]val, len(d.cols))
	for i, c := range d.cols {
		v, ok := vals[c.name]
		if !ok {
			v = val{null: true}
		}
		row[i] = v
	}
	return row
}

// named is row (under d) by column name, with the new names of renamed
// columns too.
func (s *changeSpec) named(d *tableDef, row []val) map[string]val {
	v := valuesOf(d, row)
	for to, from := range s.renamed {
		if x, ok := v[from]; ok {
			v[to] = x
		}
	}
	return v
}

// reshape is a row the source held under the old shape, as it holds it
// after the change.
func (s *changeSpec) reshape(row []val) []val {
	v := s.named(s.before, row)
	for k, x := range s.fill {
		v[k] = x
	}
	return rowOf(s.after, v)
}

// sameShape reports whether a and b have the same columns (name, type,
// modifier, key flag) in the same order.
func sameShape(a, b *tableDef) bool {
	if len(a.cols) != len(b.cols) {
		return false
	}
	for i := range a.cols {
		x, y := a.cols[i], b.cols[i]
		if x.name != y.name || x.typeOID != y.typeOID || x.typmod() != y.typmod() || x.key != y.key {
			return false
		}
	}
	return true
}

// describe lists d's columns for messages.
func describe(d *tableDef) string {
	var b strings.Builder
	for i, c := range d.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.name + " " + schemachange.TypeName(c.typeOID, c.typmod()))
	}
	return b.String()
}

// typeOf is the type OID and modifier of a SQL type name as
// schemachange.TypeName writes it.
func typeOf(sql string) (uint32, int32, bool) {
	for _, oid := range []uint32{16, 21, 23, 20, 700, 701, 25, 17, 1082, 1114, 1184, 2950, 114, 3802, 1700, 1043, 1042} {
		if schemachange.TypeName(oid, -1) == sql {
			return oid, 0, true
		}
	}
	var n, p, s int32
	switch {
	case sscan(sql, "character varying(%d)", &n):
		return 1043, n + 4, true
	case sscan(sql, "character(%d)", &n):
		return 1042, n + 4, true
	case sscan(sql, "numeric(%d,%d)", &p, &s):
		return 1700, (p<<16 | s) + 4, true
	}
	return 0, 0, false
}

func sscan(s, format string, args ...any) bool {
	n, err := fmt.Sscanf(s, format, args...)
	return err == nil && n == len(args)
}
