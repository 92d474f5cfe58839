package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/internal/verify"
)

// ReseedOptions are `trellara reseed`'s.
type ReseedOptions struct {
	// Tables to copy again (config.ParseTableName form); each must be one
	// of the flow's tables.
	Tables []string
	// AllTables copies every table of the flow again (Tables empty). It is
	// the recovery of a sink that lost part of the stream: its cursor past
	// the local log's retention, or its target's checkpoint behind what
	// the log holds (a target restored from an old backup).
	AllTables bool
	// Sink names the target ("" for the flow's only sink).
	Sink string
	// ChunkRows bounds one chunk; 0 means 10000.
	ChunkRows int
	// Wait bounds the wait for the flow's applier (the service's, or the
	// one Reseed runs on a flow at rest) at each watermark; 0 means 5
	// minutes.
	Wait time.Duration
	// Progress is told about each merged chunk.
	Progress func(apply.ReseedProgress)
}

// ReseedTable is one table's reseed: the copy and the verify after its
// handoff.
type ReseedTable struct {
	apply.ReseedResult
	Verdict verify.Verdict `json:"verdict"`
	Reasons []string       `json:"reasons"`
}

// ReseedResult is `trellara reseed`'s result.
type ReseedResult struct {
	Flow   string        `json:"flow"`
	Sink   string        `json:"sink"`
	Tables []ReseedTable `json:"tables"`
}

// Converged reports whether every table verified CONVERGED.
func (r *ReseedResult) Converged() bool {
	for _, t := range r.Tables {
		if t.Verdict != verify.Converged {
			return false
		}
	}
	return len(r.Tables) > 0
}

// RenderText prints one line per table.
func (r *ReseedResult) RenderText(w io.Writer) {
	for _, t := range r.Tables {
		how := "copied"
		if t.Resumed {
			how = "resumed and copied"
		}
		fmt.Fprintf(w, "%s %s: reseed %d %s %d rows in %d chunks, handed off; verify %s\n", t.Verdict, t.Relation, t.ID, how, t.Rows, t.Chunks, t.Verdict)
		for _, why := range t.Reasons {
			fmt.Fprintf(w, "  %s\n", why)
		}
	}
}

// ReseedCommand is the command that reseeds table (and resumes its
// unfinished reseed).
func ReseedCommand(configPath, table string) string {
	return shell.Trellara("reseed", configPath, "--table", table)
}

// Reseed copies each of o.Tables again into sink's target while the flow
// keeps running (apply.Reseed: watermarked chunks, a shadow table swapped
// in at the handoff), then verifies the table. The flow's applier applies
// the watermarks: beside a running service that is the service's; on a
// flow at rest Reseed runs the flow's pipeline itself for as long as it
// takes, under the flow's lock, and leaves the flow at rest (withPipeline).
func (f *Flow) Reseed(ctx context.Context, o ReseedOptions) (*ReseedResult, error) {
	s, err := f.Sink(o.Sink)
	if err != nil {
		return nil, err
	}
	if o.AllTables && len(o.Tables) > 0 {
		return nil, fmt.Errorf("flow %s: --all-tables copies every table of the flow and takes no --table (%d given)", f.Cfg.Flow, len(o.Tables))
	}
	if o.AllTables {
		o.Tables = tableStrings(f.Tables())
	}
	if len(o.Tables) == 0 {
		return nil, fmt.Errorf("flow %s: name the table to reseed with --table (or every table with --all-tables)", f.Cfg.Flow)
	}
	var tables []config.TableName
	for _, name := range o.Tables {
		t, err := config.ParseTableName(name)
		if err != nil {
			return nil, err
		}
		found := false
		for _, c := range f.Tables() {
			found = found || c == t
		}
		if !found {
			return nil, fmt.Errorf("flow %s: %s is not one of the flow's tables (%v); reseed copies a table the flow captures", f.Cfg.Flow, t, tableStrings(f.Tables()))
		}
		tables = append(tables, t)
	}
	// A blocked schema change on a table being reseeded is taken over by
	// its reseed; one on another table holds the whole flow, and with it
	// the reseed's watermarks.
	if f.Pins == nil {
		if f.Pins, err = capture.OpenPins(filepath.Join(f.dir, "pins.json")); err != nil {
			return nil, err
		}
	}
	pending, err := f.PendingSchemaChanges()
	if err != nil {
		return nil, err
	}
	blocked, held := map[string]bool{}, map[string]bool{}
	for _, p := range pending {
		blocked[p.Plan.Relation] = true
		held[p.Plan.Relation] = p.Held
	}
	if len(blocked) > 0 && len(f.Sinks()) > 1 {
		// The takeover moves capture on for every sink, and each sink's
		// applier would need its own reseed from the same barrier.
		return nil, fmt.Errorf("flow %s: capture is stopped at a schema change, and a reseed takes one over only on a flow with one sink; "+
			"recover with: %s", f.Cfg.Flow, f.resnapshot())
	}
	for rel := range blocked {
		if !held[rel] && !slices.Contains(tableStrings(tables), rel) {
			return nil, fmt.Errorf("flow %s: capture is stopped at a schema change on %s (see %s), and the whole flow holds there, so no reseed watermark "+
				"can reach the target; reseed that table too: %s", f.Cfg.Flow, rel, shell.Trellara("schema ddl-plan", f.ConfigPath), ReseedCommand(f.ConfigPath, rel))
		}
	}
	res := &ReseedResult{Flow: f.Cfg.Flow, Sink: s.Name, Tables: []ReseedTable{}}
	err = f.withPipeline(ctx, "the reseed", func(ctx context.Context) error {
		return f.reseed(ctx, o, s, tables, blocked, held, res)
	})
	return res, err
}

// reseed is Reseed's copy, handoff and verify of each table, while the
// flow's stream moves (withPipeline).
func (f *Flow) reseed(ctx context.Context, o ReseedOptions, s config.Sink, tables []config.TableName, blocked, held map[string]bool, res *ReseedResult) error {
	src, tgt, closeBoth, err := f.connectBoth(ctx, s)
	if err != nil {
		return err
	}
	defer closeBoth()
	gap, err := f.sinkGap(ctx, s, tgt)
	if err != nil {
		return err
	}
	replaceAll := false
	if gap != nil {
		defer gap.close()
		if !o.AllTables {
			return fmt.Errorf("flow %s: sink %s %s; every table must be copied again: %s", f.Cfg.Flow, s.Name, gap, f.reseedAllCommand(s))
		}
		if len(blocked) > 0 {
			return fmt.Errorf("flow %s: sink %s %s, and capture is stopped at a schema change; recover with: %s", f.Cfg.Flow, s.Name, gap, f.resnapshot())
		}
		if err := f.bridgeGap(ctx, src, tgt, s, tables, gap); err != nil {
			return err
		}
		replaceAll = true
	}
	for _, t := range tables {
		ro := apply.ReseedOptions{
			Flow: f.Cfg.Flow, SourceID: f.Cfg.Source.ID, Schema: s.Target.Schema,
			Table: t, Target: t, ChunkRows: o.ChunkRows, Wait: o.Wait,
			Command: ReseedCommand(f.ConfigPath, t.String()), ConfigPath: f.ConfigPath, Progress: o.Progress,
		}
		if replaceAll {
			ro.Replace, ro.Command = true, f.reseedAllCommand(s)
		}
		if blocked[t.String()] {
			rel := t.String()
			ro.Replace = true
			ro.Recorded = func(int64) error { return f.setReseedTakeover(rel, true) }
		}
		r, err := apply.Reseed(ctx, src, tgt, ro)
		if err == nil && f.reseedTakesOver(t.String()) {
			err = f.setReseedTakeover(t.String(), false)
		}
		if err == nil && held[t.String()] {
			// Handed off: the table is in place in its new shape (the
			// handoff released its hold on the target too).
			err = f.clearHeld(t.String())
		}
		if err != nil {
			return fmt.Errorf("flow %s: %w (resume: %s)", f.Cfg.Flow, err, ro.Command)
		}
		vr, err := f.VerifySink(ctx, s, VerifyOptions{Tables: []string{t.String()}, Wait: o.Wait})
		if err != nil {
			return fmt.Errorf("flow %s: reseed %d of %s handed off, but its verify failed: %w (verify it with %s)",
				f.Cfg.Flow, r.ID, t, err, shell.Trellara("verify", f.ConfigPath, "--table", t.String()))
		}
		rt := ReseedTable{ReseedResult: *r, Verdict: vr.Verdict}
		for _, tr := range vr.Tables {
			rt.Reasons = append(rt.Reasons, tr.Reasons...)
		}
		if vr.Verdict != verify.Behind {
			if err := apply.FinishReseed(ctx, tgt, s.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID, r.ID, vr.Verdict == verify.Converged); err != nil {
				return err
			}
		}
		res.Tables = append(res.Tables, rt)
	}
	return nil
}

// reseedRepairSteps lists the unfinished reseeds of every sink.
func (f *Flow) reseedRepairSteps(ctx context.Context) ([]RepairStep, error) {
	var out []RepairStep
	for _, sk := range f.Sinks() {
		rs, err := f.sinkReseeds(ctx, sk)
		if err != nil {
			return out, err
		}
		for _, r := range rs {
			out = append(out, RepairStep{Kind: "reseed", Table: r.Relation,
				Problem: fmt.Sprintf("reseed %d of %s is unfinished (%s, %d chunks and %d rows merged); the target table is the old copy until its handoff", r.ID, r.Relation, r.Status, r.Chunks, r.Rows),
				Fix:     "resume it (it runs the flow's pipeline itself when no service runs): " + r.Command,
				Then:    "it ends with a verify of the table (CONVERGED or DIVERGED)",
				Command: r.Command,
			})
		}
	}
	return out, nil
}

// sinkReseeds reads sink's unfinished reseeds.
func (f *Flow) sinkReseeds(ctx context.Context, sk config.Sink) ([]apply.ReseedState, error) {
	tgt, err := f.ConnectSink(ctx, sk)
	if err != nil {
		return nil, err
	}
	defer tgt.Close(context.Background())
	return apply.ListReseeds(ctx, tgt, sk.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
}

// reseedNotes are status's lines for sink's unfinished reseeds.
func (f *Flow) reseedNotes(ctx context.Context, tgt apply.DB, sk config.Sink) []string {
	rs, err := apply.ListReseeds(ctx, tgt, sk.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
	if err != nil {
		return []string{"could not read the reseeds in progress: " + err.Error()}
	}
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("reseed %d of %s in progress (%s, %d chunks and %d rows merged); resume it with %s",
			r.ID, r.Relation, r.Status, r.Chunks, r.Rows, r.Command))
	}
	return out
}

// reseedTakeoverPath lists the relations whose blocked schema change a
// reseed has taken over (capture.AssemblerOptions.Accepted).
func (f *Flow) reseedTakeoverPath() string { return filepath.Join(f.dir, "schema-reseed.json") }

// reseedTakesOver reports whether a reseed of relation has taken over its
// blocked schema change: capture goes on under the new shape.
func (f *Flow) reseedTakesOver(relation string) bool {
	rels, err := f.reseedTakeovers()
	if err != nil {
		f.Logger.Warn("could not read the reseeds taking over schema changes", "path", f.reseedTakeoverPath(), "error", err)
		return false
	}
	return slices.Contains(rels, relation)
}

func (f *Flow) reseedTakeovers() ([]string, error) {
	var rels []string
	return rels, readStateJSON(f.reseedTakeoverPath(), &rels)
}

// readStateJSON reads a JSON file of the flow's state directory into v;
// a file that does not exist leaves v as it is.
func readStateJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s is damaged: %w", path, err)
	}
	return nil
}

// setReseedTakeover records (on) or clears relation's takeover, durably:
// the record is written once the reseed and its shadow table exist on the
// target, and cleared after the handoff (by then capture has moved the
// pin past the change).
func (f *Flow) setReseedTakeover(relation string, on bool) error {
	rels, err := f.reseedTakeovers()
	if err != nil {
		return err
	}
	rels = slices.DeleteFunc(rels, func(r string) bool { return r == relation })
	if on {
		rels = append(rels, relation)
	}
	b, _ := json.Marshal(rels)
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return err
	}
	return capture.WriteFileDurable(f.reseedTakeoverPath(), b)
}
