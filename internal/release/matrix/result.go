package matrix

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// FormatVersion is the version of the results file layout.
const FormatVersion = 1

// Path statuses.
const (
	Pass       = "pass"
	Fail       = "fail"
	NotCovered = "not-covered"
)

// Result is one major's run: pgmatrix/results/pgNN.json.
type Result struct {
	FormatVersion int       `json:"format_version"`
	Major         int       `json:"major"`
	ServerVersion string    `json:"server_version"` // `postgres --version` of the server that ran
	ServerSource  string    `json:"server_source"`  // where that server came from
	Date          time.Time `json:"date"`           // start of this major's run, UTC
	Commit        string    `json:"commit"`         // git rev-parse HEAD
	Describe      string    `json:"describe"`       // git describe --tags --always --dirty
	Host          string    `json:"host"`           // OS and CPU count of the machine
	Paths         Paths     `json:"paths"`
}

// Paths are the two capture paths.
type Paths struct {
	ExternalRelay Path `json:"external_relay"`
	Extension     Path `json:"extension"`
}

// Path is one capture path's outcome on one major.
type Path struct {
	Status          string    `json:"status"`
	Ran             string    `json:"ran,omitempty"`    // the exact commands, in words a reader can rerun
	Reason          string    `json:"reason,omitempty"` // why not-covered, or what failed
	DurationSeconds float64   `json:"duration_seconds"`
	Packages        []Package `json:"packages,omitempty"` // external_relay
	Excluded        []Exclude `json:"excluded,omitempty"` // tests deliberately not run, with why
	Steps           []Step    `json:"steps,omitempty"`    // extension
}

// Package is one Go package's outcome under `go test -json`.
type Package struct {
	Package        string       `json:"package"`
	Status         string       `json:"status"` // pass, fail, or skip (no test files / all skipped)
	ElapsedSeconds float64      `json:"elapsed_seconds"`
	Passed         int          `json:"tests_passed"`
	Failed         int          `json:"tests_failed"`
	Skipped        int          `json:"tests_skipped"`
	FailedTests    []FailedTest `json:"failed_tests,omitempty"`
	SkippedTests   []string     `json:"skipped_tests,omitempty"`
	BuildError     string       `json:"build_error,omitempty"` // the compiler's first lines, when the test binary did not build
}

// FailedTest names a failed test and the first lines it printed.
type FailedTest struct {
	Test    string `json:"test"`
	Excerpt string `json:"excerpt,omitempty"`
}

// Exclude is a test pgmatrix skips on purpose (pgmatrix/exclude.tsv).
type Exclude struct {
	Test   string `json:"test"`
	Reason string `json:"reason"`
}

// ReadExcludes reads pgmatrix/exclude.tsv: one "TestName<TAB>reason" per
// line; blank lines and lines starting with # are ignored.
func ReadExcludes(path string) ([]Exclude, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Exclude
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		test, reason, ok := strings.Cut(line, "\t")
		test, reason = strings.TrimSpace(test), strings.TrimSpace(reason)
		if !ok || test == "" || reason == "" || strings.ContainsAny(test, " |^$") {
			return nil, fmt.Errorf("matrix: %s:%d: want \"TestName<TAB>reason\"", path, i+1)
		}
		out = append(out, Exclude{Test: test, Reason: reason})
	}
	return out, nil
}

// SkipPattern is the go test -skip regexp matching exactly the excluded
// top-level tests, or "" for none.
func SkipPattern(ex []Exclude) string {
	if len(ex) == 0 {
		return ""
	}
	names := make([]string, len(ex))
	for i, e := range ex {
		names[i] = e.Test
	}
	return "^(" + strings.Join(names, "|") + ")$"
}

// Step is one step of the extension path.
type Step struct {
	Name            string  `json:"name"`
	Status          string  `json:"status"` // pass, fail, not-covered
	Detail          string  `json:"detail,omitempty"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// goTestEvent is one line of `go test -json` (cmd/test2json).
type goTestEvent struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output events (Go 1.24+)
	FailedBuild string // on a package's fail event: the ImportPath that did not build
}

// excerptBytesMax bounds what a failed test contributes to the results file.
const excerptBytesMax = 400

// ParseGoTest reads `go test -json` output and returns one Package per
// package seen, sorted by name. Only top-level tests are counted (subtests
// roll up into their parent); a failing subtest still names itself in
// FailedTests, because that is where the assertion is.
func ParseGoTest(r io.Reader) ([]Package, error) {
	pkgs := map[string]*Package{}
	output := map[string][]string{} // package + "\x00" + test -> output lines
	build := map[string][]string{}  // import path -> compiler output
	get := func(name string) *Package {
		p := pkgs[name]
		if p == nil {
			p = &Package{Package: name}
			pkgs[name] = p
		}
		return p
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // build errors and the like arrive as plain text
		}
		var ev goTestEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("matrix: go test -json: %w", err)
		}
		if ev.Action == "build-output" {
			build[ev.ImportPath] = append(build[ev.ImportPath], ev.Output)
			continue
		}
		if ev.Package == "" {
			continue
		}
		p := get(ev.Package)
		key := ev.Package + "\x00" + ev.Test
		switch ev.Action {
		case "output":
			if ev.Test != "" {
				output[key] = append(output[key], ev.Output)
			}
		case "pass", "fail", "skip":
			if ev.Test == "" {
				p.Status = ev.Action
				p.ElapsedSeconds = ev.Elapsed
				if ev.FailedBuild != "" {
					p.BuildError = excerpt(build[ev.FailedBuild])
					if p.BuildError == "" {
						p.BuildError = "build failed: " + ev.FailedBuild
					}
				}
				continue
			}
			top := !strings.Contains(ev.Test, "/")
			switch ev.Action {
			case "pass":
				if top {
					p.Passed++
				}
			case "fail":
				if top {
					p.Failed++
				}
				p.FailedTests = append(p.FailedTests, FailedTest{Test: ev.Test, Excerpt: excerpt(output[key])})
			case "skip":
				if top {
					p.Skipped++
					p.SkippedTests = append(p.SkippedTests, ev.Test)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("matrix: go test -json: %w", err)
	}
	out := make([]Package, 0, len(pkgs))
	for _, p := range pkgs {
		if p.Status == "" {
			// No final event: the binary was killed (timeout) or never ran.
			p.Status = Fail
		}
		// A parent whose only failures are in subtests adds nothing a
		// reader needs beyond the subtest names.
		p.FailedTests = dropParents(p.FailedTests)
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Package < out[j].Package })
	return out, nil
}

// excerpt keeps the first lines a test printed that are not test2json
// framing, trimmed, within excerptBytesMax.
func excerpt(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		b.WriteString(l)
		if b.Len() >= excerptBytesMax {
			break
		}
	}
	s := b.String()
	if len(s) > excerptBytesMax {
		s = strings.ToValidUTF8(s[:excerptBytesMax], "") + "…"
	}
	return s
}

func dropParents(fs []FailedTest) []FailedTest {
	var out []FailedTest
	for _, f := range fs {
		parent := false
		for _, g := range fs {
			if strings.HasPrefix(g.Test, f.Test+"/") {
				parent = true
				break
			}
		}
		if !parent {
			out = append(out, f)
		}
	}
	return out
}

// RelayStatus decides the external_relay status from the packages and go
// test's exit status: pass needs both a zero exit and no failed package
// (a build failure exits non-zero without any package event).
func RelayStatus(pkgs []Package, exitCode int) (string, string) {
	var failed []string
	for _, p := range pkgs {
		if p.Status == Fail {
			failed = append(failed, p.Package)
		}
	}
	switch {
	case len(failed) > 0:
		return Fail, "failed: " + strings.Join(failed, ", ")
	case exitCode != 0:
		return Fail, fmt.Sprintf("go test exited %d with no failed package (build error or timeout; see the run log)", exitCode)
	case len(pkgs) == 0:
		return Fail, "go test reported no packages"
	}
	return Pass, ""
}

// StepStatus decides the extension status from its steps: not-covered when
// the first step could not run, fail when any step failed, pass otherwise.
func StepStatus(steps []Step) (string, string) {
	if len(steps) == 0 {
		return NotCovered, "no step ran"
	}
	if steps[0].Status == NotCovered {
		return NotCovered, steps[0].Detail
	}
	for _, s := range steps {
		if s.Status == Fail {
			return Fail, s.Name + " failed: " + s.Detail
		}
	}
	for _, s := range steps {
		if s.Status == NotCovered {
			return Pass, "passed what ran; not run: " + s.Name + " (" + s.Detail + ")"
		}
	}
	return Pass, ""
}

// ReadSteps reads the JSON-lines file pgmatrix step appends to.
func ReadSteps(path string) ([]Step, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var steps []Step
	dec := json.NewDecoder(f)
	for {
		var s Step
		if err := dec.Decode(&s); err == io.EOF {
			return steps, nil
		} else if err != nil {
			return nil, fmt.Errorf("matrix: %s: %w", path, err)
		}
		steps = append(steps, s)
	}
}

// AppendStep adds one step to a JSON-lines file.
func AppendStep(path string, s Step) error {
	switch s.Status {
	case Pass, Fail, NotCovered:
	default:
		return fmt.Errorf("matrix: step %q: status %q must be pass, fail or not-covered", s.Name, s.Status)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Validate checks a result read back from disk before it is rendered.
func (r *Result) Validate() error {
	if r.FormatVersion != FormatVersion {
		return fmt.Errorf("matrix: pg%d: format_version %d, this generator reads %d", r.Major, r.FormatVersion, FormatVersion)
	}
	if r.Major < 10 || r.Date.IsZero() || r.Commit == "" {
		return fmt.Errorf("matrix: result for major %d lacks major, date or commit", r.Major)
	}
	for name, p := range map[string]Path{"external_relay": r.Paths.ExternalRelay, "extension": r.Paths.Extension} {
		switch p.Status {
		case Pass, Fail:
		case NotCovered:
			if p.Reason == "" {
				return fmt.Errorf("matrix: pg%d %s: not-covered needs a reason", r.Major, name)
			}
		default:
			return fmt.Errorf("matrix: pg%d %s: status %q must be pass, fail or not-covered", r.Major, name, p.Status)
		}
	}
	return nil
}

// Load reads and validates one results file.
func Load(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("matrix: %s: %w", path, err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return &r, nil
}

// Write stores a result as indented JSON.
func (r *Result) Write(path string) error {
	if err := r.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
