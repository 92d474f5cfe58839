package pilot

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/chaoslive"
	"github.com/trellara/trellara/internal/config"
)

// The flow's live evidence goes into the package when recorded, is listed
// as not run (with the command that makes it) when not, and the scorecard
// cites it: a failing live run fails claims 2 and 3.
func TestLiveEvidence(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.Config{Transport: config.Transport{Local: &config.Local{Dir: dir}}}
	b := &builder{opts: Options{ConfigPath: "flow.yml"}, p: &Package{Files: map[string][]byte{}, Manifest: Manifest{NotRun: []NotRun{}}}}
	b.live(cfg)
	if len(b.p.Files) != 0 || len(b.p.Manifest.NotRun) != 3 || !strings.Contains(b.p.Manifest.NotRun[1].Reason, "trellara qualify --config flow.yml") ||
		!strings.Contains(b.p.Manifest.NotRun[2].Reason, "trellara semantics --config flow.yml") {
		t.Fatalf("without evidence: files %v, not run %+v", b.p.Files, b.p.Manifest.NotRun)
	}

	rep := &chaoslive.Report{Verdict: "PASS", VerdictReason: "4 faults recovered", Reader: chaoslive.ReaderSummary{Observations: 90},
		Faults: make([]chaoslive.Fault, 4), Kinds: []chaoslive.KindSummary{{Kind: "relay", Injected: 4, CaughtUp: chaoslive.Dist{P95: 0.4}}}}
	q := &chaoslive.Qualification{Title: "t", Live: rep, Verdict: rep.Verdict}
	if err := chaoslive.SaveEvidence(cfg, chaoslive.EvidenceQualificationJSON, chaoslive.EvidenceQualificationHTML, q); err != nil {
		t.Fatal(err)
	}
	b = &builder{opts: Options{ConfigPath: "flow.yml"}, p: &Package{Files: map[string][]byte{}, Manifest: Manifest{NotRun: []NotRun{}}}}
	b.live(cfg)
	for _, f := range []string{FileQualification, FileQualificationJSON} {
		if _, ok := b.p.Files[f]; !ok {
			t.Errorf("%s not in the package: %+v", f, b.p.Manifest)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "evidence", chaoslive.EvidenceQualificationHTML)); err != nil {
		t.Fatal(err)
	}
	sc := Score(b.p, "mem")
	for _, c := range sc.Claims[1:3] {
		if !slices.Contains(c.Evidence, FileQualificationJSON) || !strings.Contains(c.Detail, "live (qualification.json)") {
			t.Errorf("claim %d does not cite the live evidence: %+v", c.ID, c)
		}
	}

	// The last semantics run: claim 2 cites it, and fails on a violation.
	if err := chaoslive.SaveJSON(cfg, chaoslive.EvidenceSemantics, map[string]any{"transactions": 40, "observations": 120, "violations": 0, "applied": true}); err != nil {
		t.Fatal(err)
	}
	b = &builder{opts: Options{ConfigPath: "flow.yml"}, p: &Package{Files: map[string][]byte{}, Manifest: Manifest{NotRun: []NotRun{}}}}
	b.live(cfg)
	if c := Score(b.p, "mem").Claims[1]; !slices.Contains(c.Evidence, FileSemantics) || !strings.Contains(c.Detail, "120 target reads, 0 half-applied") {
		t.Errorf("claim 2 does not cite the semantics run: %+v", c)
	}
	b.p.Files[FileSemantics] = []byte(`{"transactions": 40, "observations": 120, "violations": 3, "applied": true}`)
	if c := Score(b.p, "mem").Claims[1]; c.Verdict != Fail {
		t.Errorf("claim 2 with 3 half-applied observations: %s (%s)", c.Verdict, c.Detail)
	}
	delete(b.p.Files, FileSemantics)
	for _, f := range []string{FileQualification, FileQualificationJSON} {
		if _, ok := b.p.Files[f]; !ok {
			b.p.Files[f] = nil
		}
	}
	b.p.Files[FileQualificationJSON], _ = json.Marshal(q)

	rep.Verdict = "FAIL"
	rep.Violations = []chaoslive.Violation{{Source: "reader", Detail: "sum of balances 99990"}}
	data, _ := json.Marshal(q)
	b.p.Files[FileQualificationJSON] = data
	sc = Score(b.p, "mem")
	for _, c := range sc.Claims[1:3] {
		if c.Verdict != Fail {
			t.Errorf("claim %d with a failing live run: %s (%s)", c.ID, c.Verdict, c.Detail)
		}
	}
}
