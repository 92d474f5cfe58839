// Package transport adapts the durable transports (the local segment log;
// Kafka in the full edition) to the relay's publish side and the applier's
// read side.
package transport

import (
	"context"
	"fmt"

	"github.com/trellara/trellara/segmentlog"
)

// Local is the local segment log as a relay transport.
type Local struct {
	Log *segmentlog.Log
}

// Publish appends payload; segmentlog.Append returns only once it is
// fsync'd, which is what licenses the relay to acknowledge the source.
func (l Local) Publish(_ context.Context, payload []byte) (uint64, error) {
	return l.Log.Append(payload)
}

// PublishBatch appends payloads in one commit group: one fsync for all.
func (l Local) PublishBatch(_ context.Context, payloads [][]byte) error {
	_, err := l.Log.AppendBatch(payloads)
	return err
}

// Last returns the newest entry.
func (l Local) Last(ctx context.Context) ([]byte, bool, error) {
	next := l.Log.NextOffset()
	if next == l.Log.FirstOffset() {
		return nil, false, nil
	}
	r := l.Log.NewReader(next - 1)
	defer r.Close()
	_, b, err := r.Next(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("transport: read newest entry (offset %d): %w", next-1, err)
	}
	return b, true, nil
}

// Cursor commits a named consumer's position in the log.
type Cursor struct {
	Log  *segmentlog.Log
	Name string
}

// Commit records that everything through offset has been processed; the
// reader resumes at offset+1.
func (c Cursor) Commit(offset uint64) error {
	return c.Log.CommitCursor(c.Name, offset+1)
}
