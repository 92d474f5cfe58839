package flow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/verify"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/relay"
)

// Progress is what a bounded run reports while it works.
// Published counts this run's units; Applied is the flow's total (the
// target checkpoint's count).
type Progress struct {
	Phase      string                  `json:"phase"` // snapshot, streaming, applying, verifying, done
	Snapshot   *relay.SnapshotProgress `json:"snapshot,omitempty"`
	Published  uint64                  `json:"published_units_this_run"`
	Applied    int64                   `json:"transactions_applied_total"`
	Checkpoint string                  `json:"checkpoint_lsn"`
	Target     string                  `json:"catch_up_lsn"`
}

// RunResult is the outcome of a bounded run.
// ThisRun counts what this run did; Totals are the flow's counts since its
// first run (the target checkpoint's).
type RunResult struct {
	Flow         string         `json:"flow"`
	Transport    RunTransport   `json:"transport"`
	CatchUpLSN   string         `json:"catch_up_lsn"`
	Checkpoint   string         `json:"checkpoint_lsn"`
	ThisRun      RunCounts      `json:"this_run"`
	Totals       RunCounts      `json:"totals"`
	Duration     time.Duration  `json:"-"`
	DurationSecs float64        `json:"duration_seconds"`
	Verify       *verify.Result `json:"verify"`
	// Sinks has every sink's part; Checkpoint, ThisRun, Totals and Verify
	// above are the first sink's (a single-target flow's only one).
	Sinks []SinkRunResult `json:"sinks"`
}

// SinkRunResult is one sink's part of a bounded run.
type SinkRunResult struct {
	Sink       string         `json:"sink"`
	Checkpoint string         `json:"checkpoint_lsn"`
	ThisRun    RunCounts      `json:"this_run"`
	Totals     RunCounts      `json:"totals"`
	Verify     *verify.Result `json:"verify"`
}

// Converged reports whether every sink verified CONVERGED; false when the
// run did not verify.
func (r *RunResult) Converged() bool {
	for _, s := range r.Sinks {
		if s.Verify == nil || s.Verify.Verdict != verify.Converged {
			return false
		}
	}
	return len(r.Sinks) > 0
}

// sinkRun is one sink's applier in a bounded run.
type sinkRun struct {
	sink    config.Sink
	conn    *pgx.Conn
	applier *apply.Applier
}

// RunTransport names the transport a bounded run used.
type RunTransport struct {
	Kind  string `json:"kind"` // "local" or "kafka"
	Dir   string `json:"dir"`  // the local log's directory, or a broker flow's state directory
	Fsync string `json:"fsync"`
	// Broker describes a broker transport (Broker.Describe).
	Broker string `json:"broker,omitempty"`
}

func (f *Flow) runTransport() RunTransport {
	if f.broker != nil {
		return RunTransport{Kind: "kafka", Dir: f.dir, Broker: f.broker.Describe()}
	}
	return RunTransport{Kind: "local", Dir: f.dir, Fsync: f.Cfg.Transport.Local.Fsync}
}

// RunCounts are transaction and row counts. PublishedUnits is set for
// this run only (the log does not keep a total).
type RunCounts struct {
	PublishedUnits      *uint64 `json:"published_units,omitempty"`
	TransactionsApplied int64   `json:"transactions_applied"`
	TransactionsSkipped int64   `json:"transactions_skipped"`
	RowsApplied         int64   `json:"rows_applied"`
}

// RunLocal is `trellara run --local`: capture and apply to every sink
// concurrently until each sink has applied everything the source committed
// before the run started (proved by a fence), then optionally verify each
// sink while the pipeline keeps running, then stop all cleanly.
func (f *Flow) RunLocal(ctx context.Context, doVerify bool, progress func(Progress)) (*RunResult, error) {
	start := time.Now()
	if len(f.Sinks()) == 0 {
		return nil, ErrNoTarget(f.Cfg.Flow)
	}
	defer f.setMemoryLimit()()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	report := func(p Progress) {
		if progress != nil {
			progress(p)
		}
	}

	var sinks []*sinkRun
	defer func() {
		for _, r := range sinks {
			r.conn.Close(context.Background())
		}
	}()
	for _, sk := range f.Sinks() {
		tgt, err := f.ConnectSink(ctx, sk)
		if err != nil {
			return nil, err
		}
		r := &sinkRun{sink: sk, conn: tgt}
		sinks = append(sinks, r)
		if sk.Target.CreateTables {
			if err := f.createTargetTables(ctx, tgt); err != nil {
				return nil, err
			}
		}
	}
	// An extension flow's first run records its initial snapshot before
	// any applier starts (extsnapshot.go).
	tgts := map[string]*pgx.Conn{}
	for _, r := range sinks {
		tgts[r.sink.Name] = r.conn
	}
	if _, err := f.prepareExtensionSnapshot(ctx, tgts); err != nil {
		return nil, err
	}
	for _, r := range sinks {
		var err error
		if r.applier, err = f.Applier(r.conn, r.sink, nil); err != nil {
			return nil, err
		}
	}
	// caughtUp is the lowest checkpoint over the sinks: the run is done
	// when the slowest one has passed the fence.
	caughtUp := func() apply.Checkpoint {
		low := sinks[0].applier.Checkpoint()
		for _, r := range sinks[1:] {
			if cp := r.applier.Checkpoint(); cp.EndLSN < low.EndLSN {
				low = cp
			}
		}
		return low
	}

	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
		session  *relay.Session
		sessMu   sync.Mutex
	)
	fail := func(err error) {
		if err == nil || errors.Is(err, context.Canceled) {
			return
		}
		errMu.Lock()
		// An error that arrives after the run was cancelled is a
		// consequence of the cancel (connections torn down under it), not
		// its cause: keep the first real one.
		if firstErr == nil && ctx.Err() == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel()
	}
	streaming := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		capture := f.Capture
		if f.Cfg.Source.Capture == config.CaptureExtension {
			capture = f.CaptureExtension
		}
		err := capture(ctx, CaptureOptions{
			Streaming: streaming,
			Snapshot: func(p relay.SnapshotProgress) {
				report(Progress{Phase: "snapshot", Snapshot: &p})
			},
			Session: func(s *relay.Session) { sessMu.Lock(); session = s; sessMu.Unlock() },
		})
		appliers := make([]*apply.Applier, len(sinks))
		for i, r := range sinks {
			appliers[i] = r.applier
		}
		f.drainBeforeBarrier(ctx, err, appliers)
		fail(err)
	}()
	for _, r := range sinks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail(f.Apply(ctx, r.conn, r.sink, r.applier, nil))
		}()
	}

	select {
	case <-streaming:
	case <-ctx.Done():
		wg.Wait()
		return nil, f.runError(firstErr, ctx)
	}
	src, err := f.ConnectSource(ctx)
	if err != nil {
		cancel()
		wg.Wait()
		if firstErr != nil {
			return nil, firstErr
		}
		return nil, err
	}
	defer src.Close(context.Background())
	for _, r := range sinks {
		if _, err := f.resumeExtensionSnapshot(ctx, r.sink, func(p apply.ReseedProgress) {
			report(Progress{Phase: "snapshot", Snapshot: &relay.SnapshotProgress{Table: p.Relation, Rows: uint64(p.Rows), Done: p.Phase == "handoff"}})
		}); err != nil {
			cancel()
			wg.Wait()
			if firstErr != nil {
				return nil, firstErr
			}
			return nil, err
		}
	}
	fence, err := relay.EmitFence(ctx, src, fmt.Sprintf("run %s", time.Now().UTC().Format(time.RFC3339Nano)))
	if err != nil {
		cancel()
		wg.Wait()
		if firstErr != nil {
			return nil, firstErr // the fence failed because a component did
		}
		return nil, err
	}
	res := &RunResult{Flow: f.Cfg.Flow, Transport: f.runTransport(), CatchUpLSN: lsn.Format(fence)}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for caughtUp().EndLSN < fence {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, f.runError(firstErr, ctx)
		case <-tick.C:
			cp := caughtUp()
			p := Progress{Phase: "applying", Applied: cp.TxnsApplied, Checkpoint: lsn.Format(cp.EndLSN), Target: lsn.Format(fence)}
			sessMu.Lock()
			if session != nil {
				p.Published = session.Stats().Published
			}
			sessMu.Unlock()
			report(p)
		}
	}

	verified := make([]*verify.Result, len(sinks))
	if doVerify {
		report(Progress{Phase: "verifying"})
		for i, r := range sinks {
			vr, err := f.verifyWith(ctx, r.sink, r.applier, VerifyOptions{})
			if err != nil {
				cancel()
				wg.Wait()
				if firstErr != nil {
					return nil, firstErr
				}
				return nil, err
			}
			verified[i] = vr
		}
	}
	cancel()
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	f.ApplyRetention()
	var published uint64
	sessMu.Lock()
	if session != nil {
		published = session.Stats().Published
	}
	sessMu.Unlock()
	for i, r := range sinks {
		cp, st := r.applier.Checkpoint(), r.applier.Stats()
		res.Sinks = append(res.Sinks, SinkRunResult{Sink: r.sink.Name, Checkpoint: lsn.Format(cp.EndLSN),
			ThisRun: RunCounts{PublishedUnits: &published, TransactionsApplied: st.TxnsApplied, TransactionsSkipped: st.TxnsSkipped, RowsApplied: st.RowsApplied},
			Totals:  RunCounts{TransactionsApplied: cp.TxnsApplied, TransactionsSkipped: cp.TxnsSkipped, RowsApplied: cp.RowsApplied},
			Verify:  verified[i]})
	}
	first := res.Sinks[0]
	res.Checkpoint, res.ThisRun, res.Totals, res.Verify = first.Checkpoint, first.ThisRun, first.Totals, first.Verify
	res.Duration = time.Since(start)
	res.DurationSecs = res.Duration.Seconds()
	report(Progress{Phase: "done"})
	return res, nil
}

func (f *Flow) runError(first error, ctx context.Context) error {
	if first != nil {
		return first
	}
	return ctx.Err()
}

func (f *Flow) createTargetTables(ctx context.Context, tgt *pgx.Conn) error {
	src, err := f.ConnectSource(ctx)
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	defs, err := f.gatedSourceTables(ctx, src)
	if err != nil {
		return err
	}
	return apply.CreateTables(ctx, tgt, defs)
}

// VerifyOptions narrows `trellara verify`.
type VerifyOptions struct {
	// Tables to compare; empty means every table of the flow.
	Tables []string
	// Wait bounds the time spent waiting for the target to reach the
	// watermark; a target still short of it is BEHIND. verify.NoWait does
	// not wait. 0 means verify's default (30 s) for a flow in motion, and
	// no wait for a flow at rest (nothing moves it; verifyAtRest), where a
	// positive Wait is still honoured: a service may be starting.
	Wait time.Duration
	// SQLRowHash hashes rows in SQL on both sides even where the trellara
	// extension provides its C row hash (verify.Options.SQLRowHash).
	SQLRowHash bool
}

// Verify compares the source with the target of the flow's only sink
// (VerifySink for a named one).
func (f *Flow) Verify(ctx context.Context, o VerifyOptions) (*verify.Result, error) {
	s, err := f.Sink("")
	if err != nil {
		return nil, err
	}
	return f.VerifySink(ctx, s, o)
}

// VerifySink compares the source with sink s's target, in either state
// of the flow. In motion (a service or a run holds the flow) it writes a
// fence after the source snapshot and waits for the target to apply it.
// At rest it writes nothing: it holds the flow's lock while it compares,
// and counts what the target lacks instead (pendingAtRest), so BEHIND
// means committed changes to the flow's tables that the target has not
// applied, never that the source's WAL moved.
func (f *Flow) VerifySink(ctx context.Context, s config.Sink, o VerifyOptions) (*verify.Result, error) {
	return f.verifyWith(ctx, s, nil, o)
}

// NotFlowTableError: verify --table named a table the flow does not
// capture. No verdict is reached or stored.
type NotFlowTableError struct {
	Flow   string
	Table  string
	Tables []string // the flow's tables
}

func (e *NotFlowTableError) Error() string {
	return fmt.Sprintf("flow %s: %s is not one of the flow's tables (%s); verify compares tables the flow captures: name one of them with --table, or none to verify them all",
		e.Flow, e.Table, strings.Join(e.Tables, ", "))
}

// flowTables checks that every name is one of the flow's tables.
func (f *Flow) flowTables(names []string) error {
	for _, name := range names {
		t, err := config.ParseTableName(name)
		if err != nil {
			return err
		}
		if !slices.Contains(f.Tables(), t) && !(len(f.Cfg.Source.Schemas) > 0 && f.captures(t.Schema)) {
			return &NotFlowTableError{Flow: f.Cfg.Flow, Table: t.String(), Tables: tableStrings(f.Tables())}
		}
	}
	return nil
}

// verifyWith verifies sink s; with its applier running in this process,
// the applier's checkpoint is the watermark.
func (f *Flow) verifyWith(ctx context.Context, s config.Sink, running *apply.Applier, o VerifyOptions) (*verify.Result, error) {
	if err := f.flowTables(o.Tables); err != nil {
		return nil, err
	}
	atRest := false
	if running == nil {
		switch lock, err := f.lockAtRest(false); {
		case errors.Is(err, errInMotion):
		case err != nil:
			return nil, err
		case lock != nil:
			lock.release() // taken again for the count, after the source snapshot
			atRest = true
		case f.broker == nil:
			atRest = true // no log yet: nothing was captured, nothing holds the flow
		}
	}
	src, err := f.ConnectSource(ctx)
	if err != nil {
		return nil, err
	}
	defer src.Close(context.Background())
	fenceConn, err := f.ConnectSource(ctx)
	if err != nil {
		return nil, err
	}
	defer fenceConn.Close(context.Background())
	tgt, err := f.ConnectSink(ctx, s)
	if err != nil {
		return nil, err
	}
	defer tgt.Close(context.Background())
	tables := o.Tables
	if len(tables) == 0 {
		tables = tableStrings(f.Tables())
	}
	// Beside a running applier, each round holds it at the round's fence
	// until the target snapshot is taken (apply.HoldToken); a flow at
	// rest has no applier to hold.
	holds := &verifyHolds{f: f, s: s, fence: fenceConn}
	defer holds.close()
	if !atRest && running == nil && f.broker != nil {
		// A Kafka flow has no lock to take: its slot, not active, says no
		// pipeline captures (its capture refuses an active slot).
		if atRest, err = f.brokerAtRest(ctx, fenceConn); err != nil {
			return nil, err
		}
	}
	opts := verify.Options{
		Tables:       tables,
		ConfigPath:   f.ConfigPath,
		WaitCaughtUp: o.Wait,
		SQLRowHash:   o.SQLRowHash,
		// The watermark is a fence written after the source snapshot: once
		// the target has applied it, the target has everything the
		// snapshot saw.
		SourceLSN: func(ctx context.Context) (uint64, error) {
			return relay.EmitFence(ctx, fenceConn, "verify")
		},
		SourceSnapshot:      holds.snapshot,
		TargetSnapshotTaken: holds.release,
		TargetCheckpoint: func(ctx context.Context) (verify.Position, error) {
			var cp apply.Checkpoint
			if running != nil {
				cp = running.Checkpoint()
			} else {
				st, err := apply.ReadStatus(ctx, tgt, s.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
				if err != nil {
					return verify.Position{}, err
				}
				cp = st.Checkpoint
			}
			return holds.position(ctx, cp)
		},
	}
	holds.off = atRest
	var pending *verify.Pending
	if atRest {
		// A pipeline that takes the flow mid-verify is held from the next
		// round on.
		f.verifyAtRest(&opts, fenceConn, tgt, s, o.Wait, &pending, func() { holds.off = false })
	}
	if opts.Held, err = f.heldForVerify(ctx, tgt, s); err != nil {
		return nil, err
	}
	res, err := verify.Verify(ctx, src, tgt, opts)
	if err == nil && pending != nil && res.Watermark != nil {
		res.Watermark.Pending = pending
		if pending.NotCounted != "" {
			res.Notes = append(res.Notes, "the flow is at rest; not counted: "+pending.NotCounted)
		}
	}
	if err == nil {
		if rerr := f.RecordVerify(s, res); rerr != nil {
			f.Logger.Warn("could not record the verify result for status", "err", rerr)
		}
		var converged []string
		for _, t := range res.Tables {
			if t.Verdict == verify.Converged {
				converged = append(converged, t.Table)
			}
		}
		if rerr := f.refreshPartitions(ctx, src, converged); rerr != nil {
			f.Logger.Warn("could not record the partitions of the converged tables", "err", rerr)
		}
	}
	return res, err
}

// verifyHolds makes each verify round beside a running applier exact
// (apply.OpenHold): the applier stops at a hold fence, a temporary slot
// gives a source snapshot exact at its consistent point C, the applier
// applies what commits below C and stops again, and the target snapshot is
// taken there; the hold ends as soon as it is. Where any step is not to be
// had (an applier that predates holds, or one too far behind to reach the
// fence within holdReachMax, no free slot), the round takes a fresh
// snapshot and a plain fence, and verify's rechecks stand in, as before.
type verifyHolds struct {
	f     *Flow
	s     config.Sink
	fence *pgx.Conn // on the source
	conn  *pgx.Conn // on the target, the holds' own
	id    string
	at    uint64
	off   bool
}

// holdReachMax bounds the wait for the applier to stop at a hold fence.
const holdReachMax = 10 * time.Second

// snapshot is verify.Options.SourceSnapshot. A step that fails ends the
// hold and leaves the rounds to the plain fence: a hold is an exactness
// aid, never a reason for verify to fail.
func (h *verifyHolds) snapshot(ctx context.Context) (string, uint64, func(), error) {
	name, at, done, err := h.try(ctx)
	if err != nil && ctx.Err() == nil {
		h.f.Logger.Info("verify: comparing without a hold", "err", err)
		h.release(ctx)
		h.off = true
		return "", 0, nil, nil
	}
	return name, at, done, err
}

func (h *verifyHolds) try(ctx context.Context) (string, uint64, func(), error) {
	h.release(ctx)
	if h.off {
		return "", 0, nil, nil
	}
	if h.conn == nil {
		c, err := h.f.ConnectSink(ctx, h.s)
		if err != nil {
			return "", 0, nil, err
		}
		h.conn = c
	}
	schema := h.s.Target.Schema
	id := fmt.Sprintf("%s-%016x", h.f.Cfg.Flow, rand.Uint64())
	if err := apply.OpenHold(ctx, h.conn, schema, id); err != nil {
		h.f.Logger.Debug("verify: no hold (the target's schema predates it)", "err", err)
		h.off = true
		return "", 0, nil, nil
	}
	h.id = id
	if _, err := relay.EmitFence(ctx, h.fence, apply.HoldToken(id)); err != nil {
		return "", 0, nil, err
	}
	for deadline := time.Now().Add(holdReachMax); ; {
		held, _, err := apply.HoldState(ctx, h.conn, schema, id)
		if err != nil {
			return "", 0, nil, err
		}
		if held {
			break
		}
		if time.Now().After(deadline) {
			h.f.Logger.Info("verify: the applier did not stop at the hold fence in time; comparing without a hold", "hold", id, "waited", holdReachMax)
			h.release(ctx)
			h.off = true
			return "", 0, nil, nil
		}
		select {
		case <-ctx.Done():
			return "", 0, nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	repl, err := h.f.replicationConnect(ctx)
	if err != nil {
		h.release(ctx)
		return "", 0, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, holdReachMax)
	slot, err := relay.CreateTemporarySlot(sctx, repl, fmt.Sprintf("trellara_verify_%016x", rand.Uint64()))
	cancel()
	if err != nil {
		repl.Close(context.Background())
		h.f.Logger.Info("verify: no temporary slot for an exact source snapshot; comparing without a hold", "err", err)
		h.release(ctx)
		h.off = true
		return "", 0, nil, nil
	}
	done := func() { repl.Close(context.Background()) }
	if err := apply.SetHoldLSN(ctx, h.conn, schema, id, slot.ConsistentPoint); err != nil {
		done()
		return "", 0, nil, err
	}
	// A unit at or past C for the applier to stop at, should the source
	// be idle.
	if _, err := relay.EmitFence(ctx, h.fence, "verify"); err != nil {
		done()
		return "", 0, nil, err
	}
	h.at = slot.ConsistentPoint
	return slot.SnapshotName, slot.ConsistentPoint, done, nil
}

// position is the checkpoint as the round's watermark sees it: once the
// applier has applied everything below the hold's LSN and stopped there,
// the target holds exactly what the source snapshot does.
func (h *verifyHolds) position(ctx context.Context, cp apply.Checkpoint) (verify.Position, error) {
	p := verify.Position{EndLSN: cp.EndLSN, AppliedAt: cp.AppliedAt}
	if h.id == "" || h.at == 0 {
		return p, nil
	}
	_, reached, err := apply.HoldState(ctx, h.conn, h.s.Target.Schema, h.id)
	if err != nil {
		return p, err
	}
	if reached {
		p.EndLSN = max(p.EndLSN, h.at)
	}
	return p, nil
}

// release ends the open hold, if any.
func (h *verifyHolds) release(ctx context.Context) {
	if h.id == "" {
		return
	}
	if err := apply.CloseHold(ctx, h.conn, h.s.Target.Schema, h.id); err != nil {
		h.f.Logger.Warn("verify: could not end the hold; it expires by itself", "hold", h.id, "err", err)
	}
	h.id, h.at = "", 0
}

func (h *verifyHolds) close() {
	if h.conn != nil {
		h.release(context.Background())
		h.conn.Close(context.Background())
	}
}
