package sim

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"
	"time"
)

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
	ID         string      `json:"id"`
	Family     string      `json:"family"`
	Title      string      `json:"title"`
	Simulation string      `json:"simulation"`
	Seed       uint64      `json:"seed"`
	Invariant  string      `json:"invariant"`
	Proof      string      `json:"proof"`
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
	rep := &Report{SchemaVersion: 1, Bounds: bounds}
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
			Invariant: sc.Invariant, Proof: sc.Proof, Recovery: sc.Recovery, Faults: sc.Faults, Expect: sc.Expect,
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
	for _, inv := range []string{InvNoLoss, InvExactlyOnce, InvAtomic, InvAckDurable, InvQuarantine, InvSchemaPinned} {
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

// WriteText prints each scenario with its invariant, proof and recovery
// commands, then the summary.
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
	if strings.HasSuffix(what, "y") {
		return fmt.Sprintf("%d %sies", n, what[:len(what)-1])
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func invText(id string) string {
	if t, ok := InvariantText[id]; ok {
		return t
	}
	return "every invariant"
}

// bar is one family's bar in the chart.
type bar struct {
	Family                     string
	Y, LabelY, CountX, X2, X3  int
	PassW, FailW, SkipW        int
	Passed, Failed, NotReached int
	Scenarios                  int
}

// WriteHTML writes a self-contained HTML report: no scripts, no external
// assets, the chart inline SVG.
func WriteHTML(w io.Writer, rep *Report, version string) error {
	const width = 420
	most := 1
	for _, f := range rep.Families {
		most = max(most, f.Scenarios)
	}
	var bars []bar
	for i, f := range rep.Families {
		scale := func(n int) int { return n * width / most }
		b := bar{Family: f.Family, Y: 10 + i*34, LabelY: 10 + i*34 + 15, Passed: f.Passed, Failed: f.Failed, NotReached: f.NotReached,
			PassW: scale(f.Passed), FailW: scale(f.Failed), SkipW: scale(f.NotReached), Scenarios: f.Scenarios}
		b.X2 = 130 + b.PassW
		b.X3 = b.X2 + b.FailW
		b.CountX = b.X3 + b.SkipW + 8
		bars = append(bars, b)
	}
	data := struct {
		R       *Report
		Bars    []bar
		ChartH  int
		Version string
		Inv     map[string]string
	}{rep, bars, 20 + len(bars)*34, version, InvariantText}
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
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Trellara correctness report</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1200px;padding:0 1rem;color:#1b1f24}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem}
.muted{color:#57606a}.cards{display:flex;gap:1rem;flex-wrap:wrap;margin:1rem 0}
.card{border:1px solid #d0d7de;border-radius:6px;padding:.6rem 1rem;min-width:8rem}.card b{display:block;font-size:1.5rem}
table{border-collapse:collapse;width:100%;margin:.5rem 0}th,td{border:1px solid #d0d7de;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right}code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;padding:0 .2rem}
.pass{color:#116329;font-weight:600}.fail{color:#cf222e;font-weight:600}.not-reached{color:#57606a;font-weight:600}
tr.row-fail td{background:#ffebe9}
</style>
</head>
<body>
<h1>Trellara correctness report</h1>
<p class="muted">Deterministic failure matrix{{if .Version}} · trellara {{.Version}}{{end}}. Every scenario runs the real relay, segment log and applier code against simulated I/O; each names the invariant it protects, the command that proves it and the command that recovers.{{if .R.Bounds}} Bounds from the flow configuration: {{.R.Bounds}}.{{end}}</p>
<div class="cards">
<div class="card"><b>{{.R.Summary.Scenarios}}</b>scenarios</div>
<div class="card"><b>{{.R.Summary.Simulations}}</b>simulations</div>
<div class="card"><b>{{.R.Summary.Families}}</b>families</div>
<div class="card"><b class="pass">{{.R.Summary.Passed}}</b>passed</div>
<div class="card"><b class="fail">{{.R.Summary.Failed}}</b>failed</div>
<div class="card"><b class="not-reached">{{.R.Summary.NotReached}}</b>not reached</div>
</div>

<h2>Outcomes per family</h2>
<svg xmlns="http://www.w3.org/2000/svg" width="640" height="{{.ChartH}}" viewBox="0 0 640 {{.ChartH}}" role="img" aria-label="scenario outcomes per family">
{{range .Bars}}<text x="0" y="{{.LabelY}}" font-size="13" fill="#1b1f24">{{.Family}}</text>
<rect x="130" y="{{.Y}}" width="{{.PassW}}" height="22" fill="#2da44e"><title>{{.Passed}} passed</title></rect>
<rect x="{{.X2}}" y="{{.Y}}" width="{{.FailW}}" height="22" fill="#cf222e"><title>{{.Failed}} failed</title></rect>
<rect x="{{.X3}}" y="{{.Y}}" width="{{.SkipW}}" height="22" fill="#8c959f"><title>{{.NotReached}} not reached</title></rect>
<text x="{{.CountX}}" y="{{.LabelY}}" font-size="12" fill="#57606a">{{.Passed}}/{{.Scenarios}}</text>
{{end}}</svg>

<table>
<tr><th>family</th><th>scenarios</th><th>simulations</th><th>passed</th><th>failed</th><th>not reached</th></tr>
{{range .R.Families}}<tr><td>{{.Family}}</td><td class="num">{{.Scenarios}}</td><td class="num">{{.Simulations}}</td><td class="num">{{.Passed}}</td><td class="num">{{.Failed}}</td><td class="num">{{.NotReached}}</td></tr>
{{end}}</table>

<h2>Invariants</h2>
<p class="muted">All are checked in every scenario; each scenario names the one it is built to threaten.</p>
<table>
<tr><th>invariant</th><th>meaning</th></tr>
{{range .R.Invariants}}<tr><td><code>{{.ID}}</code></td><td>{{.Text}}</td></tr>
{{end}}</table>

<h2>Scenarios</h2>
<table>
<tr><th>scenario</th><th>family</th><th>invariant</th><th>faults</th><th>proof</th><th>recovery</th><th>result</th></tr>
{{range .R.Scenarios}}<tr class="row-{{.Result}}"><td><code>{{.ID}}</code><br>{{.Title}}<br><span class="muted">{{.Simulation}} · seed {{.Seed}}</span></td>
<td>{{.Family}}</td><td><code>{{.Invariant}}</code></td><td>{{faults .Faults}}</td><td><code>{{.Proof}}</code></td><td>{{.Recovery}}</td>
<td class="{{.Result}}">{{.Result}}<br><span class="muted">{{.Outcome}}</span>{{range .Violations}}<br>{{.Invariant}}: {{.Detail}}{{end}}</td></tr>
{{end}}</table>

<h2>Simulations</h2>
<table>
<tr><th>simulation</th><th>what it runs</th><th>bounds</th><th>scenarios</th></tr>
{{range .R.Simulations}}<tr><td><code>{{.Name}}</code></td><td>{{.Title}}</td><td>{{.Bounds}}</td><td class="num">{{.Scenarios}}</td></tr>
{{end}}</table>
</body>
</html>
`))
