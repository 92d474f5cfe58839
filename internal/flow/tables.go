package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/config"
)

// Tables returns the configured source tables.
func (f *Flow) Tables() []config.TableName {
	return append([]config.TableName(nil), f.Cfg.Source.Tables...)
}

// tableStrings renders tables in config.TableName's text form, which
// config.ParseTableName reads back to the same tables.
func tableStrings(tables []config.TableName) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.String()
	}
	return out
}

// gatedSourceTables reads the configured tables' definitions from the
// source and refuses, naming each fix, when one fails the identity gate
// (apply.TableDef.IdentityGate, the rule preflight reports). Run calls it
// before it creates a publication or target tables: a published table
// without a replica identity makes the source reject every UPDATE and
// DELETE on it.
func (f *Flow) gatedSourceTables(ctx context.Context, src *pgx.Conn) ([]apply.TableDef, error) {
	defs, err := apply.SourceTables(ctx, src, f.Tables())
	if err != nil {
		return nil, fmt.Errorf("flow %s: %w", f.Cfg.Flow, err)
	}
	var refused []error
	for _, d := range defs {
		if e := d.IdentityGate(); e != nil {
			refused = append(refused, e)
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("flow %s: refusing to publish tables whose updates and deletes cannot be identified "+
			"(once published, the source would reject every UPDATE and DELETE on them); nothing was created or changed on the source. "+
			"Fix each on the source, then run again (trellara preflight --config %s checks every table):\n%w",
			f.Cfg.Flow, f.ConfigPath, errors.Join(refused...))
	}
	return defs, nil
}

// sanitizedList renders tables for SQL, comma-separated.
func sanitizedList(tables []config.TableName) string {
	q := make([]string, len(tables))
	for i, t := range tables {
		q[i] = t.Sanitize()
	}
	return strings.Join(q, ", ")
}
