package verify

import (
	"errors"
	"fmt"

	"github.com/trellara/trellara/internal/opts"
)

// Every operating error Verify returns wraps one of these, so the CLI can
// classify it without matching text. A divergence is never an error: it is a
// Result with Verdict Diverged.
var (
	// ErrOptions: the caller asked for something out of range. Fix the flag
	// or configuration named in the message.
	ErrOptions = opts.ErrInvalid

	// ErrSourceTable: a table named for verification does not exist on the
	// source (or is not a table). The configuration or --table flag is wrong;
	// nothing was compared for it, so no verdict could be honest.
	ErrSourceTable = errors.New("verify: source table not found")

	// ErrIncomparable: the two servers cannot render equal values as equal
	// bytes (different server encodings), or one lacks hashtextextended
	// (PostgreSQL older than 11). A checksum comparison would report false
	// divergences, so Verify refuses instead.
	ErrIncomparable = errors.New("verify: source and target cannot be compared")

	// ErrTargetCheckpoint: the caller's TargetCheckpoint hook failed.
	ErrTargetCheckpoint = errors.New("verify: reading the target checkpoint failed")

	// ErrSourceLSN: the source WAL position could not be read.
	ErrSourceLSN = errors.New("verify: reading the source WAL position failed")
)

// TableError is a failure while reading one table on one side: a query
// error, a lost connection, a cancelled context. It names the relation as
// that side knows it, so a target-side mapping mistake is visible.
type TableError struct {
	Table string // schema.name on Side
	Side  string // "source" or "target"
	Err   error
}

// Error renders "verify: <side> table <name>: <cause>".
func (e *TableError) Error() string {
	return fmt.Sprintf("verify: %s table %s: %v", e.Side, e.Table, e.Err)
}

// Unwrap returns the cause.
func (e *TableError) Unwrap() error { return e.Err }

// OptionsError names the option Verify refused and what is allowed; it
// wraps ErrOptions.
type OptionsError = opts.Error
