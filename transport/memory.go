package transport

import (
	"context"
	"sync"
)

// Memory is an in-memory transport: durable for as long as the process
// lives. Tests, benchmarks and the simulator use it where the local log's
// disk behaviour is not what is under test.
type Memory struct {
	mu    sync.Mutex
	units [][]byte
}

// Publish appends a copy of payload.
func (m *Memory) Publish(_ context.Context, payload []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.units = append(m.units, append([]byte(nil), payload...))
	return uint64(len(m.units) - 1), nil
}

// PublishBatch appends copies of payloads.
func (m *Memory) PublishBatch(ctx context.Context, payloads [][]byte) error {
	for _, p := range payloads {
		if _, err := m.Publish(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// Last returns the newest payload.
func (m *Memory) Last(context.Context) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.units) == 0 {
		return nil, false, nil
	}
	return m.units[len(m.units)-1], true, nil
}

// Units returns the payloads published so far, oldest first.
func (m *Memory) Units() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.units...)
}
