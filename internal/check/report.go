package check

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// SchemaVersion is the version of the JSON report; it changes only when a
// field is removed or changes meaning (adding fields does not bump it).
const SchemaVersion = 1

// Severity ranks a finding. The zero value is invalid on purpose.
type Severity int

// Severities, lowest first. Their names are part of the JSON contract.
const (
	Info Severity = iota + 1
	Notice
	Warning
	High
	Critical
)

var severityNames = map[Severity]string{
	Info: "info", Notice: "notice", Warning: "warning", High: "high", Critical: "critical",
}

func (s Severity) String() string {
	if n, ok := severityNames[s]; ok {
		return n
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// MarshalJSON writes the severity name.
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads a severity name.
func (s *Severity) UnmarshalJSON(b []byte) error {
	var n string
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	for k, v := range severityNames {
		if v == n {
			*s = k
			return nil
		}
	}
	return fmt.Errorf("check: unknown severity %q", n)
}

// grade maps the worst severity to a letter.
func grade(worst Severity) string {
	switch worst {
	case Critical:
		return "F"
	case High:
		return "D"
	case Warning:
		return "C"
	case Notice:
		return "B"
	default:
		return "A"
	}
}

// Passing reports whether a grade is A or B (trellara-check exits 0).
func Passing(g string) bool { return g == "A" || g == "B" }

// Section identifiers, stable in JSON.
const (
	SectionCapture    = "capture"
	SectionSlots      = "slots"
	SectionWAL        = "wal"
	SectionSettings   = "settings"
	SectionConflicts  = "conflicts"
	SectionPrivileges = "privileges"
	// SectionFlowLog is the flow's own local log, added after Inspect by
	// `trellara check --config` (AddFlowLog); trellara-check has none.
	SectionFlowLog = "log"
)

var sectionTitles = map[string]string{
	SectionCapture:    "capture readiness",
	SectionSlots:      "slots",
	SectionWAL:        "wal headroom",
	SectionSettings:   "settings",
	SectionConflicts:  "conflicts",
	SectionPrivileges: "privileges",
	SectionFlowLog:    "flow's log",
}

var sectionOrder = []string{SectionCapture, SectionSlots, SectionWAL, SectionSettings, SectionConflicts, SectionPrivileges}

// Finding is one graded observation.
type Finding struct {
	Severity Severity `json:"severity"`
	// Code is a stable identifier for the rule, e.g. "wal_level_not_logical".
	Code    string `json:"code"`
	Section string `json:"section"`
	Title   string `json:"title"`
	// Detail says why it matters.
	Detail string `json:"detail"`
	// Action is the exact SQL or setting change that fixes it; required
	// above info.
	Action string `json:"action,omitempty"`
	// Objects are the tables or slots concerned, if any.
	Objects []string `json:"objects,omitempty"`
}

// Section is one block of the report: a one-line summary and detail lines
// for people, while the typed fields of Report carry the same data for tools.
type Section struct {
	ID      string   `json:"id"`
	Title   string   `json:"title"`
	Status  string   `json:"status"` // "ok" or the worst severity in it
	Summary string   `json:"summary"`
	Lines   []string `json:"lines"`
}

// Report is the result of Inspect.
type Report struct {
	SchemaVersion int       `json:"schema_version"`
	GeneratedAt   time.Time `json:"generated_at"`
	// Target is user@host:port/database, never with a password. Set by
	// Session.Inspect; empty (and left out of text and JSON) when the report was
	// made on a connection the caller opened itself.
	Target   string     `json:"target,omitempty"`
	Grade    string     `json:"grade"`
	Headline string     `json:"headline"`
	Server   ServerInfo `json:"server"`
	Sections []Section  `json:"sections"`
	Findings []Finding  `json:"findings"`
	// Notes say what could not be seen and why.
	Notes []string `json:"notes"`

	Tables          []Table    `json:"tables"`
	TablesTruncated bool       `json:"tables_truncated"`
	Slots           []Slot     `json:"slots"`
	WAL             WAL        `json:"wal"`
	Settings        []Setting  `json:"settings"`
	Privileges      Privileges `json:"privileges"`
	Conflicts       Conflicts  `json:"conflicts"`
	// Scope is set when the report grades one flow (Options.Scope).
	Scope   *ScopeReport `json:"scope,omitempty"`
	Elapsed JSONSeconds  `json:"elapsed_seconds"`
}

// JSONSeconds is a duration written as fractional seconds.
type JSONSeconds time.Duration

// MarshalJSON writes seconds with millisecond precision.
func (d JSONSeconds) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%.3f", time.Duration(d).Seconds())), nil
}

// Blockers are the critical findings: capture cannot start until they are
// fixed, so no starting config is written.
func (r *Report) Blockers() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == Critical {
			out = append(out, f)
		}
	}
	return out
}

// finish sorts findings, computes grade, headline and section statuses.
func (r *Report) finish() {
	sort.SliceStable(r.Findings, func(i, j int) bool {
		if r.Findings[i].Severity != r.Findings[j].Severity {
			return r.Findings[i].Severity > r.Findings[j].Severity
		}
		return sectionIndex(r.Findings[i].Section) < sectionIndex(r.Findings[j].Section)
	})
	worst := Info
	lowering := 0
	for _, f := range r.Findings {
		if f.Severity > worst {
			worst = f.Severity
		}
		if f.Severity > Info {
			lowering++
		}
	}
	r.Grade = grade(worst)
	if lowering == 0 {
		r.Headline = fmt.Sprintf("ready for capture: %s, no risks found", plural(r.readyTables(), "table"))
	} else {
		r.Headline = r.Findings[0].Title
		if lowering > 1 {
			r.Headline += fmt.Sprintf(" (+%d more)", lowering-1)
		}
	}
	for i := range r.Sections {
		s := &r.Sections[i]
		s.Status = "ok"
		w := Severity(0)
		for _, f := range r.Findings {
			if f.Section == s.ID && f.Severity > w {
				w = f.Severity
			}
		}
		if w > Info {
			s.Status = w.String()
		}
	}
	if r.Notes == nil {
		r.Notes = []string{}
	}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
}

func (r *Report) readyTables() int {
	n := 0
	for _, t := range r.Tables {
		if t.Ready {
			n++
		}
	}
	return n
}

func sectionIndex(id string) int {
	for i, s := range sectionOrder {
		if s == id {
			return i
		}
	}
	return len(sectionOrder)
}

func (r *Report) section(id string) *Section {
	for i := range r.Sections {
		if r.Sections[i].ID == id {
			return &r.Sections[i]
		}
	}
	r.Sections = append(r.Sections, Section{ID: id, Title: sectionTitles[id], Lines: []string{}})
	return &r.Sections[len(r.Sections)-1]
}

func (r *Report) add(f Finding) { r.Findings = append(r.Findings, f) }

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// RenderJSON writes the report as indented JSON (documented in docs/CLI.md).
func (r *Report) RenderJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("check: encode report: %w", err)
	}
	return nil
}

// maxObjectsText bounds how many objects one finding lists in text output;
// JSON carries them all.
const maxObjectsText = 10

// RenderText writes the report for people: a summary block shaped like the
// product page, then findings with their fixes, section details and notes.
func (r *Report) RenderText(w io.Writer) error {
	var b strings.Builder
	head := []string{"trellara-check"}
	if r.Target != "" {
		head = append(head, r.Target)
	}
	head = append(head, "PostgreSQL "+r.Server.Version, r.Server.role())
	b.WriteString(strings.Join(head, " · ") + "\n")
	fmt.Fprintf(&b, "grade %s  %s\n", r.Grade, r.Headline)
	if r.Scope != nil {
		fmt.Fprintf(&b, "graded            %s\n", r.Scope.line())
	}
	b.WriteString("\n")
	for _, s := range r.Sections {
		fmt.Fprintf(&b, "%-18s %s\n", s.Title, s.Summary)
	}
	actions := 0
	for _, f := range r.Findings {
		if f.Action != "" && f.Severity > Info {
			actions++
		}
	}
	if actions == 0 {
		fmt.Fprintf(&b, "%-18s %s\n", "actions", "none needed")
	} else {
		fmt.Fprintf(&b, "%-18s %s\n", "actions", plural(actions, "recommended action"))
	}

	if len(r.Findings) > 0 {
		b.WriteString("\nfindings\n")
		for _, f := range r.Findings {
			fmt.Fprintf(&b, "  [%s] %s: %s\n", f.Severity, sectionTitles[f.Section], f.Title)
			if f.Detail != "" {
				b.WriteString(indent(f.Detail, "      why: ", "           "))
			}
			if len(f.Objects) > 0 {
				objs := f.Objects
				more := ""
				if len(objs) > maxObjectsText {
					more = fmt.Sprintf(" … and %d more", len(objs)-maxObjectsText)
					objs = objs[:maxObjectsText]
				}
				fmt.Fprintf(&b, "      on:  %s%s\n", strings.Join(objs, ", "), more)
			}
			if f.Action != "" {
				b.WriteString(indent(f.Action, "      fix: ", "           "))
			}
		}
	}
	for _, s := range r.Sections {
		if len(s.Lines) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s\n", s.Title)
		for _, l := range s.Lines {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nnot visible to this role\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	b.WriteString("\nnothing was created — no publication, slot, or checkpoint\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// indent prefixes the first line with first and the rest with rest.
func indent(s, first, rest string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	var b strings.Builder
	for i, l := range lines {
		if i == 0 {
			b.WriteString(first)
		} else {
			b.WriteString(rest)
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// count renders "1 table has" / "3 tables have".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
