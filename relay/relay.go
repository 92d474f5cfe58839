package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay/pgoutput"
)

// FencePrefix is the logical-message prefix of a fence: a transactional
// pg_logical_emit_message Trellara writes to mark "everything committed
// before this point". A fence travels the whole path as an ordinary
// transaction, so a target checkpoint at or past it proves the target has
// seen everything the source committed before it was written.
const FencePrefix = "trellara.fence"

// Transport is where the relay publishes. Publish returns only once the
// payload is durable: that is the relay's licence to acknowledge the source.
type Transport interface {
	Publish(ctx context.Context, payload []byte) (offset uint64, err error)
	// PublishBatch makes every payload durable together (one fsync or one
	// produce round), returning once all are durable.
	PublishBatch(ctx context.Context, payloads [][]byte) error
	// Last returns the newest durable payload, ok false when empty.
	Last(ctx context.Context) (payload []byte, ok bool, err error)
}

// Config configures one relay session.
type Config struct {
	SourceID        string
	Slot            string
	Publication     string
	ProtocolVersion int  // 2 (default) or 1
	Streaming       bool // requires protocol version 2
	// StatusInterval is how often a standby status update is sent even
	// when the server does not ask; it also asks the server for a reply so
	// an idle slot advances (see Run).
	StatusInterval time.Duration
	Assembler      AssemblerOptions
	Logger         *slog.Logger
	// OnFence is called after a fence transaction is durable.
	OnFence func(token string, commitLSN uint64)
	// OnDurable is called after every acknowledgeable position advance.
	OnDurable func(endLSN uint64)
	// Stop, when non-nil, is polled after each durable advance; Run
	// returns nil once it reports true.
	Stop func() bool
	// RecordIdleAck, when set, durably records a position the session is
	// about to acknowledge although no unit in the transport ends there
	// (an idle keepalive advance). CheckResume takes it into account, so a
	// restart does not mistake that advance for a gap.
	RecordIdleAck func(lsn uint64) error
}

// Resume is where a relay session starts, derived from the transport.
//
// The LSN rule everything here follows: a transaction's commit LSN is where
// its commit record starts and its end LSN where that record ends, which is
// where the next record starts (back-to-back commits: one transaction's end
// LSN is the next one's commit LSN). A slot confirmed at position P has the
// server resend, after a restart, every transaction whose commit LSN is ≥ P
// (logical decoding skips a commit record only when it starts before P).
type Resume struct {
	// DurableEnd is the highest position the source may be acknowledged
	// at without losing a transaction the transport does not hold whole:
	// the end LSN of the newest complete transaction, or the commit LSN of
	// a trailing partial one (the server resends a transaction committing
	// at the confirmed position).
	DurableEnd uint64
	// SkipThrough: transactions with commit LSN ≤ SkipThrough are already
	// in the transport (or, with SkipEqual false, < SkipThrough).
	SkipThrough uint64
	SkipEqual   bool
	Empty       bool
}

// AfterSnapshot is where streaming resumes after a snapshot taken at the
// slot's consistent point cp. A transaction whose commit record starts
// exactly at cp is not in the snapshot (the exported snapshot sees only
// what committed before cp) and the server does send it: only commits
// strictly before cp are skipped.
func AfterSnapshot(cp uint64) Resume {
	return Resume{DurableEnd: cp, SkipThrough: cp, SkipEqual: false}
}

// ResumeFrom reads the transport's newest unit. A trailing incomplete chunk
// sequence (a crash between chunks) means that transaction is not durable:
// it will be published again, whole, and readers discard the partial copy.
// The slot may have been acknowledged through the transaction before it,
// whose end LSN can equal this one's commit LSN: the position this one
// commits at is still safe, since the server resends it from there.
func ResumeFrom(ctx context.Context, tr Transport) (Resume, error) {
	b, ok, err := tr.Last(ctx)
	if err != nil {
		return Resume{}, err
	}
	if !ok {
		return Resume{Empty: true}, nil
	}
	e, err := envelope.Decode(b)
	if err != nil {
		return Resume{}, fmt.Errorf("relay: newest transport entry: %w", err)
	}
	b0 := e.GetBoundary()
	switch {
	case b0.GetKind() == pb.UnitKind_UNIT_KIND_CHUNK && b0.ChunkIndex+1 < b0.ChunkCount:
		// Everything before this transaction is complete; it is not. A
		// slot confirmed at its commit LSN resends it; one confirmed past
		// it never will (CheckResume refuses that).
		return Resume{DurableEnd: e.CommitLsn, SkipThrough: e.CommitLsn, SkipEqual: false}, nil
	case b0.GetKind() == pb.UnitKind_UNIT_KIND_SNAPSHOT || b0.GetKind() == pb.UnitKind_UNIT_KIND_SNAPSHOT_END:
		// Snapshot units sit at the consistent point: nothing streamed yet.
		return AfterSnapshot(e.CommitLsn), nil
	default:
		return Resume{DurableEnd: e.EndLsn, SkipThrough: e.CommitLsn, SkipEqual: true}, nil
	}
}

// CheckResume refuses a resume that would skip committed transactions: the
// slot confirmed beyond both res.DurableEnd and the last recorded idle
// acknowledgement. recovery is named in the error. The relay and the
// extension's sidecar both decide with it.
func CheckResume(slot string, res Resume, slotConfirmed, idleAck uint64, recovery string) error {
	if res.Empty {
		return nil
	}
	durable := max(res.DurableEnd, idleAck)
	if slotConfirmed > durable {
		return &GapError{Slot: slot, SlotConfirmedLSN: slotConfirmed, TransportDurable: durable, RecoveryCommand: recovery}
	}
	return nil
}

// Stats are the session's counters.
type Stats struct {
	Published   uint64 // units made durable
	Skipped     uint64 // transactions already in the transport
	Bytes       uint64
	DurableEnd  uint64 // last position acknowledged
	ServerEnd   uint64 // last server WAL end seen
	Assembler   AssemblerStats
	LastCommit  time.Time
	StartedFrom uint64
}

// Session is one replication session over a replication connection.
type Session struct {
	cfg   Config
	conn  *pgconn.PgConn
	tr    Transport
	asm   *Assembler
	dec   pgoutput.Decoder
	res   Resume
	stats Stats
	log   *slog.Logger

	ackable uint64 // highest position safe to acknowledge
	sent    uint64 // last position sent to the server
	pending bool   // a multi-unit transaction is partly assembled

	// Units assembled but not yet durable. They are published together
	// (one fsync for many transactions) when the connection has nothing
	// more buffered, or a bound is reached; only then does batchAck
	// become acknowledgeable.
	batch      [][]byte
	batchBytes int
	batchAck   uint64
	unitEnd    uint64 // end LSN of the newest transaction unit assembled
	fences     []fence

	mu sync.Mutex // guards stats and ackable for Stats callers on other goroutines
}

type fence struct {
	token     string
	commitLSN uint64
}

// Publish-batch bounds: enough to amortise an fsync over many small
// transactions, small enough to bound memory and acknowledgement delay.
const (
	batchUnitsMax = 4096
	batchBytesMax = 8 << 20
)

// NewSession prepares a session; conn must be a replication=database
// connection.
func NewSession(conn *pgconn.PgConn, tr Transport, res Resume, cfg Config) *Session {
	if cfg.ProtocolVersion == 0 {
		cfg.ProtocolVersion = 2
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Assembler.SourceID = cfg.SourceID
	s := &Session{cfg: cfg, conn: conn, tr: tr, res: res, log: cfg.Logger, ackable: res.DurableEnd}
	s.asm = NewAssembler(cfg.Assembler, s.emit)
	s.stats.StartedFrom = res.DurableEnd
	return s
}

// Stats returns a copy of the counters.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.DurableEnd = s.ackable
	return st
}

func (s *Session) emit(e *pb.Envelope, endLSN uint64, final bool) error {
	if e != nil {
		if e.CommitLsn < s.res.SkipThrough || (s.res.SkipEqual && e.CommitLsn == s.res.SkipThrough) {
			if final {
				s.mu.Lock()
				s.stats.Skipped++
				s.mu.Unlock()
			}
			return nil
		}
		b, err := envelope.Encode(e)
		if err != nil {
			return fmt.Errorf("relay: encode transaction xid %d at %s: %w", e.Xid, envelope.FormatLSN(e.CommitLsn), err)
		}
		s.batch = append(s.batch, b)
		s.batchBytes += len(b)
		s.mu.Lock()
		s.stats.LastCommit = time.UnixMicro(e.CommitTimeUnixMicros)
		s.mu.Unlock()
		if final {
			for _, r := range e.Rows {
				if r.Op == pb.Op_OP_MESSAGE && r.MessagePrefix == FencePrefix {
					s.fences = append(s.fences, fence{string(r.MessageContent), e.CommitLsn})
				}
			}
		}
	}
	s.pending = !final
	if final && e != nil && endLSN > s.unitEnd {
		s.unitEnd = endLSN
	}
	if final && endLSN > s.batchAck {
		s.batchAck = endLSN
	}
	if len(s.batch) >= batchUnitsMax || s.batchBytes >= batchBytesMax {
		return s.flush(context.Background())
	}
	if len(s.batch) == 0 && final && !s.pending {
		// Nothing to publish (an empty or skipped transaction): its end
		// is acknowledgeable as soon as everything before it is durable.
		return s.advance(s.batchAck)
	}
	return nil
}

// flush makes the batch durable, then — only then — advances the
// acknowledgeable position.
func (s *Session) flush(ctx context.Context) error {
	if len(s.batch) > 0 {
		if err := s.tr.PublishBatch(ctx, s.batch); err != nil {
			// Not acknowledged: the source will resend all of it.
			return fmt.Errorf("relay: publish %d units ending before %s: %w", len(s.batch), envelope.FormatLSN(s.batchAck), err)
		}
		s.mu.Lock()
		s.stats.Published += uint64(len(s.batch))
		s.stats.Bytes += uint64(s.batchBytes)
		s.stats.Assembler = s.asm.Stats()
		s.mu.Unlock()
		s.batch, s.batchBytes = s.batch[:0], 0
	}
	fences := s.fences
	s.fences = nil
	if err := s.advance(s.batchAck); err != nil {
		return err
	}
	for _, f := range fences {
		if s.cfg.OnFence != nil {
			s.cfg.OnFence(f.token, f.commitLSN)
		}
	}
	return nil
}

func (s *Session) advance(to uint64) error {
	if to <= s.ackable {
		return nil
	}
	if to > s.unitEnd && s.cfg.RecordIdleAck != nil {
		// No unit in the transport ends here (empty transactions, an idle
		// keepalive): record the position durably before it can reach
		// the server, so a restart can tell it from a gap.
		if err := s.cfg.RecordIdleAck(to); err != nil {
			return fmt.Errorf("relay: record acknowledgement at %s: %w", envelope.FormatLSN(to), err)
		}
	}
	s.mu.Lock()
	s.ackable = to
	s.mu.Unlock()
	if s.cfg.OnDurable != nil {
		s.cfg.OnDurable(s.ackable)
	}
	return nil
}

// PluginArgs are the pgoutput options for cfg.
func PluginArgs(cfg Config) []string {
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
func (s *Session) Run(ctx context.Context) error {
	defer func() {
		s.mu.Lock()
		s.stats.Assembler = s.asm.Stats()
		s.mu.Unlock()
		s.asm.Close()
	}()
	start := pglogrepl.LSN(s.res.DurableEnd)
	if err := pglogrepl.StartReplication(ctx, s.conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: PluginArgs(s.cfg)}); err != nil {
		return fmt.Errorf("relay: START_REPLICATION slot %s at %s: %w", s.cfg.Slot, start, err)
	}
	s.log.Info("relay streaming", "slot", s.cfg.Slot, "from", start.String(), "proto_version", s.cfg.ProtocolVersion, "streaming", s.cfg.Streaming)
	next := time.Now().Add(s.cfg.StatusInterval)
	for {
		if s.cfg.Stop != nil && s.cfg.Stop() {
			if err := s.flush(ctx); err != nil {
				return err
			}
			return s.sendStatus(ctx, false)
		}
		if time.Now().After(next) {
			if err := s.flush(ctx); err != nil {
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
		if len(s.batch) > 0 || s.batchAck > s.ackable {
			// Units are waiting to be made durable: if the server has
			// nothing more for us right now, publish them.
			deadline = time.Now().Add(time.Millisecond)
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		raw, err := s.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				_ = s.sendStatus(context.Background(), false)
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				if len(s.batch) > 0 || s.batchAck > s.ackable {
					if err := s.flush(ctx); err != nil {
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
				var drift *SchemaDriftError
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
		// Nothing open and nothing half-published: every change the server
		// decoded up to its WAL end has been made durable, so confirming
		// that position loses nothing and keeps an idle slot from holding
		// WAL (the server resends anything not yet decoded).
		if k.ReplyRequested {
			if err := s.flush(ctx); err != nil {
				return err
			}
		}
		if s.asm.Idle() && !s.pending && len(s.batch) == 0 && s.batchAck <= s.ackable {
			if err := s.advance(uint64(k.ServerWALEnd)); err != nil {
				return err
			}
			s.batchAck = max(s.batchAck, s.ackable)
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
	pos := pglogrepl.LSN(s.ackable)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos,
		ClientTime: time.Now(), ReplyRequested: reply})
	if err != nil {
		return fmt.Errorf("relay: standby status to slot %s at %s: %w", s.cfg.Slot, pos, err)
	}
	s.sent = s.ackable
	return nil
}

// Acknowledged is the last position sent to the server as flushed.
func (s *Session) Acknowledged() uint64 { return s.sent }
