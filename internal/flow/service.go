package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/obs"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

// Backoff bounds for restarting a component after an error.
const (
	backoffMin = time.Second
	backoffMax = time.Minute
)

// Metric pacing. The exporters read in-process counters every
// metricsInterval; the queries against the source (pg_replication_slots)
// and the target (the quarantine table) run every pollInterval on
// connections of their own, never on the data path.
const (
	metricsInterval = time.Second
	pollInterval    = 10 * time.Second
)

// Role is what a service process runs.
type Role string

// The roles.
const (
	// RoleAll runs the capture (relay or sidecar, as source.capture says)
	// and every sink's applier in one process.
	RoleAll Role = "all"
	// RoleRelay runs the external pgoutput relay (or the sidecar when
	// source.capture is extension): the log's one writer.
	RoleRelay Role = "relay"
	// RoleSidecar runs the native extension's sidecar as the log's writer.
	RoleSidecar Role = "sidecar"
	// RoleApplier runs one sink's applier (or every sink's) beside the
	// writer, reading the log read-only.
	RoleApplier Role = "applier"
)

// ParseRole reads a --role value.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAll, RoleRelay, RoleSidecar, RoleApplier:
		return r, nil
	}
	return "", fmt.Errorf("--role %q: must be all, relay, applier or sidecar", s)
}

// captures reports whether the role writes the log (runs capture).
func (r Role) captures() bool { return r != RoleApplier }

// ServiceOptions configure the long-running service.
type ServiceOptions struct {
	ConfigPath string
	Role       Role
	// Sink names the sink of an applier process (Role applier); "" names
	// the flow's only sink.
	Sink   string
	Logger *slog.Logger
	// Build names the binary: logged at startup, exported as
	// trellara_build_info.
	Build obs.Build
	// Reload receives a value on SIGHUP: the config is re-read and, if
	// valid, the components restart with it; if not, they keep running
	// with the old one and the error is logged.
	Reload <-chan struct{}
	// Listening, when set, receives each component's bound address.
	Listening func(component, addr string)
}

// Serve runs the relay and/or applier until ctx ends (SIGTERM): each
// component restarts with capped exponential backoff after an error, and
// stops cleanly on cancel — the relay confirms the durable position it
// reached, the applier's open target transaction rolls back — and a
// shutdown line logs the positions it stopped at.
func Serve(ctx context.Context, o ServiceOptions) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if _, err := ParseRole(string(o.Role)); err != nil {
		return err
	}
	if o.Role.captures() && o.Sink != "" {
		return fmt.Errorf("--sink %q: only with --role applier (--role %s runs every sink's applier or none)", o.Sink, o.Role)
	}
	o.Logger.Info("trellara starting", "version", o.Build.Version, "commit", o.Build.Commit, "go_version", o.Build.GoVersion,
		"role", o.Role, "sink", o.Sink, "config", o.ConfigPath)
	metrics := &serviceMetrics{build: o.Build, Metrics: obs.NewMetrics(o.Build)}
	if o.Role == RoleApplier {
		// No relay port in this process: the process-level series go on
		// the first applier's.
		obs.RegisterProcess(metrics.Applier.Registry, o.Build)
	}
	var prev *Flow
	reopening := false
	for {
		f, err := openForRole(ctx, o)
		if err != nil && reopening && ctx.Err() == nil {
			// Reopening after the log became unusable: what made it so
			// (a full disk) may last a while; keep trying.
			o.Logger.Error("could not reopen the flow yet", "config", o.ConfigPath, "err", err, "retry_in", reopenWait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(reopenWait):
			}
			continue
		}
		if err != nil {
			return err
		}
		reopening = false
		if prev != nil && (prev.Cfg.Source.ID != f.Cfg.Source.ID || prev.Cfg.Flow != f.Cfg.Flow) {
			metrics.Relay.Forget(prev.Cfg.Source.ID, prev.Cfg.Flow)
			for _, am := range metrics.all() {
				am.Forget(prev.Cfg.Source.ID, prev.Cfg.Flow)
			}
		}
		prev = f
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		stopped := &stopPositions{}
		go func() { done <- f.serveOnce(rctx, o, metrics, stopped) }()
		err = waitReload(done, o)
		reload := err == nil
		if reload && ctx.Err() == nil {
			o.Logger.Info("reloading configuration", "config", o.ConfigPath)
		}
		cancel()
		if reload {
			<-done
		}
		// serveOnce has returned: stopped is complete.
		f.Close()
		if ctx.Err() != nil {
			stopped.log(o.Logger)
		}
		if !reload && ctx.Err() == nil && errors.Is(err, segmentlog.ErrMustReopen) {
			o.Logger.Error("the local log must be reopened; reopening the flow", "config", o.ConfigPath, "err", err, "retry_in", reopenWait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(reopenWait):
			}
			reopening = true
			continue
		}
		if !reload || ctx.Err() != nil {
			return err
		}
	}
}

// reopenWait is the pause before the service reopens a flow whose log
// became unusable (a full disk frees itself no faster than this).
const reopenWait = 2 * time.Second

// openForRole opens the flow for o.Role: as the log's writer for the
// relay (and all), read-only beside the relay for an applier process,
// which waits, when the relay has never opened the log, until it has.
func openForRole(ctx context.Context, o ServiceOptions) (*Flow, error) {
	if o.Role.captures() {
		return openWaitingForLock(ctx, o)
	}
	for waited := false; ; waited = true {
		f, err := OpenApplier(o.ConfigPath, o.Logger, o.Sink)
		if !errors.Is(err, segmentlog.ErrNoDurableEnd) {
			return f, err
		}
		if !waited {
			o.Logger.Info("waiting for the relay to open the local log", "config", o.ConfigPath, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// lockWaitMax bounds how long a starting service waits for the local log's
// lock: a command on the flow at rest (verify, reseed, semantics) holds it
// for seconds to minutes, and a service started meanwhile takes over when
// it ends. Past the bound the lock is another service's, and the error
// names its holder.
var lockWaitMax = 5 * time.Minute

// openWaitingForLock is Open for a capturing service, waiting up to
// lockWaitMax while another process holds the flow's log.
func openWaitingForLock(ctx context.Context, o ServiceOptions) (*Flow, error) {
	start := time.Now()
	var logged time.Time
	for {
		f, err := Open(o.ConfigPath, o.Logger)
		if !errors.Is(err, segmentlog.ErrLocked) || time.Since(start) >= lockWaitMax {
			return f, err
		}
		if time.Since(logged) >= 30*time.Second {
			o.Logger.Warn("the flow's local log is held by another process; waiting for it to finish",
				"config", o.ConfigPath, "err", err, "waited", time.Since(start).Round(time.Second), "wait_max", lockWaitMax)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// serviceMetrics are the process's registries. The first sink's applier
// uses Metrics.Applier; every further sink (--role all with sinks) gets
// a registry of its own, served on its own port, so each sink's series
// keep the contract's three labels.
type serviceMetrics struct {
	*obs.Metrics
	build obs.Build
	sinks map[string]*obs.ApplierMetrics
}

// applier returns the metrics of the i-th sink served by this process.
func (m *serviceMetrics) applier(i int, sink string) *obs.ApplierMetrics {
	if i == 0 {
		return m.Applier
	}
	if m.sinks == nil {
		m.sinks = map[string]*obs.ApplierMetrics{}
	}
	if am, ok := m.sinks[sink]; ok {
		return am
	}
	am := obs.NewMetrics(m.build).Applier // a fresh applier registry
	m.sinks[sink] = am
	return am
}

func (m *serviceMetrics) all() []*obs.ApplierMetrics {
	out := []*obs.ApplierMetrics{m.Applier}
	for _, am := range m.sinks {
		out = append(out, am)
	}
	return out
}

// stopPositions are where the components stopped, for the shutdown line.
type stopPositions struct {
	complete     bool // the components stopped cleanly and filled the rest
	confirmed    uint64
	hasConfirmed bool // a pgoutput session ran and confirmed to the slot
	durable      uint64
	hasDurable   bool
	checkpoints  []sinkCheckpoint
}

// sinkCheckpoint is where one sink's applier stopped.
type sinkCheckpoint struct {
	sink string
	lsn  uint64
}

// log writes the shutdown line, LSNs in X/X form.
func (p *stopPositions) log(log *slog.Logger) {
	if !p.complete {
		log.Info("shut down")
		return
	}
	var args []any
	if p.hasConfirmed {
		args = append(args, "confirmed_lsn", envelope.FormatLSN(p.confirmed))
	}
	if p.hasDurable {
		args = append(args, "log_durable_lsn", envelope.FormatLSN(p.durable))
	}
	for _, c := range p.checkpoints {
		key := "checkpoint_lsn"
		if len(p.checkpoints) > 1 {
			key = "sink_" + c.sink + "_checkpoint_lsn"
		}
		args = append(args, key, envelope.FormatLSN(c.lsn))
	}
	log.Info("shut down", args...)
}

// waitReload returns when the running components stop (their error) or
// when a reload with a valid configuration is requested (nil).
func waitReload(done <-chan error, o ServiceOptions) error {
	for {
		select {
		case err := <-done:
			if err == nil {
				err = context.Canceled
			}
			return err
		case <-o.Reload:
			// Open fails on the log lock held by this very process once
			// the config itself is fine; any other failure means the new
			// file is bad: keep running on the old one. An applier process
			// checks with its own read-only open.
			open := func() (*Flow, error) { return Open(o.ConfigPath, o.Logger) }
			if o.Role == RoleApplier {
				open = func() (*Flow, error) { return OpenApplier(o.ConfigPath, o.Logger, o.Sink) }
			}
			if nf, err := open(); err == nil {
				nf.Close()
			} else if !errors.Is(err, segmentlog.ErrLocked) {
				o.Logger.Error("reload refused: keeping the running configuration", "config", o.ConfigPath, "err", err)
				continue
			}
			return nil
		}
	}
}

func (f *Flow) labels(service string) []string { return []string{service, f.Cfg.Source.ID, f.Cfg.Flow} }

// relayRun is the relay component's current session, shared with its
// exporter and the shutdown line.
type relayRun struct {
	mu   sync.Mutex
	sess *relay.Session
}

func (r *relayRun) set(s *relay.Session) {
	r.mu.Lock()
	r.sess = s
	r.mu.Unlock()
}

func (r *relayRun) get() *relay.Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sess
}

// applierRun is the applier's latest checkpoint, shared likewise.
type applierRun struct {
	mu    sync.Mutex
	cp    apply.Checkpoint
	known bool
}

func (a *applierRun) set(cp apply.Checkpoint) {
	a.mu.Lock()
	a.cp, a.known = cp, true
	a.mu.Unlock()
}

func (a *applierRun) get() (apply.Checkpoint, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cp, a.known
}

func (f *Flow) serveOnce(ctx context.Context, o ServiceOptions, m *serviceMetrics, stopped *stopPositions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer f.setMemoryLimit()()
	var wg sync.WaitGroup
	errc := make(chan error, 4+2*len(f.Sinks()))

	start := func(component, addr string, reg prometheus.Gatherer, c obs.Component, h *obs.Health,
		body func(context.Context, *obs.Health) error) {
		a, wait, err := obs.Serve(ctx, addr, obs.Handler(reg, h))
		if err != nil {
			errc <- fmt.Errorf("%s: listen on %s: %w", component, addr, err)
			return
		}
		if o.Listening != nil {
			o.Listening(component, a)
		}
		c.Restarts.WithLabelValues(f.labels(serviceOf(component))...) // exported from the start, at 0
		wg.Add(2)
		go func() { defer wg.Done(); _ = wait() }()
		go func() {
			defer wg.Done()
			supervise(ctx, component, f.Logger, h, c, f.labels(serviceOf(component)), body)
		}()
	}

	var rr *relayRun
	if o.Role.captures() {
		rr = &relayRun{}
		relayHealth := obs.NewHealth()
		start(obs.ServiceRelay, f.Cfg.Run.Listen.Relay, m.Relay.Registry, m.Relay.Component, relayHealth,
			func(ctx context.Context, h *obs.Health) error {
				if o.Role == RoleSidecar || f.Cfg.Source.Capture == config.CaptureExtension {
					// The native extension path: frames from the extension's socket
					// into the same assembly, log and applier.
					h.Set("streaming", true, nil)
					return f.CaptureExtension(ctx, CaptureOptions{})
				}
				err := f.Capture(ctx, CaptureOptions{
					Session: func(s *relay.Session) {
						rr.set(s)
						h.Set("streaming", true, nil)
					},
				})
				if errors.Is(err, segmentlog.ErrMustReopen) {
					// The log instance is unusable (a failed fsync or
					// durable-end publish, as on a full disk): restarting
					// the component on it would fail forever. Stop this
					// life of the service; Serve reopens the flow, and
					// Open repairs the unacknowledged tail.
					errc <- err
				}
				return err
			})
		wg.Add(1)
		go func() { defer wg.Done(); f.exportRelay(ctx, m.Relay, relayHealth, rr) }()
		wg.Add(1)
		go func() { // retention runs beside the components, never in their path
			defer wg.Done()
			t := time.NewTicker(time.Minute)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					f.ApplyRetention()
				}
			}
		}()
	}

	var sinks []config.Sink
	switch o.Role {
	case RoleAll:
		sinks = f.Sinks()
	case RoleApplier:
		var err error
		if sinks, err = f.SelectSinks(o.Sink); err != nil {
			return err
		}
	}
	ars := make([]*applierRun, len(sinks))
	for i, sk := range sinks {
		ars[i] = &applierRun{}
		f.startApplier(ctx, &wg, start, sk, m.applier(i, sk.Name), ars[i])
	}
	go func() { wg.Wait(); close(errc) }()
	var failed error
	for err := range errc { // until every goroutine is done: they use the flow's log
		if err != nil && failed == nil {
			failed = err
			cancel()
		}
	}
	if failed != nil {
		return failed
	}
	// Every component has stopped: record where, for the shutdown line.
	if rr != nil {
		if s := rr.get(); s != nil {
			stopped.confirmed, stopped.hasConfirmed = s.Acknowledged(), true
		}
	}
	if f.Log == nil {
		// a broker flow: the relay's acknowledged position is the durable one
	} else if res, err := relay.ResumeFrom(context.Background(), transport.Local{Log: f.Log}); err == nil && !res.Empty {
		stopped.durable, stopped.hasDurable = res.DurableEnd, true
	}
	for i, ar := range ars {
		if cp, ok := ar.get(); ok {
			stopped.checkpoints = append(stopped.checkpoints, sinkCheckpoint{sinks[i].Name, cp.EndLSN})
		}
	}
	stopped.complete = true
	return ctx.Err()
}

// serviceOf is the service label of a component: relay, or applier for
// every sink's applier ("applier", "applier.NAME").
func serviceOf(component string) string {
	if component == obs.ServiceRelay {
		return obs.ServiceRelay
	}
	return obs.ServiceApplier
}

// startApplier starts sink sk's applier component on sk.Listen, and its
// exporter.
func (f *Flow) startApplier(ctx context.Context, wg *sync.WaitGroup,
	start func(component, addr string, reg prometheus.Gatherer, c obs.Component, h *obs.Health, body func(context.Context, *obs.Health) error),
	sk config.Sink, am *obs.ApplierMetrics, ar *applierRun) {
	l := f.labels(obs.ServiceApplier)
	for _, c := range []*prometheus.CounterVec{am.TxnsApplied, am.TxnsSkipped, am.RowsApplied} {
		c.WithLabelValues(l...)
	}
	latency := am.ApplyLatency.WithLabelValues(l...)
	applierHealth := obs.NewHealth()
	applierHealth.Detail("sink", sk.Name)
	start(sk.Cursor(), sk.Listen, am.Registry, am.Component, applierHealth,
		func(ctx context.Context, h *obs.Health) error {
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
			a, err := f.Applier(tgt, sk, func(commitTimes []int64) {
				now := time.Now()
				for _, us := range commitTimes {
					if us != 0 {
						// Source and local clocks differ by their skew; a
						// negative difference is skew, not speed.
						latency.Observe(max(0, now.Sub(time.UnixMicro(us)).Seconds()))
					}
				}
			})
			if err != nil {
				return err
			}
			h.Set("applying", true, nil)
			// The checkpoint's counts are lifetime totals on the target:
			// the first one seen (before anything is applied) is the base,
			// so the counters count this process's work only.
			var last *apply.Checkpoint
			return f.Apply(ctx, tgt, sk, a, func(cp apply.Checkpoint) bool {
				ar.set(cp)
				am.CheckpointLSNBytes.WithLabelValues(l...).Set(float64(cp.EndLSN))
				h.Detail("checkpoint_lsn", lsn.Format(cp.EndLSN))
				if last != nil {
					am.TxnsApplied.WithLabelValues(l...).Add(float64(max(0, cp.TxnsApplied-last.TxnsApplied)))
					am.TxnsSkipped.WithLabelValues(l...).Add(float64(max(0, cp.TxnsSkipped-last.TxnsSkipped)))
					am.RowsApplied.WithLabelValues(l...).Add(float64(max(0, cp.RowsApplied-last.RowsApplied)))
					am.LastProgress.WithLabelValues(l...).Set(float64(time.Now().Unix()))
				}
				last = &cp
				return false
			})
		})
	wg.Add(1)
	go func() { defer wg.Done(); f.exportApplier(ctx, sk, am, ar) }()
}

// exportRelay keeps the relay's series current until ctx ends: the
// session's counters and the log's size every metricsInterval, the slot's
// WAL figures from the source every pollInterval.
func (f *Flow) exportRelay(ctx context.Context, m *obs.RelayMetrics, h *obs.Health, rr *relayRun) {
	l := f.labels(obs.ServiceRelay)
	m.PublishedUnits.WithLabelValues(l...)
	m.PublishedBytes.WithLabelValues(l...)
	slot := &slotPoller{f: f, m: m, labels: l}
	defer slot.close()
	var (
		sess *relay.Session
		last relay.Stats
	)
	// account adds what s published since last to the counters.
	account := func(s *relay.Session) relay.Stats {
		st := s.Stats()
		m.PublishedUnits.WithLabelValues(l...).Add(float64(st.Published - last.Published))
		m.PublishedBytes.WithLabelValues(l...).Add(float64(st.Bytes - last.Bytes))
		if st.Published != last.Published {
			m.LastProgress.WithLabelValues(l...).Set(float64(time.Now().Unix()))
		}
		return st
	}
	t := time.NewTicker(metricsInterval)
	defer t.Stop()
	nextPoll := time.Now()
	for {
		if s := rr.get(); s != nil {
			if s != sess {
				// A restart made a new session, whose counts start at
				// zero: settle the old one's, then follow the new one.
				if sess != nil {
					account(sess)
				}
				sess, last = s, relay.Stats{}
			}
			last = account(s)
			m.AcknowledgedLSNBytes.WithLabelValues(l...).Set(float64(last.DurableEnd))
			h.Detail("acknowledged_lsn", lsn.Format(last.DurableEnd))
			h.Detail("published_units", last.Published)
		}
		if f.Log != nil { // a broker flow's log figures are the cluster's (status)
			ls := f.Log.Stats()
			m.LogRetainedBytes.WithLabelValues(l...).Set(float64(ls.RetainedBytes))
			m.LogSegments.WithLabelValues(l...).Set(float64(ls.Segments))
		}
		if !time.Now().Before(nextPoll) {
			slot.poll(ctx)
			f.exportStall(ctx, m, l)
			nextPoll = time.Now().Add(pollInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// slotPoller reads the slot's WAL figures over a source connection of its
// own, opened on first use and after a failure.
type slotPoller struct {
	f      *Flow
	m      *obs.RelayMetrics
	labels []string
	conn   *pgx.Conn
	failed bool // the last poll failed (logged once per failing streak)
}

// slotWALSQL measures from the server's WAL position (on a standby, the
// last WAL received) to the slot's restart_lsn (what the server must keep)
// and to its confirmed_flush_lsn (what the relay has confirmed).
const slotWALSQL = `SELECT pg_wal_lsn_diff(w.lsn, s.restart_lsn)::float8, pg_wal_lsn_diff(w.lsn, s.confirmed_flush_lsn)::float8
FROM pg_replication_slots s,
     (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END AS lsn) w
WHERE s.slot_name = $1`

func (p *slotPoller) poll(ctx context.Context) {
	retained, lag, err := p.query(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		p.close()
		if !p.failed {
			p.f.Logger.Warn("slot metrics unavailable; retrying every poll", "flow", p.f.Cfg.Flow, "slot", p.f.Cfg.Source.Slot,
				"every", pollInterval, "err", err)
		}
		p.failed = true
	} else {
		p.failed = false
	}
	// Unknown is absent, never a stale or made-up number.
	set := func(g *prometheus.GaugeVec, v *float64) {
		if v == nil {
			g.DeleteLabelValues(p.labels...)
			return
		}
		g.WithLabelValues(p.labels...).Set(max(0, *v))
	}
	set(p.m.SlotRetainedWALBytes, retained)
	set(p.m.LagBytes, lag)
}

func (p *slotPoller) query(ctx context.Context) (retained, lag *float64, err error) {
	if p.conn == nil {
		if p.conn, err = p.f.ConnectSource(ctx); err != nil {
			return nil, nil, err
		}
	}
	qctx, cancel := context.WithTimeout(ctx, pollInterval)
	defer cancel()
	err = p.conn.QueryRow(qctx, slotWALSQL, p.f.Cfg.Source.Slot).Scan(&retained, &lag)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil // no slot yet: nothing is retained for it
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read slot %s from pg_replication_slots: %w", p.f.Cfg.Source.Slot, err)
	}
	return retained, lag, nil
}

func (p *slotPoller) close() {
	if p.conn != nil {
		p.conn.Close(context.Background())
		p.conn = nil
	}
}

// exportApplier keeps the applier's lag and quarantine series current
// until ctx ends, also while the applier itself is down (backing off
// behind a quarantine, say), so lag keeps growing where an operator sees
// it: lag from the log every metricsInterval, the open quarantine count
// from the target every pollInterval.
func (f *Flow) exportApplier(ctx context.Context, sk config.Sink, m *obs.ApplierMetrics, ar *applierRun) {
	l := f.labels(obs.ServiceApplier)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(metricsInterval)
	defer t.Stop()
	nextPoll := time.Now()
	for {
		f.exportApplierLag(ctx, m, l, ar, sk.Cursor())
		if !time.Now().Before(nextPoll) {
			open, err := f.openQuarantine(ctx, sk, &conn)
			if err != nil {
				// Before the applier's first start the target has no
				// Trellara schema yet; afterwards the component's own
				// errors report an unreachable target.
				m.QuarantineOpen.DeleteLabelValues(l...)
			} else {
				m.QuarantineOpen.WithLabelValues(l...).Set(float64(open))
			}
			nextPoll = time.Now().Add(pollInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// openQuarantine reads the open quarantine count from the target, over
// *conn (opened on first use, closed after a failure).
func (f *Flow) openQuarantine(ctx context.Context, sk config.Sink, conn **pgx.Conn) (int64, error) {
	if *conn == nil {
		c, err := f.ConnectSink(ctx, sk)
		if err != nil {
			return 0, err
		}
		*conn = c
	}
	qctx, cancel := context.WithTimeout(ctx, pollInterval)
	defer cancel()
	st, err := apply.ReadStatus(qctx, *conn, sk.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
	if err != nil {
		(*conn).Close(context.Background())
		*conn = nil
		return 0, err
	}
	return st.QuarantineOpen, nil
}

// exportApplierLag sets the cursor lag and, from the log entries the
// applier has not applied, lag in seconds (the oldest one's source commit
// time to now) and in WAL bytes (its checkpoint to the newest one's end).
func (f *Flow) exportApplierLag(ctx context.Context, m *obs.ApplierMetrics, l []string, ar *applierRun, cursor string) {
	if f.Log == nil {
		return // a broker flow: lag per partition is in status (consumer group lag)
	}
	var cur *segmentlog.CursorStats
	st := f.Log.Stats()
	for i := range st.Cursors {
		if st.Cursors[i].Name == cursor {
			cur = &st.Cursors[i]
		}
	}
	if cur == nil {
		return
	}
	m.CursorLagEntries.WithLabelValues(l...).Set(float64(cur.LagOffsets))
	if cur.LagOffsets == 0 {
		m.LagSeconds.WithLabelValues(l...).Set(0)
		m.LagBytes.WithLabelValues(l...).Set(0)
		return
	}
	oldest, secs, ok := cursorLag(ctx, f.Log, *cur, time.Now())
	if oldest == nil {
		// Retention or a concurrent apply moved past it: the next tick
		// reads afresh.
		return
	}
	if ok {
		m.LagSeconds.WithLabelValues(l...).Set(secs)
	}
	newest, err := logEntry(ctx, f.Log, st.NextOffset-1)
	if err != nil {
		return
	}
	base := oldest.CommitLsn // nothing applied yet: from the first unit waiting
	if cp, ok := ar.get(); ok && cp.EndLSN != 0 {
		base = cp.EndLSN
	}
	if newest.EndLsn >= base {
		m.LagBytes.WithLabelValues(l...).Set(float64(newest.EndLsn - base))
	}
}

// logEntry reads and decodes the entry of l at offset.
func logEntry(ctx context.Context, l *segmentlog.Log, offset uint64) (*pb.Envelope, error) {
	rctx, cancel := context.WithTimeout(ctx, metricsInterval)
	defer cancel()
	rd := l.NewReader(offset)
	defer rd.Close()
	_, b, err := rd.Next(rctx)
	if err != nil {
		return nil, err
	}
	return envelope.Decode(b)
}

// cursorLag is a consumer's lag in time: now minus the source commit time
// of the first entry of l it has not processed (oldest), 0 when it has
// processed everything. ok is false when that cannot be told: the entry
// is unreadable (oldest nil) or carries no commit time.
func cursorLag(ctx context.Context, l *segmentlog.Log, c segmentlog.CursorStats, now time.Time) (oldest *pb.Envelope, seconds float64, ok bool) {
	if c.PastRetention {
		return nil, 0, false
	}
	if c.LagOffsets == 0 {
		return nil, 0, true
	}
	e, err := logEntry(ctx, l, c.Offset)
	if err != nil {
		return nil, 0, false
	}
	if e.CommitTimeUnixMicros == 0 {
		return e, 0, false
	}
	return e, max(0, now.Sub(time.UnixMicro(e.CommitTimeUnixMicros)).Seconds()), true
}

// supervise runs body until ctx ends, restarting it after errors with
// capped, jittered exponential backoff. The backoff starts over after a run
// in which the component became ready (it connected and worked: this
// failure is a new one, such as a server restart or a network cut, and the
// component should be back within a second), or that lasted long. A
// quarantined unit is not retried hot: the backoff runs to its cap, since
// only an operator can fix it.
func supervise(ctx context.Context, component string, log *slog.Logger, h *obs.Health, c obs.Component, labels []string,
	body func(context.Context, *obs.Health) error) {
	backoff := backoffMin
	for ctx.Err() == nil {
		c.Up.WithLabelValues(labels...).Set(1)
		started, readies := time.Now(), h.Readies()
		err := body(ctx, h)
		if ctx.Err() != nil {
			h.Set("stopped", false, nil)
			c.Up.WithLabelValues(labels...).Set(0)
			return
		}
		c.Up.WithLabelValues(labels...).Set(0)
		c.Restarts.WithLabelValues(labels...).Inc()
		backoff = restartBackoff(backoff, h.Readies() > readies, time.Since(started), err)
		h.Set("backing off", false, err)
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		log.Error("component stopped; restarting", "component", component, "err", err,
			"retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(backoff*2, backoffMax)
	}
}

// restartBackoff is the backoff before restarting a component whose run
// ended with err after ran, cur being the backoff it was started with: the
// cap for a quarantined unit, the minimum again after a run in which the
// component became ready or that lasted long, else cur (supervise doubles
// it after the wait).
func restartBackoff(cur time.Duration, becameReady bool, ran time.Duration, err error) time.Duration {
	switch {
	case apply.IsQuarantined(err):
		return backoffMax
	case becameReady || ran > 5*backoffMax:
		return backoffMin
	}
	return cur
}
