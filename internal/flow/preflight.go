package flow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/pgcatalog"
	"github.com/trellara/trellara/relay"
)

// Check is one preflight item: what was checked, whether it passed, and
// the exact fix when it did not.
type Check struct {
	Name   string `json:"name"`
	Table  string `json:"table"` // schema.name for per-table checks; "" otherwise
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// PreflightReport is `trellara preflight`.
type PreflightReport struct {
	Flow   string  `json:"flow"`
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
}

// RenderText prints one line per check.
func (r *PreflightReport) RenderText(w io.Writer) {
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s  %-22s %s\n", mark, c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(w, "      fix: %s\n", c.Fix)
		}
	}
	if r.OK {
		fmt.Fprintf(w, "\npreflight passed for flow %s\n", r.Flow)
	} else {
		fmt.Fprintf(w, "\npreflight failed for flow %s\n", r.Flow)
	}
}

// Preflight checks everything a run needs, read-only except that
// createTables creates missing target tables from the source definitions.
func (f *Flow) Preflight(ctx context.Context, createTables bool) *PreflightReport {
	r := &PreflightReport{Flow: f.Cfg.Flow, OK: true, Checks: []Check{}}
	add := func(c Check) {
		r.Checks = append(r.Checks, c)
		r.OK = r.OK && c.OK
	}
	src, err := f.ConnectSource(ctx)
	if err != nil {
		add(Check{Name: "source connection", Detail: err.Error(), Fix: "check source.database_url and that the server accepts the connection (pg_hba.conf)"})
		return r
	}
	defer src.Close(context.Background())
	var version, walLevel string
	_ = src.QueryRow(ctx, `SHOW server_version`).Scan(&version)
	add(Check{Name: "source connection", OK: true, Detail: "PostgreSQL " + version})
	if err := src.QueryRow(ctx, `SHOW wal_level`).Scan(&walLevel); err == nil {
		c := Check{Name: "wal_level", OK: walLevel == "logical", Detail: walLevel}
		if !c.OK {
			c.Fix = "ALTER SYSTEM SET wal_level = 'logical'; then restart PostgreSQL"
		}
		add(c)
	}
	var canReplicate bool
	_ = src.QueryRow(ctx, `SELECT rolsuper OR rolreplication OR pg_has_role(current_user, 'rds_replication', 'member') IS TRUE
		FROM pg_roles WHERE rolname = current_user`).Scan(&canReplicate)
	if !canReplicate {
		// pg_has_role errors when the role does not exist; retry without it.
		_ = src.QueryRow(ctx, `SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user`).Scan(&canReplicate)
	}
	c := Check{Name: "replication privilege", OK: canReplicate, Detail: "current role may start logical replication"}
	if !canReplicate {
		c.Detail = "current role has neither REPLICATION nor superuser"
		c.Fix = "ALTER ROLE <role> WITH REPLICATION (on managed services: the provider's replication role)"
	}
	add(c)

	var pluginLibs string
	if err := src.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = 'output_plugin_libraries'`).Scan(&pluginLibs); err == nil {
		ok := strings.Contains(pluginLibs, "pgoutput")
		c := Check{Name: "output_plugin_libraries", OK: ok, Detail: pluginLibs}
		if !ok {
			c.Fix = "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput','test_decoding'; SELECT pg_reload_conf();"
		}
		add(c)
	}

	extension := f.Cfg.Source.Capture == config.CaptureExtension
	if !extension {
		si, err := relay.LookupSlot(ctx, src, f.Cfg.Source.Slot)
		switch {
		case err != nil:
			add(Check{Name: "slot", Detail: err.Error()})
		case si.Exists && si.Plugin != "pgoutput":
			add(Check{Name: "slot", Detail: fmt.Sprintf("%s uses plugin %s", f.Cfg.Source.Slot, si.Plugin),
				Fix: fmt.Sprintf("drop it (SELECT pg_drop_replication_slot('%s')) or configure another source.slot", f.Cfg.Source.Slot)})
		case si.Exists:
			add(Check{Name: "slot", OK: true, Detail: fmt.Sprintf("%s exists (confirmed %s, wal_status %s)", f.Cfg.Source.Slot, lsn.Format(si.ConfirmedFlush), si.WALStatus)})
		case f.Cfg.Source.OwnsSlot:
			var free int
			_ = src.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int - count(*) FROM pg_replication_slots`).Scan(&free)
			c := Check{Name: "slot", OK: free > 0, Detail: fmt.Sprintf("%s will be created on first run (%d slots free)", f.Cfg.Source.Slot, free)}
			if free <= 0 {
				c.Fix = "raise max_replication_slots (restart required) or drop an unused slot"
			}
			add(c)
		default:
			add(Check{Name: "slot", Detail: f.Cfg.Source.Slot + " does not exist and source.owns_slot is false",
				Fix: fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput'); or set source.owns_slot: true", f.Cfg.Source.Slot)})
		}
	}

	if err := f.resolveTables(ctx, src); err != nil {
		add(Check{Name: "source schemas", Detail: err.Error(), Fix: "check source.schemas and the role's access to the source catalog"})
		return r
	}
	if len(f.Cfg.Source.Schemas) > 0 {
		c := Check{Name: "source schemas", OK: true, Detail: fmt.Sprintf("%s captured whole: %d tables now",
			strings.Join(f.Cfg.Source.Schemas, ", "), len(f.Tables())-len(f.Cfg.Source.Tables))}
		if err := f.needs15(ctx, src); err != nil {
			c.OK, c.Detail, c.Fix = false, err.Error(), "list the tables in source.tables instead of source.schemas"
		}
		add(c)
	}
	if extension {
		f.preflightExtension(ctx, src, add)
	} else {
		var pubExists bool
		_ = src.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, f.Cfg.Source.Publication).Scan(&pubExists)
		switch {
		case pubExists:
			c := Check{Name: "publication", OK: true, Detail: f.Cfg.Source.Publication + " exists"}
			if len(f.Cfg.Source.Schemas) > 0 {
				problem, fix, err := f.missingSchemas(ctx, src)
				switch {
				case err != nil:
					c.OK, c.Detail = false, err.Error()
				case problem != "":
					c.OK, c.Detail, c.Fix = false, problem, fix
				}
			}
			// The same rule run applies to an existing publication.
			if err := relay.CheckViaRoot(ctx, src, f.Cfg.Source.Publication, f.Tables()); err != nil {
				c.OK, c.Detail = false, err.Error()
				var vr *relay.ViaRootError
				if errors.As(err, &vr) {
					c.Fix = vr.Fix
				}
			}
			add(c)
		case f.Cfg.Source.OwnsSlot:
			add(Check{Name: "publication", OK: true, Detail: f.Cfg.Source.Publication + " will be created on first run"})
		default:
			add(Check{Name: "publication", Detail: f.Cfg.Source.Publication + " does not exist",
				Fix: f.publicationSQL()})
		}

	}

	defs, err := pgcatalog.ReadTables(ctx, src, f.Tables())
	if err != nil {
		add(Check{Name: "source tables", Detail: err.Error(), Fix: "create the table or correct source.tables"})
		return r
	}
	for _, d := range defs {
		// The same gate run applies before it creates a publication.
		c := Check{Name: "source table", Table: d.Schema + "." + d.Name, OK: true, Detail: fmt.Sprintf("%s: %s", d, d.IdentityText())}
		if n := len(d.Partitions); n > 0 {
			c.Detail += fmt.Sprintf("; partitioned (%d leaf partitions), copied and streamed through %s", n, d)
		}
		if e := d.IdentityGate(); e != nil {
			c.OK = false
			c.Detail = fmt.Sprintf("%s %s", d, e.Problem)
			c.Fix = e.Fix
		}
		add(c)
	}
	if len(f.Sinks()) == 0 {
		// A capture-only flow is valid (its consumers read the log or the
		// topic), but run --local and verify need a target: say so before
		// the run does, and fail an evaluation flow, which exists to apply.
		add(Check{Name: "target", OK: !f.Cfg.Run.Evaluate, Detail: noTargetProblem(f.Cfg.Flow), Fix: noTargetFix})
	}
	for _, sk := range f.Sinks() {
		f.preflightSink(ctx, sk, defs, createTables, add)
	}
	return r
}

// ErrNoTarget is the error of a command that needs a target run on flow, a
// capture-only flow: the problem and the one recipe that fixes it.
func ErrNoTarget(flow string) error {
	return fmt.Errorf("target: %s; fix: %s", noTargetProblem(flow), noTargetFix)
}

// noTargetFix is the one recipe for a flow with no target section.
const noTargetFix = "add a target to the config: `target: {database_url: {env: TRELLARA_TARGET_URL}, create_tables: true}`, then `export TRELLARA_TARGET_URL=postgres://USER:PASSWORD@HOST:5432/DATABASE` (an empty database; createdb makes one)"

func noTargetProblem(flow string) string {
	return fmt.Sprintf("none: flow %s only captures (run --role relay, consumers of its log); run --local, verify and the applier need a target", flow)
}

// preflightSink checks sink sk's target: connection, tables and, before
// the initial snapshot, rows already there.
func (f *Flow) preflightSink(ctx context.Context, sk config.Sink, defs []pgcatalog.TableDef, createTables bool, add func(Check)) {
	name := func(n string) string {
		if len(f.Sinks()) > 1 {
			return n + " (sink " + sk.Name + ")"
		}
		return n
	}
	tgt, err := f.ConnectSink(ctx, sk)
	if err != nil {
		add(Check{Name: name("target connection"), Detail: err.Error(), Fix: "check the sink's target.database_url"})
		return
	}
	defer tgt.Close(context.Background())
	add(Check{Name: name("target connection"), OK: true, Detail: "connected"})
	mism, err := apply.ValidateTables(ctx, tgt, defs)
	if err != nil {
		add(Check{Name: name("target tables"), Detail: err.Error()})
		return
	}
	if len(mism) > 0 && (createTables || sk.Target.CreateTables) {
		if err := apply.CreateTables(ctx, tgt, defs); err != nil {
			add(Check{Name: name("target tables"), Detail: err.Error()})
			return
		}
		if mism, err = apply.ValidateTables(ctx, tgt, defs); err != nil {
			add(Check{Name: name("target tables"), Detail: err.Error()})
			return
		}
	}
	if len(mism) == 0 {
		add(Check{Name: name("target tables"), OK: true, Detail: fmt.Sprintf("%d tables match the source", len(defs))})
	}
	for _, m := range mism {
		add(Check{Name: name("target table"), Table: m.Table, Detail: strings.TrimSuffix(m.String(), "; fix: "+m.Fix), Fix: m.Fix})
	}
	// Before the initial snapshot, a target table holding rows is the run's
	// own refusal (refuseFilledTargets), reported here first.
	if _, err := os.Stat(f.snapshotDonePath()); errors.Is(err, fs.ErrNotExist) {
		ours, foreign, err := f.filledTargets(ctx, tgt, sk)
		switch {
		case err != nil:
			add(Check{Name: name("target rows"), Detail: err.Error()})
		case len(foreign)+len(ours) > 0:
			for _, t := range foreign {
				one := []config.TableName{t}
				add(Check{Name: name("target rows"), Table: t.String(), Detail: foreignRowsProblem(one), Fix: f.foreignRowsFix(one)})
			}
			for _, t := range ours {
				add(Check{Name: name("target rows"), Table: t.String(), Detail: ourRowsProblem([]config.TableName{t}), Fix: f.ourRowsFix()})
			}
		default:
			add(Check{Name: name("target rows"), OK: true, Detail: "the target tables are empty, ready for the initial snapshot"})
		}
	}
}
