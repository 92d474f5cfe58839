package sidecar

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/opts"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/relay/pgoutput"
)

// Options configure a sidecar. Transport, SourceID and SocketPath (or Dial)
// are required; zero values of the rest take the defaults named.
type Options struct {
	// SocketPath is the extension's socket: the trellara.socket_path
	// setting, or <data_directory>/trellara.sock when that is empty
	// (CheckServer resolves it).
	SocketPath string
	// Dial, when set, replaces dialling SocketPath (tests, socket
	// activation). The server accepts only connections whose peer is its
	// own OS user.
	Dial func(ctx context.Context) (net.Conn, error)
	// ServerUID is the OS user the process serving the socket must run as,
	// checked with SO_PEERCRED on every Unix-socket connection before
	// anything is sent or read. 0 means this process's effective uid: the
	// extension serves only its own OS user (the sidecar runs as the
	// server's user, usually postgres), and PostgreSQL never runs as root,
	// so a process of any other uid listening on the path is not the
	// server. Set it when connecting as the server's user by other means.
	ServerUID int

	Transport capture.Transport
	SourceID  string
	// Assembler configures transaction assembly exactly as
	// relay.Options.Assembler does (its SourceID is SourceID): the memory
	// and chunk bounds, the spill directory, the schema pins and the schema
	// policy. The two capture paths must cut and classify transactions
	// identically, so a flow builds both from the same options.
	Assembler capture.AssemblerOptions
	// FrameBytesMax refuses frames (one change: one row with all its
	// values) larger than this; default 64 MiB, at most 1 GiB + 1 MiB.
	FrameBytesMax int64
	// DeadServerTimeout: with no message at all for this long the
	// connection is considered dead and re-established (default 30 s:
	// three of the server's keepalive intervals).
	DeadServerTimeout time.Duration
	// ReconnectBackoffMax caps the wait between reconnect attempts
	// (default 5 s; attempts start at 100 ms and double).
	ReconnectBackoffMax time.Duration

	// Acks, when set, records acknowledged positions that no published
	// unit covers ('P' frames, transactions without rows), so that a
	// restart can tell a slot moved by this sidecar from one moved by
	// something else (GapError). Without it that check is skipped. A flow
	// uses its state directory's capture.FileAcks.
	Acks capture.AckStore
	// GapRecovery is the command a GapError names.
	GapRecovery string

	Logger *slog.Logger
	// Stop is polled after every durable advance and every 100 ms; Run
	// returns nil once it reports true. OnDurable, OnFence and Stop are
	// called from one goroutine (the session's capture.Pipeline), never
	// concurrently.
	Stop      func() bool
	OnDurable func(endLSN uint64)
	OnFence   func(token string, commitLSN uint64)

	// Test hooks: beforeAck runs after a group is durable and before its
	// acknowledgement is sent, and withholds it by returning false (a
	// sidecar dying at that point); onFrame sees every complete frame.
	beforeAck func(lsn uint64) bool
	onFrame   func(frame []byte)
}

// Limits, named so validate and the docs agree.
const (
	frameBytesMaxDefault       = 64 << 20
	frameBytesMaxLimit         = 1<<30 + 1<<20 // a 1 GiB value plus its frame
	deadServerTimeoutDefault   = 30 * time.Second
	deadServerTimeoutMin       = 11 * time.Second // above the 10 s keepalive interval
	reconnectBackoffMaxDefault = 5 * time.Second
	reconnectBackoffStart      = 100 * time.Millisecond
)

// OptionsError names the option New refused and what is allowed.
type OptionsError = opts.Error

// withDefaults fills the zero fields with defaults, then rejects options
// that cannot work with an *OptionsError.
func (o *Options) withDefaults() error {
	if o.FrameBytesMax == 0 {
		o.FrameBytesMax = frameBytesMaxDefault
	}
	if o.DeadServerTimeout == 0 {
		o.DeadServerTimeout = deadServerTimeoutDefault
	}
	if o.ReconnectBackoffMax == 0 {
		o.ReconnectBackoffMax = reconnectBackoffMaxDefault
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.GapRecovery == "" {
		o.GapRecovery = shell.ResnapshotExtension("")
	}
	return opts.Check("sidecar",
		opts.Rule{Field: "Transport", Bad: o.Transport == nil, Reason: "is required"},
		opts.Rule{Field: "SocketPath", Bad: o.SocketPath == "" && o.Dial == nil, Reason: "is required (the trellara.socket_path setting)"},
		opts.Rule{Field: "SourceID", Bad: o.SourceID == "" || len(o.SourceID) > 256, Reason: "must be 1..256 bytes"},
		opts.Rule{Field: "Assembler.MemoryBytesMax", Bad: o.Assembler.MemoryBytesMax < 0, Reason: "must not be negative"},
		opts.Rule{Field: "Assembler.ChunkBytesMax", Bad: o.Assembler.ChunkBytesMax < 0, Reason: "must not be negative"},
		opts.Rule{Field: "FrameBytesMax", Bad: o.FrameBytesMax < chunkBytesMax || o.FrameBytesMax > frameBytesMaxLimit,
			Reason: fmt.Sprintf("must be %d..%d bytes", chunkBytesMax, frameBytesMaxLimit)},
		opts.Rule{Field: "DeadServerTimeout", Bad: o.DeadServerTimeout < deadServerTimeoutMin,
			Reason: fmt.Sprintf("must be at least %s (the server sends a keepalive every 10 s)", deadServerTimeoutMin)},
		opts.Rule{Field: "ReconnectBackoffMax", Bad: o.ReconnectBackoffMax < reconnectBackoffStart, Reason: fmt.Sprintf("must be at least %s", reconnectBackoffStart)},
	)
}

// Stats are a sidecar's counters.
type Stats struct {
	Connections  uint64
	Frames       uint64
	Transactions uint64 // committed transactions received, including skipped ones
	Published    uint64 // units made durable
	Skipped      uint64 // transactions already in the transport (replays)
	Bytes        uint64 // envelope bytes published
	Groups       uint64 // PublishBatch calls (fsyncs)
	Durable      uint64 // highest end LSN of a transaction durable in the transport
	Acked        uint64 // last position acknowledged to the server
	Hello        Hello  // of the current or last connection
	Assembler    capture.AssemblerStats
}

// Sidecar is one sidecar process's capture loop.
type Sidecar struct {
	o   Options
	log *slog.Logger
	pub *capture.Publisher
	c   *client // the current connection's, set before its publisher starts

	mu    sync.Mutex
	stats Stats
}

// New validates o.
func New(o Options) (*Sidecar, error) {
	if err := o.withDefaults(); err != nil {
		return nil, err
	}
	s := &Sidecar{o: o, log: o.Logger}
	po := capture.PublisherOptions{Transport: o.Transport, Name: "sidecar", OnDurable: o.OnDurable, OnFence: o.OnFence,
		Acknowledge: func(_ context.Context, lsn uint64) (bool, error) {
			if s.o.beforeAck != nil && !s.o.beforeAck(lsn) {
				return false, nil
			}
			return true, s.c.ack(lsn)
		}}
	if o.Acks != nil {
		po.Acks = o.Acks
	}
	s.pub = capture.NewPublisher(po, 0, 0)
	return s, nil
}

// Run is New(o) followed by Run.
func Run(ctx context.Context, o Options) error {
	s, err := New(o)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// Stats returns a copy of the counters.
func (s *Sidecar) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	ps := s.pub.Stats()
	st.Published, st.Bytes, st.Groups, st.Durable, st.Acked = ps.Units, ps.Bytes, ps.Groups, ps.Durable, ps.Acked
	return st
}

func (s *Sidecar) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// errStopped is the cause with which the publisher ends a session when Stop
// reports true.
var errStopped = errors.New("sidecar: stop requested")

// Run connects, streams and reconnects until ctx ends (ctx.Err()), Stop
// reports true (nil) or an error that reconnecting cannot cure (malformed
// input, schema drift, a publish failure, a refused connection, a gap).
func (s *Sidecar) Run(ctx context.Context) error {
	backoff := reconnectBackoffStart
	for {
		progressed, err := s.session(ctx)
		if errors.Is(err, errStopped) {
			s.log.Info("sidecar stopped", "acked", envelope.FormatLSN(s.Stats().Acked))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable(err) {
			return err
		}
		if progressed {
			backoff = reconnectBackoffStart
		}
		// Logged here, where it is handled; the error is not returned.
		s.log.Warn("sidecar reconnecting", "err", err, "after", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.o.ReconnectBackoffMax)
	}
}

// DialError is a failed connect to the socket.
type DialError struct {
	Path string
	Err  error
}

func (e *DialError) Error() string {
	hint := ""
	if errors.Is(e.Err, syscall.EACCES) || errors.Is(e.Err, syscall.EPERM) {
		hint = "; the socket is mode 0600: run the sidecar as the PostgreSQL server's OS user (usually postgres)"
	}
	return fmt.Sprintf("sidecar: connect to %s: %v%s", e.Path, e.Err, hint)
}

func (e *DialError) Unwrap() error { return e.Err }

// retryable classifies errors for Run; every branch says why.
func retryable(err error) bool {
	var (
		de *DialError
		ce *ConnectionError
		se *ServerError
	)
	switch {
	case errors.As(err, &de):
		// A missing socket or a refused connect is a server (re)starting
		// or its socket worker restarting; permissions never fix themselves.
		return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EAGAIN)
	case errors.As(err, &ce):
		// The server restarted, crashed or the worker was terminated: it
		// replays from the slot's confirmed position on the next connection.
		return true
	case errors.As(err, &se):
		return se.Retryable()
	}
	// Malformed input, protocol violations, schema drift, publish and
	// progress-store failures and gaps repeat identically on every attempt.
	return false
}

// session is one connection: handshake, then frames until an error. It
// reports whether any frame arrived (the connection was useful, so the
// reconnect backoff restarts).
func (s *Sidecar) session(ctx context.Context) (progressed bool, err error) {
	res, err := capture.ResumeFrom(ctx, s.o.Transport)
	if err != nil {
		return false, fmt.Errorf("sidecar: read the transport's newest unit: %w", err)
	}
	dial := s.o.Dial
	if dial == nil {
		dial = func(ctx context.Context) (net.Conn, error) { return dialUnix(ctx, s.o.SocketPath) }
	}
	dctx, dcancel := context.WithTimeout(ctx, s.o.DeadServerTimeout)
	conn, err := dial(dctx)
	dcancel()
	if err != nil {
		return false, &DialError{Path: s.o.SocketPath, Err: err}
	}
	defer conn.Close()
	rctx, rcancel := context.WithCancelCause(ctx)
	defer rcancel(nil)
	// Ends a read in progress when the session must end. Closing, not a
	// past deadline: the reader refreshes its deadline and could overwrite
	// one.
	defer context.AfterFunc(rctx, func() { _ = conn.Close() })()

	if err := checkPeer(conn, s.o.SocketPath, s.o.ServerUID); err != nil {
		return false, err
	}
	c := newClient(conn, s.o.DeadServerTimeout, s.o.FrameBytesMax)
	hello, err := c.handshake()
	if err != nil {
		return false, err
	}
	s.count(func(st *Stats) { st.Connections++; st.Hello = hello })
	s.log.Info("sidecar connected", "socket", s.o.SocketPath, "server_version", hello.ServerVersionNum,
		"system_identifier", hello.SystemIdentifier, "slot_confirmed", envelope.FormatLSN(hello.SlotConfirmedLSN),
		"transport_durable", envelope.FormatLSN(res.DurableEnd))
	if err := s.checkGap(hello, res); err != nil {
		return false, err
	}

	// A new connection acknowledges again from the start: a slot that
	// lags the transport moves as replays are skipped.
	s.c = c
	s.pub.Restart(res.DurableEnd, 0)
	r := &reader{s: s, c: c, rctx: rctx, res: res, cur: &capture.Batch{}, rels: map[pgoutput.OID]relFrame{}, at: res.DurableEnd}
	ao := s.o.Assembler
	ao.SourceID = s.o.SourceID
	r.asm = capture.NewAssembler(ao, r.emit)
	// The pipeline publishes on its own goroutine, so reading and
	// assembling go on during an fsync. A stop or a publish failure ends
	// the session: closing the connection ends the reader's read.
	r.pl = capture.NewPipeline(capture.PipelineOptions{Publisher: s.pub, Stop: s.o.Stop,
		// Publish, then move: a barrier's pin moves only once the unit
		// that carries it is durable (as the relay does).
		After: func() error { return r.asm.MovePins(s.pub.Acked()) },
		OnEnd: func(cause error) {
			if errors.Is(cause, capture.ErrStopped) {
				cause = errStopped
			}
			rcancel(cause)
		}})
	r.pl.Start(ctx)
	err = r.loop(rctx)
	// The reader is gone: what it handed over is complete transactions,
	// worth making durable unless publishing stopped or failed;
	// acknowledging will usually fail with the connection, which is
	// harmless.
	r.pl.Close()
	r.asm.Close()
	s.count(func(st *Stats) { st.Assembler = r.asm.Stats() })
	// Whichever side ended the session first names the reason: the
	// publisher's cause (stop, publish failure) wins over the reader's
	// resulting "connection closed".
	if cause := context.Cause(rctx); rctx.Err() != nil && ctx.Err() == nil && cause != nil {
		err = cause
	}
	return r.total > 0, err
}

// checkGap refuses a slot confirmed past what the transport and the
// AckStore hold, by the one rule (capture.CheckResume), so the two capture
// paths agree on where a gap starts. Without an AckStore, positions
// acknowledged for 'P' frames are unknown and nothing is checked.
func (s *Sidecar) checkGap(h Hello, res capture.Resume) error {
	if s.o.Acks == nil || res.Empty {
		return nil
	}
	saved, _, err := capture.AckedFor(s.o.Acks, res)
	if err != nil {
		return err
	}
	return capture.CheckResume("of the trellara extension", res, h.SlotConfirmedLSN, saved, s.o.GapRecovery)
}

// relFrame is the last 'R' frame of a relation and its schema.name.
type relFrame struct {
	raw  []byte
	name string
}

// reader turns frames into units on the connection's goroutine.
type reader struct {
	s    *Sidecar
	c    *client
	rctx context.Context // the session's: ends when the pipeline stops or fails
	pl   *capture.Pipeline
	asm  *capture.Assembler
	res  capture.Resume

	cur    *capture.Batch
	dec    frameDecoder // its messages are valid until the next frame
	rels   map[pgoutput.OID]relFrame
	at     uint64 // open transaction's commit LSN, else last end LSN
	frames uint64 // since the last commit, for Stats
	total  uint64 // this connection
}

func (r *reader) loop(ctx context.Context) error {
	for {
		m, err := r.c.next(r.at)
		if err != nil {
			return err
		}
		if m.typ != msgFrame {
			continue // keepalive: liveness only; acks follow durability, not the server
		}
		r.frames++
		r.total++
		if r.s.o.onFrame != nil {
			r.s.o.onFrame(m.frame)
		}
		if err := r.frame(ctx, m.frame); err != nil {
			return err
		}
	}
}

func (r *reader) frame(ctx context.Context, f []byte) error {
	if len(f) > 6 && f[0] == FrameVersion && f[1] == frameRelation {
		// The extension re-sends a relation's 'R' frame after any
		// invalidation, often unchanged; the assembler would rebuild and
		// re-fingerprint identical metadata only to ignore it.
		// Byte-identical to the last one for this relation: nothing new.
		if rf, ok := r.rels[pgoutput.OID(binary.BigEndian.Uint32(f[2:]))]; ok && bytes.Equal(rf.raw, f) {
			return nil
		}
	}
	// The message and its column slices are the decoder's, and its values
	// alias f, the client's read buffer: both are overwritten by the next
	// frame. The assembler copies what it keeps (values, the relation).
	msg, err := r.dec.decode(f, r.at)
	if err != nil {
		return err
	}
	switch m := msg.(type) {
	case *Progress:
		if !r.asm.Idle() {
			return &ProtocolError{LSN: r.at, Reason: fmt.Sprintf("progress frame %s inside an open transaction", m.LSN)}
		}
		r.cur.Ack = max(r.cur.Ack, uint64(m.LSN))
		return r.submit(ctx)
	case *pgoutput.Begin:
		r.at = uint64(m.FinalLSN)
	case *pgoutput.Relation:
		if err := r.asm.Handle(m, pgoutput.LSN(r.at)); err != nil {
			return err
		}
		// Only once the assembler has accepted it may the cache short-cut
		// it; a rejected one must be rejected every time. A copy: f is
		// the read buffer.
		ns := m.Namespace
		if ns == "" {
			ns = "pg_catalog"
		}
		r.rels[m.RelationID] = relFrame{raw: append([]byte(nil), f...), name: ns + "." + m.Name}
		return nil
	case *pgoutput.Delete:
		if m.OldKind == pgoutput.TupleNone {
			return &UnsupportedChangeError{Relation: r.relName(m.RelationID), LSN: r.at,
				Reason: "a DELETE without an old tuple (the table has no replica identity)"}
		}
	}
	if err = r.asm.Handle(msg, pgoutput.LSN(r.at)); err != nil {
		return err
	}
	if c, ok := msg.(*pgoutput.Commit); ok {
		r.at = uint64(c.EndLSN)
		r.s.count(func(st *Stats) { st.Frames += r.frames; st.Transactions++ })
		r.frames = 0
		return r.submit(ctx)
	}
	return nil
}

func (r *reader) relName(id pgoutput.OID) string {
	if rf, ok := r.rels[id]; ok {
		return rf.name
	}
	return fmt.Sprintf("relation OID %d", id)
}

// emit receives the assembler's units (see capture.Emit).
func (r *reader) emit(e *pb.Envelope, endLSN uint64, final bool) error {
	skipped, err := r.cur.Add(r.res, e, endLSN, final)
	if err != nil {
		return err
	}
	if skipped && final {
		r.s.count(func(st *Stats) { st.Skipped++ })
	}
	if r.cur.Full() {
		// Mid-transaction for a CHUNK sequence: its units become durable
		// now, its end only becomes acknowledgeable with its last unit.
		return r.submit(r.rctx)
	}
	return nil
}

// submit hands what the reader has assembled to the pipeline, which
// publishes it once the group in flight is durable; it waits only while the
// pipeline's pending group is full. Groups grow to what arrives during one
// publish: group commit without a timer, and a quiet stream is published
// at once.
func (r *reader) submit(ctx context.Context) error {
	return r.pl.Submit(ctx, r.cur)
}
