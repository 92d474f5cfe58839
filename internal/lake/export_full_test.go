//go:build full

package lake

import (
	"context"
	"time"
)

// AppendForeignChanges appends changes to changelog table name as a writer
// other than the committer would (no marks): the fan-in tests use it to
// put a row in the lake that no source committed, which fanin verify must
// name.
func (l *Lake) AppendForeignChanges(ctx context.Context, name string, changes []Change) error {
	t, err := l.load(ctx, name)
	if err != nil {
		return err
	}
	_, err = l.appendChanges(ctx, t, changes, nil)
	return err
}

// SetLeaseTTL shortens the lease TTL of committers opened until the
// returned restore is called. For lease_full_test.go (package lake_test).
func SetLeaseTTL(ttl time.Duration) (restore func()) {
	prev := leaseTTL
	leaseTTL = ttl
	return func() { leaseTTL = prev }
}
