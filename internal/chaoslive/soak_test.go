package chaoslive

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestDetectLeak: a series that keeps growing is flagged; a flat noisy
// one, one that grows during warm-up and then plateaus, and a sawtooth
// (a process restarted by faults) are not; too few samples are not judged.
func TestDetectLeak(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ts, leak, flat, warm, saw []float64
	for i := 0; i < 120; i++ {
		x := float64(i * 10)
		ts = append(ts, x)
		noise := rng.Float64() * (4 << 20)
		leak = append(leak, 40<<20+x*(200<<10)+noise) // +200 KiB/s on 40 MiB
		flat = append(flat, 40<<20+noise)
		warm = append(warm, 40<<20+min(x, 300)*(200<<10)+noise)
		saw = append(saw, 30<<20+float64(i%20)*(1<<20)+noise)
	}
	if f := DetectLeak("relay.rss_bytes", ts, leak, leakFloor("relay.rss_bytes")); !f.Leak {
		t.Errorf("growing series not flagged: %+v", f)
	}
	for name, vs := range map[string][]float64{"flat": flat, "warm-up then plateau": warm, "sawtooth": saw} {
		if f := DetectLeak("relay.rss_bytes", ts, vs, leakFloor("relay.rss_bytes")); !f.Judged || f.Leak {
			t.Errorf("%s: %+v", name, f)
		}
	}
	if f := DetectLeak("x.goroutines", ts[:8], leak[:8], 50); f.Judged {
		t.Errorf("8 samples judged: %+v", f)
	}
	// Goroutines: +1 per sample is a leak once it passes the floor.
	var g []float64
	for i := range ts {
		g = append(g, 20+float64(i))
	}
	if f := DetectLeak("applier.goroutines", ts, g, leakFloor("applier.goroutines")); !f.Leak {
		t.Errorf("goroutine growth not flagged: %+v", f)
	}
	svg := SVG("relay.rss_bytes", ts, leak)
	if !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "<polyline") {
		t.Errorf("svg: %.200s", svg)
	}
}

// TestCheckObservation: each whole-transaction invariant the reader holds
// the target to catches its own breakage.
func TestCheckObservation(t *testing.T) {
	good := Observation{Accounts: accounts, Sum: 100000, TransfersOut: 7, History: 7}
	if bad := checkObservation(good, &Observation{History: 5}, 100000); len(bad) != 0 {
		t.Fatalf("good observation flagged: %v", bad)
	}
	for name, tc := range map[string]struct {
		o    Observation
		prev *Observation
		want string
	}{
		"half transfer": {Observation{Accounts: accounts, Sum: 99990, TransfersOut: 7, History: 7}, nil, "half applied"},
		"split txn":     {Observation{Accounts: accounts, Sum: 100000, TransfersOut: 8, History: 7}, nil, "split across tables"},
		"went back":     {good, &Observation{History: 9}, "went back"},
		"missing rows":  {Observation{Accounts: 99, Sum: 100000}, nil, "accounts at the target"},
	} {
		bad := checkObservation(tc.o, tc.prev, 100000)
		if len(bad) != 1 || !strings.Contains(bad[0], tc.want) {
			t.Errorf("%s: %v, want one containing %q", name, bad, tc.want)
		}
	}
}

// TestDiskStatus: a disk-full fault is refused on a large filesystem (the
// machine's own disk is never filled).
func TestDiskStatus(t *testing.T) {
	if s := diskStatus("/"); s != "" && !strings.Contains(s, "not available") {
		t.Errorf("diskStatus(/) = %q", s)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(t.TempDir(), &st); err != nil {
		t.Fatal(err)
	}
	if uint64(st.Blocks)*uint64(st.Bsize) > maxFillBytes {
		if s := diskStatus(filepath.Join(t.TempDir(), "not", "yet")); !strings.Contains(s, "not available") || !strings.Contains(s, "tmpfs") {
			t.Errorf("a large filesystem: %q", s)
		}
	}
}

// TestLeakFailsSoak: a leaking series fails a soak (LeakCheck) and only
// shows as a trend in a plain live run.
func TestLeakFailsSoak(t *testing.T) {
	for _, soak := range []bool{true, false} {
		r := &run{o: Options{LeakCheck: soak}, rep: &Report{Verifies: []VerifyResult{{Final: true, Verdict: "CONVERGED"}}}}
		r.capture, r.applier = &proc{role: "relay"}, &proc{role: "applier"}
		for i := 0; i < 60; i++ {
			r.samples = append(r.samples, Sample{T: float64(i * 5), Values: map[string]float64{
				"relay.goroutines":  18,
				"applier.open_fds":  15 + float64(i), // one more open file every sample
				"applier.rss_bytes": 30 << 20,
			}})
		}
		r.finish(map[string]string{})
		leaked := false
		for _, l := range r.rep.Leaks {
			leaked = leaked || (l.Series == "applier.open_fds" && l.Leak)
		}
		if !leaked {
			t.Fatalf("soak %v: the growing open files are not flagged: %+v", soak, r.rep.Leaks)
		}
		if want := map[bool]string{true: "FAIL", false: "PASS"}[soak]; r.rep.Verdict != want {
			t.Errorf("soak %v: verdict %s (%s), want %s", soak, r.rep.Verdict, r.rep.VerdictReason, want)
		}
	}
}
