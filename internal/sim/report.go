package sim

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// ReportSchemaVersion is the version of Report's JSON form. 2: a
// scenario's proof says what was checked; the command moved to reproduce.
const ReportSchemaVersion = 2

// Report is the catalogue's outcome in a deterministic form: the same code
// always produces the same bytes (no timings, no dates), so the committed
// copy (docs/correctness/report.json) can be regenerated in CI and any
// drift fails the build.
type Report struct {
	SchemaVersion int           `json:"schema_version"`
	Summary       Summary       `json:"summary"`
	Families      []FamilyRow   `json:"families"`
	Invariants    []InvRow      `json:"invariants"`
	Simulations   []SimRow      `json:"simulations"`
	Scenarios     []ScenarioRow `json:"scenarios"`
	// Bounds names the flow settings the run used instead of the
	// simulations' own (chaos --config); empty for the catalogue.
	Bounds string `json:"bounds,omitempty"`
}

// Summary counts scenarios by result.
type Summary struct {
	Scenarios   int `json:"scenarios"`
	Simulations int `json:"simulations"`
	Families    int `json:"families"`
	Passed      int `json:"passed"`
	Failed      int `json:"failed"`
	NotReached  int `json:"not_reached"`
}

// FamilyRow is one family's line.
type FamilyRow struct {
	Family      string `json:"family"`
	Scenarios   int    `json:"scenarios"`
	Simulations int    `json:"simulations"`
	Passed      int    `json:"passed"`
	Failed      int    `json:"failed"`
	NotReached  int    `json:"not_reached"`
}

// InvRow describes an invariant.
type InvRow struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// SimRow describes a simulation.
type SimRow struct {
	Name      string `json:"name"`
	Title     string `json:"title"`
	Scenarios int    `json:"scenarios"`
	Bounds    string `json:"bounds"`
}

// ScenarioRow is one scenario and its result.
type ScenarioRow struct {
	ID         string `json:"id"`
	Family     string `json:"family"`
	Title      string `json:"title"`
	Simulation string `json:"simulation"`
	Seed       uint64 `json:"seed"`
	Invariant  string `json:"invariant"`
	// Proof is what the run checked, with the counts it checked them
	// over (proofOf); Reproduce is the command that reruns it.
	Proof      string      `json:"proof"`
	Reproduce  string      `json:"reproduce"`
	Recovery   string      `json:"recovery"`
	Faults     []Fault     `json:"faults"`
	Expect     Expect      `json:"expect"`
	Result     string      `json:"result"` // pass, fail, not-reached
	Outcome    string      `json:"outcome"`
	Violations []Violation `json:"violations,omitempty"`
}

func resultOf(r *Result) string {
	switch {
	case r.Pass:
		return "pass"
	case len(r.Violations) == 0 && !r.Fired:
		return "not-reached"
	}
	return "fail"
}

// detectedText names what the harness observes, for proofs.
var detectedText = map[string]string{
	"repair":         "torn tail cut on reopen",
	"fsync-failure":  "failed fsync",
	"ambiguous-ack":  "ambiguous publish",
	"fatal":          "log refusing to continue until reopened",
	"schema-drift":   "schema drift",
	"enospc":         "full disk",
	"corrupted":      "segment damaged at rest",
	"quarantine":     "quarantine",
	"transient":      "lost target connection",
	"sequence":       "ErrSequence",
	"past-retention": "past-retention error",
	"corruption":     "typed corruption error",
	"reseed":         "reseed taking over the blocked change",
	"reseed-handoff": "reseed handoff",
	"rename-again":   "rename run again on the renamed target (no change)",
}

// changeProof says how a run with a classified schema change checked the
// changed table (sim names the scenario's simulation).
func changeProof(sim string) string {
	for _, s := range simulations {
		if s.Name != sim || s.Workload.spec() == nil {
			continue
		}
		if s.Workload.Change == "" || s.Workload.plan().AutoApplies() {
			return "the changed table's shape checked after each target commit: the new one exactly when the transaction that first used it is applied, every value against its column's type"
		}
		return "the changed table checked after each target commit: nothing at or past the blocked change before the reseed took it over, its old rows until the handoff, the source's in the new shape after it"
	}
	return ""
}

// proofOf says what a run checked, with the counts it checked them over:
// the faults' effect, the scenario's own invariant, the end state and
// what the expectation required to be observed. It states checks, not
// verdicts: the result says whether they held.
func proofOf(r *Result) string {
	sc, st := r.Scenario, r.Stats
	var p []string
	if len(sc.Faults) > 0 {
		var hit []string
		for _, c := range []struct {
			n    int
			what string
		}{{st.RelayRestarts, "relay restart"}, {st.ApplierRestarts, "applier restart"}, {st.Crashes, "log reopen"}} {
			if c.n > 0 {
				hit = append(hit, plural(c.n, c.what))
			}
		}
		fired := "fault reached"
		if !r.Fired {
			fired = "fault point never reached"
		}
		if len(hit) > 0 {
			fired += ": " + strings.Join(hit, ", ")
		}
		p = append(p, fired)
	}
	switch sc.Invariant {
	case InvAckDurable:
		p = append(p, fmt.Sprintf("slot position checked against the durable log at %s and after every reopen of the log", plural(st.Acks, "acknowledgement")))
	case InvSchemaPinned:
		p = append(p, fmt.Sprintf("%s checked against the pinned relation fingerprints", plural(st.LogEntries, "log entry")))
	case InvQuarantine:
		q := fmt.Sprintf("%s quarantined, each checked to be one of the incompatible ones", plural(st.Quarantined, "transaction"))
		if sc.Expect.Stop == "" {
			q += ", none left open"
		}
		p = append(p, q)
	}
	if c := changeProof(sc.Simulation); c != "" {
		p = append(p, c)
	}
	p = append(p, fmt.Sprintf("target state compared with the source after each target commit (%d)", st.TargetCommits))
	if sc.Expect.Stop == "" {
		p = append(p, fmt.Sprintf("end: %s with data counted at the target, final state compared", plural(st.Delivered, "transaction")))
	} else {
		p = append(p, fmt.Sprintf("end: a typed %s stop required, target checked to be a prefix of history", sc.Expect.Stop))
	}
	var seen []string
	for _, d := range slices.Sorted(maps.Keys(r.Detected)) {
		text := detectedText[d]
		if text == "" {
			text = d
		}
		seen = append(seen, fmt.Sprintf("%s ×%d", text, r.Detected[d]))
	}
	if len(sc.Expect.Detect) > 0 || len(seen) > 0 {
		s := "observed: none"
		if len(seen) > 0 {
			s = "observed: " + strings.Join(seen, ", ")
		}
		if len(sc.Expect.Detect) > 0 {
			s += " (required: " + strings.Join(sc.Expect.Detect, ", ") + ")"
		}
		p = append(p, s)
	}
	if len(sc.Expect.Exercise) > 0 {
		var ex []string
		for _, e := range sc.Expect.Exercise {
			ex = append(ex, fmt.Sprintf("%s ×%d", e, st.exercised(e)))
		}
		p = append(p, "exercised: "+strings.Join(ex, ", "))
	}
	return strings.Join(p, "; ")
}

func boundsOf(s *Simulation) string {
	b := fmt.Sprintf("memory %s, chunk %s, segment %s, frame %s, batch %d txns/%d rows",
		size(s.MemoryBytesMax), size(s.ChunkBytesMax), size(s.SegmentBytesMax), size(int64(s.FrameBytesMax)), s.MaxBatchTxns, s.MaxBatchRows)
	if s.Retention.MaxBytes > 0 {
		b += fmt.Sprintf(", retention %s", size(s.Retention.MaxBytes))
		if s.Retention.Expire {
			b += " (expire)"
		}
	}
	return b
}

func size(n int64) string {
	switch {
	case n >= mib && n%mib == 0:
		return fmt.Sprintf("%d MiB", n/mib)
	case n >= kib && n%kib == 0:
		return fmt.Sprintf("%d KiB", n/kib)
	}
	return fmt.Sprintf("%d B", n)
}

// BuildReport assembles the report for results (catalogue order).
func BuildReport(results []*Result, sims map[string]*Simulation, bounds string) *Report {
	rep := &Report{SchemaVersion: ReportSchemaVersion, Bounds: bounds}
	fam := map[string]*FamilyRow{}
	famSims := map[string]map[string]bool{}
	simCount := map[string]int{}
	order := slices.Clone(Families)
	for _, f := range Families {
		fam[f] = &FamilyRow{Family: f}
		famSims[f] = map[string]bool{}
	}
	for _, r := range results {
		sc := r.Scenario
		row := ScenarioRow{ID: sc.ID, Family: sc.Family, Title: sc.Title, Simulation: sc.Simulation, Seed: sc.Seed,
			Invariant: sc.Invariant, Proof: proofOf(r), Reproduce: sc.Reproduce, Recovery: sc.Recovery, Faults: sc.Faults, Expect: sc.Expect,
			Result: resultOf(r), Outcome: r.Outcome, Violations: r.Violations}
		if row.Faults == nil {
			row.Faults = []Fault{}
		}
		rep.Scenarios = append(rep.Scenarios, row)
		f := fam[sc.Family]
		if f == nil {
			f = &FamilyRow{Family: sc.Family}
			fam[sc.Family] = f
			famSims[sc.Family] = map[string]bool{}
			order = append(order, sc.Family)
		}
		f.Scenarios++
		famSims[sc.Family][sc.Simulation] = true
		simCount[sc.Simulation]++
		switch row.Result {
		case "pass":
			f.Passed++
			rep.Summary.Passed++
		case "fail":
			f.Failed++
			rep.Summary.Failed++
		default:
			f.NotReached++
			rep.Summary.NotReached++
		}
	}
	for _, name := range order {
		if f := fam[name]; f.Scenarios > 0 {
			f.Simulations = len(famSims[name])
			rep.Families = append(rep.Families, *f)
		}
	}
	for _, inv := range []string{InvNoLoss, InvExactlyOnce, InvAtomic, InvAckDurable, InvQuarantine, InvSchemaPinned, InvEpochHonest} {
		rep.Invariants = append(rep.Invariants, InvRow{ID: inv, Text: InvariantText[inv]})
	}
	for _, name := range SimulationNames() {
		if n := simCount[name]; n > 0 {
			s := sims[name]
			rep.Simulations = append(rep.Simulations, SimRow{Name: name, Title: s.Title, Scenarios: n, Bounds: boundsOf(s)})
		}
	}
	rep.Summary.Scenarios = len(results)
	rep.Summary.Simulations = len(rep.Simulations)
	rep.Summary.Families = len(rep.Families)
	return rep
}

// JSON encodes the report, indented, with a final newline.
func (r *Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteText prints each scenario with its invariant, what was checked,
// the command that reruns it and the recovery, then the summary.
func WriteText(w io.Writer, rep *Report, elapsed time.Duration) {
	for _, s := range rep.Scenarios {
		mark := "PASS"
		switch s.Result {
		case "fail":
			mark = "FAIL"
		case "not-reached":
			mark = "SKIP"
		}
		fmt.Fprintf(w, "%s %s  [%s · %s · seed %d] %s\n", mark, s.ID, s.Family, s.Simulation, s.Seed, s.Outcome)
		fmt.Fprintf(w, "     %s\n", s.Title)
		fmt.Fprintf(w, "     invariant: %s — %s\n", s.Invariant, invText(s.Invariant))
		fmt.Fprintf(w, "     proof:     %s\n", s.Proof)
		fmt.Fprintf(w, "     reproduce: %s\n", s.Reproduce)
		fmt.Fprintf(w, "     recovery:  %s\n", s.Recovery)
		if s.Result == "not-reached" {
			fmt.Fprintf(w, "     its fault point was never reached under these bounds\n")
		}
		for _, v := range s.Violations {
			fmt.Fprintf(w, "     VIOLATED %s: %s\n", v.Invariant, v.Detail)
		}
	}
	fmt.Fprintf(w, "\n%s across %s in %s: %d passed, %d failed, %d not reached (%s)\n",
		plural(rep.Summary.Scenarios, "scenario"), plural(rep.Summary.Simulations, "simulation"),
		plural(rep.Summary.Families, "failure-point family"), rep.Summary.Passed, rep.Summary.Failed,
		rep.Summary.NotReached, elapsed.Round(time.Millisecond))
	if rep.Bounds != "" {
		fmt.Fprintf(w, "bounds from the flow config: %s\n", rep.Bounds)
	}
	for _, f := range rep.Families {
		fmt.Fprintf(w, "  %-14s %3d scenarios in %2d simulations: %d passed, %d failed, %d not reached\n",
			f.Family, f.Scenarios, f.Simulations, f.Passed, f.Failed, f.NotReached)
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	switch {
	case strings.HasSuffix(what, "y"):
		return fmt.Sprintf("%d %sies", n, what[:len(what)-1])
	case strings.HasSuffix(what, "sh"), strings.HasSuffix(what, "ch"), strings.HasSuffix(what, "s"), strings.HasSuffix(what, "x"):
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func invText(id string) string {
	if t, ok := InvariantText[id]; ok {
		return t
	}
	return "every invariant"
}

// RunInfo is what a rendered report says about its own run: when, on
// which host and how long the catalogue took. It is kept out of Report so
// that report.json stays byte-for-byte reproducible; the caller measures
// it and passes it in.
type RunInfo struct {
	Version   string        // trellara's version
	Generated time.Time     // when the report was generated
	Host      string        // the host the catalogue ran on
	Elapsed   time.Duration // how long the catalogue took to run
}

// recovery is one distinct recovery text, with the scenarios that use it:
// the report prints each text once and refers to it by ID.
type recovery struct {
	ID        string // R1, R2, … in order of first use
	Text      string
	Scenarios int
	Families  []string
}

// recoveries numbers the distinct recovery texts in scenario order.
func recoveries(rep *Report) ([]*recovery, map[string]string) {
	var out []*recovery
	byText := map[string]*recovery{}
	ids := map[string]string{}
	for _, s := range rep.Scenarios {
		r := byText[s.Recovery]
		if r == nil {
			r = &recovery{ID: fmt.Sprintf("R%d", len(out)+1), Text: s.Recovery}
			byText[s.Recovery] = r
			ids[s.Recovery] = r.ID
			out = append(out, r)
		}
		r.Scenarios++
		if !slices.Contains(r.Families, s.Family) {
			r.Families = append(r.Families, s.Family)
		}
	}
	return out, ids
}

// Chart geometry: family names left of the bars, labels right of them.
const (
	barX      = 140
	barWidth  = 400
	barHeight = 22
	barPitch  = 34
	barTop    = 24
)

// bar is one family's pass rate in the chart: every bar is the family's
// whole (100 %), split into the passed, failed and not-reached shares.
type bar struct {
	Family                            string
	Y, TextY                          int
	PassW, FailX, FailW, SkipX, SkipW int
	Label                             string
}

// passRate is the passed share in whole percent, rounded down so that a
// family with one failure never shows 100 %.
func passRate(passed, total int) int {
	if total == 0 {
		return 0
	}
	return passed * 100 / total
}

func bars(rep *Report) []bar {
	var out []bar
	for i, f := range rep.Families {
		if f.Scenarios == 0 {
			continue
		}
		at := func(n int) int { return barX + n*barWidth/f.Scenarios }
		y := barTop + i*barPitch
		b := bar{Family: f.Family, Y: y, TextY: y + 16,
			PassW: at(f.Passed) - barX,
			FailX: at(f.Passed), FailW: at(f.Passed+f.Failed) - at(f.Passed),
			SkipX: at(f.Passed + f.Failed), SkipW: at(f.Scenarios) - at(f.Passed+f.Failed)}
		b.Label = fmt.Sprintf("%d%% · %d/%d passed", passRate(f.Passed, f.Scenarios), f.Passed, f.Scenarios)
		if f.Failed > 0 {
			b.Label += fmt.Sprintf(", %d failed", f.Failed)
		}
		if f.NotReached > 0 {
			b.Label += fmt.Sprintf(", %d not reached", f.NotReached)
		}
		out = append(out, b)
	}
	return out
}

// evidenceRow is one family's real-server evidence in the report.
type evidenceRow struct {
	Family string
	Rows   []Evidence
}

func familyEvidence(rep *Report) []evidenceRow {
	var out []evidenceRow
	for _, f := range rep.Families {
		if ev := FamilyEvidence[f.Family]; len(ev) > 0 {
			out = append(out, evidenceRow{Family: f.Family, Rows: ev})
		}
	}
	return out
}

// humanDuration prints a run's duration in seconds (minutes past one).
func humanDuration(d time.Duration) string {
	if d >= time.Minute {
		d = d.Round(time.Second)
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// codeSpans renders text with its `code spans` as <code>, everything
// else escaped.
func codeSpans(s string) template.HTML {
	var b strings.Builder
	for i, part := range strings.Split(s, "`") {
		if i%2 == 1 {
			b.WriteString("<code>" + template.HTMLEscapeString(part) + "</code>")
		} else {
			b.WriteString(template.HTMLEscapeString(part))
		}
	}
	return template.HTML(b.String())
}

// WriteHTML writes a self-contained HTML report: no scripts, no external
// assets, the chart inline SVG. Its only links are to the page itself and
// to the repository's documents, by paths relative to its root.
func WriteHTML(w io.Writer, rep *Report, info RunInfo) error {
	recs, recIDs := recoveries(rep)
	bs := bars(rep)
	host := info.Host
	if host == "" {
		host = "an unnamed host"
	}
	data := struct {
		R          *Report
		Info       RunInfo
		Generated  string
		Host       string
		Elapsed    string
		Bars       []bar
		ChartH     int
		AxisY      int
		Recoveries []*recovery
		RecID      map[string]string
		Evidence   []evidenceRow
		Matrix     Evidence
	}{rep, info, info.Generated.UTC().Format("2006-01-02 15:04:05 UTC"), host, humanDuration(info.Elapsed),
		bs, barTop + len(bs)*barPitch + 8, barTop - 8, recs, recIDs, familyEvidence(rep), MatrixEvidence}
	return reportTmpl.Execute(w, data)
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"faults": func(fs []Fault) string {
		var parts []string
		for _, f := range fs {
			s := fmt.Sprintf("%s @ %s #%d", f.Action, f.Point, f.Nth)
			if f.Times > 1 {
				s += fmt.Sprintf(" ×%d", f.Times)
			}
			parts = append(parts, s)
		}
		if len(parts) == 0 {
			return "none (the workload itself)"
		}
		return strings.Join(parts, "; ")
	},
	"code":      codeSpans,
	"rate":      passRate,
	"join":      strings.Join,
	"scenarios": func(n int) string { return plural(n, "scenario") },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Trellara correctness report</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1200px;padding:0 1rem;color:#1b1f24}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem}
.muted{color:#57606a}.meta{color:#57606a;margin:.2rem 0 1rem}.cards{display:flex;gap:1rem;flex-wrap:wrap;margin:1rem 0}
.card{border:1px solid #d0d7de;border-radius:6px;padding:.6rem 1rem;min-width:8rem}.card b{display:block;font-size:1.5rem}
table{border-collapse:collapse;width:100%;margin:.5rem 0}th,td{border:1px solid #d0d7de;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right}code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;padding:0 .2rem}
td.proof{font-size:13px}a{color:#0969da}
.pass{color:#116329;font-weight:600}.fail{color:#cf222e;font-weight:600}.not-reached{color:#57606a;font-weight:600}
tr.row-fail td{background:#ffebe9}
</style>
</head>
<body>
<h1>Trellara correctness report</h1>
<p class="meta">Generated {{.Generated}} on {{.Host}} · the catalogue ran in {{.Elapsed}}{{if .Info.Version}} · trellara {{.Info.Version}}{{end}}</p>
<p class="muted">Deterministic failure matrix. Every scenario runs the real relay, segment log and applier code against simulated I/O, injects its faults and checks every invariant; each names the invariant it threatens, what the run checked and the recovery.{{if .R.Bounds}} Bounds from the flow configuration: {{.R.Bounds}}.{{end}} The <a href="#evidence">real-server evidence</a> runs the same code against real servers.</p>
<div class="cards">
<div class="card"><b>{{.R.Summary.Scenarios}}</b>scenarios</div>
<div class="card"><b>{{.R.Summary.Simulations}}</b>simulations</div>
<div class="card"><b>{{.R.Summary.Families}}</b>families</div>
<div class="card"><b class="pass">{{.R.Summary.Passed}}</b>passed</div>
<div class="card"><b{{if gt .R.Summary.Failed 0}} class="fail"{{end}}>{{.R.Summary.Failed}}</b>failed</div>
<div class="card"><b{{if gt .R.Summary.NotReached 0}} class="not-reached"{{end}}>{{.R.Summary.NotReached}}</b>not reached</div>
</div>

<h2>Pass rate per family</h2>
<svg xmlns="http://www.w3.org/2000/svg" width="760" height="{{.ChartH}}" viewBox="0 0 760 {{.ChartH}}" role="img" aria-label="pass rate per family">
<text x="140" y="{{.AxisY}}" font-size="11" fill="#57606a">0%</text>
<text x="340" y="{{.AxisY}}" font-size="11" fill="#57606a" text-anchor="middle">50%</text>
<text x="540" y="{{.AxisY}}" font-size="11" fill="#57606a" text-anchor="end">100%</text>
{{range .Bars}}<text x="0" y="{{.TextY}}" font-size="13" fill="#1b1f24">{{.Family}}</text>
<rect class="track" x="140" y="{{.Y}}" width="400" height="22" fill="#eaeef2"/>
{{if .PassW}}<rect class="passed" x="140" y="{{.Y}}" width="{{.PassW}}" height="22" fill="#2da44e"><title>{{.Label}}</title></rect>
{{end}}{{if .FailW}}<rect class="failed" x="{{.FailX}}" y="{{.Y}}" width="{{.FailW}}" height="22" fill="#cf222e"><title>{{.Label}}</title></rect>
{{end}}{{if .SkipW}}<rect class="not-reached" x="{{.SkipX}}" y="{{.Y}}" width="{{.SkipW}}" height="22" fill="#8c959f"><title>{{.Label}}</title></rect>
{{end}}<text x="550" y="{{.TextY}}" font-size="12" fill="#1b1f24">{{.Label}}</text>
{{end}}</svg>

<table>
<tr><th>family</th><th>pass rate</th><th>scenarios</th><th>simulations</th><th>passed</th><th>failed</th><th>not reached</th></tr>
{{range .R.Families}}<tr><td>{{.Family}}</td><td class="num">{{rate .Passed .Scenarios}}%</td><td class="num">{{.Scenarios}}</td><td class="num">{{.Simulations}}</td><td class="num">{{.Passed}}</td><td class="num">{{.Failed}}</td><td class="num">{{.NotReached}}</td></tr>
{{end}}</table>

<h2>Invariants</h2>
<p class="muted">All are checked in every scenario; each scenario names the one it is built to threaten.</p>
<table>
<tr><th>invariant</th><th>meaning</th></tr>
{{range .R.Invariants}}<tr><td><code>{{.ID}}</code></td><td>{{.Text}}</td></tr>
{{end}}</table>

<h2 id="recovery">Recovery</h2>
<p class="muted">What brings a flow back after each failure. Every scenario refers to one of these by its id.</p>
<table>
<tr><th>id</th><th>recovery</th><th>used by</th></tr>
{{range .Recoveries}}<tr id="recovery-{{.ID}}"><td><b>{{.ID}}</b></td><td>{{code .Text}}</td><td>{{scenarios .Scenarios}} ({{join .Families ", "}})</td></tr>
{{end}}</table>

<h2>Scenarios</h2>
<p class="muted">The proof is what the run checked and the counts it checked them over; the result says whether they held. Rerun any scenario with <code>trellara chaos run --scenario &lt;id&gt;</code>.</p>
<table>
<tr><th>scenario</th><th>family</th><th>invariant</th><th>faults</th><th>proof</th><th>recovery</th><th>result</th></tr>
{{range .R.Scenarios}}<tr class="row-{{.Result}}"><td><code>{{.ID}}</code><br>{{.Title}}<br><span class="muted">{{.Simulation}} · seed {{.Seed}}</span></td>
<td>{{.Family}}</td><td><code>{{.Invariant}}</code></td><td>{{faults .Faults}}</td><td class="proof">{{.Proof}}</td><td>{{with index $.RecID .Recovery}}<a href="#recovery-{{.}}">{{.}}</a>{{end}}</td>
<td class="{{.Result}}">{{.Result}}<br><span class="muted">{{.Outcome}}</span>{{range .Violations}}<br>{{.Invariant}}: {{.Detail}}{{end}}</td></tr>
{{end}}</table>

<h2>Simulations</h2>
<table>
<tr><th>simulation</th><th>what it runs</th><th>bounds</th><th>scenarios</th></tr>
{{range .R.Simulations}}<tr><td><code>{{.Name}}</code></td><td>{{.Title}}</td><td>{{.Bounds}}</td><td class="num">{{.Scenarios}}</td></tr>
{{end}}</table>

<h2 id="evidence">Real-server evidence</h2>
<p class="muted">The simulations drive the real code through simulated I/O. These tests run the same code against real PostgreSQL servers, processes killed with SIGKILL and a real disk, and the measurements were taken on a real server. Links are relative to the repository root: write the report there for them to resolve.</p>
<table>
<tr><th>family</th><th>evidence</th><th>command</th></tr>
{{range .Evidence}}{{$fam := .Family}}{{$n := len .Rows}}{{range $i, $e := .Rows}}<tr>{{if eq $i 0}}<td rowspan="{{$n}}">{{$fam}}</td>{{end}}<td><a href="{{$e.Anchor}}">{{$e.Doc}}</a>: {{code $e.Row}}{{with $e.Note}} <span class="muted">({{.}})</span>{{end}}</td><td><code>{{$e.Command}}</code></td></tr>
{{end}}{{end}}</table>
<p class="muted">This run of the catalogue took {{.Elapsed}}; its measured run time on the evidence machine is in <a href="{{.Matrix.Anchor}}">{{.Matrix.Doc}}</a>, row “{{code .Matrix.Row}}” (<code>{{.Matrix.Command}}</code>).</p>
</body>
</html>
`))
