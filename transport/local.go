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

// LocalCursor commits a named consumer's position in the log.
type LocalCursor struct {
	Log  *segmentlog.Log
	Name string
}

// Commit records that everything through offset has been processed; the
// reader resumes at offset+1.
func (c LocalCursor) Commit(offset uint64) error {
	return c.Log.CommitCursor(c.Name, offset+1)
}

// CursorReader reads the log from a named consumer's cursor. Besides Next
// it can go back (apply.Rewinder): the applier rewinds it on start when the
// target's checkpoint is behind the cursor.
type CursorReader struct {
	log  *segmentlog.Log
	name string
	rd   *segmentlog.Reader
}

// NewCursorReader returns a reader at cursor name's committed offset.
func NewCursorReader(l *segmentlog.Log, name string) (*CursorReader, error) {
	rd, err := l.NewCursorReader(name)
	if err != nil {
		return nil, err
	}
	return &CursorReader{log: l, name: name, rd: rd}, nil
}

// Next returns the next entry (segmentlog.Reader.Next).
func (r *CursorReader) Next(ctx context.Context) (uint64, []byte, error) { return r.rd.Next(ctx) }

// Position returns the offset Next returns next.
func (r *CursorReader) Position() uint64 { return r.rd.Offset() }

// Oldest returns the oldest offset the log still holds.
func (r *CursorReader) Oldest() uint64 { return r.log.FirstOffset() }

// Rewind moves the cursor back to offset, durably (so retention keeps
// everything from offset on), and reads from there.
func (r *CursorReader) Rewind(offset uint64) error {
	if err := r.log.ResetCursor(r.name, offset); err != nil {
		return fmt.Errorf("transport: rewind cursor %q to offset %d: %w", r.name, offset, err)
	}
	rd, err := r.log.NewCursorReader(r.name)
	if err != nil {
		return err
	}
	_ = r.rd.Close()
	r.rd = rd
	return nil
}

// Close releases the reader.
func (r *CursorReader) Close() error { return r.rd.Close() }
