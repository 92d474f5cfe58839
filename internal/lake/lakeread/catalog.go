package lakeread

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Dialect is the SQL dialect of a catalog database.
type Dialect int

// Dialects.
const (
	Postgres Dialect = iota // placeholders $1, $2 (pgx's database/sql driver)
	SQLite                  // placeholders ?
)

// ErrNoSuchTable: the catalog has no row for the table.
var ErrNoSuchTable = errors.New("lakeread: no such table in the catalog")

// Catalog reads an Iceberg SQL catalog: the iceberg_tables table that
// iceberg-go, PyIceberg and Iceberg's JdbcCatalog share
// (catalog_name, table_namespace, table_name, metadata_location, ...).
// It only reads; it never takes a lock or writes a row.
type Catalog struct {
	db      *sql.DB
	dialect Dialect
	name    string
}

// NewCatalog reads the catalog named name (iceberg_tables.catalog_name) in
// db.
func NewCatalog(db *sql.DB, dialect Dialect, name string) *Catalog {
	return &Catalog{db: db, dialect: dialect, name: name}
}

func (c *Catalog) q(s string) string {
	if c.dialect == SQLite {
		return s
	}
	// $n for PostgreSQL: the queries below use ? in order.
	out, n := make([]byte, 0, len(s)+8), 0
	for i := 0; i < len(s); i++ {
		if s[i] == '?' {
			n++
			out = append(out, fmt.Sprintf("$%d", n)...)
			continue
		}
		out = append(out, s[i])
	}
	return string(out)
}

// Tables lists the tables of namespace, sorted by name.
func (c *Catalog) Tables(ctx context.Context, namespace string) ([]string, error) {
	rows, err := c.db.QueryContext(ctx, c.q(`SELECT table_name FROM iceberg_tables
		WHERE catalog_name = ? AND table_namespace = ? ORDER BY table_name`), c.name, namespace)
	if err != nil {
		return nil, fmt.Errorf("lakeread: catalog %s: list tables of %s: %w", c.name, namespace, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("lakeread: catalog %s: list tables of %s: %w", c.name, namespace, err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lakeread: catalog %s: list tables of %s: %w", c.name, namespace, err)
	}
	return out, nil
}

// MetadataLocation is the table's current metadata file.
func (c *Catalog) MetadataLocation(ctx context.Context, namespace, table string) (string, error) {
	var loc sql.NullString
	err := c.db.QueryRowContext(ctx, c.q(`SELECT metadata_location FROM iceberg_tables
		WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?`), c.name, namespace, table).Scan(&loc)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("lakeread: catalog %s: table %s.%s: %w", c.name, namespace, table, ErrNoSuchTable)
	}
	if err != nil {
		return "", fmt.Errorf("lakeread: catalog %s: table %s.%s: %w", c.name, namespace, table, err)
	}
	if !loc.Valid || loc.String == "" {
		return "", fmt.Errorf("lakeread: catalog %s: table %s.%s has no metadata_location", c.name, namespace, table)
	}
	return loc.String, nil
}
