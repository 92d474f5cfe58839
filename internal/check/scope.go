package check

import (
	"fmt"
	"strings"

	"github.com/trellara/trellara/internal/shell"
)

// A report for one flow (trellara check --config, and the evidence
// package's check.json).
//
// The server-wide grade answers "is this server safe for capture?"; a
// flow's grade answers "is this flow's source safe?". Under a Scope the
// report grades the flow's own tables (Options.Tables) and its own slot,
// and lists nothing else: other tables, other slots and other
// publications appear only as counts in Scope and in one note, so a
// package forwarded to a third party never names objects the flow does
// not capture. Server settings, privileges and WAL headroom are the
// flow's too (they bound its slot) and are graded as always; WAL headroom
// is judged against the flow's slot only.

// Scope names the flow a report grades.
type Scope struct {
	Flow        string // the flow's name (config key flow)
	Slot        string // source.slot
	Publication string // source.publication
	// Schemas are captured whole (source.schemas): their tables are the
	// flow's too, beside Options.Tables.
	Schemas []string
	// ConfigPath is the flow's configuration file, for the commands a fix
	// prints; empty prints shell.ConfigPlaceholder.
	ConfigPath string
}

// ScopeReport is what a scoped report covered and what it left out.
type ScopeReport struct {
	Flow              string `json:"flow"`
	Slot              string `json:"slot"`
	Publication       string `json:"publication"`
	OtherTables       int    `json:"other_tables"`
	OtherSlots        int    `json:"other_slots"`
	OtherPublications int    `json:"other_publications"`
	Left              string `json:"-"` // the counts in words, for text
}

// TrellaraSlotPrefix is how the slots Trellara creates begin
// (source.slot defaults to trellara_<flow>, and so does the publication).
const TrellaraSlotPrefix = "trellara_"

// trellaraFlow says whether slot s is a Trellara flow's, and which. Under
// a Scope the flow's slot is known by name. Otherwise a slot is Trellara's
// when it is a logical slot on the pgoutput or trellara (the native
// extension's) plugin named trellara_<flow>, the name Trellara gives the
// slots it creates; a publication of the same name, which Trellara
// creates beside it, is further evidence (named in the detail). A
// logical-message prefix (trellara.fence, trellara.reseed) would prove it
// too, but reading one means decoding the slot, which a read-only grader
// does not do.
func (in *inspector) trellaraFlow(s Slot) (string, bool) {
	if sc := in.opts.Scope; sc != nil && s.Name == sc.Slot {
		return sc.Flow, true
	}
	if s.Type != "logical" || (s.Plugin != "pgoutput" && s.Plugin != "trellara") {
		return "", false
	}
	flow, ok := strings.CutPrefix(s.Name, TrellaraSlotPrefix)
	if !ok || flow == "" {
		return "", false
	}
	return flow, true
}

// configPath is flow's configuration file when the scope names it.
func (in *inspector) configPath(flow string) string {
	if sc := in.opts.Scope; sc != nil && sc.Flow == flow {
		return sc.ConfigPath
	}
	return ""
}

// runCommand is the fix that starts flow: `trellara run` on its
// configuration, or the packaged service's unit.
func (in *inspector) runCommand(flow string) string {
	path := in.configPath(flow)
	cmd := shell.Trellara("run", path)
	if path == "" {
		cmd += "   -- " + shell.ConfigPlaceholder + " is flow " + flow + "'s configuration"
	}
	return cmd + "\nsystemctl start " + shell.Quote("trellara@"+flow) + "   -- the same, for the packaged service"
}

// Trellara slots retaining at least this much WAL count against the grade
// when retention is unbounded or its cap is not visible: below it, an
// at-rest flow's slot is a note. (With a cap, the distance to it decides.)
const trellaraSlotWALNotice = 1 << 30

// trellaraSlotFinding grades Trellara flow flow's slot s: its consumer is
// Trellara, whose log already holds every change the slot confirmed, so an
// inactive slot is a flow at rest, fixed by running the flow, never by
// dropping the slot. It counts against the grade only when the WAL it
// holds nears what the server lets it keep.
func (in *inspector) trellaraSlotFinding(s Slot, flow string, rate float64, maxKeep int64, known bool) {
	run := in.runCommand(flow)
	owner := fmt.Sprintf("slot %s is Trellara flow %s's", slotRef(s), flow)
	evidence := ""
	if in.opts.Scope == nil || in.opts.Scope.Slot != s.Name {
		evidence = fmt.Sprintf(" (recognised by its name, %s<flow>, and plugin %s", TrellaraSlotPrefix, s.Plugin)
		if in.pubNames[s.Name] {
			evidence += "; publication " + s.Name + " exists beside it"
		}
		evidence += ")"
	}
	logNote := "Trellara's log holds every change the flow has captured: the slot's confirmed position moves only after the log made them durable."
	retained := int64(0)
	if s.RetainedBytes != nil {
		retained = *s.RetainedBytes
	}
	switch {
	case s.Invalidated:
		why := s.InvalidationReason
		if why == "" {
			why = "wal_status=" + s.WALStatus
		}
		in.r.add(Finding{Severity: High, Code: "trellara_slot_invalidated", Section: SectionSlots,
			Title:   fmt.Sprintf("%s and is invalidated (%s): the flow cannot resume from it", owner, why),
			Detail:  "The source removed WAL the flow had not read" + evidence + ". " + logNote + " The changes after it are gone from the source, so the flow starts over with a full snapshot.",
			Action:  shell.Resnapshot(in.configPath(flow)),
			Objects: []string{s.Name}})
		return
	case s.WALStatus == "unreserved":
		in.r.add(Finding{Severity: High, Code: "trellara_slot_wal_unreserved", Section: SectionSlots,
			Title:   fmt.Sprintf("%s and is past max_slot_wal_keep_size: it is invalidated at the next checkpoint unless the flow runs now", owner),
			Detail:  "The flow is at rest or behind" + evidence + ". " + logNote + " Running it now reads the slot before the source removes that WAL.",
			Action:  run,
			Objects: []string{s.Name}})
		return
	case s.Active:
		return // a running flow; slot_lagging covers one that does not confirm
	}
	title := fmt.Sprintf("%s, at rest: it holds %s of WAL until the flow runs again", owner, fmtBytes(retained))
	detail := "No process streams from the slot: the flow is at rest" + evidence + ". " + logNote +
		" The slot holds only the WAL written since the flow last ran, which the flow reads when it runs again; it grows with every source write until then."
	sev := Info
	switch {
	case known && maxKeep > 0 && s.SafeWALSize != nil:
		hours := -1.0
		if rate > 0 {
			hours = float64(*s.SafeWALSize) / rate / 3600
			title += fmt.Sprintf("; invalidated in ~%s at the current rate", hoursText(hours))
		}
		if 2*retained >= maxKeep || (hours >= 0 && hours < 24) {
			sev = Warning
			if hours >= 0 && hours < 6 {
				sev = High
			}
			detail += fmt.Sprintf(" At max_slot_wal_keep_size (%s) it is invalidated after %s more WAL, and the flow would need a full snapshot.", fmtBytes(maxKeep), fmtBytes(*s.SafeWALSize))
		}
	case retained >= trellaraSlotWALNotice:
		sev = Warning
		if known && maxKeep < 0 {
			detail += " max_slot_wal_keep_size = -1, so the source keeps that WAL until pg_wal's disk is full."
			if rate > 0 {
				detail += fmt.Sprintf(" WAL is being written at %s: every 1 GB of free disk in pg_wal buys ~%s.", fmtRate(rate), hoursText(float64(1<<30)/rate/3600))
			}
		}
	}
	code := "trellara_slot_at_rest"
	if sev > Info {
		code = "trellara_slot_retaining_wal"
	}
	in.r.add(Finding{Severity: sev, Code: code, Section: SectionSlots,
		Title: title, Detail: detail, Action: run, Objects: []string{s.Name}})
}

// scopeNote says, in words, what a scoped report left out.
func (in *inspector) scopeNote() {
	sc := in.r.Scope
	if sc == nil {
		return
	}
	var parts []string
	if sc.OtherTables > 0 {
		parts = append(parts, plural(sc.OtherTables, "other table"))
	}
	if sc.OtherSlots > 0 {
		parts = append(parts, plural(sc.OtherSlots, "other slot"))
	}
	if sc.OtherPublications > 0 {
		parts = append(parts, plural(sc.OtherPublications, "other publication"))
	}
	if len(parts) == 0 {
		return
	}
	sc.Left = strings.Join(parts, ", ")
}

// scopeLine is the text report's line for a scoped report.
func (sc *ScopeReport) line() string {
	s := fmt.Sprintf("flow %s: its tables, slot %s and publication %s", sc.Flow, sc.Slot, sc.Publication)
	if sc.Left != "" {
		s += "; not graded and not listed: " + sc.Left + " on this server (trellara-check POSTGRES_URL grades the whole server)"
	}
	return s
}

// AddFlowLog adds what the flow's own local log shows (its consumers, read
// by internal/flow, which this package does not import) as the section
// SectionFlowLog with its findings, and grades the report again.
func (r *Report) AddFlowLog(summary string, lines []string, findings []Finding) {
	sec := r.section(SectionFlowLog)
	sec.Summary = summary
	sec.Lines = append(sec.Lines, lines...)
	for _, f := range findings {
		f.Section = SectionFlowLog
		r.add(f)
	}
	r.finish()
}
