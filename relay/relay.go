package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/opts"
	"github.com/trellara/trellara/relay/pgoutput"
)

// The capture core (package capture) holds what the relay shares with the
// extension's sidecar; these names keep the relay's API.
const FencePrefix = envelope.FencePrefix

type (
	Transport = capture.Transport
	Resume    = capture.Resume
	GapError  = capture.GapError
)

// AfterSnapshot is capture.AfterSnapshot.
func AfterSnapshot(cp uint64) Resume { return capture.AfterSnapshot(cp) }

// ResumeFrom is capture.ResumeFrom.
func ResumeFrom(ctx context.Context, tr Transport) (Resume, error) {
	return capture.ResumeFrom(ctx, tr)
}

// CheckResume is capture.CheckResume.
func CheckResume(slot string, res Resume, slotConfirmed, acked uint64, recovery string) error {
	return capture.CheckResume(slot, res, slotConfirmed, acked, recovery)
}

// Options configure one relay session.
type Options struct {
	SourceID        string
	Slot            string
	Publication     string
	ProtocolVersion int  // 2 (default) or 1
	Streaming       bool // requires protocol version 2
	// StatusInterval is how often a standby status update is sent even
	// when the server does not ask; it also asks the server for a reply so
	// an idle slot advances (see Run).
	StatusInterval time.Duration
	Assembler      capture.AssemblerOptions
	Logger         *slog.Logger
	// OnFence is called after a fence transaction is durable.
	OnFence func(token string, commitLSN uint64)
	// OnDurable is called after every acknowledgeable position advance.
	OnDurable func(endLSN uint64)
	// Stop, when non-nil, is polled after each durable advance and every
	// 100 ms; Run publishes what it assembled and returns nil once it
	// reports true. OnFence, OnDurable and Stop are called from one
	// goroutine (the session's publisher), never concurrently.
	Stop func() bool
	// Acks, when set, durably records a position the session is about to
	// acknowledge although no unit in the transport ends there (an idle
	// keepalive advance, a transaction without rows). CheckResume takes it
	// into account, so a restart does not mistake that advance for a gap.
	Acks capture.AckStore
}

// Stats are the session's counters.
type Stats struct {
	Published   uint64 // units made durable
	Skipped     uint64 // transactions already in the transport
	Bytes       uint64
	DurableEnd  uint64 // last position acknowledged
	ServerEnd   uint64 // last server WAL end seen
	Assembler   capture.AssemblerStats
	LastCommit  time.Time
	StartedFrom uint64
}

// Session is one replication session over a replication connection.
type Session struct {
	cfg      Options
	conn     *pgconn.PgConn
	asm      *capture.Assembler
	dec      pgoutput.Decoder
	res      Resume
	log      *slog.Logger
	pub      *capture.Publisher
	pl       *capture.Pipeline // publishes pub's batches while the session receives
	rd       *readDeadline     // Run's; the publisher wakes a read in progress through it
	sent     uint64            // last position sent to the server
	statusAt time.Time         // when the last standby status update was sent (keepAlive)
	idleAt   time.Time         // when a keepalive last moved the acknowledgeable position (idleAckEvery)

	pending bool // a multi-unit transaction is partly assembled
	// Units assembled but not yet submitted. They are handed to the
	// pipeline when the connection has nothing more buffered, or a bound
	// is reached, and published together (one fsync for many
	// transactions); only once they are durable does their position
	// become acknowledgeable.
	cur capture.Batch

	mu    sync.Mutex // guards stats for Stats callers on other goroutines
	stats Stats
}

// OptionsError names the option NewSession refused and what is allowed.
type OptionsError = opts.Error

// withDefaults fills the zero fields with defaults, then rejects options
// that cannot work with an *OptionsError.
func (o Options) withDefaults() (Options, error) {
	if o.ProtocolVersion == 0 {
		o.ProtocolVersion = 2
	}
	if o.StatusInterval == 0 {
		o.StatusInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, opts.Check("relay",
		opts.Rule{Field: "SourceID", Bad: o.SourceID == "" || len(o.SourceID) > 256, Reason: "must be 1..256 bytes (the config's source.id)"},
		opts.Rule{Field: "Slot", Bad: o.Slot == "", Reason: "is required (the config's source.slot)"},
		opts.Rule{Field: "ProtocolVersion", Bad: o.ProtocolVersion < 1 || o.ProtocolVersion > 4,
			Reason: fmt.Sprintf("is %d; pgoutput speaks 1..4", o.ProtocolVersion)},
		opts.Rule{Field: "Streaming", Bad: o.Streaming && o.ProtocolVersion < 2,
			Reason: fmt.Sprintf("needs ProtocolVersion 2 or later, not %d", o.ProtocolVersion)},
		opts.Rule{Field: "StatusInterval", Bad: o.StatusInterval < 0, Reason: "is negative"},
	)
}

// NewSession prepares a session; conn must be a replication=database
// connection (nil for a driver that feeds it through the seams in
// sim_seams.go).
func NewSession(conn *pgconn.PgConn, tr Transport, res Resume, cfg Options) (*Session, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Assembler.SourceID = cfg.SourceID
	s := &Session{cfg: cfg, conn: conn, res: res, log: cfg.Logger}
	s.pub = capture.NewPublisher(capture.PublisherOptions{Transport: tr, Name: "relay", Acks: cfg.Acks,
		OnDurable: cfg.OnDurable, OnFence: cfg.OnFence}, res.DurableEnd, res.DurableEnd)
	s.asm = capture.NewAssembler(cfg.Assembler, s.emit)
	s.pl = capture.NewPipeline(capture.PipelineOptions{Publisher: s.pub, Stop: cfg.Stop,
		// Publish, then move: a barrier's pin moves only once the unit
		// that carries it is durable (or was already, and skipped).
		After: func() error { return s.asm.MovePins(s.pub.Acked()) },
		// A failure or a stop ends the session, and a finished publish
		// lets the batch that grew meanwhile go: a read in progress must
		// not wait for the next message to notice.
		OnEnd:  func(error) { s.wake() },
		OnIdle: s.wake,
		// Waiting for a publish (a full pending batch, a drain) must not
		// silence the session: keepAlive sends a status when one is due.
		Heartbeat: s.keepAlive, HeartbeatEvery: cfg.StatusInterval / 2})
	s.stats.StartedFrom = res.DurableEnd
	return s, nil
}

// Stats returns a copy of the counters.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	ps := s.pub.Stats()
	st.Published, st.Bytes, st.DurableEnd = ps.Units, ps.Bytes, ps.Acked
	return st
}

func (s *Session) ackable() uint64 { return s.pub.Acked() }

// wake ends Run's read in progress (called by the pipeline).
func (s *Session) wake() {
	if s.rd != nil {
		s.rd.wake()
	}
}

// due reports whether the assembled batch should be submitted once the
// connection has nothing more buffered: units or a position wait and no
// publish is in flight. While one is, the batch grows: the fsync in flight
// is the group-commit window, and the pipeline wakes the session when it
// ends (OnIdle).
func (s *Session) due() bool { return s.waiting() && !s.pl.Busy() }

// waiting reports whether units or a position wait to be submitted.
func (s *Session) waiting() bool { return len(s.cur.Units) > 0 || s.cur.Ack > s.ackable() }

func (s *Session) emit(e *pb.Envelope, endLSN uint64, final bool) error {
	if err := s.keepAlive(context.Background()); err != nil {
		return err
	}
	skipped, err := s.cur.Add(s.res, e, endLSN, final)
	if err != nil {
		return err
	}
	if skipped {
		if final {
			s.mu.Lock()
			s.stats.Skipped++
			s.mu.Unlock()
		}
		return nil
	}
	if e != nil {
		s.mu.Lock()
		s.stats.LastCommit = time.UnixMicro(e.CommitTimeUnixMicros)
		s.mu.Unlock()
	}
	s.pending = !final
	if s.cur.Full() || (len(s.cur.Units) == 0 && final) {
		// Full, or nothing to publish (an empty transaction): its end is
		// acknowledgeable as soon as everything before it is durable.
		return s.submit(context.Background())
	}
	return nil
}

// idleAckEvery is how often at most a keepalive moves the acknowledgeable
// position of an idle session. No unit ends there, so each move is a
// durable write of the flow's acknowledgement store (Options.Acks: a file
// and two fsyncs) before the publish that acknowledges it. A source whose
// WAL grows outside the publication (other tables, other databases, the
// server's own records) sends a keepalive each time the walsender catches
// up with it, hundreds a second: acknowledging each cost a fsync apiece
// and held the publishing goroutine. Once a second still keeps an idle
// slot from holding WAL.
const idleAckEvery = time.Second

// idleAckDue reports whether a keepalive may move the acknowledgeable
// position now, and if so takes the turn. A session without a connection
// (a driver of the seams in sim_seams.go, which decides when keepalives
// arrive) always may.
func (s *Session) idleAckDue() bool {
	if s.conn == nil {
		return true
	}
	now := time.Now()
	if now.Sub(s.idleAt) < idleAckEvery {
		return false
	}
	s.idleAt = now
	return true
}

// keepAlive sends a standby status update when a status interval has
// passed since the last one. Run's loop sends them between messages; while
// one large transaction is assembled and published (a CHUNK sequence) it
// gets no turn, and the server hangs up on a client silent for
// wal_sender_timeout, however busy it is. The position is the
// acknowledged one, which a transaction in progress does not move.
func (s *Session) keepAlive(ctx context.Context) error {
	if s.conn == nil || time.Since(s.statusAt) <= s.cfg.StatusInterval {
		return nil
	}
	return s.sendStatus(ctx, false)
}

// submit hands the assembled batch to the pipeline, which makes it durable
// after everything submitted before, and only then advances the
// acknowledgeable position (Acked); on a publish failure nothing is
// acknowledged and the source resends all of it. A session without a
// connection (driven through sim_seams.go) waits for the publish, so its
// driver decides the order of everything, as with a synchronous publish.
func (s *Session) submit(ctx context.Context) error {
	if err := s.keepAlive(ctx); err != nil {
		return err
	}
	published := len(s.cur.Units) > 0
	if err := s.pl.Submit(ctx, &s.cur); err != nil {
		return err
	}
	if s.conn == nil {
		if err := s.pl.Drain(ctx); err != nil {
			return err
		}
	}
	if published {
		s.mu.Lock()
		s.stats.Assembler = s.asm.Stats()
		s.mu.Unlock()
	}
	return nil
}

// flush submits the assembled batch and waits until everything submitted
// is durable and acknowledgeable.
func (s *Session) flush(ctx context.Context) error {
	if err := s.submit(ctx); err != nil {
		return err
	}
	if err := s.pl.Drain(ctx); err != nil {
		return err
	}
	return s.keepAlive(ctx)
}

// PluginArgs are the pgoutput options for cfg.
func PluginArgs(cfg Options) []string {
	args := []string{
		fmt.Sprintf("proto_version '%d'", cfg.ProtocolVersion),
		fmt.Sprintf("publication_names '%s'", strings.ReplaceAll(quoteIdent(cfg.Publication), "'", "''")),
		"messages 'true'",
	}
	if cfg.Streaming {
		args = append(args, "streaming 'on'")
	}
	return args
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Run streams from the slot until ctx ends, Stop reports true, or an error.
// The invariant it keeps: the flush position sent to the server never
// passes a transaction that is not durable in the transport.
//
// Receiving, decoding and assembling go on while a batch is published: the
// session hands what it assembled to its pipeline (capture.Pipeline) as
// soon as the connection has nothing more buffered, and the pipeline
// publishes it once the batch in flight is durable. The fsync in flight is
// the group-commit window; no timer delays a publish.
func (s *Session) Run(ctx context.Context) error {
	defer func() {
		s.mu.Lock()
		s.stats.Assembler = s.asm.Stats()
		s.mu.Unlock()
		s.Close()
	}()
	start := pglogrepl.LSN(s.res.DurableEnd)
	if err := pglogrepl.StartReplication(ctx, s.conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: PluginArgs(s.cfg)}); err != nil {
		return fmt.Errorf("relay: START_REPLICATION slot %s at %s: %w", s.cfg.Slot, start, err)
	}
	s.log.Info("relay streaming", "slot", s.cfg.Slot, "from", start.String(), "proto_version", s.cfg.ProtocolVersion, "streaming", s.cfg.Streaming)
	next := time.Now().Add(s.cfg.StatusInterval)
	s.rd = newReadDeadline(ctx, s.conn)
	// The pipeline ends (waiting for the publish in flight) before the
	// connection's read deadline is cleared: its OnEnd moves the deadline.
	defer s.rd.close()
	defer s.pl.Close()
	s.pl.Start(ctx)
	for {
		if s.pl.Stopped() {
			if err := s.flush(ctx); err != nil {
				return err
			}
			return s.sendStatus(ctx, false)
		}
		if err := s.pl.Err(); err != nil {
			// Not acknowledged: the source will resend all of it.
			return err
		}
		if time.Now().After(next) {
			if err := s.submit(ctx); err != nil {
				return err
			}
			// Ask for a reply: the server answers with a keepalive carrying
			// its decoded position, which lets an idle slot advance.
			if err := s.sendStatus(ctx, true); err != nil {
				return err
			}
			next = time.Now().Add(s.cfg.StatusInterval)
		}
		deadline := next
		if s.due() {
			// Units wait and nothing is in flight: take only what the
			// connection has already buffered, and submit them once a
			// receive would block.
			deadline = bufferedOnly
		}
		raw, err := s.rd.receive(ctx, deadline)
		if err != nil {
			if ctx.Err() != nil {
				// Wait for the publish in flight, so that the status sent
				// carries what it made durable.
				s.pl.Close()
				_ = s.sendStatus(context.Background(), false)
				return ctx.Err()
			}
			// errors.Is, not pgconn.Timeout: it allocates, and this is the
			// path of every submit.
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, errWoken) {
				if s.due() {
					if err := s.submit(ctx); err != nil {
						return err
					}
				}
				continue
			}
			return fmt.Errorf("relay: receive from slot %s: %w", s.cfg.Slot, err)
		}
		switch msg := raw.(type) {
		case *pgproto3.CopyData:
			if err := s.handleCopyData(ctx, msg.Data); err != nil {
				var drift *capture.SchemaDriftError
				if errors.As(err, &drift) {
					// Capture stops at the drifting change, but the whole
					// transactions assembled before it are good: publish
					// and acknowledge them instead of leaving them for a
					// restart that would stop at the same drift again.
					if ferr := s.flush(ctx); ferr == nil {
						_ = s.sendStatus(ctx, false)
					}
				}
				return err
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("relay: slot %s: %w", s.cfg.Slot, pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return fmt.Errorf("relay: server ended replication on slot %s", s.cfg.Slot)
		}
	}
}

func (s *Session) handleCopyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("relay: empty CopyData on slot %s", s.cfg.Slot)
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("relay: keepalive: %w", err)
		}
		s.mu.Lock()
		s.stats.ServerEnd = uint64(k.ServerWALEnd)
		s.mu.Unlock()
		// Nothing open, nothing waiting and nothing in flight: every change
		// the server decoded up to its WAL end has been made durable, so
		// confirming that position loses nothing and keeps an idle slot
		// from holding WAL (the server resends anything not yet decoded).
		if k.ReplyRequested {
			if err := s.submit(ctx); err != nil {
				return err
			}
		}
		if s.asm.Idle() && !s.pending && !s.waiting() && !s.pl.Busy() && s.idleAckDue() {
			s.cur.Ack = max(s.cur.Ack, uint64(k.ServerWALEnd))
			if err := s.submit(ctx); err != nil {
				return err
			}
		}
		if k.ReplyRequested {
			return s.sendStatus(ctx, false)
		}
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("relay: XLogData: %w", err)
		}
		m, err := s.dec.Decode(x.WALData, x.WALStart)
		if err != nil {
			return err
		}
		if err := s.asm.Handle(m, x.WALStart); err != nil {
			return err
		}
	}
	return nil
}

func (s *Session) sendStatus(ctx context.Context, reply bool) error {
	pos := pglogrepl.LSN(s.ackable())
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos,
		ClientTime: time.Now(), ReplyRequested: reply})
	if err != nil {
		return fmt.Errorf("relay: standby status to slot %s at %s: %w", s.cfg.Slot, pos, err)
	}
	s.sent, s.statusAt = uint64(pos), time.Now()
	return nil
}

// Acknowledged is the last position sent to the server as flushed.
func (s *Session) Acknowledged() uint64 { return s.sent }
