package verify

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/internal/config"
)

// shape is what one side's catalog says about one table, read inside that
// side's snapshot so it matches the rows the checksums see.
type shape struct {
	exists    bool
	oid       uint32
	relkind   string
	reltuples float64
	pages     int64 // heap pages, read only for parallel hashing
	cols      []column
	basis     KeyBasis
	key       []string
	// native: the extension's C row hash may read this table (read only
	// where the side has it; see sqlNativeTable).
	native bool
}

type column struct {
	name string
	typ  string // format_type: what "type differs" compares
	oid  uint32 // pg_type oid: picks the hash (built-in oids are fixed)
}

// readShape reads tn's relation, columns and key from q's snapshot, with
// withPages its size in pages, and with native whether the extension's C
// row hash may read it.
func readShape(ctx context.Context, q pgx.Tx, tn config.TableName, withPages, native bool) (*shape, error) {
	var (
		oid        uint32
		relkind    string
		replident  string
		reltuples  float64
		primaryKey []string
		replIdent  []string
	)
	err := q.QueryRow(ctx, sqlRelation, tn.Schema, tn.Name).Scan(&oid, &relkind, &reltuples, &replident)
	if err == pgx.ErrNoRows {
		return &shape{}, nil
	}
	if err != nil {
		return nil, err
	}
	s := &shape{exists: true, oid: oid, relkind: relkind, reltuples: reltuples}
	if relkind != "r" && relkind != "p" {
		return s, nil
	}
	if native {
		if err := q.QueryRow(ctx, sqlNativeTable, oid).Scan(&s.native); err != nil {
			return nil, err
		}
	}
	if withPages {
		if err := q.QueryRow(ctx, sqlPages, int64(oid)).Scan(&s.pages); err != nil {
			return nil, err
		}
	}
	rows, err := q.Query(ctx, sqlColumns, oid)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name, &c.typ, &c.oid); err != nil {
			rows.Close()
			return nil, err
		}
		s.cols = append(s.cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = q.Query(ctx, sqlKeyColumns, oid)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var primary bool
		var name string
		if err := rows.Scan(&primary, &name); err != nil {
			rows.Close()
			return nil, err
		}
		if primary {
			primaryKey = append(primaryKey, name)
		} else {
			replIdent = append(replIdent, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	switch {
	case len(primaryKey) > 0:
		s.basis, s.key = BasisPrimaryKey, primaryKey
	case replident == "i" && len(replIdent) > 0:
		// The replica identity index is unique over NOT NULL columns,
		// which is all a key needs.
		s.basis, s.key = BasisReplicaIdentity, replIdent
	default:
		s.basis = BasisWholeRow
	}
	return s, nil
}

// shapeProblems names every way the target's table differs from the
// source's in what Verify compares: existence, and each column's name and
// type. Column order does not matter (rows are rendered in source order on
// both sides). An empty answer means the rows are comparable.
func shapeProblems(spec tableSpec, src, dst *shape) []string {
	if !dst.exists {
		return []string{fmt.Sprintf("target table %s does not exist", spec.dst)}
	}
	if dst.relkind != "r" && dst.relkind != "p" {
		return []string{fmt.Sprintf("target relation %s is not a table (relkind %q)", spec.dst, dst.relkind)}
	}
	var out []string
	dstCols := map[string]string{}
	for _, c := range dst.cols {
		dstCols[c.name] = c.typ
	}
	srcCols := map[string]bool{}
	for _, c := range src.cols {
		srcCols[c.name] = true
		typ, ok := dstCols[c.name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("column %s is missing at target", quoteName(c.name)))
		case typ != c.typ:
			out = append(out, fmt.Sprintf("column %s is %s at source but %s at target", quoteName(c.name), c.typ, typ))
		}
	}
	for _, c := range dst.cols {
		if !srcCols[c.name] {
			out = append(out, fmt.Sprintf("column %s exists only at target (%s)", quoteName(c.name), c.typ))
		}
	}
	return out
}

// plans builds each side's expressions for a comparable table. Both use
// the source's columns and key: shapeProblems has established that the
// target has the same names and types.
func plans(spec tableSpec, src, dst *shape, h Hashing) (plan, plan) {
	byName := map[string]column{}
	for _, c := range src.cols {
		byName[c.name] = c
	}
	key := make([]column, len(src.key))
	for i, k := range src.key {
		key[i] = byName[k]
	}
	return newPlan(pgx.Identifier{spec.src.Schema, spec.src.Name}.Sanitize(), src.relkind, src.oid, src.cols, key, h),
		newPlan(pgx.Identifier{spec.dst.Schema, spec.dst.Name}.Sanitize(), dst.relkind, dst.oid, src.cols, key, h)
}

// quoteName renders a column name the way SQL would need it: bare when
// folding to lower case would not change it.
func quoteName(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '$')) {
			return pgx.Identifier{s}.Sanitize()
		}
	}
	if s == "" {
		return `""`
	}
	return s
}
