package config

import "github.com/trellara/trellara/pgname"

// The name type and its rules belong to package pgname; the config file
// uses them under the names the rest of the CLI has always called them.

// TableName is a schema-qualified table (pgname.Name).
type TableName = pgname.Name

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN-1 (pgname.MaxIdentifierBytes).
const maxIdentifierBytes = pgname.MaxIdentifierBytes

// ParseTableName parses "schema.name" with PostgreSQL identifier rules (pgname.Parse).
func ParseTableName(s string) (TableName, error) { return pgname.Parse(s) }

// ParseSchemaName parses one schema name (pgname.ParseSchema).
func ParseSchemaName(s string) (string, error) { return pgname.ParseSchema(s) }

// QuoteIdent quotes an SQL identifier only when PostgreSQL would need it (pgname.QuoteIdent).
func QuoteIdent(s string) string { return pgname.QuoteIdent(s) }
