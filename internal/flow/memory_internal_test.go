package flow

import (
	"runtime/debug"
	"testing"

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
