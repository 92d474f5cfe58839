package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/schemachange"
)

// schemaPendingPath holds the schema changes capture stopped at, for
// `trellara schema ddl-plan` and repair-plan.
func (f *Flow) schemaPendingPath() string { return filepath.Join(f.dir, "schema-pending.json") }

// PendingChange is a blocked schema change: its plan and the fingerprint
// pinned when capture stopped at it.
type PendingChange struct {
	Plan   *schemachange.Plan `json:"plan"`
	Pinned string             `json:"pinned_fingerprint"`
	// Held: schema.on_blocked is hold_table and only this table stopped
	// (its hold barrier is durable); the flow goes on.
	Held bool `json:"held,omitempty"`
}

// assemblerOptions are the transaction assembly options of both capture
// paths (the relay and the extension's sidecar): the bounds, the spill
// directory, the schema pins, and the schema policy with the source
// catalog's facts read over src, which must stay open while capture runs.
func (f *Flow) assemblerOptions(ctx context.Context, src *pgx.Conn) capture.AssemblerOptions {
	return capture.AssemblerOptions{
		MemoryBytesMax: int64(f.Cfg.Source.MemoryBytesMax), SpillDir: f.dir, Pins: f.Pins,
		InspectCommand: shell.Trellara("status", f.ConfigPath, "--view", "diagnostics"),
		Catalog: func(relation string) (map[string]schemachange.Facts, error) {
			return capture.CatalogFacts(ctx, src, relation)
		},
		Policy: f.SchemaPolicy,
		NewTable: func(oid uint32, live schemachange.Shape) (capture.NewTableFacts, error) {
			return f.newTableFacts(ctx, src, oid, live)
		},
		Accepted:  f.reseedTakesOver,
		OnBarrier: f.recordBarrierPhase,
		// Holding one table needs the reseed takeover to recover it: its
		// watermarks reach capture on both paths (the extension forwards
		// the prefix trellara. whatever trellara.include_messages says).
		HoldTable:   f.Cfg.Schema.OnBlocked == config.HoldTable,
		Held:        f.tableHeld,
		PlanCommand: shell.Trellara("schema ddl-plan", f.ConfigPath),
		Resnapshot:  f.resnapshot(),
	}
}

// resnapshot is the flow's full re-snapshot recovery, by capture path.
func (f *Flow) resnapshot() string {
	if f.Cfg.Source.Capture == config.CaptureExtension {
		return shell.ResnapshotExtension(f.ConfigPath)
	}
	return shell.Resnapshot(f.ConfigPath)
}

// SchemaPolicy is the classification policy of relation (schema.name as
// capture.RelationName writes it).
func (f *Flow) SchemaPolicy(relation string) schemachange.Policy {
	p := schemachange.Policy{Mode: schemachange.ModeStrict}
	for _, sk := range f.Sinks() {
		if sk.Target != nil && sk.Target.Mode == config.ModePartitioned {
			p.Mode = schemachange.ModePartitioned // a barrier must hold every sink
		}
	}
	for _, t := range f.Tables() {
		if t.String() == relation {
			p.Configured = true
		}
	}
	if a, b := f.semanticsTables(); f.Cfg.Environment != config.Production && (relation == a.String() || relation == b.String()) {
		// `trellara semantics` adds its two probe tables to the
		// publication (never in production): they are the flow's while
		// it runs, not tables new to it.
		p.Configured = true
	}
	for _, r := range f.Cfg.Schema.Renames {
		if r.Table.String() == relation {
			p.Renames = append(p.Renames, schemachange.ColumnRename{From: r.From, To: r.To})
		}
	}
	p.AdmitTables = f.admitsTable(relation)
	return p
}

// renameRecovery is the recovery of a plan blocked only for want of
// schema.renames entries ("" otherwise): the entries to add, and how the
// flow reads them. With them every change of the plan would auto-apply.
func (f *Flow) renameRecovery(pl *schemachange.Plan) string {
	cs := make([]schemachange.Change, len(pl.Changes))
	for i, c := range pl.Changes {
		cs[i] = c.Change
	}
	p := f.SchemaPolicy(pl.Relation)
	missing := schemachange.UnmappedRenames(cs, p)
	table, err := config.ParseTableName(pl.Relation)
	if len(missing) == 0 || err != nil {
		return ""
	}
	p.Renames = append(p.Renames, missing...)
	if !schemachange.AutoApplies(cs, p) {
		return ""
	}
	entries := make([]config.ColumnRename, len(missing))
	for i, m := range missing {
		entries[i] = config.ColumnRename{Table: table, From: m.From, To: m.To}
	}
	return "map the rename in the config (it then flows through a DDL barrier, nothing is copied again): add to " + shell.Config(f.ConfigPath) +
		" (merged into its schema section if it has one)\n" + config.RenamesYAML(entries) +
		"then let the flow read it: send the running service SIGHUP (it reloads its configuration) or start it again (`" +
		shell.Trellara("run", f.ConfigPath) + "`), or run `" + shell.Trellara("run", f.ConfigPath, "--local") + "`"
}

// recordDrift keeps the blocked change err names (if it names one) for
// ddl-plan and repair-plan, and returns err.
func (f *Flow) recordDrift(err error) error {
	var d *capture.SchemaDriftError
	if !errors.As(err, &d) || d.Plan == nil {
		return err
	}
	pending, rerr := f.PendingSchemaChanges()
	if rerr != nil {
		f.Logger.Warn("schema-pending.json unreadable; rewriting it", "error", rerr)
	}
	if len(d.Plan.Commands) == 0 {
		d.Plan.Commands = []string{f.resnapshot()}
	}
	if werr := f.recordPending(pending, PendingChange{Plan: d.Plan, Pinned: fmt.Sprintf("%016x", d.Pinned)}); werr != nil {
		f.Logger.Warn("could not record the pending schema change for ddl-plan", "path", f.schemaPendingPath(), "error", werr)
	}
	return err
}

// recordPending keeps c in schema-pending.json in place of any earlier
// change of its relation, with the reseed first among its recovery
// commands where a reseed can take it over.
func (f *Flow) recordPending(pending []PendingChange, c PendingChange) error {
	if !addTable(c.Plan) && !slices.Contains(c.Plan.Commands, ReseedCommand(f.ConfigPath, c.Plan.Relation)) {
		// First: copying the one table again while the flow runs takes the
		// change over (docs/SCHEMA.md, "Reseed").
		c.Plan.Commands = append([]string{ReseedCommand(f.ConfigPath, c.Plan.Relation)}, c.Plan.Commands...)
	}
	if m := f.renameRecovery(c.Plan); m != "" && !slices.Contains(c.Plan.Commands, m) {
		// First: a rename a mapping would let through needs no copy.
		c.Plan.Commands = append([]string{m}, c.Plan.Commands...)
	}
	keep := []PendingChange{}
	if c.Plan != nil {
		keep = append(keep, c)
	}
	for _, p := range pending {
		if p.Plan.Relation != c.Plan.Relation {
			keep = append(keep, p)
		}
	}
	b, _ := json.MarshalIndent(keep, "", "  ")
	return capture.WriteFileDurable(f.schemaPendingPath(), b)
}

// recordHeld records relation as held (schema.on_blocked: hold_table) at
// the blocked change plan, once its hold barrier is durable.
func (f *Flow) recordHeld(relation string, plan *schemachange.Plan, pinned uint64) error {
	pending, err := f.PendingSchemaChanges()
	if err != nil {
		f.Logger.Warn("schema-pending.json unreadable; rewriting it", "error", err)
	}
	if plan == nil {
		return fmt.Errorf("hold of %s carries no plan", relation)
	}
	p := *plan
	if len(p.Commands) == 0 {
		p.Commands = []string{f.resnapshot()}
	}
	return f.recordPending(pending, PendingChange{Plan: &p, Pinned: fmt.Sprintf("%016x", pinned), Held: true})
}

// clearHeld forgets relation's held change (its reseed handed off).
func (f *Flow) clearHeld(relation string) error {
	pending, err := f.PendingSchemaChanges()
	if err != nil {
		return err
	}
	keep := []PendingChange{}
	for _, p := range pending {
		if p.Plan.Relation != relation {
			keep = append(keep, p)
		}
	}
	b, _ := json.MarshalIndent(keep, "", "  ")
	return capture.WriteFileDurable(f.schemaPendingPath(), b)
}

// tableHeld reports whether relation is held (capture.AssemblerOptions.Held).
func (f *Flow) tableHeld(relation string) bool {
	pending, err := f.PendingSchemaChanges()
	if err != nil {
		f.Logger.Warn("could not read the held tables", "path", f.schemaPendingPath(), "error", err)
		return false
	}
	for _, p := range pending {
		if p.Held && p.Plan.Relation == relation {
			return true
		}
	}
	return false
}

// PendingSchemaChanges are the blocked schema changes capture stopped at
// that are still pending: the relation's pin is still the one the change
// was classified against.
func (f *Flow) PendingSchemaChanges() ([]PendingChange, error) {
	var all []PendingChange
	if err := readStateJSON(f.schemaPendingPath(), &all); err != nil || len(all) == 0 {
		return nil, err
	}
	var out []PendingChange
	var err error
	if f.Pins == nil {
		// A command that opened only the config (verify): read the pins.
		if f.Pins, err = capture.OpenPins(filepath.Join(f.dir, "pins.json")); err != nil {
			return nil, err
		}
	}
	for _, p := range all {
		if p.Plan == nil {
			continue
		}
		fp, ok := f.Pins.Pinned(p.Plan.Relation)
		if ok && fmt.Sprintf("%016x", fp) == p.Pinned || !ok && addTable(p.Plan) {
			// A table new to the flow is pending until it is pinned.
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Plan.Relation < out[j].Plan.Relation })
	return out, nil
}

// DDLPlan is `trellara schema ddl-plan`: every schema change capture is
// stopped at, classified, with the target DDL and the recovery.
type DDLPlan struct {
	Flow    string               `json:"flow"`
	Pending []*schemachange.Plan `json:"pending"`
	Notes   []string             `json:"notes"`
}

// DDLPlan builds the plan from the changes capture recorded.
func (f *Flow) DDLPlan() (*DDLPlan, error) {
	p := &DDLPlan{Flow: f.Cfg.Flow, Pending: []*schemachange.Plan{}, Notes: []string{}}
	pending, err := f.PendingSchemaChanges()
	if err != nil {
		return nil, err
	}
	for _, c := range pending {
		p.Pending = append(p.Pending, c.Plan)
	}
	if len(p.Pending) > 0 {
		p.Notes = append(p.Notes, "a blocked change moves on by the first recovery listed with it: a rename by its schema.renames entry, "+
			"a table new to the flow (add_table) by the full re-snapshot, which copies it with the others, "+
			"otherwise a reseed of the table (it copies the table again in its new shape while the flow runs). After the full re-snapshot "+
			"instead, the target tables keep their old shape: change them to the live column list first, or drop them and let "+
			shell.Trellara("preflight", f.ConfigPath, "--create-target-tables")+" create them")
	}
	return p, nil
}

// RenderText prints the plan.
func (p *DDLPlan) RenderText(w io.Writer) {
	if len(p.Pending) == 0 {
		fmt.Fprintf(w, "flow %s: no pending schema change (compatible changes flow through DDL barriers by themselves)\n", p.Flow)
	}
	for _, pl := range p.Pending {
		fmt.Fprintf(w, "%s: capture stopped at LSN %s (xid %d): %s\n", pl.Relation, pl.LSN, pl.Xid, pl.Kinds())
		fmt.Fprintf(w, "  pinned columns: %s\n", columnList(pl.Pinned))
		fmt.Fprintf(w, "  live columns:   %s\n", columnList(pl.Live))
		for _, c := range pl.Changes {
			fmt.Fprintf(w, "  - %s", c.Kind)
			if c.From != "" {
				fmt.Fprintf(w, " from %s", c.From)
			}
			if c.To != "" {
				fmt.Fprintf(w, " to %s", c.To)
			}
			fmt.Fprintf(w, "\n    compatibility %s · decision %s · mode %s: %s\n", c.Classification.Compatibility,
				c.Classification.Decision, c.Classification.Mode, c.Classification.Why)
			ddl := c.TargetDDL
			if ddl == "" {
				ddl = "none (Trellara does not apply this change)"
			}
			fmt.Fprintf(w, "    target DDL: %s\n", ddl)
		}
		if pl.Holds != "" {
			fmt.Fprintf(w, "  %s\n", pl.Holds)
		}
		for _, c := range pl.Commands {
			// A recovery may hold a YAML block: indent its lines under it.
			fmt.Fprintf(w, "  recovery: %s\n", strings.ReplaceAll(c, "\n", "\n      "))
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func columnList(sh schemachange.Shape) string {
	if len(sh.Columns) == 0 {
		return "(not kept: the pin predates shape pinning)"
	}
	parts := make([]string, len(sh.Columns))
	for i, c := range sh.Columns {
		t := c.Type()
		if t == "" {
			t = fmt.Sprintf("type oid %d", c.TypeOID)
		}
		parts[i] = c.Name + " " + t
		if c.Key {
			parts[i] += " key"
		}
	}
	return strings.Join(parts, ", ")
}

// schemaRepairSteps are repair-plan's steps for the pending schema changes.
func (f *Flow) schemaRepairSteps() ([]RepairStep, error) {
	pending, err := f.PendingSchemaChanges()
	if err != nil {
		return nil, err
	}
	var out []RepairStep
	for _, c := range pending {
		pl := c.Plan
		problem := fmt.Sprintf("capture stopped at a schema change on %s at LSN %s: %s (blocked; %s)", pl.Relation, pl.LSN, pl.Kinds(), pl.Holds)
		if c.Held {
			problem = fmt.Sprintf("%s is HELD at a schema change at LSN %s: %s (blocked; %s)", pl.Relation, pl.LSN, pl.Kinds(), pl.Holds)
		}
		out = append(out, RepairStep{Kind: "schema_change", Table: pl.Relation, LSN: pl.LSN,
			Problem: problem,
			Fix:     f.schemaFix(pl),
			Then:    "see the classified change and its target DDL with " + shell.Trellara("schema ddl-plan", f.ConfigPath),
			Command: shell.Trellara("schema ddl-plan", f.ConfigPath),
		})
	}
	return out, nil
}

// drainBeforeBarrier lets every sink's applier apply every unit already in
// the log when capture stopped at a blocked schema change (captureErr), so
// each target holds every transaction before the change: the stop is at
// the barrier, not wherever an applier happened to be. It returns when the
// slowest applier has reached the log's end, ctx ends, or the appliers make
// no progress for drainStall.
func (f *Flow) drainBeforeBarrier(ctx context.Context, captureErr error, appliers []*apply.Applier) {
	var d *capture.SchemaDriftError
	if !errors.As(captureErr, &d) || f.Log == nil || len(appliers) == 0 {
		return
	}
	end := f.Log.NextOffset()
	slowest := func() apply.Checkpoint {
		low := appliers[0].Checkpoint()
		for _, a := range appliers[1:] {
			if cp := a.Checkpoint(); !cp.HasOffset || (low.HasOffset && cp.Offset < low.Offset) {
				low = cp
			}
		}
		return low
	}
	last, since := slowest(), time.Now()
	for {
		cp := slowest()
		if (cp.HasOffset && cp.Offset+1 >= end) || ctx.Err() != nil {
			return
		}
		if cp != last {
			last, since = cp, time.Now()
		} else if time.Since(since) > drainStall {
			f.Logger.Warn("an applier did not reach the schema change's barrier", "flow", f.Cfg.Flow,
				"applied_offset", cp.Offset, "log_end", end)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// drainStall bounds drainBeforeBarrier's wait for an applier that has
// stopped moving (a quarantine, a target that is down).
const drainStall = 30 * time.Second

// schemaFix is repair-plan's fix for the blocked plan pl: its mapping
// when a schema.renames entry would let it through, else blockedFix.
func (f *Flow) schemaFix(pl *schemachange.Plan) string {
	if m := f.renameRecovery(pl); m != "" {
		return m + "; or " + f.blockedFix(pl.Relation)
	}
	return f.blockedFix(pl.Relation)
}

// blockedFix is the recovery of a blocked change on relation.
func (f *Flow) blockedFix(relation string) string {
	return "copy the table again in its new shape while the flow runs (the reseed takes the change over; other tables keep their data): " +
		ReseedCommand(f.ConfigPath, relation) + "; or copy every table again: " + f.resnapshot()
}

// addTable reports whether plan is a table new to the flow: a reseed
// cannot copy it (it is not one of the flow's tables, and the target has
// no table of it), so its recovery is the full re-snapshot.
func addTable(plan *schemachange.Plan) bool {
	return len(plan.Changes) == 1 && plan.Changes[0].Kind == schemachange.AddTable
}
