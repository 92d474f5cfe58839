package flow

import (
	"log/slog"
	"os"
	"runtime/debug"
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
// GOMEMLIMIT is set, and returns the function that restores the previous
// limit.
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
	return func() {
		// Only undo our own setting: a limit changed since is not ours.
		if debug.SetMemoryLimit(-1) == lim {
			debug.SetMemoryLimit(prev)
		}
	}
}
