package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/trellara/trellara/lsn"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/segmentlog"
)

// Unit is one verified entry of the log.
type Unit struct {
	// Offset is the entry's position in the log; committing the unit
	// moves the cursor to Offset+1.
	Offset   uint64
	Envelope *pb.Envelope
	// Bytes is the encoded size of the envelope.
	Bytes int
}

// StartKind says where a consumer starts when Options.Start is set.
type StartKind int

// Start positions.
const (
	// StartCursor starts at the cursor's committed offset, or at the
	// oldest retained entry when the cursor is not registered yet.
	StartCursor StartKind = iota
	// StartEarliest starts at the oldest retained entry.
	StartEarliest
	// StartLatest starts after the newest entry: only new units.
	StartLatest
	// StartLSN starts at the first unit whose commit LSN is at least LSN.
	StartLSN
)

// Start is where reading begins.
type Start struct {
	Kind StartKind
	LSN  uint64 // for StartLSN
}

// ParseStart reads "earliest", "latest", "cursor" or an LSN written X/X.
func ParseStart(s string) (Start, error) {
	switch s {
	case "", "cursor":
		return Start{Kind: StartCursor}, nil
	case "earliest":
		return Start{Kind: StartEarliest}, nil
	case "latest":
		return Start{Kind: StartLatest}, nil
	}
	pos, err := lsn.Parse(s)
	if err != nil {
		return Start{}, fmt.Errorf("consumer: start %q: want earliest, latest, cursor or an LSN like 0/16B3748", s)
	}
	return Start{Kind: StartLSN, LSN: uint64(pos)}, nil
}

// Options configure a Consumer. The zero value starts at the cursor and
// commits it.
type Options struct {
	Start Start
	// NoCommit reads without ever writing the cursor: inspection that
	// neither registers the consumer nor moves retention. Commit returns
	// ErrNoCommit.
	NoCommit bool
	// Logger receives the log's own events (a lost change notification,
	// an unreadable durable end). nil discards them.
	Logger *slog.Logger
}

// ErrNoCommit is returned by Commit on a consumer opened with NoCommit.
var ErrNoCommit = errors.New("consumer: opened without commit; the cursor is never written")

// DecodeError is an entry that is in the log (its frames passed the log's
// checksums) but is not a valid envelope. The consumer stops at it rather
// than skip data. It reaches the caller inside a *StreamError of kind
// ErrCorrupt (errors.As finds either).
type DecodeError struct {
	Offset uint64
	Err    error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("consumer: entry at offset %d is not a valid envelope: %v", e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Consumer reads a flow's log from a named cursor. It is not safe for
// concurrent use.
type Consumer struct {
	log  *segmentlog.Log
	dir  string
	name string
	opts Options
	// lastLSN is the commit LSN of the last unit read, for errors.
	lastLSN uint64
	rd      *segmentlog.Reader
	// pending is a unit read while positioning at an LSN, returned by the
	// first Next.
	pending *Unit
}

// Open opens the log in dir (a flow's transport.local.dir + "/log") for
// consumer name and positions it at opts.Start.
func Open(dir, name string, opts Options) (*Consumer, error) {
	l, err := segmentlog.OpenReadOnly(dir, segmentlog.Options{Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("consumer %q: open %s: %w", name, dir, err)
	}
	c := &Consumer{log: l, dir: dir, name: name, opts: opts}
	if err := c.position(context.Background()); err != nil {
		_ = l.Close()
		return nil, err
	}
	return c, nil
}

func (c *Consumer) position(ctx context.Context) error {
	l := c.log
	var from uint64
	switch c.opts.Start.Kind {
	case StartCursor:
		off, ok, err := l.CursorOffset(c.name)
		if err != nil {
			return fmt.Errorf("consumer %q: %w", c.name, err)
		}
		from = l.FirstOffset()
		if ok {
			from = off
		}
	case StartEarliest:
		from = l.FirstOffset()
	case StartLatest:
		from = l.NextOffset()
	case StartLSN:
		// Units are in commit order: scan from the oldest to the first
		// one at or past the LSN, within what is durable now.
		from = l.FirstOffset()
		end := l.NextOffset()
		rd := l.NewReader(from)
		for from < end {
			u, err := c.read(ctx, rd)
			if err != nil {
				_ = rd.Close()
				return err
			}
			if u.Envelope.CommitLsn >= c.opts.Start.LSN {
				c.rd, c.pending = rd, &u
				return nil
			}
			from++
		}
		_ = rd.Close()
	default:
		return fmt.Errorf("consumer %q: unknown start kind %d", c.name, c.opts.Start.Kind)
	}
	c.rd = l.NewReader(from)
	return nil
}

func (c *Consumer) read(ctx context.Context, rd *segmentlog.Reader) (Unit, error) {
	want := rd.Offset()
	off, b, err := rd.Next(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return Unit{}, err
		}
		var pr *segmentlog.PastRetentionError
		switch {
		case errors.As(err, &pr):
			return Unit{}, c.streamError(ErrPastRetention, pr.Offset, RecoveryRebuild, err)
		case segmentlog.IsCorruption(err):
			return Unit{}, c.streamError(ErrCorrupt, want, RecoveryRestoreLog, err)
		}
		return Unit{}, fmt.Errorf("consumer %q: read offset %d: %w", c.name, want, err)
	}
	if off != want {
		return Unit{}, c.streamError(ErrGap, want, RecoveryRestoreLog,
			fmt.Errorf("the log's next entry is offset %d: entries %d to %d are missing", off, want, off-1))
	}
	e, err := envelope.Decode(b)
	if err != nil {
		return Unit{}, c.streamError(ErrCorrupt, off, RecoveryRestoreLog, &DecodeError{Offset: off, Err: err})
	}
	c.lastLSN = e.CommitLsn
	return Unit{Offset: off, Envelope: e, Bytes: len(b)}, nil
}

// streamError is a gap, past-retention or corruption error at offset.
func (c *Consumer) streamError(kind error, offset uint64, recovery string, err error) error {
	return &StreamError{Kind: kind, Consumer: c.name, Recovery: recovery, Err: err,
		Position: Position{Log: c.dir, Offset: offset, LSN: c.lastLSN}}
}

// Next returns the next unit, waiting for the relay to append one until
// ctx is done. A gap, a position past retention or a damaged entry is a
// *StreamError (ErrGap, ErrPastRetention, ErrCorrupt).
func (c *Consumer) Next(ctx context.Context) (Unit, error) {
	if u := c.pending; u != nil {
		c.pending = nil
		return *u, nil
	}
	return c.read(ctx, c.rd)
}

// Commit records that u and every unit before it are done: the cursor
// moves to u.Offset+1, durably, and a restart resumes after u. The first
// commit registers the cursor.
func (c *Consumer) Commit(u Unit) error {
	if c.opts.NoCommit {
		return ErrNoCommit
	}
	if err := c.log.CommitCursor(c.name, u.Offset+1); err != nil {
		return fmt.Errorf("consumer %q: commit offset %d: %w", c.name, u.Offset+1, err)
	}
	return nil
}

// Stream is what every consumer offers, whatever the transport: *Consumer
// (the local log) and *kafkaconsumer.Consumer (Kafka, strict or
// partitioned). A sink written against Stream runs on either.
type Stream interface {
	// Next returns the next unit in commit order, waiting until ctx is done.
	Next(ctx context.Context) (Unit, error)
	// Commit says u and every unit before it are done: the position moves
	// past u.
	Commit(u Unit) error
	// Run hands every unit to h and commits each one h returns nil for.
	Run(ctx context.Context, h Handler) error
	Close() error
}

var _ Stream = (*Consumer)(nil)

// Handler processes one unit. Returning nil says the unit is done.
type Handler func(ctx context.Context, u Unit) error

// Run hands every unit to h in log order and commits each one h returns
// nil for (unless NoCommit), until ctx is done or h fails. An error from
// h is returned as is, with the cursor still before the unit: the next
// run starts with it.
func (c *Consumer) Run(ctx context.Context, h Handler) error {
	return runLoop(ctx, c.Next, h, func(u Unit) error {
		if c.opts.NoCommit {
			return nil
		}
		return c.Commit(u)
	})
}

// RunStream is Run for any Stream's Next and Commit: every unit to h in
// order, each committed once h returns nil for it, until ctx is done or
// h fails (the position then stays before the failed unit).
func RunStream(ctx context.Context, s Stream, h Handler) error {
	return runLoop(ctx, s.Next, h, s.Commit)
}

func runLoop(ctx context.Context, next func(context.Context) (Unit, error), h Handler, commit func(Unit) error) error {
	for {
		u, err := next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if err := h(ctx, u); err != nil {
			return err
		}
		if err := commit(u); err != nil {
			return err
		}
	}
}

// Offset returns the offset of the unit Next returns next.
func (c *Consumer) Offset() uint64 {
	if c.pending != nil {
		return c.pending.Offset
	}
	return c.rd.Offset()
}

// NextOffset returns the durable end of the log: the offset the relay's
// next unit gets.
func (c *Consumer) NextOffset() uint64 { return c.log.NextOffset() }

// Close releases the log.
func (c *Consumer) Close() error {
	err := c.rd.Close()
	if lerr := c.log.Close(); err == nil {
		err = lerr
	}
	return err
}
