package check

import (
	"fmt"
	"strings"

	"github.com/trellara/trellara/internal/config"
)

// CodeConfiguredTableMissing is the finding for a table the configuration
// names and the source does not have.
const CodeConfiguredTableMissing = "configured_table_missing"

// configuredQuery returns the configured tables that do not exist as a
// table (plain or partitioned) under exactly that schema and name: names
// are compared as stored, never parsed again, so "Sales" and sales differ
// as they do in SQL.
const configuredQuery = `
SELECT t.s, t.n
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(s, n, i)
WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
  WHERE ns.nspname = t.s AND c.relname = t.n AND c.relkind IN ('r', 'p'))
ORDER BY t.i`

// configured checks that every table of Options.Tables exists: a flow
// whose configuration names a table the source lacks cannot start, so it
// is a blocker, listed with the names exactly as the config spells them.
func (in *inspector) configured() error {
	if len(in.opts.Tables) == 0 {
		return nil
	}
	schemas := make([]string, len(in.opts.Tables))
	names := make([]string, len(in.opts.Tables))
	for i, t := range in.opts.Tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	rows, err := in.q.Query(in.ctx, configuredQuery, schemas, names)
	if err != nil {
		return fmt.Errorf("check: look up the configured tables: %w", err)
	}
	var missing []string
	for rows.Next() {
		var t config.TableName
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			rows.Close()
			return fmt.Errorf("check: look up the configured tables: %w", err)
		}
		missing = append(missing, t.String())
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check: look up the configured tables: %w", err)
	}
	sec := in.r.section(SectionCapture)
	if len(missing) == 0 {
		sec.Lines = append(sec.Lines, fmt.Sprintf("all %s named by the configuration exist", plural(len(in.opts.Tables), "table")))
		return nil
	}
	for _, m := range missing {
		sec.Lines = append(sec.Lines, "configured table "+m+" does not exist on the source")
	}
	in.r.add(Finding{Severity: Critical, Code: CodeConfiguredTableMissing, Section: SectionCapture,
		Title:   fmt.Sprintf("%s named by the configuration %s not exist on the source", plural(len(missing), "table"), doOrDoes(len(missing))),
		Detail:  "source.tables names " + strings.Join(missing, ", ") + ", which this database does not have as a table: the flow cannot publish or snapshot it",
		Action:  "create the table on the source, or correct source.tables (schema-qualified; quote names that are not all lower case, e.g. public.\"Sales\")",
		Objects: missing})
	return nil
}

func doOrDoes(n int) string {
	if n == 1 {
		return "does"
	}
	return "do"
}
