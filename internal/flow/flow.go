// Package flow wires one configured flow together: the source slot and
// publication, the relay, the local segment log, the applier and verify.
// The CLI calls it; it holds the ordering rules that span packages (snapshot
// before stream, publish before acknowledge, fences as watermarks) and none
// of their mechanics; which start it makes (snapshot, resume, refuse, gap)
// is capture.DecideStart's.
//
// # State directory
//
// Everything a flow keeps locally is in transport.local.dir (mode 0700),
// or transport.kafka.state_dir, and `trellara run --cleanup` removes all of it:
//
//   - log/: the segment log, with the applier's cursor (segmentlog); a
//     Kafka flow has none (its log is the topic, see Broker).
//   - pins.json: each relation's pinned schema fingerprint and shape
//     (capture.FilePins).
//   - schema-pending.json: the schema changes capture stopped at, with
//     their plans (schema.go; `trellara schema ddl-plan` shows them).
//   - snapshot.done: the slot's consistent point, written once the initial
//     snapshot is whole in the log; without it an owned slot is refused.
//   - stream-horizon: a whole-schema flow's stream horizon, the xmax
//     (xid8) of its initial snapshot (schemas.go): a table created at or
//     after it may join through an add_table barrier.
//   - acks: the highest position acknowledged to the source with no logged
//     unit ending there, X/X (capture.FileAcks; it migrates the older
//     idle-ack and extension-progress files on open).
//   - last-verify.json: the last verify's result, for status.
//   - spill files of open large transactions (capture.Assembler), unlinked
//     as soon as they are created.
//
// docs/DESIGN.md ("The flow's state directory") keeps the same list.
package flow

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgsession"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
)

// ApplierCursor is the segment-log consumer name of the default sink's
// applier (config.Sink.Cursor names every sink's).
const ApplierCursor = config.ApplierCursorName

// Flow is an opened flow: its config, resolved secrets and local log.
type Flow struct {
	Cfg        *config.Config
	ConfigPath string
	Secrets    config.Secrets
	Log        *segmentlog.Log
	Pins       *capture.FilePins
	Repair     *segmentlog.RepairReport
	Logger     *slog.Logger
	dir        string
	// broker is the transport when it is not the local log (Broker).
	broker Broker
	// logHeld: OpenReadOnly found the local log held by the process
	// running the flow (writerPID); f.Log then reads it beside that
	// process, up to its published durable end.
	logHeld   bool
	writerPID int
	// resolved are the tables of source.schemas the source catalog listed
	// before the initial snapshot (resolveTables).
	resolvedMu sync.Mutex
	resolved   []config.TableName
	// moving counts this process's withPipeline calls running the flow's
	// pipeline: the flow is in motion while it is positive (lockAtRest).
	moving atomic.Int32
}

// Open loads path, resolves its secrets and opens the local log.
func Open(path string, logger *slog.Logger) (*Flow, error) {
	f, err := OpenConfig(path, logger)
	if err != nil {
		return nil, err
	}
	cfg := f.Cfg
	if err := os.MkdirAll(f.dir, 0o700); err != nil { // the log, pins and checkpoints: the service user's only
		return nil, fmt.Errorf("flow %s: create %s: %w", cfg.Flow, f.dir, err)
	}
	if f.broker == nil {
		if err := f.openLog(); err != nil {
			return nil, err
		}
	}
	if f.Repair != nil {
		f.Logger.Warn("local log tail repaired", "flow", cfg.Flow, "report", f.Repair.String())
	}
	f.Pins, err = capture.OpenPins(filepath.Join(f.dir, "pins.json"))
	if err != nil {
		f.Close()
		return nil, err
	}
	// Register every sink's cursor before anything is appended, so
	// retention keeps every entry a sink has not yet read.
	for _, sk := range f.Sinks() {
		if err := f.registerCursor(sk); err != nil {
			f.Log.Close()
			return nil, err
		}
	}
	return f, nil
}

// OpenReadOnly opens a flow for the read-only commands (status, verify's
// report, repair-plan, preflight, stream locate-local, pilot-package): it
// creates, removes and rewrites nothing, whether or not the process
// running the flow holds the log. The log is always opened with
// segmentlog.OpenReadOnly, which reads up to the durable end the writer
// last published and never repairs: a torn tail past that end is left for
// the writer's next Open to cut, and damage below it is reported by the
// reader that reaches it. f.Log is nil without a local log directory (the
// flow has not run here, or --cleanup removed it) or before a writer ever
// published a durable end; no cursor is registered.
func OpenReadOnly(path string, logger *slog.Logger) (*Flow, error) {
	f, err := OpenConfig(path, logger)
	if err != nil {
		return nil, err
	}
	if f.Pins, err = capture.OpenPins(filepath.Join(f.dir, "pins.json")); err != nil {
		return nil, err
	}
	if f.broker != nil {
		return f, nil
	}
	if _, err := os.Stat(f.logDir()); errors.Is(err, fs.ErrNotExist) {
		return f, nil
	} else if err != nil {
		return nil, fmt.Errorf("flow %s: local log %s: %w", f.Cfg.Flow, f.logDir(), err)
	}
	f.writerPID = segmentlog.WriterPID(f.logDir())
	f.logHeld = f.writerPID > 0
	l := f.Cfg.Transport.Local
	ro, err := segmentlog.OpenReadOnly(f.logDir(), segmentlog.Options{SegmentBytesMax: int64(l.SegmentBytesMax), Logger: f.Logger})
	switch {
	case errors.Is(err, segmentlog.ErrNoDurableEnd):
		f.Logger.Info("local log has no published durable end yet; reporting without it", "dir", f.logDir(), "err", err)
	case err != nil:
		return nil, fmt.Errorf("flow %s: open local log read-only: %w", f.Cfg.Flow, f.logError(err))
	default:
		f.Log = ro
	}
	return f, nil
}

// OpenApplier opens a flow for an applier process beside the relay that
// writes its log: the log read-only (segmentlog.OpenReadOnly, bounded by
// the relay's durable end), and sink's cursor registered when it is not
// yet, or every sink's for sink "". Before the relay has ever opened the
// log it returns an error wrapping segmentlog.ErrNoDurableEnd.
func OpenApplier(path string, logger *slog.Logger, sink string) (*Flow, error) {
	f, err := OpenConfig(path, logger)
	if err != nil {
		return nil, err
	}
	sinks, err := f.SelectSinks(sink)
	if err != nil {
		return nil, err
	}
	if f.broker != nil {
		// Each sink reads the cluster from its target's checkpoint.
		if err := os.MkdirAll(f.dir, 0o700); err != nil {
			return nil, fmt.Errorf("flow %s: create %s: %w", f.Cfg.Flow, f.dir, err)
		}
		if f.Pins, err = capture.OpenPins(filepath.Join(f.dir, "pins.json")); err != nil {
			return nil, err
		}
		return f, nil
	}
	l := f.Cfg.Transport.Local
	f.Log, err = segmentlog.OpenReadOnly(f.logDir(), segmentlog.Options{
		SegmentBytesMax: int64(l.SegmentBytesMax),
		Retention:       segmentlog.Retention{MaxBytes: int64(l.Retention.MaxBytes), MaxAge: l.Retention.MaxAge, Expire: l.ExpirePastRetention},
		Logger:          f.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("flow %s: open local log read-only: %w", f.Cfg.Flow, f.logError(err))
	}
	if f.Pins, err = capture.OpenPins(filepath.Join(f.dir, "pins.json")); err != nil {
		f.Log.Close()
		return nil, err
	}
	for _, sk := range sinks {
		if err := f.registerCursor(sk); err != nil {
			f.Log.Close()
			return nil, err
		}
	}
	return f, nil
}

// OpenConfig loads path and resolves its secrets without opening the local
// log (Log and Pins are nil): the part of opening a flow that touches
// nothing on disk.
func OpenConfig(path string, logger *slog.Logger) (*Flow, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	sec, err := cfg.ResolveSecrets()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	f := &Flow{Cfg: cfg, ConfigPath: path, Secrets: sec, Logger: logger}
	if cfg.Transport.Local == nil {
		f.dir = cfg.Transport.Kafka.StateDir
		if err := f.openBroker(); err != nil {
			return nil, err
		}
		return f, nil
	}
	f.dir = cfg.Transport.Local.Dir
	return f, nil
}

func (f *Flow) logDir() string { return f.Cfg.Transport.Local.LogDir() }

// openLog opens (creating if needed) the local segment log.
func (f *Flow) openLog() error {
	l := f.Cfg.Transport.Local
	var err error
	f.Log, f.Repair, err = segmentlog.Open(f.logDir(), segmentlog.Options{
		SegmentBytesMax: int64(l.SegmentBytesMax),
		Retention:       segmentlog.Retention{MaxBytes: int64(l.Retention.MaxBytes), MaxAge: l.Retention.MaxAge, Expire: l.ExpirePastRetention},
		Logger:          f.Logger,
	})
	if err != nil {
		return fmt.Errorf("flow %s: open local log: %w", f.Cfg.Flow, f.logError(err))
	}
	return nil
}

// logError adds the flow's recovery to an error from the local log, which
// names no commands itself: damaged acknowledged data or a consumer past
// retention means starting the flow over (segmentlog.AddRecovery), a
// read-only open before any writer opened the log means starting the
// relay, and a second writer is told which process holds the flow.
//
// Damaged acknowledged data is not recovered by a reseed: a reseed's
// watermarks travel the stream, and the stream cannot run on a log that
// refuses to open. The re-snapshot it prints starts with `run --cleanup`,
// which opens no log (OpenForCleanup).
func (f *Flow) logError(err error) error {
	if errors.Is(err, segmentlog.ErrNoDurableEnd) {
		return fmt.Errorf("%w; start the flow's relay once: `%s`", err, shell.Trellara("run", f.ConfigPath, "--role", "relay"))
	}
	var le *segmentlog.LockedError
	if errors.As(err, &le) {
		return &heldError{err: err, msg: f.heldMessage(le.PID), sep: "; "}
	}
	var ce *segmentlog.CorruptionError
	if errors.As(err, &ce) && ce.HasLost {
		lost := fmt.Sprintf(" (the flow lost the acknowledged transactions from log offset %d", ce.LostFrom)
		if at, ok := f.lastIntactLSN(ce.LostFrom); ok {
			lost += fmt.Sprintf(", the first of them committing after LSN %s, where the last intact one ends", envelope.FormatLSN(at))
		}
		lost += "; the source will not send them again, and a reseed cannot run on a log that does not open)"
		return segmentlog.AddRecovery(&heldError{err: err, msg: lost, sep: ""}, f.resnapshot())
	}
	return segmentlog.AddRecovery(err, f.resnapshot())
}

// heldError is a log error with the flow's explanation after it.
type heldError struct {
	err      error
	sep, msg string
}

func (e *heldError) Error() string { return e.err.Error() + e.sep + e.msg }
func (e *heldError) Unwrap() error { return e.err }

// heldMessage says which process holds the flow's log and what to do.
func (f *Flow) heldMessage(pid int) string {
	who := "another trellara process"
	stop := "stop that process"
	if pid > 0 {
		who = fmt.Sprintf("trellara process %d", pid)
		stop = fmt.Sprintf("stop it (`systemctl stop trellara@%s` or `systemctl stop trellara-relay@%s` when it runs as a service, otherwise `kill %d`)",
			f.Cfg.Flow, f.Cfg.Flow, pid)
	}
	return fmt.Sprintf("flow %s is running in %s, which writes its local log %s, and a flow has one writer: %s before running this command, "+
		"or use the read-only commands beside it (`%s`, `%s`, `%s`)", f.Cfg.Flow, who, f.logDir(), stop,
		shell.Trellara("status", f.ConfigPath), shell.Trellara("verify", f.ConfigPath), shell.Trellara("stream locate-local", f.ConfigPath, "--lsn", "X/X"))
}

// lastIntactLSN is the end LSN of the newest transaction in the log before
// offset lostFrom, read up to the durable end without repairing anything.
func (f *Flow) lastIntactLSN(lostFrom uint64) (uint64, bool) {
	if lostFrom == 0 {
		return 0, false
	}
	ro, err := segmentlog.OpenReadOnly(f.logDir(), segmentlog.Options{Logger: f.Logger})
	if err != nil {
		return 0, false
	}
	defer ro.Close()
	if lostFrom-1 < ro.FirstOffset() {
		return 0, false
	}
	rd := ro.NewReader(lostFrom - 1)
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, b, err := rd.Next(ctx)
	if err != nil {
		return 0, false
	}
	e, err := envelope.Decode(b)
	if err != nil || e.EndLsn == 0 {
		return 0, false
	}
	return e.EndLsn, true
}

// OpenForCleanup opens a flow for `run --cleanup`, which removes the local
// log with the rest of the flow's state and so must work when the log
// refuses to open as damaged (the re-snapshot that damage prints starts
// here). It still refuses while another process writes the log.
func OpenForCleanup(path string, logger *slog.Logger) (*Flow, error) {
	f, err := Open(path, logger)
	if err == nil || !segmentlog.IsCorruption(err) {
		return f, err
	}
	f, cerr := OpenConfig(path, logger)
	if cerr != nil {
		return nil, cerr
	}
	f.Logger.Warn("local log is damaged; run --cleanup removes it with the flow's other state", "dir", f.logDir(), "err", err)
	return f, nil
}

// ApplyRetention drops what the retention policy allows (never what a
// registered cursor still needs, unless transport.local.expire_past_retention).
func (f *Flow) ApplyRetention() {
	if f.Log == nil {
		return // a broker's retention is the cluster's
	}
	rep, err := f.Log.ApplyRetention(time.Now())
	if err != nil {
		f.Logger.Warn("local log retention failed", "flow", f.Cfg.Flow, "err", err)
		return
	}
	f.Logger.Debug("local log retention", "flow", f.Cfg.Flow, "report", fmt.Sprintf("%+v", rep))
}

// Close closes the log (if one was opened).
func (f *Flow) Close() error {
	if f.Log == nil {
		return nil
	}
	return f.Log.Close()
}

// ConnectSource opens an ordinary connection to the source.
func (f *Flow) ConnectSource(ctx context.Context) (*pgx.Conn, error) {
	return connect(ctx, "source", f.Secrets.SourceDatabaseURL.Reveal())
}

// ConnectTarget opens a connection to the target of the flow's only
// sink (ConnectSink for a named one).
func (f *Flow) ConnectTarget(ctx context.Context) (*pgx.Conn, error) {
	s, err := f.Sink("")
	if err != nil {
		return nil, err
	}
	return f.ConnectSink(ctx, s)
}

func connect(ctx context.Context, side, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%s database_url does not parse (value not shown): %w", side, sanitize(err, url))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	pgsession.Pin(&cfg.Config) // snapshot, applier, verify and sidecar sessions read and write values as text
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s %s:%d/%s: %w", side, cfg.Host, cfg.Port, cfg.Database, sanitize(err, url))
	}
	return c, nil
}

// sanitize removes the connection string's credentials from err, by
// structure (config.ScrubConnError), keeping err's chain.
func sanitize(err error, url string) error { return config.ScrubConnError(err, url) }

func (f *Flow) replicationConnect(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(f.Secrets.SourceDatabaseURL.Reveal())
	if err != nil {
		return nil, fmt.Errorf("source database_url does not parse: %w", sanitize(err, f.Secrets.SourceDatabaseURL.Reveal()))
	}
	cfg.RuntimeParams["replication"] = "database"
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	pgsession.Pin(cfg) // the walsender renders pgoutput's column text under this session's settings
	relay.PaceReads(cfg)
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection to source %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database,
			sanitize(err, f.Secrets.SourceDatabaseURL.Reveal()))
	}
	return c, nil
}

func (f *Flow) snapshotDonePath() string { return filepath.Join(f.dir, "snapshot.done") }

// acks opens the flow's store of acknowledged positions no logged unit
// backs (capture.FileAcks), migrating the older idle-ack and
// extension-progress files.
func (f *Flow) acks() (*capture.FileAcks, error) {
	a, err := capture.OpenFileAcks(f.dir)
	if err != nil {
		return nil, fmt.Errorf("flow %s: %w", f.Cfg.Flow, err)
	}
	return a, nil
}

// CaptureOptions tune a capture session.
type CaptureOptions struct {
	// Streaming is closed once the relay is streaming (after any snapshot).
	Streaming chan<- struct{}
	Stop      func() bool
	OnFence   func(token string, commitLSN uint64)
	Snapshot  func(relay.SnapshotProgress)
	// Session receives the session once created, for status.
	Session func(*relay.Session)
}

// Capture prepares the source (publication, slot, initial snapshot when
// the flow owns them and they are new) and streams into the local log
// until ctx ends or Stop reports true.
func (f *Flow) Capture(ctx context.Context, o CaptureOptions) error {
	src := f.Cfg.Source
	conn, err := f.ConnectSource(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tr, closeTr, err := f.publisher(ctx)
	if err != nil {
		return err
	}
	defer closeTr()
	res, err := capture.ResumeFrom(ctx, tr)
	if err != nil {
		return err
	}
	si, err := f.lookupReleasedSlot(ctx, conn, src.Slot)
	if err != nil {
		return err
	}
	repl, err := f.replicationConnect(ctx)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background())
	cleanup := shell.Trellara("run", f.ConfigPath, "--cleanup")
	acks, err := f.acks()
	if err != nil {
		return err
	}
	// The identity gate comes before anything is created or changed on the
	// source, on every start: preflight reports the same rule.
	defs, err := f.gatedSourceTables(ctx, conn)
	if err != nil {
		return err
	}

	// An acknowledgement recorded over log entries the log no longer
	// holds does not cover them: counted, it would hide the gap.
	acked, lostBasis, err := capture.AckedFor(acks, res)
	if err != nil {
		return err
	}
	if lostBasis {
		f.Logger.Warn("the acknowledgement store was recorded over log entries the local log no longer holds; it does not count for the gap check",
			"flow", f.Cfg.Flow, "acks", acks.Path(), "log_durable_end", envelope.FormatLSN(res.DurableEnd))
	}
	_, markerErr := os.Stat(f.snapshotDonePath())
	switch act := capture.DecideStart(capture.Start{SlotExists: si.Exists, OwnsSlot: src.OwnsSlot, SnapshotDone: markerErr == nil,
		Log: res, SlotConfirmed: si.ConfirmedFlush, Acked: acked}); act {
	case capture.StartNoSlot:
		return fmt.Errorf("flow %s: slot %s does not exist and source.owns_slot is false; create it with "+
			"SELECT pg_create_logical_replication_slot('%s', 'pgoutput') and a publication %s, or set owns_slot: true",
			f.Cfg.Flow, src.Slot, src.Slot, src.Publication)
	case capture.StartSlotGone:
		return &capture.GapError{Slot: src.Slot, TransportDurable: res.DurableEnd,
			RecoveryCommand: "the slot is gone while the local log holds data: " + cleanup + " and run again (a full resnapshot)"}
	case capture.StartSnapshot:
		if err := f.refuseFilledTargets(ctx); err != nil {
			return err
		}
		if err := f.ensurePublication(ctx, conn); err != nil {
			return err
		}
		created, err := relay.CreateSlot(ctx, repl, src.Slot)
		if err != nil {
			return err
		}
		f.Logger.Info("slot created", "flow", f.Cfg.Flow, "slot", src.Slot, "consistent_point", envelope.FormatLSN(created.ConsistentPoint))
		snapConn, err := f.ConnectSource(ctx)
		if err != nil {
			return err
		}
		if err := f.recordStreamHorizon(ctx, snapConn, created.SnapshotName); err != nil {
			snapConn.Close(context.Background())
			return fmt.Errorf("%w; recover: %s, then run again", err, cleanup)
		}
		err = relay.Snapshot(ctx, snapConn, tr, relay.SnapshotOptions{
			SourceID: src.ID, Tables: f.Tables(), SnapshotName: created.SnapshotName,
			ConsistentPoint: created.ConsistentPoint, Pins: f.Pins, Progress: o.Snapshot})
		snapConn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("flow %s: initial snapshot: %w; recover: %s (it drops the slot and publication, empties the target tables "+
				"this snapshot copied into and removes the local state), then run again", f.Cfg.Flow, err, cleanup)
		}
		if err := capture.WriteFileDurable(f.snapshotDonePath(), []byte(envelope.FormatLSN(created.ConsistentPoint)+"\n")); err != nil {
			return err
		}
		// Read before the slot was created: a partition attached in
		// between is reported as a change, never missed.
		if err := f.writePartitions(leafRecord(defs)); err != nil {
			return err
		}
		res = capture.AfterSnapshot(created.ConsistentPoint)
	case capture.StartIncompleteSnapshot:
		return fmt.Errorf("flow %s: slot %s exists but the initial snapshot did not complete (%s missing); "+
			"the exported snapshot cannot be resumed. Recover: %s (it drops the slot and publication, empties the target tables "+
			"this snapshot copied into and removes the local state), then run again",
			f.Cfg.Flow, src.Slot, f.snapshotDonePath(), cleanup)
	case capture.StartGap:
		return capture.CheckResume(src.Slot, res, si.ConfirmedFlush, acked, shell.Resnapshot(f.ConfigPath))
	case capture.StartEmptyLog:
		return &capture.GapError{Slot: src.Slot, SlotConfirmedLSN: si.ConfirmedFlush,
			RecoveryCommand: "the local log is empty but the slot exists: " + cleanup + " and run again"}
	case capture.StartResume:
		changes, err := f.partitionChanges(defs)
		if err != nil {
			return err
		}
		for _, c := range changes {
			f.Logger.Warn(c.String()+"; ATTACH and DETACH PARTITION are not replicated, verify reports the table DIVERGED; the recovery is in repair-plan",
				"flow", f.Cfg.Flow, "table", c.Table, "repair_plan", shell.Trellara("repair-plan", f.ConfigPath))
		}
		if si.Active {
			return fmt.Errorf("flow %s: slot %s is in use by another process (still after %s); stop it first (SELECT active_pid FROM pg_replication_slots WHERE slot_name = '%s')",
				f.Cfg.Flow, src.Slot, slotReleaseWait, src.Slot)
		}
	default:
		return fmt.Errorf("flow %s: no start rule for %s", f.Cfg.Flow, act)
	}
	if o.Streaming != nil {
		close(o.Streaming)
	}
	asm := f.assemblerOptions(ctx, conn)
	s, err := relay.NewSession(repl, tr, res, relay.Options{
		SourceID: src.ID, Slot: src.Slot, Publication: src.Publication,
		ProtocolVersion: src.ProtocolVersion, Streaming: src.Streaming,
		Assembler: asm,
		Logger:    f.Logger, OnFence: o.OnFence, Stop: o.Stop,
		Acks: acks,
	})
	if err != nil {
		return fmt.Errorf("flow %s: %w", f.Cfg.Flow, err)
	}
	if o.Session != nil {
		o.Session(s)
	}
	return f.recordDrift(s.Run(ctx))
}

// Cleanup drops the slot and publication a flow owns, empties the target
// tables its snapshot copied into and removes its state on the target and
// its local state, so that the next run starts over with a full snapshot
// and no row twice. It refuses for flows that do not own the slot. It
// returns the target tables it emptied.
func (f *Flow) Cleanup(ctx context.Context) ([]config.TableName, error) {
	// The extension's decoder owns its slot, the server's: a cleanup of an
	// extension flow leaves it, and the flow's next run starts from its
	// confirmed position with a new initial snapshot.
	if ext := f.Cfg.Source.Capture == config.CaptureExtension; !ext {
		if !f.Cfg.Source.OwnsSlot {
			return nil, fmt.Errorf("flow %s: source.owns_slot is false: Trellara did not create slot %s or publication %s and will not drop them",
				f.Cfg.Flow, f.Cfg.Source.Slot, f.Cfg.Source.Publication)
		}
		conn, err := f.ConnectSource(ctx)
		if err != nil {
			return nil, err
		}
		defer conn.Close(context.Background())
		if err := relay.DropOwned(ctx, conn, f.Cfg.Source.Slot, f.Cfg.Source.Publication); err != nil {
			return nil, err
		}
	}
	var emptied []config.TableName
	for _, sk := range f.Sinks() {
		e, err := f.cleanupTarget(ctx, sk)
		if err != nil {
			return nil, err
		}
		emptied = append(emptied, e...)
	}
	if f.broker != nil {
		if err := f.broker.Remove(ctx); err != nil {
			return nil, err
		}
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return emptied, os.RemoveAll(f.dir)
}

// slotReleaseWait bounds how long capture waits for an active slot to be
// released before it refuses to start. A walsender outlives its client by
// a moment (it notices the closed connection on its next send), so a run
// that starts right after another one exited finds the slot still active.
const slotReleaseWait = 10 * time.Second

// lookupReleasedSlot looks slot up; while it is active it polls until it is
// released or slotReleaseWait passes, and returns what it saw last.
func (f *Flow) lookupReleasedSlot(ctx context.Context, conn *pgx.Conn, slot string) (relay.SlotInfo, error) {
	deadline := time.Now().Add(slotReleaseWait)
	for logged := false; ; logged = true {
		si, err := relay.LookupSlot(ctx, conn, slot)
		if err != nil || !si.Active || time.Now().After(deadline) {
			return si, err
		}
		if !logged {
			f.Logger.Info("slot is active; waiting for its previous user to let go", "flow", f.Cfg.Flow, "slot", slot, "wait_max", slotReleaseWait)
		}
		select {
		case <-ctx.Done():
			return si, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
