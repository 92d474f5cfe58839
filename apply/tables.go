package apply

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/pgcatalog"
)

// The source's table definitions (pgcatalog.TableDef) are read by
// pgcatalog; this file creates target tables from them and compares a
// target's tables with them.

// CreateTables creates every table in defs on the target (schemas too) in
// one transaction. Existing tables are left as they are: check them with
// ValidateTables.
func CreateTables(ctx context.Context, target DB, defs []pgcatalog.TableDef) error {
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

func tableList(defs []pgcatalog.TableDef) string {
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
	// NoReplicaKey: the source table fails pgcatalog.TableDef.IdentityGate (no primary
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
func ValidateTables(ctx context.Context, target DB, defs []pgcatalog.TableDef) ([]Mismatch, error) {
	var out []Mismatch
	for _, src := range defs {
		name := src.String()
		if e := src.IdentityGate(); e != nil {
			out = append(out, Mismatch{Table: name, Kind: NoReplicaKey, Source: e.Problem, Fix: "on the source: " + e.Fix})
		}
		tgt, found, err := pgcatalog.ReadTable(ctx, target, src.TableName())
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

// columnExtra is what the target says about a column beyond pgcatalog.TableDef.
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

func compareTable(src, tgt pgcatalog.TableDef, extra map[string]columnExtra) []Mismatch {
	var out []Mismatch
	name, q := src.String(), src.QualifiedName()
	tcols := map[string]pgcatalog.ColumnDef{}
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
				Fix: fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s", q, sc.SQL())})
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
				Fix: fmt.Sprintf("ALTER TABLE %s DROP COLUMN %s, ADD COLUMN %s", q, qc, sc.SQL())})
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
			fix = fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (%s)", q, pgcatalog.QuoteList(src.PrimaryKey))
		default:
			fix = fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s, ADD PRIMARY KEY (%s)", q,
				pgx.Identifier{tgt.PrimaryKeyConstraint}.Sanitize(), pgcatalog.QuoteList(src.PrimaryKey))
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
