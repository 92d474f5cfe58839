package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/pgname"
)

// TableDef is a source table's definition as far as the target needs it.
type TableDef struct {
	Schema  string
	Name    string
	Columns []ColumnDef
	// PrimaryKey lists the primary key columns in key order; empty if none.
	PrimaryKey []string
	// PrimaryKeyConstraint is the primary key constraint's name.
	PrimaryKeyConstraint string
	// ReplicaIdentity is pg_class.relreplident: 'd', 'n', 'f' or 'i'.
	ReplicaIdentity byte
	// IdentityIndex lists the replica identity index's columns when
	// ReplicaIdentity is 'i'.
	IdentityIndex []string
	// Partitions lists a partitioned table's leaf partitions (nil for a
	// plain table). The source checks each leaf's own replica identity
	// when an UPDATE or DELETE reaches it, even when the publication
	// publishes via the partition root.
	Partitions []TableDef
	// UniqueKeys lists the column lists of the source's unique indexes
	// other than the primary key (plain columns, no predicate), so a target
	// created from the definition refuses what the source refuses.
	UniqueKeys [][]string
}

// ColumnDef is one column.
type ColumnDef struct {
	Name string
	// Type is format_type(atttypid, atttypmod): "numeric(12,2)",
	// "character varying(40)", "text[]"; user types come schema-qualified
	// when not on the search path.
	Type    string
	NotNull bool
	// Generated is the expression of a GENERATED ALWAYS AS (...) STORED
	// column; pgoutput does not send such columns, so the target computes
	// them itself.
	Generated string
}

// TableName is the table's schema-qualified name.
func (d TableDef) TableName() pgname.Name {
	return pgname.Name{Schema: d.Schema, Name: d.Name}
}

// QualifiedName is the quoted "schema"."name", for SQL.
func (d TableDef) QualifiedName() string { return d.TableName().Sanitize() }

// String is the name as Trellara prints it (pgname.Name's form).
func (d TableDef) String() string { return d.TableName().String() }

// IdentityError says that a source table's UPDATE and DELETE cannot be
// identified: publishing the table would make the source refuse them
// ("does not have a replica identity and publishes updates").
type IdentityError struct {
	Table    pgname.Name
	Identity string // DEFAULT, NOTHING or INDEX
	Problem  string
	Fix      string // SQL to run on the source
}

func (e *IdentityError) Error() string {
	return fmt.Sprintf("apply: source table %s %s; fix on the source: %s", e.Table, e.Problem, e.Fix)
}

// IdentityGate is the one rule for whether a source table may be captured:
// its updates and deletes must carry an identity — a primary key (REPLICA
// IDENTITY DEFAULT), a replica identity index, or REPLICA IDENTITY FULL.
// Preflight reports it, and run refuses with it before it creates or
// alters a publication, because publishing a table without one makes the
// source reject every UPDATE and DELETE on it.
//
// A partitioned table passes when the root and every leaf partition pass:
// the root's identity is the one its changes are published under
// (publish_via_partition_root), and each leaf's is the one the source
// enforces, since ALTER TABLE ... REPLICA IDENTITY on the root does not
// reach existing partitions.
func (d TableDef) IdentityGate() *IdentityError {
	if e := d.ownIdentityGate(); e != nil {
		return e
	}
	for _, p := range d.Partitions {
		if e := p.ownIdentityGate(); e != nil {
			e.Problem = fmt.Sprintf("(a partition of %s) %s", d.TableName(), e.Problem)
			return e
		}
	}
	return nil
}

// ownIdentityGate is IdentityGate for d alone, partitions aside.
func (d TableDef) ownIdentityGate() *IdentityError {
	q := d.QualifiedName()
	addKey := fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (<key columns>); or ALTER TABLE %s REPLICA IDENTITY FULL", q, q)
	e := &IdentityError{Table: d.TableName(), Identity: d.IdentityName()}
	switch d.ReplicaIdentity {
	case identityFull:
		return nil
	case identityIndex:
		if len(d.IdentityIndex) > 0 {
			return nil
		}
		e.Problem = "has REPLICA IDENTITY USING INDEX but the index is gone: updates and deletes cannot be identified"
		e.Fix = fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY DEFAULT (with a primary key); or %s", q, addKey)
	case identityNothing:
		e.Problem = "has REPLICA IDENTITY NOTHING: updates and deletes cannot be identified"
		if len(d.PrimaryKey) > 0 {
			e.Fix = fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY DEFAULT", q)
		} else {
			e.Fix = addKey
		}
	default:
		if len(d.PrimaryKey) > 0 {
			return nil
		}
		e.Problem = "has no primary key and no replica identity: updates and deletes cannot be identified"
		e.Fix = addKey
	}
	return e
}

// IdentityName is the table's replica identity setting: DEFAULT, NOTHING,
// FULL or INDEX.
func (d TableDef) IdentityName() string { return identityName(d.ReplicaIdentity) }

// IdentityKey lists the columns that identify a row: the primary key for
// DEFAULT, the index's columns for INDEX; nil for FULL (every column) and
// for tables the gate refuses.
func (d TableDef) IdentityKey() []string {
	switch {
	case d.IdentityGate() != nil, d.ReplicaIdentity == identityFull:
		return nil
	case d.ReplicaIdentity == identityIndex:
		return d.IdentityIndex
	}
	return d.PrimaryKey
}

// IdentityText describes how the table's rows are identified, for
// preflight and status.
func (d TableDef) IdentityText() string {
	switch {
	case d.IdentityGate() != nil:
		return "none (replica identity " + identityName(d.ReplicaIdentity) + ")"
	case d.ReplicaIdentity == identityFull:
		return "REPLICA IDENTITY FULL: rows are matched on every column (a primary key makes updates and deletes cheaper)"
	case d.ReplicaIdentity == identityIndex:
		return "replica identity index (" + strings.Join(d.IdentityIndex, ", ") + ")"
	}
	return "primary key (" + strings.Join(d.PrimaryKey, ", ") + ")"
}

// CreateSQL is the CREATE TABLE statement for the target: columns, types,
// NOT NULL, generated columns and the primary key. Defaults, checks, foreign
// keys and indexes are left to the operator: replicated rows already obey
// them at the source, and foreign keys would make apply order matter.
func (d TableDef) CreateSQL() string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (", d.QualifiedName())
	for i, c := range d.Columns {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n    " + c.columnSQL())
	}
	if len(d.PrimaryKey) > 0 {
		fmt.Fprintf(&b, ",\n    PRIMARY KEY (%s)", quoteList(d.PrimaryKey))
	}
	for _, u := range d.UniqueKeys {
		fmt.Fprintf(&b, ",\n    UNIQUE (%s)", quoteList(u))
	}
	b.WriteString("\n)")
	return b.String()
}

func (c ColumnDef) columnSQL() string {
	s := pgx.Identifier{c.Name}.Sanitize() + " " + c.Type
	if c.Generated != "" {
		s += " GENERATED ALWAYS AS (" + c.Generated + ") STORED"
	}
	if c.NotNull {
		s += " NOT NULL"
	}
	return s
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// SourceTables reads the definitions of tables from the source catalog.
func SourceTables(ctx context.Context, source DB, tables []pgname.Name) ([]TableDef, error) {
	defs := make([]TableDef, 0, len(tables))
	for _, t := range tables {
		d, found, err := readTableDef(ctx, source, t)
		if err != nil {
			return nil, fmt.Errorf("apply: read definition of %s from the source: %w", t, err)
		}
		if !found {
			return nil, fmt.Errorf("apply: table %s does not exist at the source (names are schema.name; quote mixed-case names: public.\"Sales\")", t)
		}
		defs = append(defs, d)
	}
	return defs, nil
}

// readTableDef reads one table; found is false when it does not exist.
func readTableDef(ctx context.Context, db DB, name pgname.Name) (TableDef, bool, error) {
	var d TableDef
	var oid uint32
	var ident, relkind string
	err := db.QueryRow(ctx, `
		SELECT c.oid, n.nspname, c.relname, c.relreplident::text, c.relkind::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, name.Schema, name.Name).Scan(&oid, &d.Schema, &d.Name, &ident, &relkind)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	if ident != "" {
		d.ReplicaIdentity = ident[0]
	}
	rows, err := db.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
		       CASE WHEN a.attgenerated = 's' THEN pg_get_expr(ad.adbin, ad.adrelid) ELSE '' END
		FROM pg_attribute a
		LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, oid)
	if err != nil {
		return d, false, err
	}
	for rows.Next() {
		var c ColumnDef
		if err := rows.Scan(&c.Name, &c.Type, &c.NotNull, &c.Generated); err != nil {
			rows.Close()
			return d, false, err
		}
		d.Columns = append(d.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return d, false, err
	}
	if d.PrimaryKey, err = indexColumns(ctx, db, oid, "indisprimary"); err != nil {
		return d, false, err
	}
	if len(d.PrimaryKey) > 0 {
		if err := db.QueryRow(ctx, `SELECT conname FROM pg_constraint WHERE conrelid = $1 AND contype = 'p'`, oid).Scan(&d.PrimaryKeyConstraint); err != nil {
			return d, false, err
		}
	}
	if d.ReplicaIdentity == identityIndex {
		if d.IdentityIndex, err = indexColumns(ctx, db, oid, "indisreplident"); err != nil {
			return d, false, err
		}
	}
	if relkind == "p" {
		if d.Partitions, err = leafPartitions(ctx, db, oid); err != nil {
			return d, false, err
		}
	}
	if d.UniqueKeys, err = uniqueKeys(ctx, db, oid); err != nil {
		return d, false, err
	}
	return d, true, nil
}

// leafPartitions reads the definitions of a partitioned table's leaf
// partitions, at any depth.
func leafPartitions(ctx context.Context, db DB, oid uint32) ([]TableDef, error) {
	rows, err := db.Query(ctx, `
		SELECT n.nspname, c.relname
		FROM pg_partition_tree($1::oid) t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE t.isleaf ORDER BY n.nspname, c.relname`, oid)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgname.Name, error) {
		var t pgname.Name
		err := r.Scan(&t.Schema, &t.Name)
		return t, err
	})
	if err != nil {
		return nil, err
	}
	out := make([]TableDef, 0, len(names))
	for _, n := range names {
		p, found, err := readTableDef(ctx, db, n)
		if err != nil {
			return nil, fmt.Errorf("partition %s: %w", n, err)
		}
		if found {
			out = append(out, p)
		}
	}
	return out, nil
}

// uniqueKeys lists the column lists of the table's unique indexes other
// than the primary key, in index name order. Indexes on expressions or
// with a predicate are left out: a UNIQUE constraint cannot express them.
func uniqueKeys(ctx context.Context, db DB, oid uint32) ([][]string, error) {
	rows, err := db.Query(ctx, `
		SELECT array_agg(a.attname::text ORDER BY k.ord)
		FROM pg_index i
		JOIN pg_class ic ON ic.oid = i.indexrelid
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1 AND i.indisunique AND NOT i.indisprimary
		  AND i.indexprs IS NULL AND i.indpred IS NULL
		GROUP BY ic.relname
		ORDER BY ic.relname`, oid)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[[]string])
}

// indexColumns lists, in index order, the columns of the table's index
// whose boolean pg_index column flag is set.
func indexColumns(ctx context.Context, db DB, oid uint32, flag string) ([]string, error) {
	rows, err := db.Query(ctx, `
		SELECT a.attname
		FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1 AND i.`+flag+`
		ORDER BY k.ord`, oid)
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	return cols, nil
}

// CreateTables creates every table in defs on the target (schemas too) in
// one transaction. Existing tables are left as they are: check them with
// ValidateTables.
func CreateTables(ctx context.Context, target DB, defs []TableDef) error {
	var b strings.Builder
	seen := map[string]bool{}
	for _, d := range defs {
		if !seen[d.Schema] {
			seen[d.Schema] = true
			fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n", pgx.Identifier{d.Schema}.Sanitize())
		}
		b.WriteString(d.CreateSQL() + ";\n")
	}
	if b.Len() == 0 {
		return nil
	}
	// One simple-protocol query runs as one implicit transaction: all
	// tables or none.
	if _, err := target.Exec(ctx, b.String()); err != nil {
		return fmt.Errorf("apply: create target tables (%s): %w; types the source defines (enums, domains) must be created on the target first",
			tableList(defs), err)
	}
	return nil
}

func tableList(defs []TableDef) string {
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.String()
	}
	return strings.Join(names, ", ")
}

// MismatchKind names what differs between a source table and its target.
type MismatchKind string

// Mismatch kinds.
const (
	MissingTable  MismatchKind = "missing table"
	MissingColumn MismatchKind = "missing column"
	TypeDiffers   MismatchKind = "type differs"
	// NotNullDiffers: the target column is NOT NULL, the source's is not;
	// a NULL from the source would be refused.
	NotNullDiffers MismatchKind = "NOT NULL differs"
	// ExtraColumn: a target-only column that would refuse every insert
	// (NOT NULL without a default).
	ExtraColumn MismatchKind = "extra column"
	// GeneratedDiffers: the target computes a column the source sends, or
	// the reverse.
	GeneratedDiffers MismatchKind = "generated column differs"
	// IdentityAlways: a GENERATED ALWAYS identity column refuses the
	// source's values on UPDATE.
	IdentityAlways MismatchKind = "identity column is GENERATED ALWAYS"
	PKDiffers      MismatchKind = "primary key differs"
	// NoReplicaKey: the source table fails TableDef.IdentityGate (no primary
	// key, replica identity index or REPLICA IDENTITY FULL), so its updates
	// and deletes cannot be replicated at all.
	NoReplicaKey MismatchKind = "no replica identity at the source"
)

// Mismatch is one difference that would make apply fail or diverge, with
// the statement that fixes it.
type Mismatch struct {
	Table  string // schema.name
	Column string // empty for table-level mismatches
	Kind   MismatchKind
	Source string // what the source has
	Target string // what the target has
	Fix    string // SQL to run (on the target unless it says source)
}

func (m Mismatch) String() string {
	where := m.Table
	if m.Column != "" {
		where += "." + m.Column
	}
	s := where + ": " + string(m.Kind)
	if m.Source != "" || m.Target != "" {
		s += fmt.Sprintf(" (source: %s; target: %s)", orNone(m.Source), orNone(m.Target))
	}
	return s + "; fix: " + m.Fix
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// ValidateTables compares each source definition with the target table of
// the same name and returns every mismatch that would make apply fail or
// silently diverge. An empty result means the targets are usable.
func ValidateTables(ctx context.Context, target DB, defs []TableDef) ([]Mismatch, error) {
	var out []Mismatch
	for _, src := range defs {
		name := src.String()
		if e := src.IdentityGate(); e != nil {
			out = append(out, Mismatch{Table: name, Kind: NoReplicaKey, Source: e.Problem, Fix: "on the source: " + e.Fix})
		}
		tgt, found, err := readTableDef(ctx, target, src.TableName())
		if err != nil {
			return nil, fmt.Errorf("apply: read definition of %s from the target: %w", name, err)
		}
		if !found {
			out = append(out, Mismatch{Table: name, Kind: MissingTable, Source: "exists", Fix: src.CreateSQL()})
			continue
		}
		extra, err := targetColumnExtras(ctx, target, src.QualifiedName())
		if err != nil {
			return nil, fmt.Errorf("apply: read definition of %s from the target: %w", name, err)
		}
		out = append(out, compareTable(src, tgt, extra)...)
	}
	return out, nil
}

// columnExtra is what the target says about a column beyond TableDef.
type columnExtra struct {
	hasDefault     bool
	identityAlways bool
}

func targetColumnExtras(ctx context.Context, db DB, table string) (map[string]columnExtra, error) {
	rows, err := db.Query(ctx, `
		SELECT attname, atthasdef OR attidentity <> '' OR attgenerated <> '', attidentity = 'a'
		FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, table)
	if err != nil {
		return nil, err
	}
	out := map[string]columnExtra{}
	for rows.Next() {
		var n string
		var e columnExtra
		if err := rows.Scan(&n, &e.hasDefault, &e.identityAlways); err != nil {
			rows.Close()
			return nil, err
		}
		out[n] = e
	}
	return out, rows.Err()
}

func compareTable(src, tgt TableDef, extra map[string]columnExtra) []Mismatch {
	var out []Mismatch
	name, q := src.String(), src.QualifiedName()
	tcols := map[string]ColumnDef{}
	for _, c := range tgt.Columns {
		tcols[c.Name] = c
	}
	scols := map[string]bool{}
	for _, sc := range src.Columns {
		scols[sc.Name] = true
		qc := pgx.Identifier{sc.Name}.Sanitize()
		tc, ok := tcols[sc.Name]
		switch {
		case !ok:
			out = append(out, Mismatch{Table: name, Column: sc.Name, Kind: MissingColumn, Source: sc.Type,
				Fix: fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s", q, sc.columnSQL())})
			continue
		case tc.Type != sc.Type:
			out = append(out, Mismatch{Table: name, Column: sc.Name, Kind: TypeDiffers, Source: sc.Type, Target: tc.Type,
				Fix: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s::%s", q, qc, sc.Type, qc, sc.Type)})
		}
		if tc.NotNull && !sc.NotNull && sc.Generated == "" {
			out = append(out, Mismatch{Table: name, Column: sc.Name, Kind: NotNullDiffers, Source: "nullable", Target: "NOT NULL",
				Fix: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", q, qc)})
		}
		switch {
		case tc.Generated != "" && sc.Generated == "":
			out = append(out, Mismatch{Table: name, Column: sc.Name, Kind: GeneratedDiffers, Source: "plain column", Target: "generated " + tc.Generated,
				Fix: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP EXPRESSION", q, qc)})
		case sc.Generated != "" && tc.Generated == "":
			// pgoutput does not send generated columns: a plain target
			// column would stay NULL.
			out = append(out, Mismatch{Table: name, Column: sc.Name, Kind: GeneratedDiffers, Source: "generated " + sc.Generated, Target: "plain column",
				Fix: fmt.Sprintf("ALTER TABLE %s DROP COLUMN %s, ADD COLUMN %s", q, qc, sc.columnSQL())})
		}
		if extra[sc.Name].identityAlways {
			out = append(out, Mismatch{Table: name, Column: sc.Name, Kind: IdentityAlways, Source: "values replicated", Target: "GENERATED ALWAYS AS IDENTITY",
				Fix: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET GENERATED BY DEFAULT", q, qc)})
		}
	}
	for _, tc := range tgt.Columns {
		if scols[tc.Name] || !tc.NotNull || extra[tc.Name].hasDefault {
			continue
		}
		out = append(out, Mismatch{Table: name, Column: tc.Name, Kind: ExtraColumn, Target: tc.Type + " NOT NULL without a default",
			Fix: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", q, pgx.Identifier{tc.Name}.Sanitize())})
	}
	if !slices.Equal(src.PrimaryKey, tgt.PrimaryKey) {
		var fix string
		switch {
		case len(src.PrimaryKey) == 0:
			fix = "no action needed for apply; drop the target's primary key if the source can hold duplicates"
		case len(tgt.PrimaryKey) == 0:
			fix = fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (%s)", q, quoteList(src.PrimaryKey))
		default:
			fix = fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s, ADD PRIMARY KEY (%s)", q,
				pgx.Identifier{tgt.PrimaryKeyConstraint}.Sanitize(), quoteList(src.PrimaryKey))
		}
		out = append(out, Mismatch{Table: name, Kind: PKDiffers, Source: keyText(src.PrimaryKey), Target: keyText(tgt.PrimaryKey), Fix: fix})
	}
	return out
}

func keyText(cols []string) string {
	if len(cols) == 0 {
		return ""
	}
	return "(" + strings.Join(cols, ", ") + ")"
}

func identityName(b byte) string {
	switch b {
	case identityDefault:
		return "DEFAULT"
	case identityNothing:
		return "NOTHING"
	case identityFull:
		return "FULL"
	case identityIndex:
		return "INDEX"
	}
	return fmt.Sprintf("%q", b)
}
