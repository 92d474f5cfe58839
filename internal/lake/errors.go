package lake

import "errors"

// Errors the changelog writer refuses with; each is wrapped with the source,
// commit LSN and relation it concerns.
var (
	// ErrTruncate: a TRUNCATE has no row-level changelog form yet.
	ErrTruncate = errors.New("TRUNCATE is not carried into the changelog; the source table's lake history ends here (re-create the changelog table and re-snapshot the flow)")
	// ErrUnchangedToast: an update left a TOASTed value out; the changelog
	// would record a wrong value. Set REPLICA IDENTITY FULL on the table.
	ErrUnchangedToast = errors.New("unchanged TOAST value in an update (run ALTER TABLE ... REPLICA IDENTITY FULL on the source table so updates carry every column)")
	// ErrReservedColumn: the source column's name is one of the
	// changelog's own columns.
	ErrReservedColumn = errors.New("the column name is reserved for the changelog's own columns (rename the source column)")
)

// PermanentError is a failure that retrying cannot mend — a configuration
// the operator must change (a port another listener holds, a catalog
// directory that does not exist). fleet run stops with it instead of
// restarting the component forever.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }
