// Package pgcatalog reads PostgreSQL table definitions from a server's
// catalog: columns and their types, the primary key, the replica identity
// and its index, unique keys, and a partitioned table's leaf partitions.
// Snapshot, capture, apply, verify and the flow all read a source's
// tables through it, so there is one reading and one identity rule
// (TableDef.IdentityGate) for every layer.
//
// It depends on pgx and pgname only: it is a leaf of the module, beside
// pgname.
package pgcatalog

import (
	"context"
	"fmt"
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
	return fmt.Sprintf("pgcatalog: source table %s %s; fix on the source: %s", e.Table, e.Problem, e.Fix)
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
	case IdentityFull:
		return nil
	case IdentityIndex:
		if len(d.IdentityIndex) > 0 {
			return nil
		}
		e.Problem = "has REPLICA IDENTITY USING INDEX but the index is gone: updates and deletes cannot be identified"
		e.Fix = fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY DEFAULT (with a primary key); or %s", q, addKey)
	case IdentityNothing:
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
	case d.IdentityGate() != nil, d.ReplicaIdentity == IdentityFull:
		return nil
	case d.ReplicaIdentity == IdentityIndex:
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
	case d.ReplicaIdentity == IdentityFull:
		return "REPLICA IDENTITY FULL: rows are matched on every column (a primary key makes updates and deletes cheaper)"
	case d.ReplicaIdentity == IdentityIndex:
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
		b.WriteString("\n    " + c.SQL())
	}
	if len(d.PrimaryKey) > 0 {
		fmt.Fprintf(&b, ",\n    PRIMARY KEY (%s)", QuoteList(d.PrimaryKey))
	}
	for _, u := range d.UniqueKeys {
		fmt.Fprintf(&b, ",\n    UNIQUE (%s)", QuoteList(u))
	}
	b.WriteString("\n)")
	return b.String()
}

// SQL is the column's definition in CREATE TABLE and ADD COLUMN form:
// quoted name, type, generation expression, NOT NULL.
func (c ColumnDef) SQL() string {
	s := pgx.Identifier{c.Name}.Sanitize() + " " + c.Type
	if c.Generated != "" {
		s += " GENERATED ALWAYS AS (" + c.Generated + ") STORED"
	}
	if c.NotNull {
		s += " NOT NULL"
	}
	return s
}

// QuoteList is names quoted as identifiers, comma-separated.
func QuoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// Querier is what reading the catalog needs of a connection: *pgx.Conn,
// pgx.Tx and a pool all satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Replica identity settings (pg_class.relreplident), as pgoutput also
// sends them.
const (
	IdentityDefault byte = 'd'
	IdentityNothing byte = 'n'
	IdentityFull    byte = 'f'
	IdentityIndex   byte = 'i'
)

func identityName(b byte) string {
	switch b {
	case IdentityDefault:
		return "DEFAULT"
	case IdentityNothing:
		return "NOTHING"
	case IdentityFull:
		return "FULL"
	case IdentityIndex:
		return "INDEX"
	}
	return fmt.Sprintf("%q", b)
}
