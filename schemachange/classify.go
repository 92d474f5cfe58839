// Package schemachange classifies a change to a captured relation's shape —
// the pgoutput Relation message seen in the stream against the shape pinned
// when the relation was first captured — into one of eleven kinds, and each
// kind on three axes: compatibility, decision and the configured apply mode.
// It also writes the target DDL for the changes Trellara applies itself.
//
// Everything here is a pure function of its arguments; docs/SCHEMA.md is
// the user-facing description of the same rules.
//
// What pgoutput tells and what it does not: a Relation message carries, per
// column, its name, type OID, type modifier and whether it is part of the
// replica identity key. It carries no NOT NULL flag and no default, and no
// message at all is sent for a dropped table or for a change that leaves
// those four facts unchanged (SET NOT NULL, SET DEFAULT). Where a kind
// depends on NOT NULL or a default (an added column), the caller reads the
// source catalog at the drift point and passes the facts in Column.Facts;
// without them an added column is classified as not known to be nullable,
// which blocks.
package schemachange

import (
	"fmt"
	"sort"
	"strings"
)

// Kind is a change kind. The string values are part of the envelope's
// DDLEvent.kind and of `schema ddl-plan`'s JSON.
type Kind string

// The eleven change kinds.
const (
	AddNullableColumn        Kind = "add_nullable_column"
	AddColumnDefaultNotNull  Kind = "add_column_with_default_or_not_null"
	DropColumn               Kind = "drop_column"
	RenameColumn             Kind = "rename_column"
	WidenType                Kind = "widen_type"
	NarrowOrIncompatibleType Kind = "narrow_or_incompatible_type"
	IncreaseVarchar          Kind = "increase_varchar"
	SetNotNull               Kind = "set_not_null"
	PrimaryKeyChange         Kind = "primary_key_change"
	AddTable                 Kind = "add_table"
	DropOrRenameTable        Kind = "drop_or_rename_table"
)

// Kinds lists every kind in documentation order.
var Kinds = []Kind{AddNullableColumn, AddColumnDefaultNotNull, DropColumn, RenameColumn, WidenType,
	NarrowOrIncompatibleType, IncreaseVarchar, SetNotNull, PrimaryKeyChange, AddTable, DropOrRenameTable}

// Compatibility is the first axis.
type Compatibility string

// Compatibility values.
const (
	Compatible             Compatibility = "compatible"
	RequiresMapping        Compatibility = "requires-mapping"
	DestructiveOrAmbiguous Compatibility = "destructive-or-ambiguous"
	BlockedByPolicy        Compatibility = "blocked-by-policy"
)

// Decision is the second axis.
type Decision string

// Decision values.
const (
	AutoApply      Decision = "auto-apply"
	StageThenApply Decision = "stage-then-apply"
	ManualReview   Decision = "manual-review"
	Block          Decision = "block"
)

// Mode is the third axis: the target apply mode (target.mode).
type Mode string

// Apply modes.
const (
	ModeStrict      Mode = "strict"
	ModePartitioned Mode = "partitioned"
)

// Facts are what the source catalog says about a column beyond pgoutput.
type Facts struct {
	TypeName   string `json:"type_name"` // format_type(atttypid, atttypmod), e.g. "numeric(12,2)"
	NotNull    bool   `json:"not_null"`
	HasDefault bool   `json:"has_default"`
}

// Column is one column of a relation shape.
type Column struct {
	Name    string `json:"name"`
	TypeOID uint32 `json:"type_oid"`
	TypeMod int32  `json:"type_modifier"`
	Key     bool   `json:"key,omitempty"`
	// Facts, when non-nil, were read from the source catalog.
	Facts *Facts `json:"catalog,omitempty"`
}

// Type is the column's SQL type text: the catalog's when known, else the
// built-in name for its OID and modifier ("" when neither is known).
func (c Column) Type() string {
	if c.Facts != nil && c.Facts.TypeName != "" {
		return c.Facts.TypeName
	}
	return TypeName(c.TypeOID, c.TypeMod)
}

// Shape is a relation's columns in attribute order.
type Shape struct {
	Relation string   `json:"relation"` // schema.name as PostgreSQL quotes it
	OID      uint32   `json:"oid,omitempty"`
	Columns  []Column `json:"columns"`
}

// Change is one classified difference between the pinned and the live
// shape of a relation.
type Change struct {
	Kind   Kind   `json:"kind"`
	Column string `json:"column,omitempty"` // the column concerned (new name for a rename)
	// OldColumn is a renamed column's name before the rename.
	OldColumn string `json:"old_column,omitempty"`
	// From and To describe the column before and after ("" where it did
	// not exist): name and type.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// Classification is a change's three axes.
type Classification struct {
	Compatibility Compatibility `json:"compatibility"`
	Decision      Decision      `json:"decision"`
	Mode          Mode          `json:"mode"`
	// Why explains the decision in one sentence.
	Why string `json:"why"`
}

// Policy is what classification needs from the configuration.
type Policy struct {
	Mode Mode
	// Configured reports whether the relation is one of the flow's
	// tables: listed in source.tables, or pinned from a schema of
	// source.schemas.
	Configured bool
	// Renames are the relation's configured column renames
	// (schema.renames): a rename_column change one of them names
	// auto-applies.
	Renames []ColumnRename
	// AdmitTables reports whether a table the flow does not know may
	// join it (add_table): schema.unknown_table_policy is
	// allow_compatible and the relation's schema is in source.schemas.
	AdmitTables bool
}

// ColumnRename is one configured column rename of a relation.
type ColumnRename struct {
	From, To string
}

// maps reports whether p has a configured rename from → to.
func (p Policy) maps(from, to string) bool {
	for _, r := range p.Renames {
		if r.From == from && r.To == to {
			return true
		}
	}
	return false
}

// Diff classifies every difference between pinned and live, the same
// relation's shape before and after. Columns are matched by name; a column
// that changed name in place (same position, same type, the only
// difference) is a rename. An empty result means no classified change
// (the shapes may still differ in facts pgoutput does not carry).
func Diff(pinned, live Shape) []Change {
	var out []Change
	if pinned.Relation != "" && live.Relation != "" && pinned.Relation != live.Relation {
		return []Change{{Kind: DropOrRenameTable, From: pinned.Relation, To: live.Relation}}
	}
	oldBy := index(pinned.Columns)
	newBy := index(live.Columns)
	var gone, added []Column
	for _, c := range pinned.Columns {
		if _, ok := newBy[c.Name]; !ok {
			gone = append(gone, c)
		}
	}
	for _, c := range live.Columns {
		if _, ok := oldBy[c.Name]; !ok {
			added = append(added, c)
		}
	}
	// A rename: one column gone, one added, at the same position, same
	// type and key flag.
	if len(gone) == 1 && len(added) == 1 && len(pinned.Columns) == len(live.Columns) {
		g, a := gone[0], added[0]
		if position(pinned.Columns, g.Name) == position(live.Columns, a.Name) &&
			g.TypeOID == a.TypeOID && g.TypeMod == a.TypeMod && g.Key == a.Key {
			out = append(out, Change{Kind: RenameColumn, Column: a.Name, OldColumn: g.Name, From: describe(g), To: describe(a)})
			gone, added = nil, nil
		}
	}
	for _, g := range gone {
		out = append(out, Change{Kind: DropColumn, Column: g.Name, From: describe(g)})
	}
	keyChanged := false
	for _, n := range live.Columns {
		o, ok := oldBy[n.Name]
		if !ok {
			continue
		}
		if o.Key != n.Key {
			keyChanged = true
		}
		if o.TypeOID != n.TypeOID || o.TypeMod != n.TypeMod {
			out = append(out, Change{Kind: typeChange(o, n), Column: n.Name, From: describe(o), To: describe(n)})
		}
		if o.Facts != nil && n.Facts != nil && !o.Facts.NotNull && n.Facts.NotNull {
			out = append(out, Change{Kind: SetNotNull, Column: n.Name, From: describe(o), To: describe(n) + " NOT NULL"})
		}
	}
	for _, a := range added {
		if a.Key {
			keyChanged = true
		}
		k := AddColumnDefaultNotNull
		if a.Facts != nil && !a.Facts.NotNull && !a.Facts.HasDefault {
			k = AddNullableColumn
		}
		out = append(out, Change{Kind: k, Column: a.Name, To: describe(a)})
	}
	for _, g := range gone {
		if g.Key {
			keyChanged = true
		}
	}
	if keyChanged {
		out = append(out, Change{Kind: PrimaryKeyChange, From: keyList(pinned.Columns), To: keyList(live.Columns)})
	}
	return out
}

func index(cols []Column) map[string]Column {
	m := make(map[string]Column, len(cols))
	for _, c := range cols {
		m[c.Name] = c
	}
	return m
}

func position(cols []Column, name string) int {
	for i, c := range cols {
		if c.Name == name {
			return i
		}
	}
	return -1
}

func describe(c Column) string {
	t := c.Type()
	if t == "" {
		t = fmt.Sprintf("type oid %d", c.TypeOID)
	}
	return c.Name + " " + t
}

func keyList(cols []Column) string {
	var k []string
	for _, c := range cols {
		if c.Key {
			k = append(k, c.Name)
		}
	}
	return "key (" + strings.Join(k, ", ") + ")"
}

// Built-in type OIDs the widening rules name.
const (
	oidInt2    = 21
	oidInt4    = 23
	oidInt8    = 20
	oidFloat4  = 700
	oidFloat8  = 701
	oidNumeric = 1700
	oidText    = 25
	oidVarchar = 1043
)

// typeChange classifies a same-named column whose type or modifier changed.
// The safe widenings (every value of the old type is a value of the new one,
// with the same text form, so rows already applied stay correct):
//
//	int2 → int4 → int8 (and int2 → int8)
//	float4 → float8
//	int2, int4, int8 → numeric without a modifier
//	numeric(p,s) → numeric(p',s) with p' ≥ p; numeric(p,s) → numeric
//	varchar(n) → text; varchar → text
//
// varchar(n) → varchar(m) with m > n (or no limit) is increase_varchar.
// Anything else is narrow_or_incompatible_type.
func typeChange(o, n Column) Kind {
	switch {
	case o.TypeOID == oidVarchar && n.TypeOID == oidVarchar:
		if n.TypeMod < 0 || (o.TypeMod >= 0 && n.TypeMod > o.TypeMod) {
			return IncreaseVarchar
		}
		return NarrowOrIncompatibleType
	case o.TypeOID == oidVarchar && n.TypeOID == oidText:
		return WidenType
	case intRank(o.TypeOID) > 0 && intRank(n.TypeOID) > intRank(o.TypeOID):
		return WidenType
	case o.TypeOID == oidFloat4 && n.TypeOID == oidFloat8:
		return WidenType
	case intRank(o.TypeOID) > 0 && n.TypeOID == oidNumeric && n.TypeMod < 0:
		return WidenType
	case o.TypeOID == oidNumeric && n.TypeOID == oidNumeric:
		if n.TypeMod < 0 {
			return WidenType
		}
		if o.TypeMod >= 0 {
			op, os := numericMod(o.TypeMod)
			np, ns := numericMod(n.TypeMod)
			if ns == os && np >= op {
				return WidenType
			}
		}
	}
	return NarrowOrIncompatibleType
}

func intRank(oid uint32) int {
	switch oid {
	case oidInt2:
		return 1
	case oidInt4:
		return 2
	case oidInt8:
		return 3
	}
	return 0
}

// numericMod splits numeric's typmod into precision and scale.
func numericMod(mod int32) (p, s int) {
	m := int(mod) - 4
	return (m >> 16) & 0xffff, m & 0xffff
}

// TypeName is the SQL text of a built-in type with its modifier, or "" for
// a type this package does not know by OID (the catalog then names it).
func TypeName(oid uint32, mod int32) string {
	switch oid {
	case 16:
		return "boolean"
	case oidInt2:
		return "smallint"
	case oidInt4:
		return "integer"
	case oidInt8:
		return "bigint"
	case oidFloat4:
		return "real"
	case oidFloat8:
		return "double precision"
	case oidText:
		return "text"
	case 17:
		return "bytea"
	case 1082:
		return "date"
	case 1114:
		return "timestamp without time zone"
	case 1184:
		return "timestamp with time zone"
	case 2950:
		return "uuid"
	case 114:
		return "json"
	case 3802:
		return "jsonb"
	case oidNumeric:
		if mod < 0 {
			return "numeric"
		}
		p, s := numericMod(mod)
		return fmt.Sprintf("numeric(%d,%d)", p, s)
	case oidVarchar:
		if mod < 0 {
			return "character varying"
		}
		return fmt.Sprintf("character varying(%d)", mod-4)
	case 1042:
		if mod < 0 {
			return "character"
		}
		return fmt.Sprintf("character(%d)", mod-4)
	}
	return ""
}

// Classify puts kind on the three axes under p, for a change known only
// by its kind (a rename_column without its column names is never mapped).
func Classify(k Kind, p Policy) Classification { return ClassifyChange(Change{Kind: k}, p) }

// ClassifyChange puts c on the three axes under p. Only
// add_nullable_column, widen_type and increase_varchar are ever
// compatible, and only on a configured table; add_table joins them only
// when p.AdmitTables (a whole-schema flow under unknown_table_policy:
// allow_compatible); in partitioned mode a
// compatible change must be staged across every partition, which Trellara
// does not automate, so it blocks. A rename_column stays requires-mapping;
// it auto-applies (strict mode, configured table) only when p names that
// very rename (schema.renames: the same from and to).
func ClassifyChange(ch Change, p Policy) Classification {
	mode := p.Mode
	if mode == "" {
		mode = ModeStrict
	}
	c := Classification{Mode: mode}
	switch ch.Kind {
	case AddNullableColumn, WidenType, IncreaseVarchar:
		switch {
		case !p.Configured:
			c.Compatibility, c.Decision = BlockedByPolicy, Block
			c.Why = "the table is not one of the flow's configured tables"
		case mode == ModePartitioned:
			c.Compatibility, c.Decision = Compatible, StageThenApply
			c.Why = partitionedWhy
		default:
			c.Compatibility, c.Decision = Compatible, AutoApply
			c.Why = "every row before the change stays valid on the target; the target DDL is applied in one transaction with the first row after it"
		}
	case RenameColumn:
		c.Compatibility = RequiresMapping
		mapped := ch.OldColumn != "" && p.maps(ch.OldColumn, ch.Column)
		switch {
		case !mapped:
			c.Decision = ManualReview
			c.Why = "a rename looks like a dropped column and an added one; it flows only with an explicit mapping in the config"
			if ch.OldColumn != "" {
				c.Why += fmt.Sprintf(" (schema.renames: table, from: %s, to: %s; the recovery shows the entry)", ch.OldColumn, ch.Column)
			}
		case !p.Configured:
			c.Decision = Block
			c.Why = "the table is not one of the flow's configured tables"
		case mode == ModePartitioned:
			c.Decision = StageThenApply
			c.Why = partitionedWhy
		default:
			c.Decision = AutoApply
			c.Why = fmt.Sprintf("the configured mapping schema.renames (from: %s, to: %s) names this rename; the target column is renamed in one transaction with the first row after it",
				ch.OldColumn, ch.Column)
		}
	case AddColumnDefaultNotNull:
		c.Compatibility, c.Decision = RequiresMapping, ManualReview
		c.Why = "rows already on the target would need the column's default or a value the source never sent (or the column's nullability is unknown)"
	case AddTable:
		switch {
		case !p.AdmitTables:
			c.Compatibility, c.Decision = BlockedByPolicy, Block
			c.Why = "the table is not one of the flow's tables, and unknown_table_policy: allow_compatible with its schema in source.schemas does not admit it"
		case mode == ModePartitioned:
			c.Compatibility, c.Decision = Compatible, StageThenApply
			c.Why = "a DDL barrier in partitioned mode must hold every partition at the change; this is not automated, so capture stops"
		default:
			c.Compatibility, c.Decision = Compatible, AutoApply
			c.Why = "the table joins the flow: the target table is created in one transaction with its first rows"
		}
	case DropColumn, NarrowOrIncompatibleType, SetNotNull, PrimaryKeyChange, DropOrRenameTable:
		c.Compatibility, c.Decision = DestructiveOrAmbiguous, Block
		c.Why = "rows already applied may no longer fit, or the target cannot be changed to match without losing or re-identifying data"
	default:
		c.Compatibility, c.Decision = DestructiveOrAmbiguous, Block
		c.Why = "unknown change kind"
	}
	return c
}

const partitionedWhy = "a DDL barrier in partitioned mode must hold every partition at the change; this is not automated, so capture stops"

// AutoApplies reports whether every change in cs is auto-apply under p: the
// changes then flow through a DDL barrier by themselves.
func AutoApplies(cs []Change, p Policy) bool {
	if len(cs) == 0 {
		return false
	}
	for _, c := range cs {
		if ClassifyChange(c, p).Decision != AutoApply {
			return false
		}
	}
	return true
}

// UnmappedRenames are the rename_column changes of cs that p does not map:
// each needs a schema.renames entry (From: old name, To: new name).
func UnmappedRenames(cs []Change, p Policy) []ColumnRename {
	var out []ColumnRename
	for _, c := range cs {
		if c.Kind == RenameColumn && c.OldColumn != "" && !p.maps(c.OldColumn, c.Column) {
			out = append(out, ColumnRename{From: c.OldColumn, To: c.Column})
		}
	}
	return out
}

// TargetDDL is the statement Trellara runs on the target for change c of
// relation (the target table's quoted name), or "" when it runs none (the
// change is not one Trellara applies, or the new type is not known). The
// statements are idempotent: running one twice leaves the target as once.
func TargetDDL(relation string, c Change, live Shape) string {
	var col *Column
	for i := range live.Columns {
		if live.Columns[i].Name == c.Column {
			col = &live.Columns[i]
		}
	}
	if col == nil {
		return ""
	}
	return Statement(relation, c.Kind, c.OldColumn, col.Name, col.Type())
}

// Statement is the target DDL for kind on column (its new SQL type typ;
// for a rename, oldColumn is its name before) of target, the target table's
// quoted name; "" for a kind Trellara does not apply or an unknown type.
// The applier builds a barrier's DDL with it from the envelope's DDLEvent,
// so the relay's plan and the applier agree.
//
// Every statement is idempotent, because a barrier can reach the target
// again in a later transaction (the relay crashed after the barrier was
// applied and before its pin moved): ADD COLUMN IF NOT EXISTS; a type
// change to the type the column already has; and a rename wrapped in a DO
// block that renames only while the old name is still there (a target
// that has the new name and not the old one is left as it is; one that has
// both fails, loudly, at the ALTER).
func Statement(target string, kind Kind, oldColumn, column, typ string) string {
	if typ == "" || column == "" {
		return ""
	}
	name := quoteIdent(column)
	switch kind {
	case AddNullableColumn:
		return fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s %s", target, name, typ)
	case WidenType, IncreaseVarchar:
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s", target, name, typ)
	case RenameColumn:
		if oldColumn == "" || oldColumn == column {
			return ""
		}
		body := fmt.Sprintf("BEGIN IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s AND attnum > 0 AND NOT attisdropped) "+
			"THEN ALTER TABLE %s RENAME COLUMN %s TO %s; END IF; END",
			quoteLiteral(target), quoteLiteral(oldColumn), target, quoteIdent(oldColumn), name)
		tag := "$trellara$"
		for i := 1; strings.Contains(body, tag); i++ {
			tag = fmt.Sprintf("$trellara%d$", i)
		}
		return "DO " + tag + " " + body + " " + tag
	}
	return ""
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Summary names the kinds of cs, sorted and without repeats.
func Summary(cs []Change) string {
	seen := map[Kind]bool{}
	var ks []string
	for _, c := range cs {
		if !seen[c.Kind] {
			seen[c.Kind] = true
			ks = append(ks, string(c.Kind))
		}
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}
