package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/chaoslive"
)

// chaos live and qualify refuse a production flow by name (exit 2) before
// starting anything, and an unknown fault kind is a usage error.
func TestChaosLiveRefusals(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prod.yml")
	body := `version: 2
environment: production
flow: prod
source:
  id: src1
  database_url: {env: SRC_URL}
  tables: [public.trellara_chaos_accounts, public.trellara_chaos_history]
transport:
  local: {dir: ` + filepath.Join(dir, "data") + `}
target:
  database_url: {env: DST_URL}
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"chaos", "live", "--config", cfg, "--duration", "1s"},
		{"qualify", "--config", cfg, "--duration", "1s", "--format", "json"},
	} {
		out, errOut, code := run(t, args...)
		if code != ExitError || !strings.Contains(out+errOut, "refuses environment: production") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("a refused run created the flow's state")
	}
	out, errOut, code := run(t, "chaos", "live", "--config", cfg, "--faults", "relay,meteor")
	if code != ExitError || !strings.Contains(out+errOut, `unknown fault kind "meteor"`) {
		t.Errorf("--faults meteor: exit %d\n%s%s", code, out, errOut)
	}
}

// The JSON of chaos live and qualify matches docs/json: a report with
// every field filled is written through the envelope and validated.
func TestChaosLiveJSONSchema(t *testing.T) {
	v := newJSONValidator(t)
	one := 0.5
	rep := &chaoslive.Report{Flow: "f", Seed: 1, Duration: "1m0s", Started: time.Now().UTC(), Processes: []string{"p"},
		Faults:     []chaoslive.Fault{{Seq: 1, Kind: "relay", What: "SIGKILL relay pid 1", SourceLSN: "0/1", Detect: &one, Ready: &one, CaughtUp: &one, Note: "n"}},
		Kinds:      []chaoslive.KindSummary{{Kind: "relay", Status: "injected", Injected: 1, Detect: chaoslive.Dist{N: 1, P50: 0.5, P95: 0.5, Max: 0.5}}},
		Reader:     chaoslive.ReaderSummary{Observations: 3, Last: &chaoslive.Observation{Accounts: 100}},
		Violations: []chaoslive.Violation{{AtSeconds: 1, Source: "reader", Detail: "d"}},
		Verifies:   []chaoslive.VerifyResult{{Final: true, Verdict: "CONVERGED"}},
		Samples:    []chaoslive.Sample{{T: 1, Values: map[string]float64{"relay.rss_bytes": 1}}},
		Leaks:      []chaoslive.LeakFinding{{Series: "relay.rss_bytes", Judged: true}},
		NotCovered: []string{"disk: not available"}, Verdict: "FAIL", VerdictReason: "1 violations"}
	q := &chaoslive.Qualification{Title: "t", Generated: time.Now().UTC(), Command: "trellara qualify", Workload: "w", Duration: "1m0s", Live: rep, Verdict: "FAIL"}
	for _, command := range []string{"chaos live", "qualify"} {
		if command == "qualify" {
			q.Environment = &chaoslive.Environment{Host: "h", CPUs: 2, Kernel: "k", SourceVersion: "s", TargetVersion: "t", Trellara: "v",
				Binaries: []chaoslive.BinaryHash{{Name: "trellara", Path: "/bin/trellara", SHA256: strings.Repeat("a", 64), Bytes: 1}}}
		}
		var buf bytes.Buffer
		if err := writeEnvelope(&buf, command, false, q, nil); err != nil {
			t.Fatal(err)
		}
		v.check(t, command, buf.String())
	}
}
