package apply

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/pgcatalog"
)

// AddTableDetail is the DDLEvent detail of an add_table barrier: the
// source's definition of a table joining the flow. The applier creates the
// target table from it (createTable) with pgcatalog.TableDef.CreateSQL, as a reseed
// creates its shadow table from the source's definition.
func AddTableDetail(def pgcatalog.TableDef) (string, error) {
	def.Partitions = nil // the root is the relation the stream writes
	b, err := json.Marshal(def)
	if err != nil {
		return "", fmt.Errorf("apply: encode the definition of %s: %w", def, err)
	}
	return string(b), nil
}

// createTable runs an add_table barrier's DDL in this transaction: the
// target table (under its mapped name, in its schema) from the source
// definition the event carries. CREATE … IF NOT EXISTS: a barrier emitted
// again after a crash changes nothing.
func (x *pgTx) createTable(ctx context.Context, ui int, env *pb.Envelope, d *pb.DDLEvent) error {
	var rel *pb.Relation
	for _, r := range env.Relations {
		if relationName(r) == d.Relation {
			rel = r
		}
	}
	var def pgcatalog.TableDef
	if rel == nil || json.Unmarshal([]byte(d.Detail), &def) != nil || len(def.Columns) == 0 {
		return fmt.Errorf("apply: DDL barrier at commit LSN %s: add_table of %s carries no relation of the unit or no table definition",
			envelope.FormatLSN(env.CommitLsn), d.Relation)
	}
	p := x.t.plan(rel)
	def.Schema, def.Name = p.targetSchema, p.targetName
	stmt := fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS %s", pgx.Identifier{def.Schema}.Sanitize())
	if _, err := x.tx.Exec(ctx, stmt); err != nil {
		return x.t.refusal(ctx, ui, p.source, err)
	}
	if _, err := x.tx.Exec(ctx, def.CreateSQL()); err != nil {
		return x.t.refusal(ctx, ui, p.source, err)
	}
	return nil
}
