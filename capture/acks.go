package capture

import "sync"

// AckStore durably remembers the highest position acknowledged to the
// source although no unit in the transport ends there (a transaction
// without rows, an idle keepalive, an extension progress frame). CheckResume
// counts it, so a restart tells such an advance from a gap.
type AckStore interface {
	// Load returns the recorded position, 0 when none is.
	Load() (uint64, error)
	// Record must be durable before it returns: the acknowledgement
	// follows it.
	Record(lsn uint64) error
}

// MemoryAcks is an AckStore in memory, safe for concurrent use: for tests
// and for the simulator, whose model decides what survives a crash.
type MemoryAcks struct {
	mu  sync.Mutex
	lsn uint64
}

// Load returns the last recorded position.
func (m *MemoryAcks) Load() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lsn, nil
}

// Record keeps lsn.
func (m *MemoryAcks) Record(lsn uint64) error {
	m.mu.Lock()
	m.lsn = lsn
	m.mu.Unlock()
	return nil
}
