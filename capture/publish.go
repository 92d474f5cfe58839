package capture

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/hoptrace"
)

// Batch bounds: enough to amortise an fsync over many small transactions,
// small enough to bound memory and acknowledgement delay. Both capture
// paths cut batches by them.
const (
	BatchUnitsMax = 4096
	BatchBytesMax = 8 << 20
)

// Fence is a fence transaction found in a batch: its token and commit LSN.
type Fence struct {
	Token     string
	CommitLSN uint64
}

// Batch is a group of units published together, and the position that
// becomes acknowledgeable once they are durable.
type Batch struct {
	Units  [][]byte
	Bytes  int
	Ack    uint64 // highest end of a complete transaction (or other acknowledgeable position) in it
	Covers uint64 // highest end LSN of a complete transaction whose unit is in it
	Fences []Fence
	// hops are the commit LSNs of the final units, kept only while
	// hoptrace records (the latency breakdown).
	hops []uint64

	// free is the unused end of the block the last unit was encoded into.
	// Units are encoded straight into it, many to an allocation; it is
	// only ever written past every unit handed out, so a unit a transport
	// still holds is never touched.
	free []byte
}

// Encoding blocks: a unit is encoded into the free end of the current
// block, or into a new block when less than unitBlockMin is left.
const (
	unitBlockBytes = 64 << 10
	unitBlockMin   = 4 << 10
)

// encode is e's wire form, encoded into b's current block (a large unit
// that does not fit gets an allocation of its own size).
func (b *Batch) encode(e *pb.Envelope) ([]byte, error) {
	if cap(b.free) < unitBlockMin {
		b.free = make([]byte, 0, unitBlockBytes)
	}
	out, err := envelope.AppendEncode(b.free[:0], e)
	if err != nil {
		return nil, err
	}
	n := len(out)
	if n > cap(b.free) {
		// Grown out of the block into a buffer of its own, larger than
		// the unit: keep a copy of exactly its size.
		return append(make([]byte, 0, n), out...), nil
	}
	b.free = out[n:n]
	return out[:n:n], nil
}

// Add takes one of the assembler's units (Emit: e nil for a committed
// transaction without rows; final false for all but the last CHUNK of a
// transaction). A transaction res already holds is not added (skipped
// true); its end is still acknowledgeable, which moves a slot that lags the
// transport. Only a transaction's final unit makes its end acknowledgeable.
func (b *Batch) Add(res Resume, e *pb.Envelope, endLSN uint64, final bool) (skipped bool, err error) {
	if e == nil {
		if final {
			b.Ack = max(b.Ack, endLSN)
		}
		return false, nil
	}
	if res.Skips(e.CommitLsn) {
		if final {
			b.Ack = max(b.Ack, endLSN)
		}
		return true, nil
	}
	u, err := b.encode(e)
	if err != nil {
		return false, fmt.Errorf("capture: encode transaction xid %d at %s: %w", e.Xid, envelope.FormatLSN(e.CommitLsn), err)
	}
	b.Units = append(b.Units, u)
	b.Bytes += len(u)
	if final {
		b.Ack = max(b.Ack, endLSN)
		b.Covers = max(b.Covers, endLSN)
		if hoptrace.On() {
			hoptrace.At(hoptrace.Commit, e.CommitLsn, time.UnixMicro(e.CommitTimeUnixMicros))
			hoptrace.Stamp(hoptrace.Received, e.CommitLsn)
			b.hops = append(b.hops, e.CommitLsn)
		}
		for _, row := range e.Rows {
			if row.Op == pb.Op_OP_MESSAGE && row.MessagePrefix == FencePrefix {
				b.Fences = append(b.Fences, Fence{string(row.MessageContent), e.CommitLsn})
			}
		}
	}
	return false, nil
}

// Empty reports whether b holds neither units nor a position.
func (b *Batch) Empty() bool { return len(b.Units) == 0 && b.Ack == 0 }

// Full reports whether b reached a batch bound and should be published.
func (b *Batch) Full() bool { return len(b.Units) >= BatchUnitsMax || b.Bytes >= BatchBytesMax }

// Merge appends o (later in the stream) to b.
func (b *Batch) Merge(o *Batch) {
	b.Units = append(b.Units, o.Units...)
	b.Bytes += o.Bytes
	b.Ack = max(b.Ack, o.Ack)
	b.Covers = max(b.Covers, o.Covers)
	b.Fences = append(b.Fences, o.Fences...)
	b.hops = append(b.hops, o.hops...)
}

// Reset empties b, keeping its unit slice's storage.
func (b *Batch) Reset() {
	b.Units, b.Bytes, b.Ack, b.Covers, b.Fences, b.hops = b.Units[:0], 0, 0, 0, nil, b.hops[:0]
}

// PublisherOptions configure a Publisher. Transport is required.
type PublisherOptions struct {
	Transport Transport
	// Name starts the Publisher's error messages ("relay", "sidecar").
	Name string
	// Acks, when set, durably records a position before it is
	// acknowledged when no durable unit ends there (a transaction without
	// rows, an idle keepalive, an extension progress frame), so a restart
	// can tell that advance from a gap (CheckResume).
	Acks AckStore
	// Acknowledge hands a durable position to the source. Returning false
	// withholds it (a test's stand-in for dying at that point): Publish
	// then returns at once. Nil acknowledges by recording only (the relay
	// sends Acked() in its standby status updates).
	Acknowledge func(ctx context.Context, lsn uint64) (bool, error)
	// OnDurable is called after every acknowledgement, OnFence after it
	// for each fence the acknowledged batch held.
	OnDurable func(lsn uint64)
	OnFence   func(token string, commitLSN uint64)
}

// PublisherStats are a Publisher's counters.
type PublisherStats struct {
	Units   uint64 // units made durable
	Bytes   uint64 // their bytes
	Groups  uint64 // PublishBatch calls (fsyncs)
	Durable uint64 // highest end LSN of a transaction durable in the transport
	Acked   uint64 // last position acknowledged
}

// Publisher makes batches durable, in order, and only then acknowledges
// them. Publish is called from one goroutine at a time; Stats and Acked from
// any.
type Publisher struct {
	o PublisherOptions

	mu sync.Mutex
	st PublisherStats
}

// NewPublisher returns a Publisher starting at durable and acked (Restart).
func NewPublisher(o PublisherOptions, durable, acked uint64) *Publisher {
	if o.Name == "" {
		o.Name = "capture"
	}
	p := &Publisher{o: o}
	p.Restart(durable, acked)
	return p
}

// Restart sets the positions a new session starts from: durable, the end of
// the transport's newest complete transaction (Resume.DurableEnd), and
// acked, the position already acknowledged (positions at or below it are
// not acknowledged again).
func (p *Publisher) Restart(durable, acked uint64) {
	p.mu.Lock()
	p.st.Durable, p.st.Acked = durable, acked
	p.mu.Unlock()
}

// Stats returns a copy of the counters.
func (p *Publisher) Stats() PublisherStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}

// Acked is the last position acknowledged.
func (p *Publisher) Acked() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.Acked
}

// Publish makes b's units durable, then records b.Ack in the AckStore if no
// durable unit ends there, then acknowledges it, then reports b's fences.
// On a publish failure nothing is acknowledged: the source resends it all.
func (p *Publisher) Publish(ctx context.Context, b *Batch) error {
	st := p.Stats()
	if len(b.Units) > 0 {
		if err := p.o.Transport.PublishBatch(ctx, b.Units); err != nil {
			return fmt.Errorf("%s: publish %d units (acknowledgeable through %s): %w", p.o.Name, len(b.Units), envelope.FormatLSN(b.Ack), err)
		}
		for _, l := range b.hops {
			hoptrace.Stamp(hoptrace.Durable, l)
		}
		p.mu.Lock()
		p.st.Units += uint64(len(b.Units))
		p.st.Bytes += uint64(b.Bytes)
		p.st.Groups++
		p.st.Durable = max(p.st.Durable, b.Covers)
		st = p.st
		p.mu.Unlock()
	}
	if b.Ack > st.Acked {
		if b.Ack > st.Durable && p.o.Acks != nil {
			// No unit ends here: remember durably that we acknowledge it,
			// or the next start would see the slot past the transport and
			// report a gap.
			if err := recordAck(p.o.Acks, b.Ack, st.Durable); err != nil {
				return fmt.Errorf("%s: record acknowledgement at %s: %w", p.o.Name, envelope.FormatLSN(b.Ack), err)
			}
		}
		if p.o.Acknowledge != nil {
			ok, err := p.o.Acknowledge(ctx, b.Ack)
			if err != nil || !ok {
				return err
			}
		}
		p.mu.Lock()
		p.st.Acked = b.Ack
		p.mu.Unlock()
		if p.o.OnDurable != nil {
			p.o.OnDurable(b.Ack)
		}
	}
	if p.o.OnFence != nil {
		for _, f := range b.Fences {
			p.o.OnFence(f.Token, f.CommitLSN)
		}
	}
	return nil
}
