package sim

import (
	"bytes"
	"html/template"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fixtureInfo is a fixed run description, so rendered reports compare.
var fixtureInfo = RunInfo{Version: "v9.9.9-test", Generated: time.Date(2026, 12, 1, 9, 30, 0, 0, time.FixedZone("CET", 3600)),
	Host: "build-7", Elapsed: 812 * time.Millisecond}

// fake makes up a result for a catalogue scenario: no simulation runs,
// every number is chosen by the test.
func fake(t *testing.T, id string, mod func(*Result)) *Result {
	t.Helper()
	sc, _, err := Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	r := &Result{Scenario: sc, Pass: true, Fired: true, Outcome: "converged", Detected: map[string]int{},
		Stats: RunStats{Txns: 48, Delivered: 44, LogEntries: 61, TargetCommits: 12, Acks: 9}}
	if mod != nil {
		mod(r)
	}
	return r
}

func render(t *testing.T, rep *Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, rep, fixtureInfo); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func fixtureReport(t *testing.T) *Report {
	_, sims := Catalogue()
	return BuildReport([]*Result{
		fake(t, "relay.crash.before-publish", func(r *Result) { r.Stats.Crashes, r.Stats.RelayRestarts = 1, 1 }),
		fake(t, "relay.crash.mid-spill", func(r *Result) { r.Stats.Crashes, r.Stats.RelayRestarts, r.Stats.Spilled = 1, 1, 3 }),
		fake(t, "applier.crash.during-quarantine", func(r *Result) {
			r.Pass = false
			r.Detected = map[string]int{"quarantine": 2, "transient": 1}
			r.Stats.Quarantined = 2
			r.Violations = []Violation{{Invariant: InvQuarantine, Detail: "unit transaction/0/1A2B was quarantined but its data is compatible with the target"}}
		}),
		fake(t, "storage.corrupt.older-segment", func(r *Result) {
			r.Outcome = "apply stopped: corruption"
			r.Detected = map[string]int{"corrupted": 1, "corruption": 1}
		}),
		fake(t, "schema.pinned-drift", func(r *Result) {
			r.Outcome = "capture stopped: schema-drift"
			r.Detected = map[string]int{"schema-drift": 1}
		}),
		fake(t, "storage.full-disk.append", func(r *Result) { r.Pass, r.Fired = false, false }),
		fake(t, "schema.drop-column.relay-crash-before-barrier", func(r *Result) {
			r.Detected = map[string]int{"schema-drift": 1, "reseed": 1, "reseed-handoff": 1}
			r.Stats.RelayRestarts, r.Stats.Barriers = 2, 1
		}),
	}, sims, "")
}

// TestHTMLGolden: the whole page for a fixed made-up report. Regenerate
// with `go test ./internal/sim -run TestHTMLGolden -update` and review.
func TestHTMLGolden(t *testing.T) {
	got := render(t, fixtureReport(t))
	path := filepath.Join("testdata", "report.golden.html")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: generate it with go test ./internal/sim -run TestHTMLGolden -update", err)
	}
	if got != string(want) {
		t.Fatalf("the rendered report differs from %s at byte %d; regenerate with -update and review the diff",
			path, firstDiff([]byte(got), want))
	}
}

// The failed count is red only when something failed.
func TestHTMLFailedRedOnlyWhenFailing(t *testing.T) {
	_, sims := Catalogue()
	pass := BuildReport([]*Result{fake(t, "relay.crash.before-publish", nil)}, sims, "")
	html := render(t, pass)
	if !strings.Contains(html, "<b>0</b>failed") {
		t.Errorf("the failed card does not read a plain 0:\n%s", card(html, "failed"))
	}
	if strings.Contains(card(html, "failed"), `class="fail"`) {
		t.Errorf("0 failed is marked as a failure: %s", card(html, "failed"))
	}
	if !strings.Contains(html, "<b>0</b>not reached") {
		t.Errorf("0 not reached is highlighted: %s", card(html, "not reached"))
	}

	failing := BuildReport([]*Result{fake(t, "relay.crash.before-publish", func(r *Result) { r.Pass = false })}, sims, "")
	if c := card(render(t, failing), "failed"); !strings.Contains(c, `<b class="fail">1</b>`) {
		t.Errorf("1 failed is not marked as a failure: %s", c)
	}
}

// card returns the summary card whose caption is caption.
func card(html, caption string) string {
	m := regexp.MustCompile(`<div class="card"><b[^>]*>\d+</b>` + regexp.QuoteMeta(caption) + `</div>`).FindString(html)
	return m
}

// Each distinct recovery text appears once; scenarios refer to it by id.
func TestHTMLRecoveryOnce(t *testing.T) {
	results, _ := runCatalogue()
	_, sims := Catalogue()
	rep := BuildReport(results, sims, "")
	html := render(t, rep)
	texts := map[string]int{}
	for _, s := range rep.Scenarios {
		texts[s.Recovery]++
	}
	if len(texts) >= len(rep.Scenarios) {
		t.Fatalf("%d recovery texts for %d scenarios: nothing to deduplicate", len(texts), len(rep.Scenarios))
	}
	recs, ids := recoveries(rep)
	if len(recs) != len(texts) {
		t.Errorf("%d recovery entries for %d distinct texts", len(recs), len(texts))
	}
	for text, uses := range texts {
		if n := strings.Count(html, string(codeSpans(text))); n != 1 {
			t.Errorf("recovery used by %d scenarios appears %d times, want once: %.60s…", uses, n, text)
		}
		id := ids[text]
		if n := strings.Count(html, `<a href="#recovery-`+id+`">`+id+`</a>`); n != uses {
			t.Errorf("recovery %s is referenced %d times, used by %d scenarios", id, n, uses)
		}
		if !strings.Contains(html, `<tr id="recovery-`+id+`">`) {
			t.Errorf("recovery %s has no anchor", id)
		}
	}
}

var proofCell = regexp.MustCompile(`<td class="proof">([^<]*)</td>`)

// The proof column says what was checked, not the scenario id again.
func TestHTMLProofIsWhatWasChecked(t *testing.T) {
	results, _ := runCatalogue()
	_, sims := Catalogue()
	rep := BuildReport(results, sims, "")
	cells := proofCell.FindAllStringSubmatch(render(t, rep), -1)
	if len(cells) != len(rep.Scenarios) {
		t.Fatalf("%d proof cells for %d scenarios", len(cells), len(rep.Scenarios))
	}
	distinct := map[string]bool{}
	for i, s := range rep.Scenarios {
		cell := cells[i][1]
		distinct[cell] = true
		if strings.Contains(cell, s.ID) || strings.Contains(cell, "trellara chaos run") {
			t.Errorf("%s: the proof cell repeats the id or the command: %s", s.ID, cell)
		}
		if !strings.Contains(cell, "target state compared with the source after each target commit (") {
			t.Errorf("%s: the proof cell does not say what was checked: %s", s.ID, cell)
		}
	}
	if len(distinct) < len(rep.Scenarios)/2 {
		t.Errorf("only %d distinct proofs for %d scenarios", len(distinct), len(rep.Scenarios))
	}
}

func TestProofOf(t *testing.T) {
	cases := []struct {
		id   string
		mod  func(*Result)
		want []string
		not  []string
	}{
		{"relay.crash.mid-spill", func(r *Result) { r.Stats.Crashes, r.Stats.RelayRestarts, r.Stats.Spilled = 2, 2, 3 }, []string{
			"fault reached: 2 relay restarts, 2 log reopens",
			"target state compared with the source after each target commit (12)",
			"end: 44 transactions with data counted at the target, final state compared",
			"exercised: spill ×3",
		}, []string{"stop required"}},
		{"storage.power-loss.mid-append", nil, []string{
			"slot position checked against the durable log at 9 acknowledgements",
		}, nil},
		{"applier.crash.during-quarantine", func(r *Result) {
			r.Detected = map[string]int{"transient": 1, "quarantine": 2}
			r.Stats.Quarantined = 2
		}, []string{
			"2 transactions quarantined, each checked to be one of the incompatible ones, none left open",
			"observed: quarantine ×2, lost target connection ×1 (required: quarantine, transient)",
		}, nil},
		{"schema.pinned-drift", func(r *Result) { r.Detected = map[string]int{"schema-drift": 1} }, []string{
			"61 log entries checked against the pinned relation fingerprints",
			"end: a typed schema-drift stop required, target checked to be a prefix of history",
			"observed: schema drift ×1",
		}, []string{"fault", "counted at the target"}},
		{"storage.full-disk.append", func(r *Result) { r.Fired = false }, []string{"fault point never reached"}, nil},
	}
	for _, tc := range cases {
		got := proofOf(fake(t, tc.id, tc.mod))
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: proof lacks %q:\n%s", tc.id, w, got)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("%s: proof has %q:\n%s", tc.id, n, got)
			}
		}
	}
}

// The page says when, where and how long; report.json does not.
func TestHTMLRunInfo(t *testing.T) {
	rep := fixtureReport(t)
	html := render(t, rep)
	for _, want := range []string{"Generated 2026-12-01 08:30:00 UTC on build-7", "the catalogue ran in 0.81 s", "trellara v9.9.9-test"} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	j, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"build-7", "2026-12-01", "0.81", "generated", "host"} {
		if bytes.Contains(j, []byte(leak)) {
			t.Errorf("report.json carries %q: it would no longer be reproducible", leak)
		}
	}
	if got := humanDuration(95 * time.Second); got != "1 min 35 s" {
		t.Errorf("humanDuration(95s) = %q", got)
	}
}

var (
	chartFamily = regexp.MustCompile(`<text x="0" y="(\d+)"[^>]*>([^<]+)</text>`)
	chartRect   = regexp.MustCompile(`<rect class="(passed|failed|not-reached)" x="(\d+)" y="(\d+)" width="(\d+)"`)
	chartLabel  = regexp.MustCompile(`<text x="550" y="(\d+)"[^>]*>([^<]+)</text>`)
)

// chart reads the SVG back: per family, the width of each share and the
// label.
func chart(t *testing.T, html string) (map[string]map[string]int, map[string]string) {
	t.Helper()
	fams := map[int]string{}
	for _, m := range chartFamily.FindAllStringSubmatch(html, -1) {
		y, _ := strconv.Atoi(m[1])
		fams[y-16] = m[2]
	}
	widths := map[string]map[string]int{}
	for _, m := range chartRect.FindAllStringSubmatch(html, -1) {
		y, _ := strconv.Atoi(m[3])
		w, _ := strconv.Atoi(m[4])
		f := fams[y]
		if widths[f] == nil {
			widths[f] = map[string]int{}
		}
		widths[f][m[1]] = w
	}
	labels := map[string]string{}
	for _, m := range chartLabel.FindAllStringSubmatch(html, -1) {
		y, _ := strconv.Atoi(m[1])
		labels[fams[y-16]] = m[2]
	}
	return widths, labels
}

// The bars show each family's pass rate, with the counts as labels: a
// family of 10 that all passed is as long as one of 16 that all passed.
func TestHTMLPassRateBars(t *testing.T) {
	_, sims := Catalogue()
	var results []*Result
	for _, sc := range Select(mustCatalogue(), "", FamilyRelay) {
		results = append(results, fake(t, sc.ID, nil))
	}
	// Ten of the schema scenarios: 5 pass, 3 fail, 2 are not reached.
	schema := Select(mustCatalogue(), "", FamilySchema)
	if len(schema) < 10 {
		t.Fatalf("the catalogue changed: %d schema scenarios, this test needs 10", len(schema))
	}
	schema = schema[:10]
	for i, sc := range schema {
		results = append(results, fake(t, sc.ID, func(r *Result) {
			switch {
			case i < 3:
				r.Pass = false
			case i < 5:
				r.Pass, r.Fired = false, false
			}
		}))
	}
	for _, sc := range Select(mustCatalogue(), "", FamilyTransport) {
		results = append(results, fake(t, sc.ID, nil))
	}
	rep := BuildReport(results, sims, "")
	widths, labels := chart(t, render(t, rep))
	nRelay, nSchema, nTransport := len(results)-len(schema)-11, len(schema), 11
	if nSchema != 10 || nTransport != len(Select(mustCatalogue(), "", FamilyTransport)) {
		t.Fatalf("the catalogue changed: %d schema scenarios", nSchema)
	}
	if w := widths[FamilyRelay]; w["passed"] != barWidth || w["failed"] != 0 || w["not-reached"] != 0 {
		t.Errorf("relay-crash, all %d passed: widths %v, want the whole bar (%d) passed", nRelay, w, barWidth)
	}
	if w := widths[FamilyTransport]; w["passed"] != widths[FamilyRelay]["passed"] {
		t.Errorf("transport (%d/%d) and relay-crash (%d/%d) both passed fully but their bars differ: %d vs %d",
			nTransport, nTransport, nRelay, nRelay, w["passed"], widths[FamilyRelay]["passed"])
	}
	if w := widths[FamilySchema]; w["passed"] != barWidth/2 || w["failed"] != barWidth*3/10 || w["not-reached"] != barWidth/5 {
		t.Errorf("schema 5 passed, 3 failed, 2 not reached of 10: widths %v", w)
	}
	for fam, want := range map[string]string{
		FamilyRelay:  "100% · 16/16 passed",
		FamilySchema: "50% · 5/10 passed, 3 failed, 2 not reached",
	} {
		if labels[fam] != want {
			t.Errorf("%s label %q, want %q", fam, labels[fam], want)
		}
	}
	if got := passRate(199, 200); got != 99 {
		t.Errorf("passRate(199, 200) = %d: one failure must not show as 100%%", got)
	}
}

func mustCatalogue() []*Scenario {
	scs, _ := Catalogue()
	return scs
}

// The report is self-contained (nothing fetched, no scripts) and its
// links go to the page itself or to the repository's documents.
func TestHTMLSelfContained(t *testing.T) {
	html := render(t, fixtureReport(t))
	for _, want := range []string{"<!DOCTYPE html>", "<svg", "</svg>", "</html>"} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "src=", "@import", "url(", "<link", "<img", "<iframe"} {
		if strings.Contains(html, bad) {
			t.Errorf("report references an external asset or script (%q)", bad)
		}
	}
	for _, m := range regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(html, -1) {
		h := m[1]
		local := strings.HasPrefix(h, "#")
		doc := (strings.HasPrefix(h, "docs/") || strings.HasPrefix(h, "README.md")) && !strings.Contains(h, "//") && !strings.Contains(h, "..")
		if !local && !doc {
			t.Errorf("link %q leaves the page and the repository", h)
		}
	}
}

// The evidence section links every family to its real-server evidence
// and quotes the command.
func TestHTMLEvidence(t *testing.T) {
	rep := fixtureReport(t)
	html := render(t, rep)
	_, ev, ok := strings.Cut(html, `<h2 id="evidence">`)
	if !ok {
		t.Fatal("report has no evidence section")
	}
	for _, f := range rep.Families {
		rows := FamilyEvidence[f.Family]
		if len(rows) == 0 {
			t.Errorf("family %s has no real-server evidence", f.Family)
		}
		if !strings.Contains(ev, `<td rowspan="`+strconv.Itoa(len(rows))+`">`+f.Family+`</td>`) {
			t.Errorf("evidence section has no row group for %s", f.Family)
		}
		for _, e := range rows {
			for _, want := range []string{`<a href="` + e.Anchor() + `">` + e.Doc + `</a>: ` + string(codeSpans(e.Row)),
				"<code>" + template.HTMLEscapeString(e.Command) + "</code>"} {
				if !strings.Contains(ev, want) {
					t.Errorf("%s: evidence section lacks %s", f.Family, want)
				}
			}
		}
	}
	if !strings.Contains(ev, `<a href="docs/EVIDENCE.md#failure-matrix-trellara-chaos-run">`) {
		t.Error("evidence section does not link the failure matrix's own measurement")
	}
}

// Every piece of evidence the report quotes is in its document, verbatim,
// under the heading its link names: the report cannot claim evidence the
// documents do not have.
func TestEvidenceQuotesTheDocs(t *testing.T) {
	rows := []Evidence{MatrixEvidence}
	for _, f := range Families {
		if len(FamilyEvidence[f]) == 0 {
			t.Errorf("family %s has no real-server evidence", f)
		}
		rows = append(rows, FamilyEvidence[f]...)
	}
	for _, e := range rows {
		b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(e.Doc)))
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		section, ok := docSection(doc, e.Section)
		if !ok {
			t.Errorf("%s has no heading %q (link %s)", e.Doc, e.Section, e.Anchor())
			continue
		}
		var line string
		for _, l := range strings.Split(section, "\n") {
			if strings.Contains(l, e.Row) {
				line = l
				break
			}
		}
		if line == "" {
			t.Errorf("%s § %s does not have the row %q", e.Doc, e.Section, e.Row)
			continue
		}
		// A table row names its command, or its section's heading does;
		// a section's numbers are reproduced by a command the document
		// quotes.
		cmd := "`" + e.Command + "`"
		heading, _, _ := strings.Cut(section, "\n")
		switch {
		case strings.Contains(line, cmd), strings.Contains(heading, cmd):
		case strings.HasPrefix(line, "|"):
			t.Errorf("%s: neither the row %q nor its heading names the command %s", e.Doc, e.Row, cmd)
		case !strings.Contains(doc, cmd):
			t.Errorf("%s does not quote the command %s", e.Doc, cmd)
		}
		if e.Note != "" && !strings.Contains(line, e.Note) {
			t.Errorf("%s: the row %q does not say %q", e.Doc, e.Row, e.Note)
		}
	}
}

// docSection returns the text from the "## heading" line to the next
// "## " heading.
func docSection(doc, heading string) (string, bool) {
	_, rest, ok := strings.Cut(doc, "\n## "+heading+"\n")
	if !ok {
		return "", false
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return "## " + heading + "\n" + rest, true
}

func TestHeadingSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Evidence": "evidence",
		"Durable local log (`go test -bench . ./segmentlog`)":               "durable-local-log-go-test--bench--segmentlog",
		"Failure matrix (`trellara chaos run`)":                             "failure-matrix-trellara-chaos-run",
		"Native extension + sidecar (`BenchmarkSidecarVsRelay`, ./sidecar)": "native-extension--sidecar-benchmarksidecarvsrelay-sidecar",
	} {
		if got := headingSlug(in); got != want {
			t.Errorf("headingSlug(%q) = %q, want %q", in, got, want)
		}
	}
}
