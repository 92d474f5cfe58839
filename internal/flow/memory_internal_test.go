package flow

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/config"
)

// TestMemoryLimit: the limit follows memory_bytes_max and the number of
// sinks, a run sets it and restores the previous one, and GOMEMLIMIT in
// the environment wins.
func TestMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		mem   config.ByteSize
		sinks int
		want  int64
	}{
		{"defaults", config.DefaultMemoryBytesMax, 1, 240 * mib},
		{"16MiB", 16 * mib, 1, 144 * mib},
		{"three sinks", config.DefaultMemoryBytesMax, 3, 368 * mib},
		{"capture only", config.DefaultMemoryBytesMax, 0, 240 * mib},
	} {
		f := &Flow{Cfg: &config.Config{Flow: "m", Source: config.Source{MemoryBytesMax: tc.mem}, Sinks: make([]config.Sink, tc.sinks)}}
		if got := f.MemoryLimit(); got != tc.want {
			t.Errorf("%s: MemoryLimit = %d MiB, want %d MiB", tc.name, got/mib, tc.want/mib)
		}
	}

	f := &Flow{Cfg: &config.Config{Flow: "m", Source: config.Source{MemoryBytesMax: 16 * mib}, Sinks: make([]config.Sink, 1)}}
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	restore := f.setMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != 144*mib {
		t.Errorf("during a run the limit is %d, want %d", got, 144*mib)
	}
	restore()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("after a run the limit is %d, want the previous %d", got, before)
	}

	t.Setenv("GOMEMLIMIT", "1GiB")
	restore = f.setMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("with GOMEMLIMIT set the run changed the limit to %d", got)
	}
	restore()
}

// TestGCPercent: the next collection at the floor while the live heap is
// small, GOGC=100 once it is large, within bounds.
func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, floor int64
		want        int
	}{
		{20 * mib, 120 * mib, 500},
		{40 * mib, 120 * mib, 200},
		{60 * mib, 120 * mib, 100},
		{100 * mib, 120 * mib, 100},
		{1 * mib, 120 * mib, gcPercentMax},
		{0, 120 * mib, gcPercentMax},
	} {
		if got := gcPercent(tc.live, tc.floor); got != tc.want {
			t.Errorf("gcPercent(%d MiB, %d MiB) = %d, want %d", tc.live/mib, tc.floor/mib, got, tc.want)
		}
	}
}

// TestGCTuner runs the tuner on the real collector: with a small live heap
// it raises GOGC after a collection, with a live heap above its floor it
// sets 100 again, and stopping it restores the GOGC before it.
func TestGCTuner(t *testing.T) {
	const mib = 1 << 20
	gogc := func() int {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return int(s[0].Value.Uint64())
	}
	// waitGOGC collects until the tuner has set a GOGC that ok accepts.
	waitGOGC := func(what string, ok func(int) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok(gogc()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOGC is %d", what, gogc())
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
	}
	prev := debug.SetGCPercent(150)
	defer debug.SetGCPercent(prev)

	stop := startGCTuner(256 * mib)
	waitGOGC("small live heap", func(p int) bool { return p > 150 })
	live := make([]byte, 200*mib)
	for i := range live {
		live[i] = 1 // resident, not only reserved
	}
	waitGOGC("live heap near the floor", func(p int) bool { return p == 100 })
	runtime.KeepAlive(live)
	stop()
	if got := gogc(); got != 150 {
		t.Errorf("after stop GOGC is %d, want the 150 before the tuner", got)
	}
	// Stopped: collections change nothing any more.
	debug.SetGCPercent(170)
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if got := gogc(); got != 170 {
		t.Errorf("a stopped tuner set GOGC to %d", got)
	}
}
