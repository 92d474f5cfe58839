package flow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/obs"
	"github.com/trellara/trellara/internal/verify"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

// A flow is at rest or in motion (STYLE.md, rule 14). It is in motion
// while a pipeline holds it: a service (`trellara run`, its relay or
// sidecar role), a bounded run, or a command of this process that moves
// the stream itself (withPipeline). The one test is the flow's lock, the
// local log's writer lock (segmentlog: one writer per log, held by the
// process that captures): a flow whose lock this process can take is at
// rest, and stays so while it holds it. A slot's active flag is not the
// test: a walsender outlives its client by a moment, and the extension's
// decoder holds its slot whether or not a sidecar runs.
//
// A Kafka flow has no local lock: there, the pgoutput slot's active flag
// is all there is (its capture refuses an active slot, so two pipelines
// cannot both capture).

// brokerAtRest reports whether a Kafka flow is at rest: its slot is not
// active (or does not exist).
func (f *Flow) brokerAtRest(ctx context.Context, src *pgx.Conn) (bool, error) {
	si, err := relay.LookupSlot(ctx, src, f.Cfg.Source.Slot)
	if err != nil {
		return false, err
	}
	return !si.Active, nil
}

// restLock is the flow's lock, taken because no pipeline held the flow.
type restLock struct {
	f      *Flow
	opened bool      // this lock opened f.Log (and closes it on release)
	flock  io.Closer // the writer lock held without a writer (read-only)
}

// release gives the lock back: the flow is at rest and any pipeline may
// take it.
func (l *restLock) release() {
	if l.opened && l.f.Log != nil {
		_ = l.f.Log.Close()
		l.f.Log = nil
	}
	if l.flock != nil {
		_ = l.flock.Close()
	}
}

// errInMotion: a pipeline holds the flow's lock.
var errInMotion = errors.New("a pipeline holds the flow")

// lockAtRest takes the flow's lock when no pipeline holds it. It returns
// errInMotion when one does (another process holds the local log, or this
// process is running the flow's pipeline), and (nil, nil) for a flow that
// has no lock to take: a Kafka flow, or a local flow whose log directory
// does not exist yet (it has never run here, so nothing holds it; the
// directory is not created by a command that only reads).
//
// With write the log is opened as its writer (the pipeline will append);
// without, the writer lock is held with no writer and the log is opened
// read-only, so a command that only reads (verify) changes no byte of it.
func (f *Flow) lockAtRest(write bool) (*restLock, error) {
	if f.moving.Load() > 0 {
		return nil, errInMotion
	}
	if f.broker != nil {
		return nil, nil
	}
	if f.Log != nil {
		return &restLock{f: f}, nil // this process is the log's writer, and runs no pipeline
	}
	if _, err := os.Stat(f.logDir()); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if !write {
		fl, err := segmentlog.HoldWriterLock(f.logDir())
		switch {
		case errors.Is(err, segmentlog.ErrLocked):
			return nil, errInMotion
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil // no writer ever opened it: nothing was captured
		case err != nil:
			return nil, err
		}
		l := f.Cfg.Transport.Local
		ro, err := segmentlog.OpenReadOnly(f.logDir(), segmentlog.Options{SegmentBytesMax: int64(l.SegmentBytesMax), Logger: f.Logger})
		if errors.Is(err, segmentlog.ErrNoDurableEnd) {
			return &restLock{f: f, flock: fl}, nil
		} else if err != nil {
			_ = fl.Close()
			return nil, fmt.Errorf("flow %s: open local log read-only: %w", f.Cfg.Flow, f.logError(err))
		}
		f.Log = ro
		return &restLock{f: f, opened: true, flock: fl}, nil
	}
	if err := f.openLog(); errors.Is(err, segmentlog.ErrLocked) {
		return nil, errInMotion
	} else if err != nil {
		return nil, err
	}
	return &restLock{f: f, opened: true}, nil
}

// pendingLogMax and pendingSlotChangesMax bound the counts of a verify at
// rest: a flow that is that far behind is BEHIND "at least" so many.
const (
	pendingLogMax         = 100_000
	pendingSlotChangesMax = 100_000
	pendingPeekTimeout    = 2 * time.Minute
)

// pendingAtRest counts the committed transactions that touch the flow's
// tables and that sink s's target has not applied, for a flow at rest
// (the caller holds its lock, or it has no log yet). It is called after
// the source snapshot of a verify: every transaction that snapshot saw is
// either applied (its end is at or before the target checkpoint cp), or in
// the local log past cp, or committed at the source and not yet captured,
// that is, after the slot's confirmed position, where the slot is peeked
// without moving it. A commit racing the snapshot is counted or not, but
// a transaction the snapshot saw is always counted: CONVERGED at rest
// never hides one. newest is the end LSN of the newest transaction
// counted (0 when none).
func (f *Flow) pendingAtRest(ctx context.Context, src *pgx.Conn, s config.Sink, cp uint64) (p verify.Pending, newest uint64, err error) {
	logEnd := uint64(0)
	if f.Log != nil {
		var inLog int64
		inLog, newest, logEnd, p.AtLeast, err = pendingInLog(ctx, f.Log, s.Cursor(), cp)
		if err != nil {
			return p, 0, fmt.Errorf("flow %s: count the local log's entries past sink %s's checkpoint %s: %w", f.Cfg.Flow, s.Name, lsn.Format(cp), err)
		}
		p.InLog = inLog
	}
	if bs, ok := f.broker.(brokerStatuser); ok {
		// A Kafka flow: its units past the target checkpoint are not read
		// one by one; the topic's newest unit, unapplied, is at least one.
		st, err := bs.Status(ctx, []config.Sink{s})
		if err != nil {
			return p, 0, fmt.Errorf("flow %s: read the topic's newest unit: %w", f.Cfg.Flow, err)
		}
		if st.ProduceAckedCommitLSN != "" {
			acked, err := lsn.Parse(st.ProduceAckedCommitLSN)
			if err != nil {
				return p, 0, fmt.Errorf("flow %s: topic %s: newest commit LSN %q: %w", f.Cfg.Flow, st.Topic, st.ProduceAckedCommitLSN, err)
			}
			logEnd = uint64(acked)
			if logEnd > cp {
				p.InLog, p.AtLeast = 1, true
				newest = logEnd
				p.NotCounted = fmt.Sprintf("the units of topic %s past the target checkpoint one by one: its newest unit (commit %s) is not applied, so at least one is pending", st.Topic, st.ProduceAckedCommitLSN)
			}
		}
	} else if f.broker != nil {
		p.NotCounted = "the units in the broker past the target checkpoint: this transport does not report its newest unit"
	}
	floor := max(cp, logEnd)
	var (
		inSlot  int64
		end     uint64
		atLeast bool
		note    string
	)
	if f.Cfg.Source.Capture == config.CaptureExtension {
		inSlot, end, atLeast, note, err = f.peekExtensionPending(ctx, src, floor)
	} else {
		inSlot, end, atLeast, note, err = f.peekPending(ctx, src, floor)
	}
	if err != nil {
		return p, 0, err
	}
	p.InSlot, p.AtLeast = inSlot, p.AtLeast || atLeast
	if note != "" {
		p.NotCounted = strings.TrimPrefix(p.NotCounted+"; "+note, "; ")
	}
	newest = max(newest, end)
	p.Transactions = p.InLog + p.InSlot
	return p, newest, nil
}

// pendingInLog counts the transactions of l past the checkpoint cp, from
// cursor's offset (the applier commits its cursor after the target, so
// the cursor is never past what the target holds): distinct end LSNs of
// entries with a row change or a schema change. Fences and other logical
// messages, and snapshot units before cp, are not changes the target is
// missing. logEnd is the end LSN of the log's newest entry.
func pendingInLog(ctx context.Context, l *segmentlog.Log, cursor string, cp uint64) (n int64, newest, logEnd uint64, atLeast bool, err error) {
	res, err := relay.ResumeFrom(ctx, transport.Local{Log: l})
	if err != nil {
		return 0, 0, 0, false, err
	}
	if !res.Empty {
		logEnd = res.DurableEnd
	}
	if logEnd <= cp {
		return 0, 0, logEnd, false, nil
	}
	from, ok, err := l.CursorOffset(cursor)
	if err != nil || !ok {
		from = l.FirstOffset() // past retention, or not registered: the gap is reseed's (sinkGap)
	}
	end := l.NextOffset()
	rd := l.NewReader(from)
	defer rd.Close()
	seen := map[uint64]bool{}
	for off, read := from, 0; off < end; off, read = off+1, read+1 {
		if read == pendingLogMax {
			return n, newest, logEnd, true, nil
		}
		_, b, err := rd.Next(ctx)
		if err != nil {
			return n, newest, logEnd, false, fmt.Errorf("read offset %d: %w", off, err)
		}
		e, err := envelope.Decode(b)
		if err != nil {
			return n, newest, logEnd, false, fmt.Errorf("decode offset %d: %w", off, err)
		}
		if e.EndLsn <= cp || seen[e.EndLsn] || !changes(e) {
			continue
		}
		seen[e.EndLsn] = true
		n++
		newest = max(newest, e.EndLsn)
	}
	return n, newest, logEnd, false, nil
}

// changes reports whether e changes a table: a row change or a schema
// change, not only logical messages (fences, barriers' messages).
func changes(e *pb.Envelope) bool {
	if len(e.DdlEvents) > 0 {
		return true
	}
	for _, r := range e.Rows {
		if r.Op != pb.Op_OP_MESSAGE {
			return true
		}
	}
	return false
}

// peekSQL reads the slot's pending pgoutput messages without moving it
// (pg_logical_slot_peek_binary_changes), up to the current WAL position
// and a bounded number of messages. Only each message's kind and, for a
// COMMIT, its end LSN leave the server. publication_names is the flow's
// publication, so only its tables' changes come out; logical messages are
// not asked for ('messages' is off), so Trellara's fences never count.
const peekSQL = `SELECT get_byte(data, 0), CASE WHEN get_byte(data, 0) = 67 THEN substring(data FROM 11 FOR 8) END
FROM pg_logical_slot_peek_binary_changes($1, pg_current_wal_lsn(), $2, 'proto_version', $3, 'publication_names', $4)`

// peekPending counts the transactions committed after the slot's
// confirmed position that end past floor and change one of the
// publication's tables: pgoutput BEGIN .. COMMIT with at least one change
// (INSERT, UPDATE, DELETE, TRUNCATE) in between. PostgreSQL 15 and later
// skip empty transactions; older servers send them, and they are not
// counted. end is the newest counted one's end LSN.
func (f *Flow) peekPending(ctx context.Context, src *pgx.Conn, floor uint64) (n int64, end uint64, atLeast bool, note string, err error) {
	slot := f.Cfg.Source.Slot
	si, err := f.lookupReleasedSlot(ctx, src, slot)
	if err != nil {
		return 0, 0, false, "", err
	}
	if !si.Exists {
		return 0, 0, false, fmt.Sprintf("changes at the source: slot %s does not exist, so nothing was captured and nothing pends", slot), nil
	}
	if si.Active {
		return 0, 0, false, "", fmt.Errorf("flow %s: slot %s is active although no pipeline holds the flow's lock: another process streams from it "+
			"(SELECT active_pid FROM pg_replication_slots WHERE slot_name = '%s'); stop it, then verify again", f.Cfg.Flow, slot, slot)
	}
	var version int
	if err := src.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return 0, 0, false, "", fmt.Errorf("flow %s: read server_version_num: %w", f.Cfg.Flow, err)
	}
	proto := "2"
	if version < 140000 {
		proto = "1"
	}
	pctx, cancel := context.WithTimeout(ctx, pendingPeekTimeout)
	defer cancel()
	rows, err := src.Query(pctx, peekSQL, slot, pendingSlotChangesMax, proto, pgx.Identifier{f.Cfg.Source.Publication}.Sanitize())
	if err != nil {
		return 0, 0, false, "", fmt.Errorf("flow %s: peek slot %s: %w", f.Cfg.Flow, slot, err)
	}
	defer rows.Close()
	n, end, atLeast, err = countCommits(rows, floor)
	if err != nil {
		return 0, 0, false, "", fmt.Errorf("flow %s: peek slot %s: %w", f.Cfg.Flow, slot, err)
	}
	return n, end, atLeast, "", nil
}

// peekExtensionSQL peeks a slot of the trellara output plugin (frames,
// ext/trellara.h: version byte, kind byte; a COMMIT's end LSN at bytes
// 11..18), with the decoder worker's own table filter and no messages.
// The tables option is left out when the worker has none (all tables),
// as the worker leaves it out.
const peekExtensionSQL = `SELECT get_byte(data, 1), CASE WHEN get_byte(data, 1) = 67 THEN substring(data FROM 12 FOR 8) END
FROM pg_logical_slot_peek_binary_changes($1, pg_current_wal_lsn(), $2, VARIADIC
	CASE WHEN $3 = '' THEN ARRAY['include_messages', 'false'] ELSE ARRAY['tables', $3, 'include_messages', 'false'] END)`

// peekExtensionPending is peekPending for source.capture: extension. The
// extension's decoder worker holds its slot (active) whether or not a
// sidecar runs, so the slot itself cannot be peeked; a temporary copy of
// it can (pg_copy_logical_replication_slot: same plugin, same confirmed
// position, gone with this session, never confirmed), peeked with the
// worker's table filter (trellara.tables). The trellara plugin sends a
// transaction's frames only when it has a change for those tables, so a
// COMMIT after a change frame is one pending transaction.
func (f *Flow) peekExtensionPending(ctx context.Context, src *pgx.Conn, floor uint64) (n int64, end uint64, atLeast bool, note string, err error) {
	var slot string
	var exists bool
	var tables *string
	if err := src.QueryRow(ctx, `SELECT s.name, EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = s.name), current_setting('trellara.tables', true)
		FROM (SELECT coalesce(nullif(current_setting('trellara.slot_name', true), ''), $1) AS name) s`, f.Cfg.Source.Slot).
		Scan(&slot, &exists, &tables); err != nil {
		return 0, 0, false, "", fmt.Errorf("flow %s: look up the extension's slot %s: %w", f.Cfg.Flow, slot, err)
	}
	if !exists {
		return 0, 0, false, fmt.Sprintf("changes at the source: the extension's slot %s does not exist", slot), nil
	}
	copyName := fmt.Sprintf("trellara_verify_%d", src.PgConn().PID())
	if _, err := src.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2, true)`, slot, copyName); err != nil {
		return 0, 0, false, fmt.Sprintf("transactions committed after the extension slot %s's confirmed position and not yet in the local log "+
			"(a temporary copy of the slot, to read them without moving it, failed: %v); a change among them shows as a table that differs", slot, err), nil
	}
	defer func() {
		if _, derr := src.Exec(context.WithoutCancel(ctx), `SELECT pg_drop_replication_slot($1)`, copyName); derr != nil && err == nil {
			f.Logger.Warn("could not drop verify's temporary slot; it goes with the session", "slot", copyName, "err", derr)
		}
	}()
	filter := ""
	if tables != nil {
		filter = *tables
	}
	pctx, cancel := context.WithTimeout(ctx, pendingPeekTimeout)
	defer cancel()
	rows, err := src.Query(pctx, peekExtensionSQL, copyName, pendingSlotChangesMax, filter)
	if err != nil {
		return 0, 0, false, "", fmt.Errorf("flow %s: peek a copy of the extension's slot %s: %w", f.Cfg.Flow, slot, err)
	}
	defer rows.Close()
	n, end, atLeast, err = countCommits(rows, floor)
	if err != nil {
		return 0, 0, false, "", fmt.Errorf("flow %s: peek a copy of the extension's slot %s: %w", f.Cfg.Flow, slot, err)
	}
	return n, end, atLeast, "", nil
}

// countCommits counts, over rows of (kind, commit end LSN) read from a
// peek, the transactions that end past floor with at least one change
// (INSERT, UPDATE, DELETE, TRUNCATE) between their BEGIN and COMMIT; the
// same letters in pgoutput's messages and the trellara plugin's frames.
// atLeast: the peek returned pendingSlotChangesMax messages or more (the
// server stops after the transaction that reaches the bound).
func countCommits(rows pgx.Rows, floor uint64) (n int64, end uint64, atLeast bool, err error) {
	var messages int
	changed := false
	for rows.Next() {
		var kind int
		var commitEnd []byte
		if err := rows.Scan(&kind, &commitEnd); err != nil {
			return 0, 0, false, err
		}
		messages++
		switch kind {
		case 'B':
			changed = false
		case 'I', 'U', 'D', 'T':
			changed = true
		case 'C':
			if len(commitEnd) != 8 {
				return 0, 0, false, fmt.Errorf("a COMMIT without its end LSN (%d bytes)", len(commitEnd))
			}
			if e := binary.BigEndian.Uint64(commitEnd); changed && e > floor {
				n++
				end = max(end, e)
			}
			changed = false
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, false, fmt.Errorf("bounded at %s: %w", pendingPeekTimeout, err)
	}
	return n, end, messages >= pendingSlotChangesMax, nil
}

// verifyAtRest fills opts for a verify of sink s of a flow found at rest:
// no fence (nothing would apply it); the watermark is the end of the
// newest pending transaction counted after the source snapshot, or the
// target checkpoint when none pends, so the target is caught up exactly
// when nothing it lacks was committed. The flow's lock is held only while
// counting (a service starting meanwhile is refused it for that moment
// only): a pipeline that takes the flow later can only bring the target
// closer to the source snapshot, and one that holds it by the time of the
// count turns this round back into a verify in motion (a fence). Nothing
// moves a flow at rest, so verify does not wait, unless wait (an explicit
// --wait) says a service may be starting. pending receives the last count
// (nil when the round ran in motion).
func (f *Flow) verifyAtRest(opts *verify.Options, src, tgt *pgx.Conn, s config.Sink, wait time.Duration, pending **verify.Pending, inMotion func()) {
	opts.WaitCaughtUp = verify.NoWait
	if wait > 0 {
		opts.WaitCaughtUp = wait
	}
	fence := opts.SourceLSN
	opts.SourceLSN = func(ctx context.Context) (uint64, error) {
		lock, err := f.lockAtRest(false)
		if errors.Is(err, errInMotion) {
			*pending = nil
			inMotion()
			return fence(ctx) // a pipeline took the flow since verify started
		}
		if err != nil {
			return 0, err
		}
		if lock != nil {
			defer lock.release()
		}
		if f.broker != nil {
			if rest, err := f.brokerAtRest(ctx, src); err != nil {
				return 0, err
			} else if !rest {
				*pending = nil
				inMotion()
				return fence(ctx)
			}
		}
		st, err := apply.ReadStatus(ctx, tgt, s.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
		if err != nil {
			return 0, err
		}
		p, newest, err := f.pendingAtRest(ctx, src, s, st.Checkpoint.EndLSN)
		if err != nil {
			return 0, err
		}
		*pending = &p
		if p.Transactions == 0 {
			return st.Checkpoint.EndLSN, nil
		}
		return newest, nil
	}
}

// withPipeline runs fn while the flow's stream moves (STYLE.md, rule 14):
// what fn writes to the source reaches the target, and the watermarks fn
// waits for are applied. Beside a pipeline that holds the flow (a service
// or a run), fn runs as it is: that pipeline moves the stream. When none
// holds it, withPipeline takes the flow's lock (the local log, as its one
// writer) and runs the flow's components in this process for as long as fn
// runs: capture (relay or sidecar, as source.capture says) and every sink's
// applier, each restarted after an error with the service's backoff
// (supervise), as `trellara run` runs them. Then it stops them, waits for
// the slot to be released and gives the lock back: the flow is at rest
// again. A command that needs the stream to move (reseed, reseed
// --all-tables, semantics) goes through here, never waiting on a pipeline
// that does not exist.
func (f *Flow) withPipeline(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	lock, err := f.lockAtRest(true)
	if errors.Is(err, errInMotion) {
		return fn(ctx)
	}
	if err != nil {
		return err
	}
	if lock == nil && f.broker != nil {
		// A Kafka flow: its service's relay holds the slot.
		conn, err := f.ConnectSource(ctx)
		if err != nil {
			return err
		}
		rest, err := f.brokerAtRest(ctx, conn)
		conn.Close(context.Background())
		if err != nil {
			return err
		}
		if !rest {
			return fn(ctx)
		}
	}
	if lock == nil && f.broker == nil {
		// No log yet: the pipeline creates it, and with it takes the lock.
		if err := os.MkdirAll(f.dir, 0o700); err != nil {
			return fmt.Errorf("flow %s: create %s: %w", f.Cfg.Flow, f.dir, err)
		}
		if err := f.openLog(); err != nil {
			if errors.Is(err, segmentlog.ErrLocked) {
				return fn(ctx)
			}
			return err
		}
		lock = &restLock{f: f, opened: true}
	}
	if lock != nil {
		defer lock.release()
	}
	if f.Pins == nil {
		if f.Pins, err = capture.OpenPins(filepath.Join(f.dir, "pins.json")); err != nil {
			return err
		}
	}
	for _, sk := range f.Sinks() {
		if err := f.registerCursor(sk); err != nil {
			return err
		}
	}
	f.Logger.Info("no pipeline holds the flow: running its capture and appliers in this process for "+what, "flow", f.Cfg.Flow)
	f.moving.Add(1)
	defer f.moving.Add(-1)
	p := f.startPipeline(ctx)
	err = fn(ctx)
	perr := p.stop()
	f.awaitSlotReleased(context.WithoutCancel(ctx))
	if err != nil && perr != nil {
		return fmt.Errorf("%w (the flow's pipeline, which %s ran while the flow was at rest, last failed with: %v)", err, what, perr)
	}
	return err
}

// pipeline is the flow's components run in this process by withPipeline.
type pipeline struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	last   error // the last error a component stopped with
}

// startPipeline starts capture and every sink's applier under supervise,
// as the service does (serveOnce), without its listeners.
func (f *Flow) startPipeline(ctx context.Context) *pipeline {
	ctx, cancel := context.WithCancel(ctx)
	p := &pipeline{cancel: cancel}
	m := obs.NewMetrics(obs.Build{})
	// A restart is routine here (capture stopped at the schema change the
	// reseed takes over restarts until it does): logged at debug level,
	// and the last error is reported if the command fails.
	quiet := slog.New(debugHandler{f.Logger.Handler()})
	run := func(component string, c obs.Component, body func(context.Context, *obs.Health) error) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			supervise(ctx, component, quiet, obs.NewHealth(), c, f.labels(serviceOf(component)), func(ctx context.Context, h *obs.Health) error {
				err := body(ctx, h)
				if err != nil && ctx.Err() == nil {
					p.mu.Lock()
					p.last = err
					p.mu.Unlock()
				}
				return err
			})
		}()
	}
	run(obs.ServiceRelay, m.Relay.Component, func(ctx context.Context, h *obs.Health) error {
		if f.Cfg.Source.Capture == config.CaptureExtension {
			h.Set("streaming", true, nil)
			return f.CaptureExtension(ctx, CaptureOptions{})
		}
		return f.Capture(ctx, CaptureOptions{Session: func(*relay.Session) { h.Set("streaming", true, nil) }})
	})
	for _, sk := range f.Sinks() {
		run(sk.Cursor(), m.Applier.Component, func(ctx context.Context, h *obs.Health) error {
			tgt, err := f.ConnectSink(ctx, sk)
			if err != nil {
				return err
			}
			defer tgt.Close(context.Background())
			if sk.Target.CreateTables {
				if err := f.createTargetTables(ctx, tgt); err != nil {
					return err
				}
			}
			a, err := f.Applier(tgt, sk, nil)
			if err != nil {
				return err
			}
			h.Set("applying", true, nil)
			return f.Apply(ctx, tgt, sk, a, nil)
		})
	}
	return p
}

// stop cancels the components, waits for them, and returns the last
// error one of them stopped with while running.
func (p *pipeline) stop() error {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// awaitSlotReleased waits, up to slotReleaseWait, until the flow's
// pgoutput slot is no longer active: its walsender notices the closed
// connection a moment after the client, and the next command finds the
// flow at rest.
func (f *Flow) awaitSlotReleased(ctx context.Context) {
	if f.Cfg.Source.Capture == config.CaptureExtension {
		return // the decoder worker holds it for good
	}
	conn, err := f.ConnectSource(ctx)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	_, _ = f.lookupReleasedSlot(ctx, conn, f.Cfg.Source.Slot)
}

// debugHandler passes every record on at debug level.
type debugHandler struct{ slog.Handler }

func (h debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h debugHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

func (h debugHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return debugHandler{h.Handler.WithAttrs(as)}
}

func (h debugHandler) WithGroup(name string) slog.Handler {
	return debugHandler{h.Handler.WithGroup(name)}
}
