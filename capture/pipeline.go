package capture

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStopped is the cause a Pipeline ends with when its Stop reports true.
var ErrStopped = errors.New("capture: stop requested")

// errPipelineClosed is what Submit returns after Close: a programming error
// of the owner, never an operating condition.
var errPipelineClosed = errors.New("capture: submit to a closed publish pipeline")

// stopPollDefault bounds how long Stop may go unpolled when nothing is
// published.
const stopPollDefault = 100 * time.Millisecond

// PipelineOptions configure a Pipeline. Publisher is required.
type PipelineOptions struct {
	Publisher *Publisher
	// After runs after each batch is durable and acknowledged: what may
	// happen only then (a barrier's pin moves once the unit that carries it
	// is durable). An error ends publishing like a publish failure.
	After func() error
	// Stop, when set, is polled when the pipeline starts, after each batch
	// and every StopPoll (default 100 ms); once it reports true the pipeline
	// is stopped: Stopped reports true, OnEnd is called with ErrStopped, and
	// nothing more is published unless the owner asks with Drain.
	Stop     func() bool
	StopPoll time.Duration
	// OnEnd is called once, when publishing fails (with the error) or Stop
	// reports true (with ErrStopped), so that an owner blocked elsewhere (in
	// a read) learns of it at once.
	OnEnd func(cause error)
	// OnIdle, when set, is called after a batch is published when nothing
	// is pending: an owner that holds its batch while one is in flight (so
	// that it grows during the fsync) submits it now.
	OnIdle func()
	// Heartbeat, when set, runs on the owner's goroutine every
	// HeartbeatEvery (default 100 ms) while Submit or Drain waits for a
	// publish: an owner that must keep talking to its source meanwhile
	// (the relay's standby status updates, without which the server drops
	// a client silent for wal_sender_timeout) does it here. Its error ends
	// the wait.
	Heartbeat      func(ctx context.Context) error
	HeartbeatEvery time.Duration
}

// Pipeline publishes batches on its own goroutine, in stream order and one
// at a time, so that its owner keeps receiving and assembling while a
// batch's fsync runs: no stage waits for another's fsync.
//
// The owner (one goroutine) hands over what it assembled with Submit. What
// is submitted waits in one pending batch, merged in stream order; the
// publishing goroutine takes the whole pending batch whenever it finishes
// the previous one. A group therefore grows to what arrives during one
// publish: the fsync in flight is the group-commit window, without a timer,
// and a quiet stream is published at once. At most one batch is in flight
// and one pending; Submit waits while the pending one is full (Batch.Full),
// so memory stays bounded.
//
// Each batch goes through Publisher.Publish (durable first, then
// acknowledged: Acked moves only after the batch is durable), then After.
// The Publisher's callbacks (Acknowledge, OnDurable, OnFence), After, Stop
// and OnEnd all run on the publishing goroutine, never concurrently with one
// another. A failure is kept: nothing after the failed batch is published or
// acknowledged, and Submit, Drain and Err return it.
type Pipeline struct {
	o PipelineOptions

	mu       sync.Mutex
	pending  *Batch // submitted, not yet taken; nil when none
	spare    *Batch // a published batch whose storage Submit reuses
	inFlight bool
	drain    bool // the owner waits for everything submitted, also after a stop
	err      error
	stopped  bool
	started  bool
	closing  bool

	work     chan struct{} // pending has something, or drain was asked (capacity 1)
	progress chan struct{} // a batch was taken or finished, or the pipeline ended (capacity 1)
	quit     chan struct{}
	done     chan struct{}
	ended    bool // OnEnd was called; publishing goroutine only
}

// NewPipeline returns a Pipeline; its goroutine starts with Start or the
// first Submit, and ends with Close.
func NewPipeline(o PipelineOptions) *Pipeline {
	if o.StopPoll <= 0 {
		o.StopPoll = stopPollDefault
	}
	if o.HeartbeatEvery <= 0 {
		o.HeartbeatEvery = stopPollDefault
	}
	return &Pipeline{o: o, work: make(chan struct{}, 1), progress: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
}

// Start starts the publishing goroutine unless it runs or ran; ctx is
// passed to every publish.
func (p *Pipeline) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closing {
		return
	}
	p.started = true
	go p.run(ctx)
}

// Submit hands b's units and position to the publishing goroutine, after
// everything submitted before, and leaves b empty for the owner to fill
// again. It waits only while the pending batch is full. It returns the
// pipeline's failure, if publishing failed: then b was not taken.
func (p *Pipeline) Submit(ctx context.Context, b *Batch) error {
	p.Start(ctx)
	for {
		p.mu.Lock()
		switch {
		case p.err != nil:
			err := p.err
			p.mu.Unlock()
			return err
		case p.closing:
			p.mu.Unlock()
			return errPipelineClosed
		case b.Empty():
			p.mu.Unlock()
			return nil
		case p.pending == nil:
			nb := p.spare
			if nb == nil {
				nb = &Batch{}
			}
			p.spare = nil
			*nb, *b = *b, *nb
			p.pending = nb
		case !p.pending.Full():
			p.pending.Merge(b)
			b.Reset()
		default:
			p.mu.Unlock()
			if err := p.wait(ctx); err != nil {
				return err
			}
			continue
		}
		p.mu.Unlock()
		p.poke(p.work)
		return nil
	}
}

// Drain publishes everything submitted (also after a stop) and waits until
// it is durable and acknowledged, or publishing failed (its error).
func (p *Pipeline) Drain(ctx context.Context) error {
	p.mu.Lock()
	p.drain = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.drain = false
		p.mu.Unlock()
	}()
	p.poke(p.work)
	for {
		p.mu.Lock()
		busy := p.err == nil && p.started && !p.closing && (p.pending != nil || p.inFlight)
		err := p.err
		p.mu.Unlock()
		if !busy {
			return err
		}
		if err := p.wait(ctx); err != nil {
			return err
		}
	}
}

// Busy reports whether a batch is pending or in flight.
func (p *Pipeline) Busy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending != nil || p.inFlight
}

// Err is the failure that ended publishing, nil while there is none.
func (p *Pipeline) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Stopped reports whether Stop reported true.
func (p *Pipeline) Stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// Close waits for the batch in flight, publishes the pending one unless
// publishing failed or was stopped, and ends the publishing goroutine.
// Calling it again does nothing.
func (p *Pipeline) Close() {
	p.mu.Lock()
	started, closing := p.started, p.closing
	p.closing = true
	p.mu.Unlock()
	if !started {
		return
	}
	if !closing {
		close(p.quit)
	}
	<-p.done
}

func (p *Pipeline) poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (p *Pipeline) wait(ctx context.Context) error {
	if p.o.Heartbeat == nil {
		select {
		case <-p.progress:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	t := time.NewTicker(p.o.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-p.progress:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			if err := p.o.Heartbeat(ctx); err != nil {
				return err
			}
		}
	}
}

func (p *Pipeline) run(ctx context.Context) {
	defer close(p.done)
	var tick <-chan time.Time
	if p.o.Stop != nil {
		t := time.NewTicker(p.o.StopPoll)
		defer t.Stop()
		tick = t.C
		p.pollStop()
	}
	for {
		select {
		case <-p.work:
			p.publishPending(ctx, false)
		case <-tick:
			p.pollStop()
		case <-p.quit:
			// The owner is done: what it handed over is complete
			// transactions, worth making durable, unless publishing ended.
			p.publishPending(ctx, true)
			p.mu.Lock()
			p.pending = nil
			p.mu.Unlock()
			p.poke(p.progress)
			return
		}
	}
}

// publishPending publishes pending batches until none is left, publishing
// fails, or (unless the owner drains) Stop reported true.
func (p *Pipeline) publishPending(ctx context.Context, closing bool) {
	for {
		p.mu.Lock()
		b := p.pending
		if b == nil || p.err != nil || (p.stopped && (closing || !p.drain)) {
			p.mu.Unlock()
			p.poke(p.progress)
			return
		}
		p.pending, p.inFlight = nil, true
		p.mu.Unlock()
		p.poke(p.progress)

		err := p.o.Publisher.Publish(ctx, b)
		if err == nil && p.o.After != nil {
			err = p.o.After()
		}
		b.Reset()
		p.mu.Lock()
		p.inFlight, p.spare = false, b
		if err != nil {
			p.err = err
		}
		idle := p.pending == nil
		p.mu.Unlock()
		p.poke(p.progress)
		if err != nil {
			p.end(err)
			return
		}
		p.pollStop()
		if idle && p.o.OnIdle != nil {
			p.o.OnIdle()
		}
	}
}

func (p *Pipeline) pollStop() {
	if p.o.Stop == nil {
		return
	}
	p.mu.Lock()
	over := p.stopped || p.err != nil
	p.mu.Unlock()
	if over || !p.o.Stop() {
		return
	}
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.poke(p.progress)
	p.end(ErrStopped)
}

func (p *Pipeline) end(cause error) {
	if p.ended {
		return
	}
	p.ended = true
	if p.o.OnEnd != nil {
		p.o.OnEnd(cause)
	}
}
