package chaoslive

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHTMLSelfContained: the page has every section, one SVG curve per
// sampled series, escapes what it prints, and loads nothing (no script,
// no external URL).
func TestHTMLSelfContained(t *testing.T) {
	one := 1.5
	rep := &Report{Flow: "f", Seed: 3, Duration: "1m0s", Verdict: "PASS", VerdictReason: "ok",
		Faults:     []Fault{{Seq: 1, Kind: KindRelay, What: "SIGKILL relay pid 9", Detect: &one, Ready: &one, CaughtUp: &one}},
		Verifies:   []VerifyResult{{Final: true, Verdict: "CONVERGED"}},
		NotCovered: []string{"disk: <not available>"}}
	for i := 0; i < 10; i++ {
		rep.Samples = append(rep.Samples, Sample{T: float64(i), Values: map[string]float64{"relay.rss_bytes": float64(i), "slot_lag_bytes": 1}})
	}
	rep.Leaks = DetectLeaks(rep.Samples)
	rep.summarize(map[string]string{KindRelay: "injected"})
	q := &Qualification{Title: "Q <b>", Generated: time.Now(), Workload: WorkloadName, Duration: "1m0s", Live: rep, Verdict: rep.Verdict,
		Environment: &Environment{Host: "h", CPUs: 2, Binaries: []BinaryHash{{Name: "trellara", SHA256: strings.Repeat("0", 64)}}}}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, q); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, want := range []string{`id="environment"`, `id="live-chaos"`, `id="soak"`, `id="not-covered"`, "SIGKILL relay pid 9", "&lt;not available&gt;", "Q &lt;b&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(page, "<svg"); n != 2 {
		t.Errorf("%d SVG charts, want one per series (2)", n)
	}
	if regexp.MustCompile(`(?i)<script|src="http|href="http|@import|url\(`).MatchString(page) {
		t.Error("the page loads something external or runs a script")
	}
}
