package matrix

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A trimmed capture of `go test -json` with a passing package, a failing
// subtest, a skipped test and a package with no final event (killed).
const goTestJSON = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK","Elapsed":0.1}
{"Action":"run","Package":"example.com/a","Test":"TestSkip"}
{"Action":"output","Package":"example.com/a","Test":"TestSkip","Output":"    a_test.go:9: needs -short=false\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestSkip","Elapsed":0}
{"Action":"pass","Package":"example.com/a","Elapsed":1.5}
{"Action":"run","Package":"example.com/b","Test":"TestParent"}
{"Action":"run","Package":"example.com/b","Test":"TestParent/child"}
{"Action":"output","Package":"example.com/b","Test":"TestParent/child","Output":"=== RUN   TestParent/child\n"}
{"Action":"output","Package":"example.com/b","Test":"TestParent/child","Output":"    b_test.go:12: pg_basebackup: no such file or directory\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestParent/child","Elapsed":0.2}
{"Action":"fail","Package":"example.com/b","Test":"TestParent","Elapsed":0.2}
{"Action":"fail","Package":"example.com/b","Elapsed":2}
not json: a build error line
{"Action":"run","Package":"example.com/c","Test":"TestHang"}
{"ImportPath":"example.com/d [example.com/d.test]","Action":"build-output","Output":"# example.com/d [example.com/d.test]\n"}
{"ImportPath":"example.com/d [example.com/d.test]","Action":"build-output","Output":"d_test.go:4:2: could not import example.com/e\n"}
{"ImportPath":"example.com/d [example.com/d.test]","Action":"build-fail"}
{"Action":"fail","Package":"example.com/d","Elapsed":0,"FailedBuild":"example.com/d [example.com/d.test]"}
`

func TestParseGoTest(t *testing.T) {
	pkgs, err := ParseGoTest(strings.NewReader(goTestJSON))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 4 {
		t.Fatalf("%d packages, want 4: %+v", len(pkgs), pkgs)
	}
	a, b, c, d := pkgs[0], pkgs[1], pkgs[2], pkgs[3]
	if d.Status != Fail || d.BuildError != "# example.com/d [example.com/d.test] d_test.go:4:2: could not import example.com/e" {
		t.Errorf("d = %+v", d)
	}
	if a.Status != "pass" || a.Passed != 1 || a.Skipped != 1 || a.SkippedTests[0] != "TestSkip" || a.ElapsedSeconds != 1.5 {
		t.Errorf("a = %+v", a)
	}
	if b.Status != "fail" || b.Failed != 1 || len(b.FailedTests) != 1 || b.FailedTests[0].Test != "TestParent/child" ||
		b.FailedTests[0].Excerpt != "b_test.go:12: pg_basebackup: no such file or directory" {
		t.Errorf("b = %+v", b)
	}
	if c.Status != Fail {
		t.Errorf("a package with no final event must count as failed, got %q", c.Status)
	}
	if s, _ := RelayStatus(pkgs, 1); s != Fail {
		t.Errorf("RelayStatus = %s", s)
	}
	if s, _ := RelayStatus(pkgs[:1], 0); s != Pass {
		t.Errorf("RelayStatus(all pass) = %s", s)
	}
	if s, _ := RelayStatus(pkgs[:1], 2); s != Fail {
		t.Error("a non-zero go test exit must fail even when every package passed")
	}
	if s, _ := RelayStatus(nil, 0); s != Fail {
		t.Error("no packages must fail")
	}
}

func TestStepStatus(t *testing.T) {
	for _, tc := range []struct {
		steps []Step
		want  string
	}{
		{nil, NotCovered},
		{[]Step{{Name: "headers", Status: NotCovered, Detail: "none"}}, NotCovered},
		{[]Step{{Name: "headers", Status: Pass}, {Name: "build", Status: Fail}}, Fail},
		{[]Step{{Name: "headers", Status: Pass}, {Name: "build", Status: Pass}}, Pass},
	} {
		if got, _ := StepStatus(tc.steps); got != tc.want {
			t.Errorf("StepStatus(%+v) = %s, want %s", tc.steps, got, tc.want)
		}
	}
}

func TestExcludes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.tsv")
	if err := os.WriteFile(p, []byte("# comment\n\nTestA\thangs\nTestB\tslow\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ex, err := ReadExcludes(p)
	if err != nil || len(ex) != 2 {
		t.Fatalf("%+v %v", ex, err)
	}
	if got := SkipPattern(ex); got != "^(TestA|TestB)$" {
		t.Errorf("SkipPattern = %q", got)
	}
	for _, bad := range []string{"TestA\n", "TestA\t\n", "Test A\tx\n", "^TestA\tx\n"} {
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadExcludes(p); err == nil {
			t.Errorf("ReadExcludes accepted %q", bad)
		}
	}
}

func TestResultRoundTripAndRender(t *testing.T) {
	dir := t.TempDir()
	pkgs, _ := ParseGoTest(strings.NewReader(goTestJSON))
	steps := filepath.Join(dir, "steps.jsonl")
	if err := AppendStep(steps, Step{Name: "headers", Status: NotCovered, Detail: "no PostgreSQL 16 headers | obtainable"}); err != nil {
		t.Fatal(err)
	}
	if err := AppendStep(steps, Step{Name: "x", Status: "maybe"}); err == nil {
		t.Error("AppendStep accepted status maybe")
	}
	st, err := ReadSteps(steps)
	if err != nil {
		t.Fatal(err)
	}
	r := &Result{FormatVersion: FormatVersion, Major: 16, ServerVersion: "16.14", ServerSource: "npm",
		Date: time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC), Commit: "0123456789abcdef", Describe: "0123456-dirty", Host: "Debian"}
	r.Paths.ExternalRelay = Path{Status: Fail, Ran: "go test ...", Packages: pkgs[:2], Excluded: []Exclude{{Test: "TestHang", Reason: "hangs"}}}
	r.Paths.Extension.Status, r.Paths.Extension.Reason = StepStatus(st)
	r.Paths.Extension.Steps = st
	if err := r.Write(filepath.Join(dir, "pg16.json")); err != nil {
		t.Fatal(err)
	}
	got, err := LoadDir(dir)
	if err != nil || len(got) != 1 || got[0].Paths.Extension.Status != NotCovered {
		t.Fatalf("LoadDir = %+v, %v", got, err)
	}
	var buf bytes.Buffer
	if err := RenderSupport(&buf, got); err != nil {
		t.Fatal(err)
	}
	doc := buf.String()
	for _, want := range []string{
		"| 16 | 16.14 | **fail** (1 failing: see below) | not covered: no PostgreSQL 16 headers \\| obtainable | 2026-11-30 21:00 | `0123456-dirty` |",
		"- FAILED `example.com/b` TestParent/child: b_test.go:12: pg_basebackup: no such file or directory",
		"`a.TestSkip`",
		"Excluded by pgmatrix (pgmatrix/exclude.tsv), so not covered: `TestHang`: hangs",
		"Not covered on this machine: no PostgreSQL 16 headers | obtainable. The extension is not built, tested or packaged for PostgreSQL 16 here.",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("SUPPORT.md lacks %q:\n%s", want, doc)
		}
	}

	bad := *r
	bad.Paths.Extension = Path{Status: NotCovered}
	if err := bad.Validate(); err == nil {
		t.Error("not-covered without a reason validated")
	}
}
