package apply

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/opts"
	"github.com/trellara/trellara/internal/shell"
)

// Sentinel errors. Each is wrapped with the flow, source and LSN it concerns;
// test with errors.Is.
var (
	// ErrInvalidConfig is wrapped by every Config validation failure.
	ErrInvalidConfig = opts.ErrInvalid
	// ErrPartitioned is returned for Config.Mode "partitioned" and for a
	// CHUNK unit routed to a partition other than 0: partitioned mode
	// interleaves the chunks of one source transaction with other
	// transactions across partitions and needs a manifest-barrier
	// coordinator this applier does not have yet. Strict mode's chunk
	// sequences (one large transaction, consecutive in the log) are applied.
	ErrPartitioned = fmt.Errorf("apply: partitioned mode %w (target.mode: partitioned); use target.mode: strict", buildinfo.ErrNotImplemented)
	// ErrSequence means the transport delivered units in an order the relay
	// never writes (a snapshot batch gap, a snapshot ending before all of its
	// batches were applied, a chunk sequence cut short by anything other
	// than the relay republishing it from chunk 0). Applying anyway would
	// leave a hole in the target, so the flow stops.
	ErrSequence = errors.New("apply: units out of sequence")
	// ErrWrongSource means a unit carries a source id other than the flow's.
	// Two sources interleaved in one log cannot share one checkpoint.
	ErrWrongSource = errors.New("apply: unit from another source")
	// ErrBusy means another applier holds the flow's lock on the target.
	// Two appliers would each apply every transaction.
	ErrBusy = errors.New("apply: another applier is running this flow against the target")
	// ErrRunning means Run was called while a Run of the same Applier was in
	// progress; an Applier owns one connection and applies serially.
	ErrRunning = errors.New("apply: Run is already in progress on this applier")
)

// QuarantinedError is returned by Run when a unit could not be applied and
// was stored in the quarantine table instead. In strict mode the flow stops
// there: nothing after the unit is applied, the checkpoint stays before it,
// and the transport cursor is not advanced past it.
type QuarantinedError struct {
	Flow      string
	SourceID  string
	CommitLSN uint64
	// Unit is "transaction", "snapshot" or "snapshot_end".
	Unit string
	// Relation is the source relation (config.TableName form) whose change failed,
	// when the failure can be attributed to one.
	Relation string
	// SQLState is the target's error code; empty when the failure was found
	// by the applier itself (an UPDATE that matched no row).
	SQLState string
	// ID is the quarantine row id; 0 if recording it failed.
	ID int64
	// ConfigPath is used in the commands the message suggests.
	ConfigPath string
	Err        error
}

func (e *QuarantinedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apply: flow %q (source %q): %s at commit LSN %s", e.Flow, e.SourceID, e.Unit, envelope.FormatLSN(e.CommitLSN))
	if e.Relation != "" {
		fmt.Fprintf(&b, " failed on %s", e.Relation)
	} else {
		b.WriteString(" failed")
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if e.SQLState != "" && !strings.Contains(e.Err.Error(), e.SQLState) {
		fmt.Fprintf(&b, " (SQLSTATE %s)", e.SQLState)
	}
	if e.ID != 0 {
		fmt.Fprintf(&b, "; it was quarantined (id %d)", e.ID)
	}
	fmt.Fprintf(&b, " and the flow is stopped before it (strict mode), so the target holds every earlier transaction and nothing later. "+
		"See it with `%s`; after fixing the target, replay it with `%s`",
		shell.Trellara("status", e.ConfigPath, "--view", "quarantine"), shell.Trellara("repair-plan", e.ConfigPath))
	return b.String()
}

func (e *QuarantinedError) Unwrap() error { return e.Err }

// CheckpointBehindError is returned by Run when the target's checkpoint is
// behind the transport cursor and the transport no longer holds the units
// in between: the target lost commits (restored from a backup, failed over
// to an asynchronous standby) and they cannot be applied again from this
// transport. Applying on from the cursor would leave them out of the
// target for good, so the flow stops.
type CheckpointBehindError struct {
	Flow     string
	SourceID string
	// CommitLSN and Offset are the target's checkpoint; HasOffset is false
	// when the target holds no unit of the flow at all.
	CommitLSN uint64
	Offset    uint64
	HasOffset bool
	// Cursor is the transport cursor; Oldest the oldest offset the
	// transport still holds.
	Cursor, Oldest uint64
	// ConfigPath is used in the commands the message suggests.
	ConfigPath string
}

func (e *CheckpointBehindError) Error() string {
	cp := "holds no unit of the flow"
	need := uint64(0)
	if e.HasOffset {
		cp = fmt.Sprintf("is at commit LSN %s, log offset %d", envelope.FormatLSN(e.CommitLSN), e.Offset)
		need = e.Offset + 1
	}
	return fmt.Sprintf("apply: flow %q (source %q): the target's checkpoint %s, but the log cursor is at offset %d: "+
		"the target lost transactions it had committed (restored from a backup, or failed over to an asynchronous standby), "+
		"and the log no longer holds them (it starts at offset %d; the target needs offset %d on). "+
		"Applying on would leave them missing. Recover: %s",
		e.Flow, e.SourceID, cp, e.Cursor, e.Oldest, need, shell.Resnapshot(e.ConfigPath))
}

// TransientError wraps a failure that says nothing about the data: the
// target connection broke, the server is shutting down or restarting, a
// serialization failure or deadlock. Nothing was committed past the
// checkpoint; the caller reconnects and runs again, and redelivered units
// are skipped.
type TransientError struct {
	Flow      string
	SourceID  string
	CommitLSN uint64 // the first unit of the attempt; 0 when not tied to one
	Err       error
}

func (e *TransientError) Error() string {
	at := ""
	if e.CommitLSN != 0 {
		at = " at commit LSN " + envelope.FormatLSN(e.CommitLSN)
	}
	return fmt.Sprintf("apply: flow %q (source %q)%s: transient target error, reconnect and run again: %v", e.Flow, e.SourceID, at, e.Err)
}

func (e *TransientError) Unwrap() error { return e.Err }

// IsTransient reports whether err is or wraps a *TransientError.
func IsTransient(err error) bool {
	var t *TransientError
	return errors.As(err, &t)
}

// IsQuarantined reports whether err is or wraps a *QuarantinedError.
func IsQuarantined(err error) bool {
	var q *QuarantinedError
	return errors.As(err, &q)
}

// errClass is what the applier does with a target error.
type errClass int

const (
	// classApply: the unit's data cannot be applied to this target as it is
	// (constraint, type, missing table or column). Retrying cannot help;
	// quarantine it.
	classApply errClass = iota
	// classTransient: the failure belongs to the connection or the server's
	// state, not to the data. Retrying after a reconnect can succeed.
	classTransient
	// classFatal: the failure belongs to the deployment (privileges, a
	// server bug); quarantining the unit would blame good data. Stop and
	// report.
	classFatal
)

// classify decides what an error from the target means. It is the only
// place that reads SQLSTATEs, so the policy can be read in one screen.
func classify(err error) errClass {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		// No server error: the connection broke (EOF, reset, timeout, closed
		// by a cancelled context). The server never judged the data.
		return classTransient
	}
	code := pgErr.Code
	switch {
	case strings.HasPrefix(code, "08"): // connection exception
		return classTransient
	case strings.HasPrefix(code, "40"): // serialization failure, deadlock: the server says retry
		return classTransient
	case strings.HasPrefix(code, "53"): // insufficient resources (disk full, too many connections): fixable by the operator, then retry
		return classTransient
	case strings.HasPrefix(code, "57"): // operator intervention: shutdown, crash restart, cancelled statement
		return classTransient
	case strings.HasPrefix(code, "58"): // system error (I/O) outside the data
		return classTransient
	case code == "55P03", code == "55006": // lock not available, object in use
		return classTransient
	case code == "25006": // read-only transaction: the target is a standby (failover in progress)
		return classTransient
	case code == "42501": // insufficient privilege: a grant is missing, the data is fine
		return classFatal
	case strings.HasPrefix(code, "XX"), strings.HasPrefix(code, "F0"), strings.HasPrefix(code, "25"):
		// Internal error, configuration file error, transaction-state misuse:
		// the server or this program is at fault, not the unit.
		return classFatal
	default:
		// 22 data exception, 23 integrity constraint, 42 undefined table or
		// column / datatype mismatch, 0A not supported, 44, 54, P0, 39...
		return classApply
	}
}

// sqlState returns the SQLSTATE of err, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// divergenceError is an apply failure the applier detects itself: an UPDATE
// or DELETE that did not match exactly one target row. The target no longer
// mirrors the source for that key.
type divergenceError struct {
	op      string
	matched int64
	key     string
}

func (e *divergenceError) Error() string {
	return fmt.Sprintf("%s matched %d target rows where exactly 1 was expected (%s): the target has diverged from the source for this row",
		e.op, e.matched, e.key)
}

// unitError is an apply failure the applier finds before sending anything:
// the unit cannot be expressed against the target (no replica identity key).
type unitError struct{ reason string }

func (e *unitError) Error() string { return e.reason }
