package flow

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/internal/verify"
	"github.com/trellara/trellara/lsn"
)

// RepairStep is one thing to do, in order.
// Problem, Fix and Then are prose; the other fields carry the same facts
// for scripts: the table concerned, the SQLSTATE and commit LSN of a
// quarantined transaction ("" when not applicable), and Command, the one
// command to run after the fix.
type RepairStep struct {
	Kind     string `json:"kind"` // schema_change, quarantine, diverged, past_retention, ...
	Table    string `json:"table"`
	SQLState string `json:"sqlstate"`
	LSN      string `json:"lsn"`
	Problem  string `json:"problem"`
	Fix      string `json:"fix"`
	Then     string `json:"then"`
	Command  string `json:"command"`
}

// RepairPlan is `trellara repair-plan`: what is wrong with a flow and the
// commands that recover it, from the target's quarantine and the last
// verify result.
type RepairPlan struct {
	Flow  string       `json:"flow"`
	Steps []RepairStep `json:"steps"`
	Notes []string     `json:"notes"`
}

// RenderText prints the numbered plan.
func (p *RepairPlan) RenderText(w io.Writer) {
	if len(p.Steps) == 0 {
		fmt.Fprintf(w, "flow %s: nothing to repair (no open quarantine, last verify not diverged)\n", p.Flow)
	}
	for i, s := range p.Steps {
		fmt.Fprintf(w, "%d. %s\n   fix:  %s\n   then: %s\n", i+1, s.Problem, s.Fix, s.Then)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// sqlstateFix suggests a fix by SQLSTATE class.
func sqlstateFix(state, relation, configPath string) string {
	switch {
	case state == "42P01":
		return fmt.Sprintf("create %s on the target (%s creates it from the source definition)", relation,
			shell.Trellara("preflight", configPath, "--create-target-tables"))
	case state == "42703":
		return fmt.Sprintf("add the missing column to %s on the target (the source gained it; see %s)", relation, shell.Trellara("preflight", configPath))
	case strings.HasPrefix(state, "23"):
		return fmt.Sprintf("the target's %s rejects the source's row (integrity constraint violation, SQLSTATE %s): a target row already holds the key or value (rows the flow did not write, e.g. left by an earlier run), or a constraint exists only on the target; remove the conflicting target row, or the target-only constraint", relation, state)
	case strings.HasPrefix(state, "22"):
		return fmt.Sprintf("a value does not fit %s's target column type (%s): align the target column type with the source", relation, state)
	case state == "":
		return "the target row the change addresses is missing or different (a divergence): inspect with " + shell.Trellara("verify", configPath, "--table", relation)
	default:
		return "see the error; fix the target so the statement can succeed"
	}
}

// RepairPlan builds the plan.
func (f *Flow) RepairPlan(ctx context.Context) (*RepairPlan, error) {
	p := &RepairPlan{Flow: f.Cfg.Flow, Steps: []RepairStep{}, Notes: []string{}}
	rerunCmd := shell.Trellara("run", f.ConfigPath, "--local", "--verify")
	rerun := rerunCmd + "   (the applier retries the quarantined transaction first; it is marked replayed once it applies)"
	for _, sk := range f.Sinks() {
		tgt, err := f.ConnectSink(ctx, sk)
		if err != nil {
			return nil, err
		}
		st, err := apply.ReadStatus(ctx, tgt, sk.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
		tgt.Close(context.Background())
		if err != nil {
			return nil, err
		}
		where := ""
		if len(f.Sinks()) > 1 {
			where = "sink " + sk.Name + ": "
		}
		for _, q := range st.Quarantine {
			p.Steps = append(p.Steps, RepairStep{Kind: "quarantine", Table: q.Relation, SQLState: q.SQLState, LSN: lsn.Format(q.CommitLSN),
				Problem: where + fmt.Sprintf("quarantined %s at commit %s on %s: %s (%d attempts)", q.Unit, lsn.Format(q.CommitLSN), q.Relation, withSQLState(q.Error, q.SQLState), q.Attempts),
				Fix:     sqlstateFix(q.SQLState, q.Relation, f.ConfigPath),
				Then:    rerun,
				Command: rerunCmd,
			})
		}
	}
	// Partition changes first: they explain a divergence or quarantine
	// on the table, and their recovery covers both.
	partSteps, err := f.partitionRepairSteps(ctx)
	if err != nil {
		p.Notes = append(p.Notes, "could not compare the source's partitions with the snapshot's: "+err.Error())
	}
	p.Steps = append(partSteps, p.Steps...)
	// A schema change first: capture stopped there, and nothing after it
	// reaches the target until it is resolved.
	schemaSteps, err := f.schemaRepairSteps()
	if err != nil {
		p.Notes = append(p.Notes, "could not read the pending schema changes: "+err.Error())
	}
	p.Steps = append(append([]RepairStep{}, schemaSteps...), p.Steps...)
	reseedSteps, err := f.reseedRepairSteps(ctx)
	if err != nil {
		p.Notes = append(p.Notes, "could not read the reseeds in progress: "+err.Error())
	}
	p.Steps = append(p.Steps, reseedSteps...)
	st, err := f.Status(ctx, "report")
	for _, ss := range st.sinksOrNone(err) {
		lv := ss.LastVerify
		if lv == nil {
			continue
		}
		where := ""
		if len(st.Sinks) > 1 {
			where = "sink " + ss.Sink + ": "
		}
		if s, ok := behindStep(lv, f.ConfigPath); ok {
			s.Problem = where + s.Problem
			p.Steps = append(p.Steps, s)
		}
		for _, t := range lv.Tables {
			if t.Verdict != verify.Diverged {
				continue // a BEHIND table is not a divergence: behindStep covers it
			}
			at := ""
			if w := lv.Watermark; w != nil {
				at = w.SourceLSN.String()
			}
			p.Steps = append(p.Steps, RepairStep{Kind: "diverged", Table: t.Table, LSN: at,
				Problem: where + fmt.Sprintf("%s diverged at the last verify: %s", t.Table, strings.Join(t.Reasons, "; ")),
				Fix:     "copy the table again (beside the running service, or running the pipeline itself at rest): " + ReseedCommand(f.ConfigPath, t.Table),
				Then:    "the reseed ends with a verify of the table (CONVERGED or DIVERGED)",
				Command: ReseedCommand(f.ConfigPath, t.Table),
			})
		}
	}
	if err == nil {
		for _, c := range st.Log.Cursors {
			if c.PastRetention {
				step := RepairStep{Kind: "past_retention",
					Problem: fmt.Sprintf("consumer %s is past the local log's retention at offset %d; the log no longer holds what it has not applied", c.Name, c.Offset),
					Fix:     shell.Resnapshot(f.ConfigPath),
					Then:    verifyAfterRun(f.ConfigPath),
					Command: verify.CatchUpCommand(f.ConfigPath),
				}
				for _, sk := range f.Sinks() {
					if sk.Cursor() == c.Name {
						cmd := f.reseedAllCommand(sk)
						step.Problem = fmt.Sprintf("sink %s (cursor %s) is past the local log's retention at offset %d; the log no longer holds what it has not applied", sk.Name, c.Name, c.Offset)
						step.Fix = "copy every table of the sink again (the slot and the other sinks are kept): " + cmd + "; or " + shell.Resnapshot(f.ConfigPath)
						step.Then, step.Command = "the reseed ends with a verify of each table (CONVERGED or DIVERGED)", cmd
					}
				}
				p.Steps = append(p.Steps, step)
			}
		}
	}
	return p, nil
}

// sinksOrNone is st's sinks, or none when the status could not be read.
func (st *Status) sinksOrNone(err error) []SinkStatus {
	if err != nil || st == nil {
		return nil
	}
	return st.Sinks
}

// verifyAfterRun is the check after a recovery that ends in a bounded run:
// a standalone verify of a stopped pipeline answers BEHIND, since nothing
// applies its fence, so the run verifies while its applier still runs.
func verifyAfterRun(configPath string) string {
	return verify.CatchUpCommand(configPath) + "   (verifies at a common watermark; expect CONVERGED, exit 0)"
}

// behindStep is the one step for a last verify that found the target short
// of its watermark: catch up, never re-copy, since nothing was shown to
// differ at a common watermark.
func behindStep(r *verify.Result, configPath string) (RepairStep, bool) {
	if r.Verdict != verify.Behind {
		return RepairStep{}, false
	}
	at := ""
	if w := r.Watermark; w != nil {
		at = w.SourceLSN.String()
	}
	return RepairStep{Kind: "behind", LSN: at, Command: verify.CatchUpCommand(configPath),
		Problem: fmt.Sprintf("the last verify (%s) found the target behind, not diverged: %s",
			r.StartedAt.Format(time.RFC3339), strings.TrimPrefix(r.Headline(), "BEHIND: ")),
		Fix: verify.CatchUpAdvice(configPath),
		Then: "the run ends with its own verify: expect CONVERGED (exit 0); DIVERGED there is a difference at a common watermark, and " +
			shell.Trellara("repair-plan", configPath) + " plans its repair",
	}, true
}
