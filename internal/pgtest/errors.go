package pgtest

import "errors"

// errMajorMissing marks a request for a PostgreSQL major that is not installed
// while some other major is: such a test is skipped locally but fails in CI.
var errMajorMissing = errors.New("pgtest: requested PostgreSQL major not installed")
