//go:build full

package lake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/flow"
	"github.com/trellara/trellara/internal/obs"
)

// RunOptions configure RunFleet.
type RunOptions struct {
	Logger *slog.Logger
	Build  obs.Build
	// Listening, when set, receives the lake committer's bound address.
	Listening func(addr string)
}

// RunFleet runs the fleet until ctx ends: one relay per source whose
// relay is the fleet's (the flow's own relay service: its slot, its local
// log or Kafka topic, its /healthz and /metrics on the flow's
// run.listen.relay; a source with relay: external has its relay run
// elsewhere, by trellara run --role relay) and one lake committer over
// every source's stream,
// serving /healthz and /metrics on run.listen. Each part restarts with
// capped backoff after an error; a source that is down only makes its
// relay reconnect, and nothing is buffered on the source side beyond what
// its slot retains.
func RunFleet(ctx context.Context, f *Fleet, o RunOptions) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Info("trellara fleet starting", "fleet", f.Name, "sources", f.SourceIDs(), "catalog", f.Lake.Catalog.Kind,
		"warehouse", f.Lake.Warehouse, "namespace", f.Lake.Namespace, "version", o.Build.Version, "commit", o.Build.Commit)
	// A component that stops for good (a permanent error) cancels the rest.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	health := obs.NewHealth()
	m := newLakeMetrics(f)
	addr, wait, err := obs.Serve(ctx, f.Run.Listen, obs.Handler(m.reg, health))
	if err != nil {
		return fmt.Errorf("fleet: lake committer: listen on %s: %w (set run.listen in %s)", f.Run.Listen, err, f.File())
	}
	if o.Listening != nil {
		o.Listening(addr)
	}
	var wg sync.WaitGroup
	for _, s := range f.Sources {
		if s.ExternalRelay() {
			log.Info("fleet: source relay runs outside this process (relay: external); committing what it publishes",
				"source", s.ID, "config", s.Config, "stream", streamName(s))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slog := log.With("source", s.ID)
			if err := restart(ctx, slog, "relay "+s.ID, func(ctx context.Context) error {
				return flow.Serve(ctx, flow.ServiceOptions{ConfigPath: s.Config, Role: "relay", Logger: slog, Build: o.Build})
			}); err != nil {
				cancel(fmt.Errorf("fleet: source %s (%s): %w", s.ID, s.Config, err))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := restart(ctx, log, "lake committer", func(ctx context.Context) error {
			return commitLoop(ctx, f, log, health, m)
		}); err != nil {
			cancel(fmt.Errorf("fleet: lake committer (%s): %w", f.File(), err))
		}
	}()
	wg.Wait()
	_ = wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("trellara fleet stopped: a component cannot start until its configuration changes", "fleet", f.Name, "err", err)
		return err
	}
	log.Info("trellara fleet stopped", "fleet", f.Name)
	return nil
}

// streamName names what the committer reads of source s.
func streamName(s FleetSource) string {
	if k := s.Kafka(); k != nil {
		return "kafka topic " + k.Topic
	}
	return "log " + s.LogDir()
}

// restart runs body until ctx ends, again after each error with capped,
// jittered exponential backoff; an error a restart cannot mend (permanent)
// is returned instead, and the fleet stops with it.
func restart(ctx context.Context, log *slog.Logger, what string, body func(context.Context) error) error {
	backoff := time.Second
	for ctx.Err() == nil {
		started := time.Now()
		err := body(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if permanent(err) {
			return err
		}
		if time.Since(started) > 5*time.Minute {
			backoff = time.Second
		}
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		log.Error("fleet: component stopped; restarting", "component", what, "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(backoff*2, time.Minute)
	}
	return nil
}

// commitLoop is one life of the lake committer: it opens the lake and the
// committer and runs the committer's loop.
func commitLoop(ctx context.Context, f *Fleet, log *slog.Logger, h *obs.Health, m *lakeMetrics) error {
	h.Set("opening the catalog", false, nil)
	l, err := Open(ctx, f.Lake)
	if err != nil {
		h.Set("catalog unavailable", false, err)
		return err
	}
	defer l.Close()
	c, err := NewCommitter(ctx, l, f, log)
	if err != nil {
		what := "catalog unavailable"
		if errors.Is(err, ErrLeaseHeld) {
			// Another committer owns a table: this one waits on the
			// restart backoff, committing nothing (a standby).
			what = "a table is leased to another committer"
		}
		h.Set(what, false, err)
		return err
	}
	defer c.Close()
	return c.loop(ctx, h, m)
}

// loop commits a batch every run.commit_every and starts an epoch every
// epochs.close_interval. An epoch's probes run while the loop goes on
// committing: a lagging source, whose probe waits up to min(max_lag,
// 15 s) for its slot, delays only the epoch record, never the rows of the
// sources that keep up. One epoch is pending at a time; a close tick
// while one is pending is skipped.
func (c *Committer) loop(ctx context.Context, h *obs.Health, m *lakeMetrics) error {
	// The probes of a pending epoch end with this life of the loop.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h.Set("committing", true, nil)
	commit := time.NewTicker(c.fleet.Run.CommitEvery)
	defer commit.Stop()
	epoch := time.NewTicker(c.fleet.Epochs.CloseInterval)
	defer epoch.Stop()
	epochC := epoch.C
	if !c.lake.sink.EpochWriter() {
		// A shard writes no epochs: it cannot claim a source caught up
		// in tables it does not commit.
		epochC = nil
		c.log.Info("lake: this committer owns lake.tables and writes no epoch records", "committer", c.lake.sink.Committer,
			"tables", tablesText(c.lake.sink.Tables))
	}
	// The heartbeat renews the leases between commits: a commit_every
	// or an epoch wait longer than the TTL must not let them lapse.
	heartbeat := time.NewTicker(max(c.leases.TTL()/3, 10*time.Millisecond))
	defer heartbeat.Stop()
	var pending *PendingEpoch
	var probed <-chan struct{} // pending's Done; nil (never ready) with none
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-commit.C:
			if err := c.Step(ctx); err != nil {
				h.Set("commit failed", false, err)
				return err
			}
		case <-heartbeat.C:
			if err := c.leases.Renew(ctx); err != nil {
				h.Set("lease lost", false, err)
				return err
			}
			continue
		case <-epochC:
			if pending != nil {
				c.log.Debug("lake: epoch close skipped: the previous epoch's probes are still out")
				continue
			}
			pending = c.StartEpoch(ctx)
			probed = pending.Done()
			continue
		case <-probed:
			e, err := c.FinishEpoch(ctx, pending)
			pending, probed = nil, nil
			if err != nil {
				h.Set("epoch failed", false, err)
				return err
			}
			h.Detail("last_epoch", e.ID)
			h.Detail("last_epoch_status", e.Status)
			h.Detail("missing_sources", e.Missing())
		}
		m.observe(c.Stats())
		h.Set("committing", true, nil)
	}
}

// lakeMetrics is the committer's registry.
type lakeMetrics struct {
	reg      *prometheus.Registry
	commits  prometheus.Gauge
	rows     *prometheus.GaugeVec
	epoch    prometheus.Gauge
	complete prometheus.Gauge
	included *prometheus.GaugeVec
	through  *prometheus.GaugeVec
}

func newLakeMetrics(f *Fleet) *lakeMetrics {
	reg := prometheus.NewRegistry()
	l := prometheus.Labels{"fleet": f.Name}
	m := &lakeMetrics{reg: reg,
		commits: prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellara_lake_table_commits", Help: "Iceberg table commits by this committer process", ConstLabels: l}),
		rows:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trellara_lake_rows_committed", Help: "changelog rows committed by this committer process, per source", ConstLabels: l}, []string{"source_id"}),
		epoch:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellara_lake_last_epoch", Help: "id of the last closed epoch", ConstLabels: l}),
		complete: prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellara_lake_last_epoch_complete",
			Help: "1 when the last closed epoch is complete, 0 when complete_with_gaps", ConstLabels: l}),
		included: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trellara_lake_source_included", Help: "1 when the last epoch includes the source", ConstLabels: l}, []string{"source_id"}),
		through:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trellara_lake_source_through_lsn", Help: "the last epoch's through LSN of the source, as a number", ConstLabels: l}, []string{"source_id"}),
	}
	reg.MustRegister(m.commits, m.rows, m.epoch, m.complete, m.included, m.through)
	for _, id := range f.SourceIDs() {
		m.rows.WithLabelValues(id)
		m.included.WithLabelValues(id)
	}
	return m
}

func (m *lakeMetrics) observe(s CommitterStats) {
	m.commits.Set(float64(s.Commits))
	for id, n := range s.Rows {
		m.rows.WithLabelValues(id).Set(float64(n))
	}
	if s.LastEpoch.ID == 0 {
		return
	}
	m.epoch.Set(float64(s.LastEpoch.ID))
	if s.LastEpoch.Status == StatusComplete {
		m.complete.Set(1)
	} else {
		m.complete.Set(0)
	}
	for _, se := range s.LastEpoch.Sources {
		v := 0.0
		if se.Included {
			v = 1
		}
		m.included.WithLabelValues(se.SourceID).Set(v)
		m.through.WithLabelValues(se.SourceID).Set(float64(se.ThroughLSN))
	}
}

// permanent reports whether err cannot be mended by a restart: a
// PermanentError, a listen address in use, or an invalid configuration.
func permanent(err error) bool {
	var pe *PermanentError
	var ve *config.ValidationError
	return errors.As(err, &pe) || errors.Is(err, syscall.EADDRINUSE) || errors.As(err, &ve)
}
