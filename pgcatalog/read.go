package pgcatalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/pgname"
)

// ReadTables reads the definitions of tables from a source's catalog; a
// table that does not exist is an error that names it.
func ReadTables(ctx context.Context, source Querier, tables []pgname.Name) ([]TableDef, error) {
	defs := make([]TableDef, 0, len(tables))
	for _, t := range tables {
		d, found, err := ReadTable(ctx, source, t)
		if err != nil {
			return nil, fmt.Errorf("pgcatalog: read definition of %s from the source: %w", t, err)
		}
		if !found {
			return nil, fmt.Errorf("pgcatalog: table %s does not exist at the source (names are schema.name; quote mixed-case names: public.\"Sales\")", t)
		}
		defs = append(defs, d)
	}
	return defs, nil
}

// ReadTable reads one table's definition from db's catalog (a source's or
// a target's); found is false when it does not exist.
func ReadTable(ctx context.Context, db Querier, name pgname.Name) (TableDef, bool, error) {
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
	if d.ReplicaIdentity == IdentityIndex {
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
func leafPartitions(ctx context.Context, db Querier, oid uint32) ([]TableDef, error) {
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
		p, found, err := ReadTable(ctx, db, n)
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
func uniqueKeys(ctx context.Context, db Querier, oid uint32) ([][]string, error) {
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
func indexColumns(ctx context.Context, db Querier, oid uint32, flag string) ([]string, error) {
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
