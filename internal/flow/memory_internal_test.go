package flow

import (
	"runtime/debug"
	"testing"

	"github.com/trellara/trellara/internal/config"
)

// TestMemoryLimit: the limit follows memory_bytes_max and the number of
// sinks, a run sets it and GOGC=400 and restores the previous ones, and
// GOMEMLIMIT (for both) and GOGC (for the percentage) in the environment
// win.
func TestMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		mem   config.ByteSize
		sinks int
		want  int64
	}{
		{"defaults", config.DefaultMemoryBytesMax, 1, 256 * mib},
		{"16MiB", 16 * mib, 1, 160 * mib},
		{"three sinks", config.DefaultMemoryBytesMax, 3, 384 * mib},
		{"capture only", config.DefaultMemoryBytesMax, 0, 256 * mib},
	} {
		f := &Flow{Cfg: &config.Config{Flow: "m", Source: config.Source{MemoryBytesMax: tc.mem}, Sinks: make([]config.Sink, tc.sinks)}}
		if got := f.MemoryLimit(); got != tc.want {
			t.Errorf("%s: MemoryLimit = %d MiB, want %d MiB", tc.name, got/mib, tc.want/mib)
		}
	}

	f := &Flow{Cfg: &config.Config{Flow: "m", Source: config.Source{MemoryBytesMax: 16 * mib}, Sinks: make([]config.Sink, 1)}}
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	before := debug.SetMemoryLimit(-1)
	gcBefore := debug.SetGCPercent(100)
	defer debug.SetGCPercent(gcBefore)
	restore := f.setMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != 160*mib {
		t.Errorf("during a run the limit is %d, want %d", got, 160*mib)
	}
	if got := debug.SetGCPercent(gcPercent); got != gcPercent {
		t.Errorf("during a run GOGC is %d, want %d", got, gcPercent)
	}
	restore()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("after a run the limit is %d, want the previous %d", got, before)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("after a run GOGC is %d, want the previous 100", got)
	}

	t.Setenv("GOGC", "150")
	restore = f.setMemoryLimit()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set the run changed the percentage to %d", got)
	}
	restore()

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "1GiB")
	restore = f.setMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("with GOMEMLIMIT set the run changed the limit to %d", got)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOMEMLIMIT set the run changed GOGC to %d", got)
	}
	restore()
}
