package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/internal/verify"
	"github.com/trellara/trellara/lsn"
)

// A DDL barrier's propagation contract (docs/SCHEMA.md, "The propagation
// contract"): its id, the sinks it must reach, and its phases in order —
// published (the unit carrying it is durable in the log), pin moved, then
// per sink applied (the target DDL and the first rows of the new shape
// committed, with the checkpoint). Capture records the first two in the
// flow's state directory (barriers.json); each sink's applier records the
// last on its target, in the barrier's own transaction
// (apply.BarrierAck). Status joins them.

// Barrier phases, in order.
const (
	PhasePublished = capture.BarrierPublished
	PhasePinMoved  = capture.BarrierPinMoved
	PhaseHeld      = capture.BarrierHeld // a hold barrier's, in place of pin_moved
	PhaseApplied   = "applied"           // per sink
)

// barriersKeptMax bounds the barriers kept in barriers.json and shown.
const barriersKeptMax = 32

func (f *Flow) barriersPath() string { return filepath.Join(f.dir, "barriers.json") }

// barrierRecord is capture's side of one barrier.
type barrierRecord struct {
	ID          string     `json:"id"`
	Relation    string     `json:"relation"`
	CommitLSN   string     `json:"commit_lsn"`
	Kinds       []string   `json:"kinds"`
	DDL         []string   `json:"target_ddl"`
	Sinks       []string   `json:"sinks"`
	PublishedAt *time.Time `json:"published_at"`
	PinMovedAt  *time.Time `json:"pin_moved_at"`
	HeldAt      *time.Time `json:"held_at,omitempty"`
}

// barrierFileMu serialises barriers.json's read-modify-write: capture may
// record from its publisher's goroutine.
var barrierFileMu sync.Mutex

// recordBarrierPhase is capture.AssemblerOptions.OnBarrier: it records
// phase of b durably, with the time it happened and the sinks b affects.
func (f *Flow) recordBarrierPhase(b capture.Barrier, phase string) error {
	barrierFileMu.Lock()
	defer barrierFileMu.Unlock()
	recs, err := f.barrierRecords()
	if err != nil {
		f.Logger.Warn("barriers.json unreadable; rewriting it", "path", f.barriersPath(), "error", err)
		recs = nil
	}
	var r *barrierRecord
	for i := range recs {
		if recs[i].ID == b.ID {
			r = &recs[i]
		}
	}
	if r == nil {
		nr := barrierRecord{ID: b.ID, Relation: b.Relation, CommitLSN: envelope.FormatLSN(b.CommitLSN), Kinds: []string{}, DDL: []string{}, Sinks: []string{}}
		for _, d := range b.Events {
			nr.Kinds = append(nr.Kinds, d.Kind)
			if d.Column != "" && d.Detail != "" {
				nr.DDL = append(nr.DDL, d.Detail)
			}
		}
		for _, sk := range f.Sinks() {
			nr.Sinks = append(nr.Sinks, sk.Name)
		}
		recs = append(recs, nr)
		r = &recs[len(recs)-1]
	}
	now := time.Now().UTC()
	switch phase {
	case PhasePublished:
		r.PublishedAt = &now
	case PhasePinMoved:
		r.PinMovedAt = &now
	case PhaseHeld:
		// Held only once the hold barrier is durable (published above).
		var pinned uint64
		for _, d := range b.Events {
			pinned = d.OldFingerprint
		}
		if err := f.recordHeld(b.Relation, b.Plan, pinned); err != nil {
			return err
		}
		r.HeldAt = &now
	default:
		return fmt.Errorf("unknown barrier phase %q", phase)
	}
	if len(recs) > barriersKeptMax {
		recs = recs[len(recs)-barriersKeptMax:]
	}
	buf, _ := json.MarshalIndent(recs, "", "  ")
	return capture.WriteFileDurable(f.barriersPath(), buf)
}

func (f *Flow) barrierRecords() ([]barrierRecord, error) {
	var recs []barrierRecord
	return recs, readStateJSON(f.barriersPath(), &recs)
}

// BarrierContract is one barrier's propagation contract as status shows it.
type BarrierContract struct {
	ID        string   `json:"id"`
	Relation  string   `json:"relation"`
	CommitLSN string   `json:"commit_lsn"`
	Kinds     []string `json:"kinds"`
	TargetDDL []string `json:"target_ddl"`
	// Sinks are the sinks the barrier must reach (the flow's sinks when
	// it was published).
	Sinks  []string       `json:"sinks"`
	Phases []BarrierPhase `json:"phases"`
	Acks   []BarrierAck   `json:"acks"`
	// Complete: every phase done, every sink acknowledged.
	Complete bool `json:"complete"`
}

// BarrierPhase is one phase of a contract, in order.
type BarrierPhase struct {
	Phase string     `json:"phase"`
	Sink  string     `json:"sink,omitempty"`
	Done  bool       `json:"done"`
	At    *time.Time `json:"at"`
}

// BarrierAck is one sink's acknowledgement: its target recorded the
// barrier in the barrier's own transaction and its checkpoint is at or
// past the barrier's commit LSN.
type BarrierAck struct {
	Sink         string     `json:"sink"`
	Acknowledged bool       `json:"acknowledged"`
	AppliedAt    *time.Time `json:"applied_at"`
	// VisibilityPauseMillis is how long the barrier's target transaction
	// held the table, from its DDL to its commit; null when unknown.
	VisibilityPauseMillis *float64 `json:"visibility_pause_ms"`
	CheckpointCommitLSN   string   `json:"checkpoint_commit_lsn"`
	// Released is when a hold barrier's table was released by its
	// reseed's handoff.
	ReleasedAt *time.Time `json:"released_at,omitempty"`
}

// sinkBarriers is what one sink's target says about barriers.
type sinkBarriers struct {
	sink       string
	checkpoint uint64
	acks       map[string]apply.BarrierAck
	err        error
}

// readSinkBarriers reads sink's barrier rows and checkpoint over tgt.
func (f *Flow) readSinkBarriers(ctx context.Context, tgt apply.DB, sinkName, schema string, checkpoint uint64) sinkBarriers {
	sb := sinkBarriers{sink: sinkName, checkpoint: checkpoint, acks: map[string]apply.BarrierAck{}}
	rows, err := apply.ListBarriers(ctx, tgt, schema, f.Cfg.Flow, f.Cfg.Source.ID, barriersKeptMax)
	if err != nil {
		sb.err = err
		return sb
	}
	for _, r := range rows {
		sb.acks[r.ID] = r
	}
	return sb
}

// barrierContracts joins capture's records with each sink's
// acknowledgements, oldest first.
func (f *Flow) barrierContracts(sinks []sinkBarriers) ([]BarrierContract, []string) {
	var notes []string
	recs, err := f.barrierRecords()
	if err != nil {
		notes = append(notes, "barriers: "+err.Error())
	}
	byID := map[string]*barrierRecord{}
	for i := range recs {
		byID[recs[i].ID] = &recs[i]
	}
	// A barrier a target recorded that capture's record no longer keeps
	// (or lost) is still shown, its capture phases unknown.
	for _, sb := range sinks {
		if sb.err != nil {
			notes = append(notes, fmt.Sprintf("sink %s: could not read its DDL barriers: %v", sb.sink, sb.err))
		}
		for id, a := range sb.acks {
			if byID[id] == nil {
				r := barrierRecord{ID: id, Relation: a.Relation, CommitLSN: lsn.Format(a.CommitLSN), Kinds: a.Kinds, DDL: a.DDL}
				for _, s := range sinks {
					r.Sinks = append(r.Sinks, s.sink)
				}
				recs = append(recs, r)
				byID[id] = &recs[len(recs)-1]
			}
		}
	}
	sort.SliceStable(recs, func(i, j int) bool {
		a, _ := lsn.Parse(recs[i].CommitLSN)
		b, _ := lsn.Parse(recs[j].CommitLSN)
		return a < b
	})
	if len(recs) > barriersKeptMax {
		recs = recs[len(recs)-barriersKeptMax:]
	}
	out := []BarrierContract{}
	for _, r := range recs {
		c := BarrierContract{ID: r.ID, Relation: r.Relation, CommitLSN: r.CommitLSN, Kinds: r.Kinds, TargetDDL: r.DDL,
			Sinks: r.Sinks, Phases: []BarrierPhase{}, Acks: []BarrierAck{}, Complete: true}
		if c.Kinds == nil {
			c.Kinds = []string{}
		}
		if c.TargetDDL == nil {
			c.TargetDDL = []string{}
		}
		if c.Sinks == nil {
			c.Sinks = []string{}
		}
		c.Phases = append(c.Phases, BarrierPhase{Phase: PhasePublished, Done: r.PublishedAt != nil, At: r.PublishedAt})
		if slices.Contains(r.Kinds, capture.HoldKind) {
			c.Phases = append(c.Phases, BarrierPhase{Phase: PhaseHeld, Done: r.HeldAt != nil, At: r.HeldAt})
		} else {
			c.Phases = append(c.Phases, BarrierPhase{Phase: PhasePinMoved, Done: r.PinMovedAt != nil, At: r.PinMovedAt})
		}
		at, _ := lsn.Parse(r.CommitLSN)
		for _, name := range c.Sinks {
			ack := BarrierAck{Sink: name}
			for _, sb := range sinks {
				if sb.sink != name {
					continue
				}
				ack.CheckpointCommitLSN = lsn.Format(sb.checkpoint)
				if a, ok := sb.acks[r.ID]; ok {
					ddlAt := a.DDLAt.UTC()
					ack.AppliedAt = &ddlAt
					if !a.CommitAt.IsZero() {
						ms := float64(a.VisibilityPause().Microseconds()) / 1000
						ack.VisibilityPauseMillis = &ms
					}
					if !a.ReleasedAt.IsZero() {
						rel := a.ReleasedAt.UTC()
						ack.ReleasedAt = &rel
					}
					ack.Acknowledged = sb.checkpoint >= uint64(at)
				}
			}
			c.Acks = append(c.Acks, ack)
			c.Phases = append(c.Phases, BarrierPhase{Phase: PhaseApplied, Sink: name, Done: ack.Acknowledged, At: ack.AppliedAt})
		}
		for _, p := range c.Phases {
			c.Complete = c.Complete && p.Done
		}
		out = append(out, c)
	}
	return out, notes
}

// renderBarriers prints the contracts (status --view diagnostics).
func renderBarriers(w io.Writer, cs []BarrierContract) {
	for _, c := range cs {
		state := "complete"
		if !c.Complete {
			state = "in progress"
		}
		fmt.Fprintf(w, "barrier       %s · %s · sinks %s · %s\n", c.ID, strings.Join(c.Kinds, ", "), strings.Join(c.Sinks, ", "), state)
		for _, d := range c.TargetDDL {
			fmt.Fprintf(w, "              target DDL: %s\n", d)
		}
		for i, p := range c.Phases {
			name := p.Phase
			if p.Sink != "" {
				name = "sink " + p.Sink + " " + p.Phase
			}
			when := "pending"
			if p.Done && p.At != nil {
				when = p.At.Format(time.RFC3339Nano)
			} else if p.Done {
				when = "done"
			}
			extra := ""
			for _, a := range c.Acks {
				if p.Phase == PhaseApplied && a.Sink == p.Sink && a.VisibilityPauseMillis != nil {
					extra = fmt.Sprintf(" · visibility pause %.1f ms", *a.VisibilityPauseMillis)
				}
			}
			fmt.Fprintf(w, "              %d. %s: %s%s\n", i+1, name, when, extra)
		}
	}
}

// heldForVerify are sink s's held tables (schema.on_blocked: hold_table),
// for verify to report HELD: those its target holds (the hold barrier
// applied, not released by a reseed's handoff), and those capture holds
// (the hold barrier durable in the log, which the target reaches before
// verify's watermark).
func (f *Flow) heldForVerify(ctx context.Context, tgt apply.DB, s config.Sink) (map[string]verify.HeldTable, error) {
	out := map[string]verify.HeldTable{}
	held := func(rel, lsnText, kinds string) {
		if _, ok := out[rel]; ok {
			return
		}
		out[rel] = verify.HeldTable{
			Reason: fmt.Sprintf("HELD at a blocked schema change at LSN %s%s (schema.on_blocked: hold_table): capture no longer publishes its rows; the plan: %s",
				lsnText, kinds, shell.Trellara("schema ddl-plan", f.ConfigPath)),
			Recovery: ReseedCommand(f.ConfigPath, rel),
		}
	}
	onTarget, err := apply.HeldTables(ctx, tgt, s.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
	if err != nil {
		return nil, fmt.Errorf("flow %s: read the held tables on sink %s: %w", f.Cfg.Flow, s.Name, err)
	}
	pending, err := f.PendingSchemaChanges()
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		if p.Held {
			held(p.Plan.Relation, p.Plan.LSN, ": "+p.Plan.Kinds())
		}
	}
	for rel, b := range onTarget {
		held(rel, lsn.Format(b.CommitLSN), "")
	}
	return out, nil
}
