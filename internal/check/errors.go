package check

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// ErrNotReadOnly means the session could write. Inspect refuses to run on
	// such a session: read-only is a promise to the user, not a habit.
	ErrNotReadOnly = errors.New("check: session is not read-only")
	// ErrUnsupported means the server is too old to grade (before 10 there is
	// no pgoutput).
	ErrUnsupported = errors.New("check: server version not supported")
	// ErrBlocked means a starting config was refused because of critical
	// findings; see BlockedError.
	ErrBlocked = errors.New("check: critical blockers present")
)

// BlockedError lists the findings that stop --write-config.
type BlockedError struct {
	Blockers []Finding
}

func (e *BlockedError) Error() string {
	titles := make([]string, len(e.Blockers))
	for i, f := range e.Blockers {
		titles[i] = f.Title
	}
	return fmt.Sprintf("check: refusing to write a config: %d critical blocker(s): %s", len(e.Blockers), strings.Join(titles, "; "))
}

// Unwrap makes errors.Is(err, ErrBlocked) work.
func (e *BlockedError) Unwrap() error { return ErrBlocked }

// QueryError wraps a failed inspection query with what it was reading.
type QueryError struct {
	What string // e.g. "pg_replication_slots"
	Err  error
}

func (e *QueryError) Error() string { return fmt.Sprintf("check: read %s: %v", e.What, e.Err) }

// Unwrap returns the driver error.
func (e *QueryError) Unwrap() error { return e.Err }

// degradable reports whether a failed read should become a Note rather than
// fail the inspection, and a short reason. Only server-side refusals qualify:
// a missing privilege, an object this version lacks, or a per-statement
// timeout on one optional read. Connection loss is never degradable.
func degradable(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", false
	}
	switch pgErr.Code {
	case "42501": // insufficient_privilege: the role may not read it
		return "permission denied", true
	case "42P01", "42883", "42703", "42704": // undefined table/function/column/object: older version
		return "not available on this server", true
	case "55000": // object_not_in_prerequisite_state, e.g. a function refused during recovery
		return pgErr.Message, true
	case "57014": // query_canceled by statement_timeout: the rest can still be graded
		return "timed out (statement_timeout)", true
	case "55P03": // lock_not_available by lock_timeout
		return "waited too long for a lock (lock_timeout)", true
	case "0A000": // feature_not_supported
		return pgErr.Message, true
	}
	return "", false
}
