// Package matrix holds the PostgreSQL support matrix: one Result per major,
// built from what pgmatrix/run.sh actually ran, stored as
// pgmatrix/results/pgNN.json, and rendered into docs/SUPPORT.md. Nothing in
// the document comes from anywhere else, so it cannot claim more than a run
// showed.
//
// A Result has two paths, each with a status:
//
//	external_relay  the Go integration suite (relay, applier, verify, flow,
//	                check, pgtest) against that major's server, from
//	                `go test -json`, one entry per package
//	extension       the C extension: build, PGXS regression tests and the
//	                live worker test, one entry per step
//
//	pass         everything that ran passed
//	fail         something ran and failed; the failing tests or steps are named
//	not-covered  it could not run here; Reason says why
//
// Format version 1. Adding a field is compatible; renaming or removing one
// needs a new FormatVersion and a migration of the committed results.
package matrix
