//go:build full

package lake

import "time"

// SetLeaseTTL shortens the lease TTL of committers opened until the
// returned restore is called. For lease_full_test.go (package lake_test).
func SetLeaseTTL(ttl time.Duration) (restore func()) {
	prev := leaseTTL
	leaseTTL = ttl
	return func() { leaseTTL = prev }
}
