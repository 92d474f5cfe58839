package flow

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The Go runtime's soft memory limit (runtime/debug.SetMemoryLimit) for a
// process running a flow, derived from the flow's bounds. Without it the
// collector lets the heap reach twice its live size (GOGC=100), so the
// peak resident memory of a large transaction was about double what the
// relay and the appliers actually hold.
//
// What a flow holds, and so the limit (at the defaults, 240 MiB for one
// sink):
//
//	relay     source.memory_bytes_max of row data before it spills; its
//	          in-memory form is larger than the counted bytes: 2×
//	chunks    one chunk being published and one being applied, the
//	          applier's decoded read-ahead (at most 8 MiB, apply), with
//	          the runtime's own needs: memoryLimitBase (112 MiB)
//	sinks     each further sink's applier: memoryLimitPerSink (64 MiB)
//
// GOMEMLIMIT in the environment takes precedence (the operator's choice).
//
// The limit counts the Go runtime's memory, not the binary's own pages, so
// the process's resident size runs 10–25 MiB above it once it binds: the
// base was 128 MiB until one large transaction's peak RSS came out at
// 256–266 MiB (make bench-mem; docs/EVIDENCE.md) against the 256 MiB the
// defaults promise.
//
// The limit binds only when a flow really holds that much (a large
// transaction). Draining a backlog of small transactions the live heap
// stays around 20 MiB and the collector paces itself by GOGC, far below
// the limit (gctrace of a 100k TPC-B catch-up, docs/EVIDENCE.md).
const (
	memoryLimitBase    = 112 << 20
	memoryLimitPerSink = 64 << 20
)

// MemoryLimit is the soft memory limit a process running this flow sets.
func (f *Flow) MemoryLimit() int64 {
	extra := max(len(f.Sinks())-1, 0)
	return memoryLimitBase + 2*int64(f.Cfg.Source.MemoryBytesMax) + int64(extra)*memoryLimitPerSink
}

// setMemoryLimit sets MemoryLimit for the duration of a run, unless
// GOMEMLIMIT is set, and starts the collector's pacing (startGCTuner)
// unless GOGC is set; it returns the function that undoes both.
func (f *Flow) setMemoryLimit() (restore func()) {
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Debug("memory limit from GOMEMLIMIT", "flow", f.Cfg.Flow, "gomemlimit", os.Getenv("GOMEMLIMIT"))
		return func() {}
	}
	lim := f.MemoryLimit()
	prev := debug.SetMemoryLimit(lim)
	log.Debug("memory limit", "flow", f.Cfg.Flow, "bytes", lim)
	stopTuner := func() {}
	if os.Getenv("GOGC") == "" {
		stopTuner = startGCTuner(lim / 3)
	}
	return func() {
		stopTuner()
		// Only undo our own setting: a limit changed since is not ours.
		if debug.SetMemoryLimit(-1) == lim {
			debug.SetMemoryLimit(prev)
		}
	}
}

// The collector's pacing. GOGC=100 starts a collection when the heap has
// grown to twice what survived the last one. Draining a backlog of small
// transactions, about 20 MiB survives, so the collector ran every ~20 MiB
// of allocation: 56–57 collections in a 100k TPC-B catch-up, with its
// marking and the allocation paths it slows about a fifth of the process's
// CPU (docs/EVIDENCE.md, 2026-12-01 21:00–22:00 UTC; 19 collections now).
// The memory limit is sized for the worst case, a large transaction, and a
// small live heap leaves most of it unused. The tuner sets GOGC after every
// collection so that the next one starts at floor bytes (a third of the limit)
// while the live heap is small, and back to 100 once it is large: the
// limit binds then exactly as it did (a fixed GOGC=400 raised one large
// transaction's peak RSS from 231–247 MiB to 267–272 MiB).
const gcPercentMax = 800

// gcPercent is the GOGC that starts the next collection when the heap
// reaches floor bytes, live bytes having survived the last one; 100 at
// least, gcPercentMax at most.
func gcPercent(live, floor int64) int {
	if live <= 0 {
		return gcPercentMax
	}
	return int(min(max((floor-live)*100/live, 100), gcPercentMax))
}

// gcTuner is the running tuner; one per process.
var gcTuner struct {
	sync.Mutex
	on    bool  // a tuner is running
	gen   int   // its generation: a cleanup of a stopped one does nothing
	floor int64 // its floor
	set   int   // the GOGC it set last
	prev  int   // the GOGC before it started
}

// gcSentinel is an object that nothing references: the collection after
// its allocation frees it, and its cleanup runs the tuner. It holds a
// pointer so the allocator gives it a block of its own (the tiny
// allocator batches small pointer-free objects, which then outlive a
// collection).
type gcSentinel struct {
	_ *int
	_ [8]byte
}

// startGCTuner starts the tuner with floor bytes and returns the function
// that stops it and restores the previous GOGC. A second tuner in the
// process (two flows) leaves the first one running.
func startGCTuner(floor int64) (stop func()) {
	t := &gcTuner
	t.Lock()
	defer t.Unlock()
	if t.on {
		return func() {}
	}
	t.on, t.floor = true, floor
	t.gen++
	gen := t.gen
	t.prev = debug.SetGCPercent(100)
	t.set = 100
	armGCTuner(gen)
	return func() {
		t.Lock()
		defer t.Unlock()
		if !t.on || t.gen != gen {
			return
		}
		t.on = false
		// Only undo our own setting: a GOGC changed since is not ours.
		if cur := debug.SetGCPercent(t.prev); cur != t.set {
			debug.SetGCPercent(cur)
		}
	}
}

// armGCTuner allocates the sentinel whose cleanup tunes after the next
// collection.
func armGCTuner(gen int) {
	runtime.AddCleanup(new(gcSentinel), tuneGC, gen)
}

// tuneGC runs after a collection: it sets GOGC for the live heap that
// collection left, and arms itself for the next one.
func tuneGC(gen int) {
	t := &gcTuner
	t.Lock()
	defer t.Unlock()
	if !t.on || t.gen != gen {
		return
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		if p := gcPercent(int64(s[0].Value.Uint64()), t.floor); p != t.set {
			debug.SetGCPercent(p)
			t.set = p
		}
	}
	armGCTuner(gen)
}
