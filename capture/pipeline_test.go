package capture_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellara/trellara/capture"
)

// gatedTransport's PublishBatch tells entered that it started, then blocks
// until release yields its result: an fsync that takes as long as the test
// wants.
type gatedTransport struct {
	entered chan int      // the number of units of each publish that started
	release chan error    // one result per publish
	gone    chan struct{} // the test ended: every publish fails
	mu      sync.Mutex    // guards units
	units   [][]byte      // every unit made durable, in order
}

// newPipeline returns a Pipeline over a gatedTransport; when the test ends,
// blocked publishes fail and the pipeline is closed, also after a failure.
func newPipeline(t *testing.T, o capture.PipelineOptions, po capture.PublisherOptions, durable uint64) (*capture.Pipeline, *capture.Publisher, *gatedTransport) {
	g := &gatedTransport{entered: make(chan int, 16), release: make(chan error, 16), gone: make(chan struct{})}
	po.Transport = g
	o.Publisher = capture.NewPublisher(po, durable, durable)
	pl := capture.NewPipeline(o)
	t.Cleanup(pl.Close)
	t.Cleanup(func() { close(g.gone) })
	return pl, o.Publisher, g
}

func (g *gatedTransport) Publish(context.Context, []byte) (uint64, error) { panic("not used") }
func (g *gatedTransport) Last(context.Context) ([]byte, bool, error)      { return nil, false, nil }
func (g *gatedTransport) PublishBatch(_ context.Context, p [][]byte) error {
	g.entered <- len(p)
	select {
	case err := <-g.release:
		if err != nil {
			return err
		}
	case <-g.gone:
		return errors.New("test ended")
	}
	g.mu.Lock()
	g.units = append(g.units, p...)
	g.mu.Unlock()
	return nil
}

func unitBatch(ack uint64, units ...byte) *capture.Batch {
	b := &capture.Batch{Ack: ack, Covers: ack}
	for _, u := range units {
		b.Units = append(b.Units, []byte{u})
		b.Bytes++
	}
	return b
}

// While a batch's publish (its fsync) is in flight, nothing it or anything
// after it carries is acknowledged: not its position, not a later batch's,
// not an ack-only position submitted behind it. Batches submitted meanwhile
// wait as one group and are published, in order, after it.
func TestPipelineAcknowledgesOnlyDurableBatches(t *testing.T) {
	ctx := context.Background()
	var (
		mu      sync.Mutex
		durable []uint64
	)
	pl, pub, g := newPipeline(t, capture.PipelineOptions{}, capture.PublisherOptions{Acks: &capture.MemoryAcks{},
		OnDurable: func(lsn uint64) { mu.Lock(); durable = append(durable, lsn); mu.Unlock() }}, 100)

	if err := pl.Submit(ctx, unitBatch(200, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if n := <-g.entered; n != 2 {
		t.Fatalf("first publish has %d units, want 2", n)
	}
	// The first batch is in flight: the owner goes on and submits more.
	b := unitBatch(300, 3)
	if err := pl.Submit(ctx, b); err != nil {
		t.Fatal(err)
	}
	if !b.Empty() {
		t.Fatalf("Submit left %+v in the owner's batch", b)
	}
	if err := pl.Submit(ctx, &capture.Batch{Ack: 350}); err != nil { // a keepalive's position
		t.Fatal(err)
	}
	if err := pl.Submit(ctx, unitBatch(400, 4)); err != nil {
		t.Fatal(err)
	}
	if a := pub.Acked(); a != 100 {
		t.Fatalf("acknowledged %d while the publish of the batch ending at 200 is in flight; want 100", a)
	}
	if !pl.Busy() {
		t.Fatal("Busy is false with a publish in flight")
	}
	g.release <- nil
	if n := <-g.entered; n != 2 {
		t.Fatalf("second publish has %d units, want the 2 submitted during the first", n)
	}
	if a := pub.Acked(); a != 200 {
		t.Fatalf("acknowledged %d with the first batch durable and the second in flight; want 200", a)
	}
	g.release <- nil
	if err := pl.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if a := pub.Acked(); a != 400 {
		t.Fatalf("acknowledged %d after draining; want 400", a)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []uint64{200, 400}; !slices.Equal(durable, want) {
		t.Fatalf("OnDurable saw %v, want %v", durable, want)
	}
	if want := [][]byte{{1}, {2}, {3}, {4}}; !slices.EqualFunc(g.units, want, slices.Equal) {
		t.Fatalf("units published in the order %v, want %v", g.units, want)
	}
	if st := pub.Stats(); st.Groups != 2 || st.Units != 4 {
		t.Fatalf("stats %+v: want 2 groups of 4 units", st)
	}
}

// A failed publish acknowledges nothing, publishes nothing after it, ends
// the pipeline (OnEnd, Err) and refuses further batches with its error.
func TestPipelinePublishFailureStops(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("fsync: input/output error")
	ended := make(chan error, 1)
	after := 0
	pl, pub, g := newPipeline(t, capture.PipelineOptions{
		After: func() error { after++; return nil },
		OnEnd: func(cause error) { ended <- cause }}, capture.PublisherOptions{}, 100)
	if err := pl.Submit(ctx, unitBatch(200, 1)); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if err := pl.Submit(ctx, unitBatch(300, 2)); err != nil {
		t.Fatal(err)
	}
	g.release <- boom
	if cause := <-ended; !errors.Is(cause, boom) {
		t.Fatalf("OnEnd(%v), want the publish error", cause)
	}
	if err := pl.Drain(ctx); !errors.Is(err, boom) {
		t.Fatalf("Drain = %v, want the publish error", err)
	}
	if err := pl.Submit(ctx, unitBatch(400, 3)); !errors.Is(err, boom) {
		t.Fatalf("Submit after the failure = %v, want the publish error", err)
	}
	pl.Close()
	if a := pub.Acked(); a != 100 {
		t.Fatalf("acknowledged %d after a failed publish; want 100", a)
	}
	if len(g.entered) != 0 || after != 0 {
		t.Fatalf("%d publishes and %d After calls followed the failure", len(g.entered), after)
	}
}

// Stop is polled after each batch; once it reports true nothing more is
// published unless the owner drains, and Close discards what is pending.
func TestPipelineStop(t *testing.T) {
	ctx := context.Background()
	ended := make(chan error, 1)
	var pub *capture.Publisher
	pl, pub, g := newPipeline(t, capture.PipelineOptions{
		Stop:  func() bool { return pub.Acked() >= 200 },
		OnEnd: func(cause error) { ended <- cause }}, capture.PublisherOptions{}, 0)
	if err := pl.Submit(ctx, unitBatch(200, 1)); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if err := pl.Submit(ctx, unitBatch(300, 2)); err != nil {
		t.Fatal(err)
	}
	g.release <- nil
	if cause := <-ended; !errors.Is(cause, capture.ErrStopped) {
		t.Fatalf("OnEnd(%v), want ErrStopped", cause)
	}
	if !pl.Stopped() || pl.Err() != nil {
		t.Fatalf("Stopped %v, Err %v", pl.Stopped(), pl.Err())
	}
	// The owner flushes what it has after the stop, as the relay does.
	g.release <- nil
	if err := pl.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if a := pub.Acked(); a != 300 {
		t.Fatalf("acknowledged %d after draining past the stop; want 300", a)
	}
	if err := pl.Submit(ctx, unitBatch(400, 3)); err != nil {
		t.Fatal(err)
	}
	g.release <- errors.New("published after the stop") // fails it, should it start
	pl.Close()
	if a := pub.Acked(); a != 300 || len(g.entered) != 0 {
		t.Fatalf("Close published after the stop (acknowledged %d)", a)
	}
}

// OnIdle is called when a publish ends with nothing pending (the owner may
// submit the batch it held back meanwhile), not when a pending batch goes
// next.
func TestPipelineOnIdle(t *testing.T) {
	ctx := context.Background()
	var idle atomic.Int32
	pl, pub, g := newPipeline(t, capture.PipelineOptions{OnIdle: func() { idle.Add(1) }}, capture.PublisherOptions{}, 0)
	if err := pl.Submit(ctx, unitBatch(200, 1)); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if err := pl.Submit(ctx, unitBatch(300, 2)); err != nil {
		t.Fatal(err)
	}
	g.release <- nil
	<-g.entered // the pending batch went next
	if n := idle.Load(); n != 0 {
		t.Fatalf("OnIdle called %d times with a batch pending", n)
	}
	g.release <- nil
	if err := pl.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	pl.Close()
	if n := idle.Load(); n != 1 || pub.Acked() != 300 {
		t.Fatalf("OnIdle called %d times (want 1), acknowledged %d (want 300)", n, pub.Acked())
	}
}

// TestPipelineHeartbeatWhileWaiting: while the owner waits in Drain (or in
// Submit behind a full pending batch) for a publish that takes long, the
// owner's Heartbeat keeps running (the relay's standby status updates: a
// walsender drops a client silent for wal_sender_timeout), and its error
// ends the wait.
func TestPipelineHeartbeatWhileWaiting(t *testing.T) {
	ctx := context.Background()
	var beats atomic.Int64
	fail := errors.New("source connection gone")
	var failNow atomic.Bool
	pl, _, g := newPipeline(t, capture.PipelineOptions{HeartbeatEvery: time.Millisecond,
		Heartbeat: func(context.Context) error {
			beats.Add(1)
			if failNow.Load() {
				return fail
			}
			return nil
		}}, capture.PublisherOptions{Acks: &capture.MemoryAcks{}}, 100)

	if err := pl.Submit(ctx, unitBatch(200, 1)); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	done := make(chan error, 1)
	go func() { done <- pl.Drain(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); beats.Load() < 3; {
		select {
		case err := <-done:
			t.Fatalf("Drain returned %v while the publish was held", err)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d heartbeats in 10 s while Drain waited for a held publish", beats.Load())
		}
	}
	g.release <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A failing heartbeat ends the wait with its error.
	if err := pl.Submit(ctx, unitBatch(300, 2)); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	failNow.Store(true)
	if err := pl.Drain(ctx); !errors.Is(err, fail) {
		t.Fatalf("Drain = %v, want the heartbeat's error", err)
	}
	g.release <- nil
}
