// Package mutation names the protections of the applier (package apply)
// that the simulator's mutation tests remove one at a time, to prove the
// failure matrix notices when one is missing (docs/CORRECTNESS.md,
// "Mutation tests").
//
// It is internal so that no program outside this module can switch a
// protection off: the only way in is a Target that implements Carrier,
// and only code inside the module can name Set to implement it. The
// simulated database (internal/sim) is the one such Target.
package mutation

// Set is a set of removed protections; the zero value removes none.
type Set uint32

// The applier's protections that a Set can remove.
const (
	// CursorBeforeCommit moves the transport cursor before the target
	// transaction commits.
	CursorBeforeCommit Set = 1 << iota
	// SkipDedupe applies redelivered transactions again.
	SkipDedupe
	// SplitChunks commits a chunk sequence chunk by chunk.
	SplitChunks
	// DropRefused passes over a refused unit instead of quarantining it.
	DropRefused
	// CursorBeforeFlush moves the transport cursor as soon as an
	// asynchronous target commit returns, before the target has flushed
	// it (apply's flush-aware cursor). Only a target that commits
	// asynchronously (the PostgreSQL one with synchronous_commit off) can
	// show it; the apply package's target-crash tests do.
	CursorBeforeFlush
)

// Has reports whether s removes the protection m.
func (s Set) Has(m Set) bool { return s&m != 0 }

// Carrier is implemented by a target whose applier runs without the
// protections in Mutations (apply.NewWithTarget asks once, at
// construction).
type Carrier interface {
	ApplierMutations() Set
}
