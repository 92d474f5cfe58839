package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/schemachange"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/segmentlog/segmentlogtest"
	"github.com/trellara/trellara/transport"
	"github.com/trellara/trellara/transport/kafka/manifest"
)

// The harness runs one scenario: the real relay session (decode,
// assembly, spill, chunking, publish-then-acknowledge), the real segment
// log on the simulated filesystem, and the real applier on the simulated
// target, interleaved by a seeded scheduler on one goroutine, with faults
// injected at named points. Everything that could vary between runs — the
// schedule, the history, torn bytes, the clock — comes from the seed, so a
// seed reproduces a run byte for byte (the event trace).

const (
	logDir      = "/sim/log"
	cursorName  = "applier"
	simFlow     = "sim"
	simSourceID = "sim-source"
	simConfig   = "trellara.yml"
)

var (
	errAmbiguous   = errors.New("sim: the broker acknowledged nothing; the publish may or may not be durable")
	errRelayDied   = errors.New("sim: the relay process died during the publish")
	errApplierDied = errors.New("sim: the applier process died after the target commit")
	errMachineDied = errors.New("sim: the machine lost power")
	errEIO         = fmt.Errorf("sim: fsync: %w", syscall.EIO)
)

type harness struct {
	acks capture.MemoryAcks // the flow's durable acknowledgement record (its AckStore)
	sc   *Scenario
	sim  *Simulation
	opts Options
	rng  *rand.Rand // the schedule
	frng *rand.Rand // fault details (torn bytes, partial batches)
	hist *history
	chk  *checker
	db   *simDB
	ctx  context.Context

	trace bytes.Buffer
	step  int
	nowUS int64

	fs           *segmentlogtest.FS
	lg           *segmentlog.Log
	logOpts      segmentlog.Options
	pins         *simPins
	snapshotDone bool
	inSnapshot   bool
	quiet        bool // setting up: no faults
	slot         uint64
	spillDir     string

	relay     *relayProc
	relayStop error
	relayDone bool
	driftSeen int
	// accepted holds the tables whose blocked change a reseed took over
	// (the flow's schema-reseed.json); sentPos is how far the source has
	// got, for its catalog.
	accepted    map[string]bool
	sentPos     uint64
	deferred    [][]byte // Mutations.AckBeforeDurable: reported durable, not yet written
	enospcUntil int

	app     *applierProc
	appStop error
	appIdle bool

	// parts are the data partitions of Kafka partitioned mode
	// (Simulation.Partitions), index p-1 for partition p.
	parts [][]simChunk

	faults       []*faultState
	arg          int
	pendingImage *segmentlogtest.FS
	detected     map[string]int
	stats        RunStats
	failed       bool
}

type faultState struct {
	Fault
	hits  int
	fired bool
}

type relayProc struct {
	sess    *relay.Session
	stream  []*wire
	pos     int
	sentEnd uint64
	// For the mid-transaction fault points: the open transaction and how
	// many of its rows were sent; what committed since the last flush.
	open            *htxn
	openRows        int
	bigCommitted    bool
	streamCommitted bool
	// driftCommitted: the transaction that first used a changed shape
	// (the one carrying a DDL barrier) committed since the last flush.
	driftOpen, driftCommitted bool
}

type applierProc struct {
	a    *apply.Applier
	conn *simConn
	feed *logFeed
	cur  *simCursor
}

// Run runs one scenario of sim.
func Run(sc *Scenario, sim *Simulation, opts Options) (res *Result) {
	if sim.FanIn != nil {
		return runFanIn(sc, sim, opts)
	}
	h := &harness{sc: sc, sim: sim, opts: opts, ctx: context.Background(),
		rng:      rand.New(rand.NewPCG(sc.Seed, 0x5c4ed01e)),
		frng:     rand.New(rand.NewPCG(sc.Seed, 0xfa017)),
		detected: map[string]int{}, nowUS: commitTime0}
	for _, f := range sc.Faults {
		h.faults = append(h.faults, &faultState{Fault: f})
	}
	res = &Result{Scenario: sc}
	defer func() {
		if p := recover(); p != nil {
			h.chk.fail(InvLiveness, "the run panicked: %v", p)
			res.Violations, res.Pass = h.chk.violations, false
		}
		h.shutdown()
	}()
	h.run()
	res.Violations = h.chk.violations
	res.Fired = true
	for _, f := range h.faults {
		if !f.fired {
			res.Fired = false
		}
	}
	if opts.Override != nil && !res.Fired || opts.Override != nil && onlyExpectation(res.Violations) {
		// Under a flow's own bounds a fault point or an expected outcome
		// may not be reachable (no segment rolls with 64 MiB segments):
		// the scenario did not run, rather than failed.
		if onlyExpectation(res.Violations) {
			res.Fired, res.Violations = false, nil
		}
	}
	res.Pass = len(res.Violations) == 0 && res.Fired
	res.Steps = h.step
	res.Detected = h.detected
	res.Stats = h.stats
	res.Outcome = "converged"
	switch {
	case h.relayStop != nil:
		res.Outcome = "capture stopped: " + kindOf(h.relayStop)
	case h.appStop != nil:
		res.Outcome = "apply stopped: " + kindOf(h.appStop)
	}
	if opts.Trace {
		res.Trace = h.trace.Bytes()
	}
	return res
}

func onlyExpectation(vs []Violation) bool {
	for _, v := range vs {
		if v.Invariant != InvExpectedError {
			return false
		}
	}
	return len(vs) > 0
}

// unfire records that a fault's point was reached but its action found
// nothing to act on.
func (h *harness) unfire(action string) {
	for _, f := range h.faults {
		if f.Action == action {
			f.fired = false
		}
	}
}

func (h *harness) now() time.Time { return time.UnixMicro(h.nowUS).UTC() }

func (h *harness) tracef(who, format string, args ...any) {
	fmt.Fprintf(&h.trace, "%05d %-7s ", h.step, who)
	fmt.Fprintf(&h.trace, format, args...)
	h.trace.WriteByte('\n')
}

func (h *harness) detect(what string) { h.detected[what]++ }

// at is a fault point: it returns the action of a fault due here, if any.
func (h *harness) at(point string) string {
	if h.inSnapshot || h.quiet {
		return ""
	}
	act := ""
	for _, f := range h.faults {
		if f.Point != point {
			continue
		}
		f.hits++
		if f.hits >= f.Nth && f.hits < f.Nth+max(f.Times, 1) {
			f.fired = true
			if act == "" {
				act, h.arg = f.Action, f.Arg
				h.tracef("fault", "%s at %s (hit %d)", f.Action, point, f.hits)
			}
		}
	}
	return act
}

func (h *harness) wants(point string) bool {
	for _, f := range h.faults {
		if f.Point == point && f.hits < f.Nth+max(f.Times, 1)-1 {
			return true
		}
	}
	return false
}

func (h *harness) bounds() (mem, chunk, seg int64, txns, rows, bytes int) {
	s := h.sim
	mem, chunk, seg, txns, rows, bytes = s.MemoryBytesMax, s.ChunkBytesMax, s.SegmentBytesMax, s.MaxBatchTxns, s.MaxBatchRows, s.MaxBatchBytes
	if o := h.opts.Override; o != nil {
		pick64 := func(v, o int64) int64 {
			if o > 0 {
				return o
			}
			return v
		}
		pick := func(v, o int) int {
			if o > 0 {
				return o
			}
			return v
		}
		mem, chunk, seg = pick64(mem, o.MemoryBytesMax), pick64(chunk, o.ChunkBytesMax), pick64(seg, o.SegmentBytesMax)
		txns, rows, bytes = pick(txns, o.MaxBatchTxns), pick(rows, o.MaxBatchRows), pick(bytes, o.MaxBatchBytes)
	}
	return
}

func (h *harness) run() {
	h.hist = generate(h.sc.Seed, h.sim.Workload)
	h.db = newSimDB(h.now)
	h.db.useTables(h.hist.defs)
	h.accepted = map[string]bool{}
	h.chk = newChecker(h.hist, h.db, h.sim.Workload.Snapshot)
	if h.sim.Partitions > 0 {
		h.chk.unit = func(b []byte) ([]byte, error) {
			u, missing, err := h.rebuild(b, false)
			if err == nil && missing != nil {
				err = fmt.Errorf("manifest names chunks the data partitions do not hold: %v", missing)
			}
			return u, err
		}
	}
	h.db.onCommit = h.chk.afterCommit
	h.db.wrongShape = func(detail string) {
		h.chk.fail(InvSchemaPinned, "a row reached the target under a shape the target's table does not have (refused: %s)", detail)
	}
	h.db.point = h.at
	h.db.ddlApart = h.opts.Mutations.DDLApart
	h.db.detect = h.detect
	h.stats.Txns = len(h.hist.txns)
	for _, t := range h.hist.txns {
		if h.hist.expected(t) && t.rows > 0 {
			h.stats.Delivered++
		}
	}
	h.pins = &simPins{pins: map[string]uint64{}, shapes: map[string]schemachange.Shape{}, ignore: h.opts.Mutations.IgnoreDrift}
	h.slot = h.hist.cp
	if dir, err := os.MkdirTemp("", "trellara-sim-spill-"); err == nil {
		h.spillDir = dir
	}
	h.fs = segmentlogtest.NewFS()
	h.fs.SetSyncLies(h.opts.Mutations.StorageLies)
	_, _, seg, _, _, _ := h.bounds()
	h.logOpts = segmentlog.Options{SegmentBytesMax: seg, FrameBytesMax: h.sim.FrameBytesMax, Retention: h.sim.Retention,
		IndexIntervalBytes: 256, Clock: h.now}
	// Setting up the flow is not under test: no faults yet.
	h.quiet = true
	err := h.openLog()
	// The flow's consumer is registered before capture publishes anything,
	// so retention keeps what it has not read. (internal/flow registers it
	// on the applier's first run instead; see docs/CORRECTNESS.md.)
	if err == nil {
		err = h.lg.CommitCursor(cursorName, 0)
	}
	h.quiet = false
	if err != nil {
		h.chk.fail(InvLiveness, "set up the log: %v", err)
		return
	}
	h.tracef("sim", "scenario %s simulation %s seed %d: %d transactions, %d messages", h.sc.ID, h.sim.Name, h.sc.Seed,
		len(h.hist.txns), len(h.hist.wires))

	stepsMax := h.opts.StepsMax
	if stepsMax == 0 {
		stepsMax = 2000 + 40*len(h.hist.wires)/max(1, h.sim.Burst)
	}
	for h.step = 1; h.step <= stepsMax; h.step++ {
		h.nowUS += 1000
		if h.enospcUntil > 0 && h.step >= h.enospcUntil {
			h.enospcUntil = 0
			h.fs.SetSpace(-1)
			h.tracef("fs", "disk space freed")
		}
		h.handoff()
		if h.finished() {
			break
		}
		if h.rng.IntN(2) == 0 {
			h.relayStep()
		} else {
			h.applierStep()
		}
		if h.pendingImage != nil {
			h.machineCrash(h.pendingImage)
		}
		if len(h.chk.violations) > 0 && !h.failed {
			h.failed = true
			h.tracef("check", "violation: %s: %s", h.chk.violations[0].Invariant, h.chk.violations[0].Detail)
		}
	}
	if !h.finished() {
		pos, n := 0, 0
		if h.relay != nil {
			pos, n = h.relay.pos, len(h.relay.stream)
		}
		cur, _, _ := h.lg.CursorOffset(cursorName)
		h.chk.fail(InvLiveness, "no end after %d steps: relay at message %d of %d, applier cursor %d of %d, capture stopped: %v, apply stopped: %v",
			stepsMax, pos, n, cur, h.lg.NextOffset(), h.relayStop, h.appStop)
	}
	h.evaluate()
}

// finished: capture delivered everything (or stopped for good) and the
// applier drained the log (or stopped for good).
func (h *harness) finished() bool {
	if h.hist.recover && h.appStop == nil && h.relayStop == nil && !h.db.handedOff(tAccounts.name) {
		return false
	}
	relayEnd := h.relayStop != nil || h.relayDone
	if !relayEnd {
		return false
	}
	if h.appStop != nil {
		return true
	}
	if !h.appIdle || h.app == nil {
		return false
	}
	cur, ok, err := h.lg.CursorOffset(cursorName)
	return err == nil && ok && cur == h.lg.NextOffset()
}

func (h *harness) evaluate() {
	sc := h.sc
	switch sc.Expect.Stop {
	case "":
		if h.relayStop != nil {
			h.chk.fail(InvExpectedError, "capture stopped: %v", h.relayStop)
		}
		if h.appStop != nil {
			h.chk.fail(InvExpectedError, "apply stopped: %v", h.appStop)
		}
	case "schema-drift":
		var d *capture.SchemaDriftError
		if !errors.As(h.relayStop, &d) {
			h.chk.fail(InvSchemaPinned, "capture did not stop on the schema drift (stopped: %v)", h.relayStop)
		}
	case "past-retention":
		var p *segmentlog.PastRetentionError
		// The recovery is the flow's to add (segmentlog.AddRecovery in
		// internal/flow); the simulator checks the error itself.
		if !errors.As(h.appStop, &p) {
			h.chk.fail(InvExpectedError, "apply did not stop with a past-retention error (stopped: %v)", h.appStop)
		}
	case "corruption":
		if !segmentlog.IsCorruption(h.appStop) {
			h.chk.fail(InvExpectedError, "apply did not stop with a corruption error (stopped: %v)", h.appStop)
		}
	}
	for _, d := range sc.Expect.Detect {
		if h.detected[d] == 0 {
			h.chk.fail(InvExpectedError, "expected to observe %q, never did", d)
		}
	}
	if h.relay != nil {
		h.relayStats()
	}
	h.stats.Barriers = h.db.barriers
	for _, e := range sc.Expect.Exercise {
		if h.stats.exercised(e) == 0 {
			h.chk.fail(InvExpectedError, "the run never exercised %q", e)
		}
	}
	h.chk.scan(h.lg)
	h.chk.final(sc.Expect.Stop == "")
	h.stats.LogEntries = int(h.lg.NextOffset())
	h.stats.TargetCommits = h.db.commits
	h.stats.Quarantined = len(h.db.quarantine)
	h.tracef("sim", "end: %d violations, log %d entries, %d target commits, checkpoint %s", len(h.chk.violations),
		h.lg.NextOffset(), h.db.commits, envelope.FormatLSN(h.db.checkpoint.CommitLSN))
}

// relayStats adds the session's assembly counters to the run's.
func (h *harness) relayStats() {
	a := h.relay.sess.Stats().Assembler
	h.stats.Spilled += int(a.Spilled)
	h.stats.Chunked += int(a.ChunkedTxns)
	h.stats.AbortedSubxacts += int(a.AbortedSubxid)
}

func (h *harness) shutdown() {
	if h.relay != nil {
		h.relay.sess.Close()
		h.relay = nil
	}
	if h.lg != nil {
		_ = h.lg.Close()
	}
	if h.spillDir != "" {
		_ = os.RemoveAll(h.spillDir)
	}
}

// --- the log ------------------------------------------------------------

// openLog opens the log on h.fs. A power loss or failed fsync during
// Open's own repair is retried the way a restarted process would: on the
// image the crash left, or on the same disk.
func (h *harness) openLog() error {
	var lg *segmentlog.Log
	var rep *segmentlog.RepairReport
	var err error
	for range 10 {
		o := h.logOpts
		o.FS = h.fs
		h.fs.SetHooks(segmentlogtest.Hooks{Sync: h.onSync})
		lg, rep, err = segmentlog.Open(logDir, o)
		if err == nil {
			break
		}
		if segmentlog.IsCorruption(err) {
			return err
		}
		h.tracef("log", "open failed: %s", errLine(err))
		if img := h.pendingImage; img != nil {
			h.pendingImage = nil
			h.fs = img
			h.fs.SetSyncLies(h.opts.Mutations.StorageLies)
		}
	}
	if err != nil {
		return err
	}
	if rep != nil {
		h.detect("repair")
		h.tracef("log", "repaired: %s", rep)
	}
	h.lg = lg
	return nil
}

// onSync is the filesystem's fsync hook. It runs on the log's flusher
// goroutine (or in CommitCursor) while the harness waits for it.
func (h *harness) onSync(path string) error {
	point := "fs.sync.segment"
	if strings.Contains(path, "/cursors/") {
		point = "fs.sync.cursor"
	}
	switch h.at(point) {
	case actPowerLoss:
		h.pendingImage = h.fs.CrashImage(nil)
		return errMachineDied
	case actTornLoss:
		h.pendingImage = h.fs.CrashImage(h.frng)
		return errMachineDied
	case actFsyncFail:
		h.detect("fsync-failure")
		return errEIO
	}
	return nil
}

// reopenLog is a process restart without power loss: the log instance is
// unusable (a failed fsync), so everything that uses it starts again.
func (h *harness) reopenLog() {
	h.killRelay("log reopened")
	h.killApplier("log reopened")
	_ = h.lg.Close()
	if err := h.openLog(); err != nil {
		h.chk.fail(InvLiveness, "reopen the log: %v", err)
		h.relayStop, h.appStop = err, err
		return
	}
	h.chk.rescan(h.lg)
	h.chk.acked(h.slot, true)
	h.stats.Crashes++
}

// machineCrash loses power: the log's directory becomes img, every
// process restarts; the target (another machine) keeps what it committed.
func (h *harness) machineCrash(img *segmentlogtest.FS) {
	h.pendingImage = nil
	h.tracef("crash", "power loss")
	h.killRelay("power loss")
	h.killApplier("power loss")
	_ = h.lg.Close()
	h.fs = img
	h.fs.SetSyncLies(h.opts.Mutations.StorageLies)
	h.enospcUntil = 0
	if err := h.openLog(); err != nil {
		if segmentlog.IsCorruption(err) {
			h.chk.fail(InvNoLoss, "after the power loss the log does not open: %v", err)
		} else {
			h.chk.fail(InvLiveness, "after the power loss the log does not open: %v", err)
		}
		h.relayStop, h.appStop = err, err
		return
	}
	h.chk.rescan(h.lg)
	h.chk.acked(h.slot, true)
	h.stats.Crashes++
}

// takeover is `trellara reseed --config F --table T` for a blocked change
// of T: the reseed records itself on the target (its shadow table in the
// source's current shape, replace set), then the takeover in the flow's
// state directory; capture, restarted by the service, meets the change
// again and emits a reseed barrier.
func (h *harness) takeover(drift *capture.SchemaDriftError) {
	rel := drift.Relation
	if t := h.hist.driftTxn; drift.LSN != t.commitLSN || drift.Xid != t.xid {
		h.chk.fail(InvSchemaPinned, "capture stopped on %s at LSN %s (xid %d); the first transaction under the new shape commits at %s (xid %d)",
			rel, envelope.FormatLSN(drift.LSN), drift.Xid, envelope.FormatLSN(t.commitLSN), t.xid)
	}
	if k := drift.Plan.Kinds(); !strings.Contains(k, string(h.hist.spec.kind)) {
		h.chk.fail(InvSchemaPinned, "capture stopped on %s classified as %s, not %s", rel, k, h.hist.spec.kind)
	}
	h.db.recordReseed(rel)
	h.accepted[rel] = true
	h.detect("reseed")
	h.tracef("reseed", "%s: a reseed takes over %s at %s", rel, drift.Plan.Kinds(), envelope.FormatLSN(drift.LSN))
}

// handoff ends a reseed that took over a blocked change: once capture
// delivered everything and the applier applied it, one target transaction
// replaces the table by the reseed's copy, the source's table in its
// current shape (the chunks and the stream's writes to the shadow table,
// which the simulated target does not model one by one).
func (h *harness) handoff() {
	sp := h.hist.spec
	if !h.hist.recover || !h.relayDone || h.app == nil || !h.appIdle || !h.db.reseeding(tAccounts.name) {
		return
	}
	if cur, ok, err := h.lg.CursorOffset(cursorName); err != nil || !ok || cur != h.lg.NextOffset() {
		return
	}
	h.db.handoff(sp.after, h.hist.final.tables[tAccounts.name].rows)
	h.detect("reseed-handoff")
	h.tracef("reseed", "%s handed off at %s", tAccounts.name, envelope.FormatLSN(h.db.checkpoint.CommitLSN))
}

// --- capture ------------------------------------------------------------

// simPins is the relay's pin store. Pins are durable the moment they are
// taken, so it survives crashes.
type simPins struct {
	pins   map[string]uint64
	shapes map[string]schemachange.Shape
	ignore bool // Mutations.IgnoreDrift
}

func (p *simPins) PinnedShape(r string) (schemachange.Shape, bool) {
	if p.ignore {
		return schemachange.Shape{}, false
	}
	sh, ok := p.shapes[r]
	return sh, ok
}

func (p *simPins) PinShape(r string, fp uint64, sh schemachange.Shape) error {
	p.pins[r], p.shapes[r] = fp, sh
	return nil
}

// catalog is the source catalog's facts about the simulated tables. The
// catalog is the source's now: accounts has its new shape once capture
// has reached the transaction that first uses it (the source commits the
// DDL just before).
func (h *harness) catalog(relation string) (map[string]schemachange.Facts, error) {
	for _, d := range h.hist.defs {
		if d.name != relation {
			continue
		}
		if sp := h.hist.spec; sp != nil && d == sp.before && h.hist.ddlPos != 0 && h.sentPos >= h.hist.ddlPos {
			d = sp.after
		}
		return factsOf(d), nil
	}
	return nil, fmt.Errorf("sim: relation %s does not exist", relation)
}

func (p *simPins) Pinned(r string) (uint64, bool) {
	if p.ignore {
		return 0, false
	}
	v, ok := p.pins[r]
	return v, ok
}

func (p *simPins) Pin(r string, fp uint64) error { p.pins[r] = fp; return nil }

// simTransport is the local log as the relay's transport, with the
// publish faults.
type simTransport struct{ h *harness }

func (t simTransport) Publish(ctx context.Context, p []byte) (uint64, error) {
	if t.h.sim.Partitions > 0 {
		if err := t.publishPartitioned([][]byte{p}); err != nil {
			return 0, err
		}
		return t.h.lg.NextOffset() - 1, nil
	}
	return transport.Local{Log: t.h.lg}.Publish(ctx, p)
}

func (t simTransport) Last(ctx context.Context) ([]byte, bool, error) {
	b, ok, err := transport.Local{Log: t.h.lg}.Last(ctx)
	if err != nil || !ok || t.h.sim.Partitions == 0 {
		return b, ok, err
	}
	b, _, err = t.h.rebuild(b, false)
	return b, err == nil, err
}

func (t simTransport) PublishBatch(_ context.Context, ps [][]byte) error {
	h := t.h
	if h.sim.Partitions > 0 {
		return t.publishPartitioned(ps)
	}
	if h.opts.Mutations.AckBeforeDurable {
		prev := h.deferred
		h.deferred = nil
		for _, p := range ps {
			h.deferred = append(h.deferred, slices.Clone(p))
		}
		if len(prev) > 0 {
			_, err := h.lg.AppendBatch(prev)
			return err
		}
		return nil
	}
	act := h.at("relay.publish")
	if hasChunks(ps) {
		if a := h.at("relay.publish-chunks"); a != "" {
			act = a
		}
	}
	if h.relay != nil && h.relay.driftCommitted {
		// The publish of the batch that holds the DDL barrier.
		if a := h.at("relay.publish-barrier"); a != "" {
			act = a
		}
	}
	switch act {
	case actAmbiguous:
		if _, err := h.lg.AppendBatch(ps); err != nil {
			return err
		}
		h.detect("ambiguous-ack")
		return errAmbiguous
	case actPartial:
		if k := h.frng.IntN(len(ps)); k > 0 {
			if _, err := h.lg.AppendBatch(ps[:k]); err != nil {
				return err
			}
			h.tracef("fault", "%d of %d units durable when the relay died", k, len(ps))
		}
		return errRelayDied
	}
	_, err := h.lg.AppendBatch(ps)
	return err
}

func hasChunks(ps [][]byte) bool {
	for _, p := range ps {
		if e, err := envelope.Decode(p); err == nil && e.Boundary.Kind == pb.UnitKind_UNIT_KIND_CHUNK {
			return true
		}
	}
	return false
}

func (h *harness) startRelay() {
	tr := simTransport{h}
	res, err := capture.ResumeFrom(h.ctx, tr)
	if errors.Is(err, segmentlog.ErrMustReopen) {
		// The applier's failed cursor fsync poisoned the shared log.
		h.tracef("relay", "resume failed: %s", errLine(err))
		h.detect("fatal")
		h.reopenLog()
		return
	}
	if err != nil {
		h.tracef("relay", "resume failed: %v", err)
		h.relayStop = err
		h.chk.fail(InvLiveness, "the relay cannot resume from the log: %v", err)
		return
	}
	acked, _ := h.acks.Load()
	// The flow's start rules, with the simulated flow's state: with a
	// snapshot workload the flow owns its slot, and creating it, taking
	// the snapshot and writing the marker have no fault point between
	// them, so the slot exists exactly when the marker does. Without one
	// the slot predates the source's history, which an empty log then
	// captures whole.
	start := capture.Start{SlotExists: !h.sim.Workload.Snapshot || h.snapshotDone, OwnsSlot: h.sim.Workload.Snapshot,
		SnapshotDone: h.snapshotDone, Log: res, SlotConfirmed: h.slot, Acked: acked, FromSlot: !h.sim.Workload.Snapshot}
	switch act := capture.DecideStart(start); act {
	case capture.StartResume:
	case capture.StartSnapshot:
		h.inSnapshot = true
		err := h.publishSnapshot(tr)
		h.inSnapshot = false
		if err != nil {
			h.chk.fail(InvLiveness, "initial snapshot: %v", err)
			h.relayStop = err
			return
		}
		h.snapshotDone = true // the flow's durable snapshot.done marker
		res = capture.AfterSnapshot(h.hist.cp)
		h.tracef("relay", "snapshot published at %s", envelope.FormatLSN(h.hist.cp))
		h.chk.scan(h.lg)
		if h.at("relay.snapshot-published") == actCrash {
			h.tracef("crash", "relay after the snapshot, before streaming")
			h.stats.RelayRestarts++
			return
		}
	case capture.StartGap:
		// The slot was acknowledged past the newest unit in the log and
		// past the AckStore's record. Whether anything was really lost is
		// the checker's question; either way the flow does not restart.
		missing := false
		for _, t := range h.hist.txns {
			if t.rows > 0 && t.commitLSN > res.DurableEnd && t.commitLSN < h.slot && !h.chk.inLog[t.commitLSN] {
				missing = true
			}
		}
		if missing {
			h.chk.fail(InvAckDurable, "the slot is confirmed at %s but the log holds transactions only through %s",
				envelope.FormatLSN(h.slot), envelope.FormatLSN(res.DurableEnd))
		} else {
			h.chk.fail(InvLiveness, "the flow refuses to resume (relay.GapError: slot confirmed at %s, newest unit in the log ends at %s) "+
				"although no transaction with data lies between: an idle keepalive acknowledged past the log's newest unit",
				envelope.FormatLSN(h.slot), envelope.FormatLSN(res.DurableEnd))
		}
		h.relayStop = &capture.GapError{Slot: "sim", SlotConfirmedLSN: h.slot, TransportDurable: res.DurableEnd}
		return
	default:
		h.chk.fail(InvLiveness, "the flow refuses to start (%s): slot confirmed at %s, log %+v", act, envelope.FormatLSN(h.slot), res)
		h.relayStop = fmt.Errorf("start refused: %s", act)
		return
	}
	from := max(res.DurableEnd, h.slot)
	mem, chunk, _, _, _, _ := h.bounds()
	sess, err := relay.NewSession(nil, tr, res, relay.Options{SourceID: simSourceID, Slot: "sim",
		Assembler: h.assemblerOptions(mem, chunk),
		Logger:    slog.New(slog.DiscardHandler),
		// The flow records such acknowledgements durably before sending
		// them (its AckStore); the harness keeps the record across crashes
		// the same way.
		Acks: &h.acks})
	if err != nil {
		h.relayStop = fmt.Errorf("relay options: %w", err)
		return
	}
	h.relay = &relayProc{sess: sess, stream: h.hist.stream(from)}
	h.tracef("relay", "start: resume durable-end %s skip-through %s, streaming from %s (%d messages)",
		envelope.FormatLSN(res.DurableEnd), envelope.FormatLSN(res.SkipThrough), envelope.FormatLSN(from), len(h.relay.stream))
}

// assemblerOptions are the relay's, as a flow sets them: with a classified
// change (a compatible drift, Workload.Change) the table is configured and
// the catalog answers, and a blocked change a reseed took over
// (h.accepted) goes on as a reseed barrier.
func (h *harness) assemblerOptions(mem, chunk int64) capture.AssemblerOptions {
	o := capture.AssemblerOptions{MemoryBytesMax: mem, ChunkBytesMax: chunk, SpillDir: h.spillDir, Pins: h.pins,
		InspectCommand: shell.Trellara("status", simConfig, "--view", "diagnostics")}
	if h.hist.spec != nil {
		o.Catalog = h.catalog
		w, ignore := h.sim.Workload, h.opts.Mutations.IgnoreRenames
		o.Policy = func(relation string) schemachange.Policy {
			p := w.policy(relation)
			if ignore {
				p.Renames = nil
			}
			return p
		}
		o.Accepted = func(relation string) bool { return h.accepted[relation] }
	}
	return o
}

// publishSnapshot writes the initial copy the way relay.Snapshot does:
// per table SNAPSHOT batches at the consistent point, then SNAPSHOT_END.
func (h *harness) publishSnapshot(tr simTransport) error {
	cp := h.hist.cp
	for _, d := range h.hist.defs {
		rel := capture.RelationFromPgoutput(pgRelation(d, 0))
		name := d.name
		_ = h.pins.Pin(name, rel.Fingerprint)
		t := h.hist.initial.tables[name]
		keys := make([]string, 0, len(t.rows))
		for k := range t.rows {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var batch uint32
		publish := func(kind pb.UnitKind, rows []*pb.Row) error {
			e := &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: simSourceID, CommitLsn: cp, EndLsn: cp,
				CommitTimeUnixMicros: commitTime0, Relations: []*pb.Relation{rel}, Rows: rows,
				Boundary: &pb.Boundary{Kind: kind, ChunkIndex: batch, SnapshotRelation: name}}
			envelope.Seal(e)
			b, err := envelope.Encode(e)
			if err != nil {
				return err
			}
			if _, err := tr.Publish(h.ctx, b); err != nil {
				return err
			}
			if kind == pb.UnitKind_UNIT_KIND_SNAPSHOT {
				batch++
			}
			return nil
		}
		var rows []*pb.Row
		for _, k := range keys {
			row := &pb.Row{Seq: uint64(len(rows)), Op: pb.Op_OP_INSERT}
			for _, v := range t.rows[k] {
				if v.null {
					row.NewTuple = append(row.NewTuple, &pb.Value{Kind: pb.ValueKind_VALUE_KIND_NULL})
				} else {
					row.NewTuple = append(row.NewTuple, &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(v.s)})
				}
			}
			rows = append(rows, row)
			if len(rows) == 4 {
				if err := publish(pb.UnitKind_UNIT_KIND_SNAPSHOT, rows); err != nil {
					return err
				}
				rows = nil
			}
		}
		if len(rows) > 0 {
			if err := publish(pb.UnitKind_UNIT_KIND_SNAPSHOT, rows); err != nil {
				return err
			}
		}
		if err := publish(pb.UnitKind_UNIT_KIND_SNAPSHOT_END, nil); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) killRelay(why string) {
	if h.relay == nil {
		return
	}
	h.relayStats()
	h.relay.sess.Close()
	h.relay = nil
	h.deferred = nil
	h.stats.RelayRestarts++
	h.tracef("crash", "relay: %s", why)
}

func (h *harness) relayFailed(err error) {
	h.tracef("relay", "error: %s", errLine(err))
	var drift *capture.SchemaDriftError
	switch {
	case h.pendingImage != nil:
		return // the machine crash follows
	case errors.As(err, &drift):
		h.detect("schema-drift")
		h.driftSeen++
		h.killRelay("stopped on schema drift")
		// Capture is stopped for good once everything committed before
		// the change is durable; until then the service restarts the
		// relay (a drift error does not flush what was assembled).
		done := true
		for _, t := range h.hist.txns {
			if t.rows > 0 && h.hist.beforeDrift(t) && !h.chk.inLog[t.commitLSN] {
				done = false
			}
		}
		switch {
		case h.driftSeen > 200:
			h.relayStop = err
		case done && h.hist.recover && !h.accepted[drift.Relation]:
			h.takeover(drift)
		case done && !h.hist.recover:
			h.relayStop = err
		}
	case errors.Is(err, segmentlog.ErrMustReopen):
		h.detect("fatal")
		h.reopenLog()
	case errors.Is(err, syscall.ENOSPC):
		h.detect("enospc")
		h.killRelay("publish failed: disk full")
	default:
		h.killRelay("publish failed")
	}
}

func (h *harness) relayStep() {
	if h.relayStop != nil || h.relayDone {
		return
	}
	if h.relay == nil {
		h.startRelay()
		return
	}
	r := h.relay
	n := 1 + h.rng.IntN(max(1, h.sim.Burst))
	first := r.pos
	for i := 0; i < n && r.pos < len(r.stream); i++ {
		if h.at("relay.message") == actCutStream {
			h.tracef("relay", "sent %d messages", r.pos-first)
			h.killRelay("replication connection dropped")
			return
		}
		w := r.stream[r.pos]
		r.pos++
		r.track(w)
		h.sentPos = max(h.sentPos, w.pos)
		err := r.sess.HandleCopyData(h.ctx, xlogData(w.pos, w.end, h.nowUS, w.data))
		if h.pendingImage != nil {
			return // the machine lost power while the relay was publishing
		}
		if err != nil {
			h.relayFailed(err)
			return
		}
		r.sentEnd = w.end
	}
	h.tracef("relay", "sent messages %d..%d of %d", first, r.pos, len(r.stream))
	// The server pauses: Run publishes what it assembled.
	if r.open != nil && strings.HasPrefix(r.open.kind, "big") && r.openRows*2 >= h.sim.Workload.BigRows && h.at("relay.mid-big-txn") == actCrash {
		h.killRelay("crash inside a large (spilled) transaction")
		return
	}
	if r.open != nil && r.open.streamed && h.at("relay.mid-stream") == actCrash {
		h.killRelay("crash inside a streamed transaction")
		return
	}
	if r.driftCommitted && h.at("relay.before-flush-barrier") == actCrash {
		h.killRelay("crash before publishing the DDL barrier")
		return
	}
	switch h.at("relay.before-flush") {
	case actCrash:
		h.killRelay("crash before publish")
		return
	case actENOSPC:
		h.fs.SetSpace(int64(h.arg))
		h.enospcUntil = h.step + 40
		h.tracef("fs", "disk full (%d bytes left)", h.arg)
	}
	err := r.sess.Flush(h.ctx)
	if h.pendingImage != nil {
		return // the machine lost power during the publish: nothing after it happened
	}
	if err != nil {
		h.relayFailed(err)
		return
	}
	h.chk.scan(h.lg)
	st := r.sess.Stats()
	h.tracef("relay", "flushed: %d units published, durable end %s", st.Published, envelope.FormatLSN(st.DurableEnd))
	crashAfter := h.at("relay.after-flush") == actCrash
	if r.bigCommitted && h.at("relay.after-flush-big") == actCrash {
		crashAfter = true
	}
	if r.streamCommitted && h.at("relay.after-flush-stream") == actCrash {
		crashAfter = true
	}
	if r.driftCommitted && h.at("relay.after-flush-barrier") == actCrash {
		crashAfter = true
	}
	r.bigCommitted, r.streamCommitted, r.driftCommitted = false, false, false
	if crashAfter {
		h.killRelay("crash after publish, before acknowledging")
		return
	}
	if h.sim.Retention.MaxBytes > 0 {
		h.retention()
	}
	atEnd := r.pos == len(r.stream)
	if r.pos > 0 && (atEnd || h.rng.IntN(3) > 0) {
		if err := r.sess.HandleCopyData(h.ctx, keepalive(r.sentEnd, h.nowUS)); err != nil {
			h.relayFailed(err)
			return
		}
		if h.at("relay.after-keepalive") == actCrash {
			h.killRelay("crash after a keepalive")
			return
		}
	}
	if atEnd || h.rng.IntN(2) == 0 {
		h.status()
	}
	if atEnd && r.open == nil && h.slot == r.sess.Stats().DurableEnd {
		h.relayDone = true
		h.tracef("relay", "caught up at %s", envelope.FormatLSN(h.slot))
		switch act := h.at("relay.done"); act {
		case actCorrupt:
			h.corruptSealed()
		case actCorruptIdx:
			h.corruptIndex()
		case actCorruptAcked, actCorruptAtEnd, actTornPast:
			h.damageNewest(act)
		}
	}
}

// status is a standby status update: the slot's confirmed position moves
// to what the relay may acknowledge.
func (h *harness) status() {
	if h.relay == nil {
		return
	}
	if d := h.relay.sess.Stats().DurableEnd; d > h.slot {
		h.slot = d
		h.tracef("relay", "acknowledged %s", envelope.FormatLSN(d))
		h.chk.acked(h.slot, false)
		h.stats.Acks++
	}
}

// track follows the open source transaction for the fault points.
func (r *relayProc) track(w *wire) {
	t := w.owner
	if t.aborted {
		return
	}
	if w.drift {
		r.driftOpen = true
	}
	if w == t.commit {
		if r.driftOpen {
			r.driftOpen, r.driftCommitted = false, true
		}
		r.open, r.openRows = nil, 0
		if strings.HasPrefix(t.kind, "big") {
			r.bigCommitted = true
		}
		if t.streamed {
			r.streamCommitted = true
		}
		return
	}
	if r.open != t {
		r.open, r.openRows = t, 0
	}
	r.openRows++
}

func (h *harness) retention() {
	rep, err := h.lg.ApplyRetention(h.now())
	if err != nil {
		h.tracef("log", "retention: %v", err)
		return
	}
	if len(rep.RemovedSegments) > 0 {
		h.tracef("log", "retention removed %d segments, first offset %d, expired cursors %v", len(rep.RemovedSegments), rep.FirstOffset, rep.ExpiredCursors)
	}
}

// corruptSealed damages a payload byte in the oldest sealed segment the
// applier has not read yet.
func (h *harness) corruptSealed() {
	segs := h.fs.Names(logDir, ".seg")
	cur, _, _ := h.lg.CursorOffset(cursorName)
	for i, name := range segs[:max(0, len(segs)-1)] {
		var base uint64
		fmt.Sscanf(strings.TrimSuffix(name[strings.LastIndexByte(name, '/')+1:], ".seg"), "%d", &base)
		if i == 0 || base < cur {
			continue
		}
		if h.fs.Flip(name, 32+32+8) {
			h.detect("corrupted")
			h.tracef("fault", "flipped a byte in %s", name)
			return
		}
	}
	h.unfire(actCorrupt)
}

// corruptIndex damages a sealed segment's index and restarts the process:
// Open must notice and rebuild it.
func (h *harness) corruptIndex() {
	idx := h.fs.Names(logDir, ".idx")
	if len(idx) == 0 {
		h.unfire(actCorruptIdx)
		return
	}
	h.fs.Flip(idx[0], len(h.fs.Bytes(idx[0]))/2)
	h.tracef("fault", "flipped a byte in %s", idx[0])
	h.reopenLog()
}

// damageNewest damages the newest segment at rest relative to the durable
// end (act says where) and restarts the process. Below the durable end
// the bytes were acknowledged: Open must refuse with a typed corruption
// error and leave every byte as it was. At or past it they never were:
// Open cuts them as a torn tail and nothing acknowledged is lost.
func (h *harness) damageNewest(act string) {
	segs := h.fs.Names(logDir, ".seg")
	d := h.fs.Bytes(logDir + "/DURABLE")
	if len(segs) == 0 || len(d) != 40 {
		h.unfire(act)
		return
	}
	name := segs[len(segs)-1]
	end := int(binary.LittleEndian.Uint64(d[16:24])) // committed bytes of the active segment
	b := h.fs.Bytes(name)
	switch act {
	case actCorruptAcked:
		if end <= 32 || end > len(b) {
			h.unfire(act)
			return
		}
		b[end-1] ^= 0xff
	case actCorruptAtEnd:
		b = append(b[:end], make([]byte, 64)...)
		for i := range 64 {
			b[end+i] = byte(h.frng.IntN(256))
		}
	case actTornPast:
		b = append(b, []byte("an unacknowledged, torn commit group")...)
	}
	h.fs.SetBytes(name, b)
	h.detect("corrupted")
	h.tracef("fault", "%s: damaged %s relative to its durable end at byte %d", act, name, end)
	if act != actCorruptAcked {
		h.reopenLog()
		return
	}
	h.killRelay("log reopened")
	h.killApplier("log reopened")
	_ = h.lg.Close()
	before := h.fs.Bytes(name)
	err := h.openLog()
	switch {
	case err == nil:
		h.chk.fail(InvNoLoss, "damage below the durable end of %s was opened as a torn tail: acknowledged entries cut", name)
		h.chk.rescan(h.lg)
		return
	case !segmentlog.IsCorruption(err):
		h.chk.fail(InvLiveness, "reopen the log: %v", err)
	case !bytes.Equal(before, h.fs.Bytes(name)):
		h.chk.fail(InvNoLoss, "the refused Open changed %s", name)
	default:
		h.detect("corruption")
	}
	h.relayStop, h.appStop = err, err
}

// --- apply --------------------------------------------------------------

// logFeed is the applier's apply.PollSource over the log, with the
// delivery faults of a transport.
type logFeed struct {
	h       *harness
	rd      *segmentlog.Reader
	pending []entry // deliveries injected ahead of the reader
	held    *entry  // partitioned mode: the manifest at the barrier
}

type entry struct {
	offset  uint64
	payload []byte
}

func (f *logFeed) Poll(ctx context.Context) (uint64, []byte, bool, error) {
	if f.h.sim.Partitions == 0 {
		return f.poll(ctx)
	}
	if f.held == nil {
		off, b, ok, err := f.poll(ctx)
		if err != nil || !ok {
			return off, b, ok, err
		}
		f.held = &entry{off, b}
	}
	b, missing, err := f.h.rebuild(f.held.payload, true)
	if err != nil {
		return 0, nil, false, err
	}
	if missing != nil {
		f.h.detect("barrier-held")
		f.h.tracef("apply", "manifest at offset %d held at the barrier: waiting for %v", f.held.offset, missing)
		return 0, nil, false, nil
	}
	e := f.held
	f.held = nil
	return e.offset, b, true, nil
}

func (f *logFeed) poll(ctx context.Context) (uint64, []byte, bool, error) {
	if len(f.pending) > 0 {
		e := f.pending[0]
		f.pending = f.pending[1:]
		return e.offset, e.payload, true, nil
	}
	if f.rd.Offset() >= f.h.lg.NextOffset() {
		return 0, nil, false, nil
	}
	off, b, err := f.rd.Next(ctx)
	if err != nil {
		return 0, nil, false, err
	}
	return off, b, true, nil
}

func (f *logFeed) Seek(offset uint64) error {
	f.pending, f.held = nil, nil
	_ = f.rd.Close()
	f.rd = f.h.lg.NewReader(offset)
	return nil
}

// peekChunks returns the entries of the chunk sequence starting at the
// feed's position, if one starts there and is complete in the log.
func (f *logFeed) peekChunks() []entry {
	if len(f.pending) > 0 {
		return nil
	}
	rd := f.h.lg.NewReader(f.rd.Offset())
	defer rd.Close()
	var out []entry
	for rd.Offset() < f.h.lg.NextOffset() {
		off, b, err := rd.Next(context.Background())
		if err != nil {
			return nil
		}
		e, err := envelope.Decode(b)
		if err != nil || e.Boundary.Kind != pb.UnitKind_UNIT_KIND_CHUNK || int(e.Boundary.ChunkIndex) != len(out) {
			return nil
		}
		out = append(out, entry{off, b})
		if e.Boundary.ChunkIndex+1 == e.Boundary.ChunkCount {
			if len(out) < 3 {
				return nil
			}
			return out
		}
	}
	return nil
}

// simCursor commits the applier's cursor in the log.
type simCursor struct{ h *harness }

func (c *simCursor) Commit(offset uint64) error {
	act := c.h.at("applier.before-cursor")
	if c.h.chk.chunkEnd[offset] {
		if a := c.h.at("applier.before-cursor-chunked"); a != "" {
			act = a
		}
	}
	if act == actCrash {
		return errApplierDied
	}
	return transport.LocalCursor{Log: c.h.lg, Name: cursorName}.Commit(offset)
}

func (h *harness) killApplier(why string) {
	if h.app == nil {
		return
	}
	h.app.conn.kill()
	_ = h.app.feed.rd.Close()
	h.app = nil
	h.appIdle = false
	h.stats.ApplierRestarts++
	h.tracef("crash", "applier: %s", why)
}

func (h *harness) startApplier() {
	if h.at("applier.start") == actCrash {
		h.tracef("crash", "applier died while starting")
		h.stats.ApplierRestarts++
		return
	}
	_, _, _, txns, rows, bytes := h.bounds()
	conn := h.db.connect()
	conn.mutations = h.opts.Mutations.Apply
	a, err := apply.NewWithTarget(conn, apply.Config{Flow: simFlow, SourceID: simSourceID, MaxBatchTxns: txns, MaxBatchRows: rows,
		MaxBatchBytes: bytes, ConfigPath: simConfig, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.appStop = err
		h.chk.fail(InvLiveness, "applier config: %v", err)
		return
	}
	if err := a.Open(h.ctx); err != nil {
		h.tracef("apply", "start failed: %s", errLine(err))
		return
	}
	rd, err := h.lg.NewCursorReader(cursorName)
	if err != nil {
		conn.kill()
		h.applierFailed(err)
		return
	}
	h.app = &applierProc{a: a, conn: conn, feed: &logFeed{h: h, rd: rd}, cur: &simCursor{h}}
	cp := a.Checkpoint()
	h.tracef("apply", "start: checkpoint %s, cursor %d", envelope.FormatLSN(cp.CommitLSN), rd.Offset())
}

func (h *harness) applierStep() {
	if h.appStop != nil {
		return
	}
	if h.app == nil {
		if lag := h.sim.LagApplier; lag > 0 && !h.relayDone && h.relayStop == nil {
			if h.relay == nil || h.relay.pos*100 < lag*len(h.relay.stream) {
				return
			}
		}
		h.startApplier()
		return
	}
	p := h.app
	switch h.at("applier.step") {
	case actStorm:
		// The consumer's position goes back (a lost cursor write, a
		// transport redelivering from an older offset) and it restarts:
		// everything since is delivered again.
		cur, _, _ := h.lg.CursorOffset(cursorName)
		to := max(h.lg.FirstOffset(), cur-min(cur, uint64(h.arg)))
		if err := h.lg.ResetCursor(cursorName, to); err != nil {
			h.tracef("fault", "cursor reset failed: %s", errLine(err))
		}
		h.tracef("fault", "consumer replays from offset %d (cursor was %d)", to, cur)
		h.killApplier("consumer restarted at an older offset")
		return
	case actRestartFeed:
		cur, _, _ := h.lg.CursorOffset(cursorName)
		_ = p.feed.Seek(cur)
		h.tracef("fault", "feed reconnects at the cursor, offset %d", cur)
	}
	if h.wants("applier.chunks") {
		if seq := p.feed.peekChunks(); seq != nil {
			switch h.at("applier.chunks") {
			case actSwapChunks:
				seq[1], seq[2] = seq[2], seq[1]
				p.feed.deliver(seq)
			case actFinalFirst:
				last := seq[len(seq)-1]
				p.feed.deliver(append([]entry{last}, seq[:len(seq)-1]...))
			}
		}
	}
	ok, err := p.a.Step(h.ctx, p.feed, p.cur)
	if h.pendingImage != nil {
		return
	}
	if err != nil {
		h.applierFailed(err)
		return
	}
	h.appIdle = !ok
	if ok {
		cp := p.a.Checkpoint()
		h.tracef("apply", "applied through %s (offset %d)", envelope.FormatLSN(cp.CommitLSN), cp.Offset)
	}
}

// deliver makes the feed return entries next, in this order, and then
// continue after the last of them.
func (f *logFeed) deliver(es []entry) {
	end := es[0].offset
	for _, e := range es {
		end = max(end, e.offset)
	}
	_ = f.rd.Close()
	f.rd = f.h.lg.NewReader(end + 1)
	f.pending = es
	f.h.tracef("fault", "feed delivers offsets %v", offsetsOf(es))
}

func offsetsOf(es []entry) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.offset
	}
	return out
}

func (h *harness) applierFailed(err error) {
	h.tracef("apply", "error: %s", errLine(err))
	var qe *apply.QuarantinedError
	var pr *segmentlog.PastRetentionError
	switch {
	case errors.As(err, &qe):
		h.detect("quarantine")
		key := "transaction/" + envelope.FormatLSN(qe.CommitLSN)
		if !h.chk.quarantined(key) {
			h.appStop = err
			h.killApplier("quarantined a compatible transaction")
			return
		}
		// The operator repairs the target (relaxes the constraint for
		// this value) and restarts the flow, which replays the unit.
		if t := h.hist.byLSN[qe.CommitLSN]; t != nil {
			for _, v := range h.badValues(t) {
				h.db.allowed[v] = true
			}
		}
		h.killApplier("flow stopped on quarantine; target repaired")
	case apply.IsTransient(err):
		h.detect("transient")
		h.killApplier("target connection lost")
	case errors.Is(err, apply.ErrSequence):
		h.detect("sequence")
		h.killApplier("units out of sequence")
	case errors.As(err, &pr):
		h.detect("past-retention")
		h.appStop = err
		h.killApplier("past retention")
	case segmentlog.IsCorruption(err):
		h.detect("corruption")
		h.appStop = err
		h.killApplier("log damaged")
	case errors.Is(err, segmentlog.ErrMustReopen):
		h.detect("fatal")
		h.reopenLog()
	case errors.Is(err, errApplierDied):
		h.killApplier("died after the target commit, before the cursor")
	case errors.Is(err, syscall.ENOSPC):
		h.detect("enospc")
		h.killApplier("cursor write failed: disk full")
	default:
		h.chk.fail(InvExpectedError, "the applier stopped: %v", err)
		h.appStop = err
		h.killApplier("stopped")
	}
}

// badValues are the values of t that the target refuses until repaired.
func (h *harness) badValues(t *htxn) []string {
	var out []string
	for _, w := range h.hist.wires {
		if w.owner != t {
			continue
		}
		var cols []pgoutput.Column
		switch m := w.msg.(type) {
		case *pgoutput.Insert:
			cols = m.New
		case *pgoutput.Update:
			cols = m.New
		}
		for _, c := range cols {
			if s := string(c.Data); strings.HasPrefix(s, "incompatible-") {
				out = append(out, s)
			}
		}
	}
	return out
}

// errLine is an error on one line, for the trace.
func errLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// kindOf names a stopping error.
func kindOf(err error) string {
	var d *capture.SchemaDriftError
	var p *segmentlog.PastRetentionError
	switch {
	case errors.As(err, &d):
		return "schema drift"
	case errors.As(err, &p):
		return "past retention"
	case segmentlog.IsCorruption(err):
		return "corruption"
	}
	return "error"
}

// simChunk is a chunk record on a simulated data partition.
type simChunk struct {
	value     []byte
	checksum  uint64 // the unit's, as the record's header carries it
	visibleAt int    // the first step a consumer can read it
}

// publishPartitioned is PublishBatch in Kafka partitioned mode: every
// unit's chunks go to the data partitions, then the manifests to the log,
// as transport/kafka's producer writes them, with the broker's faults.
func (t simTransport) publishPartitioned(ps [][]byte) error {
	h := t.h
	n := h.sim.Partitions
	if h.parts == nil {
		h.parts = make([][]simChunk, n)
	}
	act := h.at("relay.publish")
	type unitChunks struct{ refs []manifest.ChunkRef }
	var mans [][]byte
	var units []unitChunks
	for _, p := range ps {
		e, rows, err := manifest.Split(p, n)
		if err != nil {
			return err
		}
		m := &manifest.Manifest{Skeleton: proto.Clone(e).(*pb.Envelope), Checksum: e.GetChecksum(), From: make([]int64, n)}
		m.Skeleton.Rows, m.Skeleton.Checksum = nil, 0
		for i := range n {
			m.From[i] = int64(len(h.parts[i]))
		}
		for part := int32(1); part <= int32(n); part++ {
			if len(rows[part]) == 0 {
				continue
			}
			v, err := manifest.EncodeChunk(rows[part])
			if err != nil {
				return err
			}
			m.Chunks = append(m.Chunks, manifest.ChunkRef{Partition: part, Offset: int64(len(h.parts[part-1])), Rows: len(rows[part])})
			h.parts[part-1] = append(h.parts[part-1], simChunk{value: v, checksum: e.GetChecksum()})
		}
		b, err := manifest.Encode(m)
		if err != nil {
			return err
		}
		mans = append(mans, b)
		units = append(units, unitChunks{m.Chunks})
	}
	delay := func(c manifest.ChunkRef) { h.parts[c.Partition-1][c.Offset].visibleAt = h.step + h.arg }
	switch act {
	case actAmbiguous:
		if _, err := h.lg.AppendBatch(mans); err != nil {
			return err
		}
		h.detect("ambiguous-ack")
		return errAmbiguous
	case actPartial:
		// The relay dies between its chunks and its manifests: a prefix
		// of the manifests is durable, the rest of the chunks are named by
		// none.
		if k := h.frng.IntN(len(mans)); k > 0 {
			if _, err := h.lg.AppendBatch(mans[:k]); err != nil {
				return err
			}
			h.tracef("fault", "%d of %d manifests durable when the relay died", k, len(mans))
		}
		return errRelayDied
	case actBrokerRestart:
		// The broker restarts after the chunks are durable, before the
		// manifests: the produce fails and every consumer reconnects.
		h.detect("broker-restart")
		if h.app != nil {
			cur, _, _ := h.lg.CursorOffset(cursorName)
			_ = h.app.feed.Seek(cur)
		}
		h.tracef("fault", "broker restart: %d units' chunks durable, no manifest", len(mans))
		return errRelayDied
	case actManifestFirst:
		for _, u := range units {
			for _, c := range u.refs {
				delay(c)
			}
		}
	case actChunkWithheld:
		for _, u := range units {
			if len(u.refs) > 1 {
				delay(u.refs[len(u.refs)-1])
				break
			}
		}
	}
	_, err := h.lg.AppendBatch(mans)
	return err
}

// rebuild is the reader's side of partitioned mode: the unit of manifest
// b, or the chunks it still waits for (visible: only what a consumer can
// read at this step).
func (h *harness) rebuild(b []byte, visible bool) ([]byte, []manifest.ChunkRef, error) {
	m, err := manifest.Decode(b)
	if err != nil {
		return nil, nil, err
	}
	var missing []manifest.ChunkRef
	var rows [][]*pb.Row
	for _, c := range m.Chunks {
		part := h.parts[c.Partition-1]
		if int(c.Offset) >= len(part) || visible && part[c.Offset].visibleAt > h.step {
			missing = append(missing, c)
			continue
		}
		ch := part[c.Offset]
		if ch.checksum != m.Checksum {
			return nil, nil, fmt.Errorf("partition %d offset %d holds a chunk of another unit", c.Partition, c.Offset)
		}
		r, err := manifest.DecodeChunk(ch.value)
		if err != nil {
			return nil, nil, err
		}
		rows = append(rows, r)
	}
	if missing != nil {
		return nil, missing, nil
	}
	out, err := manifest.Assemble(m, rows)
	return out, nil, err
}
