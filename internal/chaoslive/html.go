package chaoslive

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
)

// Environment is where a qualification ran.
type Environment struct {
	Host          string       `json:"host"`
	CPUs          int          `json:"cpus"`
	MemoryBytes   uint64       `json:"memory_bytes"`
	Kernel        string       `json:"kernel"`
	OS            string       `json:"os"`
	SourceVersion string       `json:"source_postgresql"`
	TargetVersion string       `json:"target_postgresql"`
	Trellara      string       `json:"trellara_version"`
	GoVersion     string       `json:"go_version"`
	Binaries      []BinaryHash `json:"binaries"`
	Note          string       `json:"note,omitempty"`
}

// BinaryHash names an executable by its SHA-256.
type BinaryHash struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// Qualification is `trellara qualify`'s report: a live chaos soak with
// its environment.
type Qualification struct {
	Title       string       `json:"title"`
	Generated   time.Time    `json:"generated"`
	Command     string       `json:"command"`
	Workload    string       `json:"workload"`
	Duration    string       `json:"duration"`
	Environment *Environment `json:"environment,omitempty"`
	Live        *Report      `json:"live"`
	Verdict     string       `json:"verdict"`
}

type chart struct {
	Name string
	SVG  template.HTML
	Leak *LeakFinding
}

var page = template.Must(template.New("q").Funcs(template.FuncMap{
	"secs": secs,
	"mib":  func(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) },
	"label": func(v VerifyResult) string {
		switch {
		case v.Final:
			return "final"
		case v.AfterFaults == 0:
			return "before the first fault"
		}
		return fmt.Sprintf("after %d faults", v.AfterFaults)
	},
	"f2": func(x float64) string { return fmt.Sprintf("%.2f", x) },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Q.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#111}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
th{background:#f3f4f6}.PASS{color:#047857;font-weight:bold}.FAIL{color:#b91c1c;font-weight:bold}
figure{margin:0}.charts{display:flex;flex-wrap:wrap;gap:10px}.mono{font-family:ui-monospace,monospace;font-size:12px}
</style></head><body>
<h1>{{.Q.Title}}</h1>
<p>Verdict: <span class="{{.Q.Verdict}}" id="verdict">{{.Q.Verdict}}</span> — {{.Q.Live.VerdictReason}}</p>
<table>
<tr><th>workload</th><td>{{.Q.Workload}}</td></tr>
<tr><th>duration</th><td>{{.Q.Duration}} planned, {{f2 .Q.Live.Elapsed}} s elapsed, seed {{.Q.Live.Seed}}</td></tr>
<tr><th>generated</th><td>{{.Q.Generated.Format "2006-01-02 15:04:05 UTC"}}</td></tr>
<tr><th>command</th><td class="mono">{{.Q.Command}}</td></tr>
</table>
{{with .Q.Environment}}<h2 id="environment">Environment</h2>
<table>
<tr><th>machine</th><td>{{.Host}}: {{.CPUs}} CPUs, {{mib .MemoryBytes}} memory{{if .Note}} ({{.Note}}){{end}}</td></tr>
<tr><th>kernel</th><td>{{.Kernel}}</td></tr><tr><th>OS</th><td>{{.OS}}</td></tr>
<tr><th>source</th><td>{{.SourceVersion}}</td></tr><tr><th>target</th><td>{{.TargetVersion}}</td></tr>
<tr><th>Trellara</th><td>{{.Trellara}} ({{.GoVersion}})</td></tr>
</table>
<table><tr><th>binary</th><th>path</th><th>SHA-256</th><th>bytes</th></tr>
{{range .Binaries}}<tr><td>{{.Name}}</td><td class="mono">{{.Path}}</td><td class="mono">{{.SHA256}}</td><td>{{.Bytes}}</td></tr>{{end}}
</table>{{end}}
<h2 id="live-chaos">Live chaos: recovery time per fault kind</h2>
<p>Seconds from the injection to: detection (process exit observed or /readyz false), ready (/readyz true on every process), caught up (the target checkpoint at or past the source's WAL position when the fault began).</p>
<table><tr><th>kind</th><th>status</th><th>n</th><th>detect p50 / p95 / max</th><th>ready p50 / p95 / max</th><th>caught up p50 / p95 / max</th></tr>
{{range .Q.Live.Kinds}}<tr><td>{{.Kind}}</td><td>{{.Status}}</td><td>{{.Injected}}</td>{{if .Injected}}<td>{{f2 .Detect.P50}} / {{f2 .Detect.P95}} / {{f2 .Detect.Max}}</td><td>{{f2 .Ready.P50}} / {{f2 .Ready.P95}} / {{f2 .Ready.Max}}</td><td>{{f2 .CaughtUp.P50}} / {{f2 .CaughtUp.P95}} / {{f2 .CaughtUp.Max}}</td>{{else}}<td>-</td><td>-</td><td>-</td>{{end}}</tr>{{end}}
</table>
<h3>Faults</h3>
<table><tr><th>#</th><th>kind</th><th>at (s)</th><th>what</th><th>source LSN</th><th>detect</th><th>ready</th><th>caught up</th><th>note</th></tr>
{{range .Q.Live.Faults}}<tr><td>{{.Seq}}</td><td>{{.Kind}}</td><td>{{f2 .AtSeconds}}</td><td>{{.What}}</td><td class="mono">{{.SourceLSN}}</td><td>{{secs .Detect}}</td><td>{{secs .Ready}}</td><td>{{secs .CaughtUp}}</td><td>{{.Note}}{{if .Error}} <b>ERROR {{.Error}}</b>{{end}}</td></tr>{{end}}
</table>
<h3>Workload, reader and verify</h3>
<table>
<tr><th>transactions committed</th><td>{{.Q.Live.Committed}} (workload errors while a server was down: {{.Q.Live.WorkloadErrs}})</td></tr>
<tr><th>reader</th><td>{{.Q.Live.Reader.Observations}} observations of the target in one snapshot each, {{.Q.Live.Reader.Reconnects}} reconnects{{with .Q.Live.Reader.Last}}; last: {{.Accounts}} accounts, sum {{.Sum}}, {{.History}} history rows{{end}}</td></tr>
{{range .Q.Live.Verifies}}<tr><th>verify ({{label .}})</th><td>{{.Verdict}} in {{f2 .Seconds}} s{{if .Detail}}: {{.Detail}}{{end}}</td></tr>{{end}}
<tr><th>violations</th><td id="violations">{{len .Q.Live.Violations}}</td></tr>
</table>
{{if .Q.Live.Violations}}<table><tr><th>at (s)</th><th>source</th><th>detail</th></tr>{{range .Q.Live.Violations}}<tr><td>{{f2 .AtSeconds}}</td><td>{{.Source}}</td><td>{{.Detail}}</td></tr>{{end}}</table>{{end}}
<h2 id="soak">Resources over time</h2>
<p>Sampled every few seconds: process RSS and open files (/proc), goroutines (/metrics), log directory size, slot lag (source) and apply lag (/metrics). A series leaks when its trend over the second half grows more than {{.LeakPct}}% of its mean and more than its floor.</p>
<div class="charts">{{range .Charts}}<figure>{{.SVG}}<figcaption class="mono">{{with .Leak}}{{.Summary}}{{end}}</figcaption></figure>{{end}}</div>
<h2 id="not-covered">Not covered</h2>
<ul>{{range .Q.Live.NotCovered}}<li>{{.}}</li>{{end}}</ul>
</body></html>
`))

// WriteHTML writes q as one self-contained page (inline CSS and SVG, no
// scripts, no external assets).
func WriteHTML(w io.Writer, q *Qualification) error {
	leaks := map[string]*LeakFinding{}
	for i := range q.Live.Leaks {
		leaks[q.Live.Leaks[i].Series] = &q.Live.Leaks[i]
	}
	var charts []chart
	for _, name := range seriesNames(q.Live.Samples) {
		ts, vs := seriesOf(q.Live.Samples, name)
		charts = append(charts, chart{Name: name, SVG: template.HTML(SVG(name, ts, vs)), Leak: leaks[name]}) //nolint:gosec // SVG escapes its text
	}
	return page.Execute(w, struct {
		Q       *Qualification
		Charts  []chart
		LeakPct int
	}{q, charts, int(LeakRelative * 100)})
}

// Title is the page title of a live chaos run or a qualification.
func Title(kind, flow string) string {
	return strings.TrimSpace(fmt.Sprintf("Trellara %s: flow %s", kind, flow))
}
