// Package transport is where the relay and its consumers meet: the durable
// boundary every verified envelope crosses between capture and apply. Its
// interfaces are the contract; Local (the segment log on this machine) and
// transport/kafka (the full edition) implement them, and Memory serves tests.
//
// The rule the interfaces carry, in both directions:
//
//   - A Publisher returns from Publish or PublishBatch only once the payloads
//     are durable (fsync'd, or acknowledged by every in-sync replica). That
//     return is the relay's licence to acknowledge the source slot; nothing
//     else is.
//   - A Reader hands payloads out in publish order. A consumer commits its
//     Cursor only after it has finished with a unit (for an applier: after
//     the target transaction holding it committed), so a crash between the
//     two costs a redelivery, never a gap. Redeliveries are expected:
//     consumers skip what their own checkpoint already holds.
//
// A custom consumer needs no more than this package and package envelope:
// package consumer wraps a Reader and a Cursor with envelope validation and
// is the one to start from (see examples/jsonl-consumer).
package transport

import "context"

// Publisher is the relay's side: where capture publishes.
type Publisher interface {
	// Publish makes payload durable and returns its offset.
	Publish(ctx context.Context, payload []byte) (offset uint64, err error)
	// PublishBatch makes every payload durable together (one fsync or one
	// produce round), returning once all are durable.
	PublishBatch(ctx context.Context, payloads [][]byte) error
	// Last returns the newest durable payload, ok false when empty. The
	// relay resumes from it.
	Last(ctx context.Context) (payload []byte, ok bool, err error)
}

// Reader is a consumer's side: payloads in publish order, from a cursor.
// Next waits for the next payload, or returns ctx's error.
type Reader interface {
	Next(ctx context.Context) (offset uint64, payload []byte, err error)
}

// Rewinder is a Reader that can go back to an earlier offset. The applier
// uses it on start when the target's checkpoint is behind the cursor (a
// target restored from a backup): it is given those units again. Offsets
// of a flow's transport start at 0.
type Rewinder interface {
	// Position returns the offset the next Next returns: at start, the
	// consumer cursor.
	Position() uint64
	// Oldest returns the oldest offset the transport still holds.
	Oldest() uint64
	// Rewind makes offset the one the next Next returns and durably moves
	// the consumer cursor back to it, so the transport keeps every entry
	// from offset on.
	Rewind(offset uint64) error
}

// Cursor records how far a consumer got: everything through offset is done.
// Retention follows the slowest cursor.
type Cursor interface {
	Commit(offset uint64) error
}

var (
	_ Publisher = Local{}
	_ Publisher = (*Memory)(nil)
	_ Reader    = (*CursorReader)(nil)
	_ Rewinder  = (*CursorReader)(nil)
	_ Cursor    = LocalCursor{}
)
