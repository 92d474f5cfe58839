package segmentlog

import (
	"errors"
	"fmt"

	"github.com/trellara/trellara/internal/opts"
	"github.com/trellara/trellara/segmentlog/internal/vfs"
)

// Sentinel errors. Each is wrapped with the identifiers that locate the
// problem (path, offset, cursor name); test with errors.Is.
var (
	// ErrClosed is returned by every call made after Close.
	ErrClosed = errors.New("segmentlog: log is closed")
	// ErrOutOfRange means an offset lies beyond the end of the log. It is
	// a caller bug or a cursor from another log directory, never data loss.
	ErrOutOfRange = errors.New("segmentlog: offset out of range")
	// ErrPayloadTooLarge means a payload exceeds Options.PayloadBytesMax;
	// nothing was written.
	ErrPayloadTooLarge = errors.New("segmentlog: payload too large")
	// ErrCursorRegress means CommitCursor was asked to move a cursor
	// backwards. Cursors are monotonic so that a bug in a consumer cannot
	// silently re-deliver (or, via retention, lose) data; a deliberate
	// rewind goes through ResetCursor.
	ErrCursorRegress = errors.New("segmentlog: cursor cannot move backwards")
	// ErrUnknownCursor means no cursor with that name is registered.
	ErrUnknownCursor = errors.New("segmentlog: unknown cursor")
	// ErrInvalidCursorName means a cursor name is empty, too long, or uses
	// characters outside [A-Za-z0-9._-] (names become file names).
	ErrInvalidCursorName = errors.New("segmentlog: invalid cursor name")
	// ErrLocked means another process (or another Log in this process)
	// holds the directory. Two writers would interleave frames.
	ErrLocked = vfs.ErrLocked
	// ErrInvalidOptions is wrapped by every Options validation failure
	// (the one sentinel of every package's OptionsError).
	ErrInvalidOptions = opts.ErrInvalid
	// ErrMustReopen is matched (errors.Is) by every *FatalError.
	ErrMustReopen = errors.New("segmentlog: log must be reopened")
)

// CorruptionError reports bytes on disk that fail validation in a place
// where they cannot be an interrupted write: an older segment, a frame
// followed by intact frames of a later commit group, a damaged cursor
// file. The log refuses to truncate such damage because the bytes were
// acknowledged to a writer; an operator has to look at it.
type CorruptionError struct {
	Path     string // file holding the damage
	Position int64  // byte position in Path where validation failed
	Offset   uint64 // logical offset being read, when known (HasOffset)
	// HasOffset says whether Offset is meaningful.
	HasOffset bool
	// LostFrom and LostTo bound the acknowledged entries the damage
	// takes, [LostFrom, LostTo), when the durable end tells (HasLost):
	// LostFrom is the first offset lost, LostTo the durable end's next
	// offset. The payloads are opaque to the log; the caller maps the
	// offsets to what they held (the first lost LSN, for a flow).
	LostFrom, LostTo uint64
	HasLost          bool
	Reason           string
}

func (e *CorruptionError) Error() string {
	at := fmt.Sprintf("%s at byte %d", e.Path, e.Position)
	if e.HasOffset {
		at += fmt.Sprintf(" (offset %d)", e.Offset)
	}
	lost := ""
	if e.HasLost && e.LostTo > e.LostFrom {
		lost = fmt.Sprintf("; acknowledged entries at offsets %d to %d are lost", e.LostFrom, e.LostTo-1)
	}
	return fmt.Sprintf("segmentlog: corruption in %s: %s%s; acknowledged data is damaged, so the log will not truncate it and left every byte as it is: "+
		"restore the directory from a replica or backup", at, e.Reason, lost)
}

// LockedError is a second writer refused: process PID (0 when the lock
// file does not name one) holds the directory. It matches ErrLocked.
type LockedError struct {
	Dir string
	PID int
}

func (e *LockedError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = fmt.Sprintf("process %d", e.PID)
	}
	return fmt.Sprintf("segmentlog: %s is open for writing by %s (one writer per log; other processes read it with OpenReadOnly)", e.Dir, who)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// AddRecovery ends err's message with the caller's recovery when err is or
// wraps a *CorruptionError (", or <recovery>", after restoring from a
// backup) or a *PastRetentionError (": <recovery>"); other errors are
// returned unchanged. The log's errors say what happened and why; the
// command that fixes it belongs to the caller that knows the flow's
// configuration (internal/flow, from internal/shell). The result unwraps
// to err.
func AddRecovery(err error, recovery string) error {
	if err == nil || recovery == "" {
		return err
	}
	if IsCorruption(err) {
		return &recoveryError{err: err, tail: ", or " + recovery}
	}
	if p := (*PastRetentionError)(nil); errors.As(err, &p) {
		return &recoveryError{err: err, tail: ": " + recovery}
	}
	return err
}

// recoveryError is an error with the caller's recovery appended.
type recoveryError struct {
	err  error
	tail string
}

func (e *recoveryError) Error() string { return e.err.Error() + e.tail }
func (e *recoveryError) Unwrap() error { return e.err }

// IsCorruption reports whether err is or wraps a *CorruptionError.
func IsCorruption(err error) bool {
	var c *CorruptionError
	return errors.As(err, &c)
}

// FatalError is returned once a durability guarantee can no longer be
// kept: an fsync failed (the kernel may have dropped dirty pages and will
// not report it twice, so retrying could report success for lost data),
// or a failed write could not be undone. Every later call on the same Log
// returns the same *FatalError. Appends acknowledged before it are
// durable; the fate of the failing batch is decided by Open's repair.
type FatalError struct {
	Op   string // "fsync", "truncate", ...
	Path string
	Err  error
}

func (e *FatalError) Error() string {
	return fmt.Sprintf("segmentlog: %s %s failed: %v; this log instance is unusable because the durability of unacknowledged data is unknown: "+
		"close it and reopen the directory (Open repairs the tail)", e.Op, e.Path, e.Err)
}

func (e *FatalError) Unwrap() []error { return []error{ErrMustReopen, e.Err} }

// PastRetentionError is returned to a reader (or a cursor operation) that
// needs an offset that retention has already deleted. With
// Retention.Expire set, retention deletes segments that a registered
// cursor still needs and marks the cursor; the consumer cannot continue
// without a gap, and the flow has to start over: the caller names how
// (AddRecovery).
type PastRetentionError struct {
	Consumer    string // cursor name; empty for an anonymous reader
	Offset      uint64 // offset the consumer needs
	FirstOffset uint64 // oldest offset the log still holds
}

func (e *PastRetentionError) Error() string {
	who := "reader"
	if e.Consumer != "" {
		who = fmt.Sprintf("consumer %q", e.Consumer)
	}
	return fmt.Sprintf("segmentlog: %s needs offset %d but retention removed everything before offset %d; "+
		"the consumer would skip data, so it cannot continue",
		who, e.Offset, e.FirstOffset)
}

// OptionsError names the option that failed validation and its allowed
// range (Options.withDefaults). It wraps ErrInvalidOptions.
type OptionsError = opts.Error
