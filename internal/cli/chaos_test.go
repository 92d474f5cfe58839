package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChaosRunOneScenario(t *testing.T) {
	out, errOut, code := run(t, "chaos", "run", "--scenario", "relay.crash.before-publish")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"PASS relay.crash.before-publish", "invariant: no-loss", "proof:     fault reached: 1 relay restart; target state compared",
		"reproduce: trellara chaos run --scenario relay.crash.before-publish",
		"recovery:", "1 scenario across 1 simulation in 1 failure-point family: 1 passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestChaosRunJSONFamilyAndSwarm(t *testing.T) {
	out, errOut, code := run(t, "chaos", "run", "--family", "schema", "--seeds", "1", "--format", "json")
	if code != ExitOK && code != ExitFindings {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var got struct {
		Summary   struct{ Scenarios, Passed int }
		Scenarios []struct {
			ID, Family, Invariant, Proof, Recovery, Result string
		}
		Swarm *struct {
			Runs     int
			Failures []struct{ Reproduce string }
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	newJSONValidator(t).check(t, "chaos run", out) // docs/json/chaos-run.schema.json
	if got.Summary.Scenarios < 5 || got.Summary.Passed != got.Summary.Scenarios {
		t.Errorf("summary %+v", got.Summary)
	}
	for _, s := range got.Scenarios {
		if s.Family != "schema" || s.Invariant == "" || s.Proof == "" || s.Recovery == "" || s.Result != "pass" {
			t.Errorf("scenario %+v", s)
		}
	}
	if got.Swarm == nil || got.Swarm.Runs == 0 {
		t.Fatalf("no swarm runs: %+v", got.Swarm)
	}
	for _, f := range got.Swarm.Failures {
		if !strings.HasPrefix(f.Reproduce, "trellara chaos run --scenario swarm.") {
			t.Errorf("reproduce command %q", f.Reproduce)
		}
	}
}

func TestChaosBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"chaos", "run", "--scenario", "no.such.scenario"},
		{"chaos", "run", "--family", "nope"},
		{"chaos", "run", "--format", "yaml"},
		{"chaos", "run", "--config", filepath.Join(t.TempDir(), "missing.yml")},
	} {
		if _, _, code := run(t, args...); code != ExitError {
			t.Errorf("%v: exit %d, want %d", args, code, ExitError)
		}
	}
}

func TestChaosReport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole catalogue")
	}
	path := filepath.Join(t.TempDir(), "report.html")
	out, errOut, code := run(t, "chaos", "report", "--output", path)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "relay.crash.before-publish") {
		t.Errorf("report.html lacks the chart or the scenarios")
	}
	// When and where it ran, measured here (report.json carries neither).
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "on "+host+" · the catalogue ran in ") || !strings.Contains(string(b), "<p class=\"meta\">Generated 20") {
		t.Errorf("report.html does not say when, where and how long it ran")
	}
	if !strings.Contains(out, "wrote "+path) {
		t.Errorf("output %q", out)
	}
}
