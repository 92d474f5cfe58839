package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/obs"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
)

// Backoff bounds for restarting a component after an error.
const (
	backoffMin = time.Second
	backoffMax = time.Minute
)

// ServiceOptions configure the long-running service.
type ServiceOptions struct {
	ConfigPath string
	Role       string // relay, applier or all
	Logger     *slog.Logger
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
// reached, the applier's open target transaction rolls back.
func Serve(ctx context.Context, o ServiceOptions) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch o.Role {
	case "relay", "all", "sidecar":
	case "applier":
		// The local log admits one process; a separate applier process
		// would need a read-only log open that does not exist yet.
		return fmt.Errorf("not implemented yet: run --role applier as its own process on the local log; use --role all (one process runs relay and applier)")
	default:
		return fmt.Errorf("--role %q: must be all, relay or sidecar", o.Role)
	}
	metrics := obs.NewMetrics()
	for {
		f, err := Open(o.ConfigPath, o.Logger)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- f.serveOnce(rctx, o, metrics) }()
		if err := waitReload(done, o); err != nil || ctx.Err() != nil {
			cancel()
			f.Close()
			return err
		}
		o.Logger.Info("reloading configuration", "config", o.ConfigPath)
		cancel()
		<-done
		f.Close()
	}
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
			// file is bad: keep running on the old one.
			if nf, err := Open(o.ConfigPath, o.Logger); err == nil {
				nf.Close()
			} else if !errors.Is(err, segmentlog.ErrLocked) {
				o.Logger.Error("reload refused: keeping the running configuration", "config", o.ConfigPath, "err", err)
				continue
			}
			return nil
		}
	}
}

func (f *Flow) serveOnce(ctx context.Context, o ServiceOptions, m *obs.Metrics) error {
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	labels := func(service string) []string { return []string{service, f.Cfg.Source.ID, f.Cfg.Flow} }

	start := func(component, addr string, h *obs.Health, body func(context.Context, *obs.Health) error) {
		a, wait, err := obs.Serve(ctx, addr, obs.Handler(m, h))
		if err != nil {
			errc <- fmt.Errorf("%s: listen on %s: %w", component, addr, err)
			return
		}
		if o.Listening != nil {
			o.Listening(component, a)
		}
		wg.Add(2)
		go func() { defer wg.Done(); _ = wait() }()
		go func() {
			defer wg.Done()
			supervise(ctx, component, f.Logger, h, m, labels(component), body)
		}()
	}

	relayHealth := obs.NewHealth()
	start("relay", f.Cfg.Run.Listen.Relay, relayHealth, func(ctx context.Context, h *obs.Health) error {
		var sess *relay.Session
		var mu sync.Mutex
		stop := make(chan struct{})
		defer close(stop)
		go func() { // export the session's counters while it runs
			t := time.NewTicker(time.Second)
			defer t.Stop()
			var last relay.Stats
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				mu.Lock()
				s := sess
				mu.Unlock()
				if s == nil {
					continue
				}
				st := s.Stats()
				l := labels("relay")
				m.PublishedUnits.WithLabelValues(l...).Add(float64(st.Published - last.Published))
				m.PublishedBytes.WithLabelValues(l...).Add(float64(st.Bytes - last.Bytes))
				m.AcknowledgedLSN.WithLabelValues(l...).Set(float64(st.DurableEnd))
				if st.Published != last.Published {
					m.LastProgressSecond.WithLabelValues(l...).Set(float64(time.Now().Unix()))
				}
				ls := f.Log.Stats()
				m.LogRetainedBytes.WithLabelValues(l...).Set(float64(ls.RetainedBytes))
				m.LogSegments.WithLabelValues(l...).Set(float64(ls.Segments))
				h.Detail("acknowledged_lsn", lsnString(st.DurableEnd))
				h.Detail("published_units", st.Published)
				last = st
			}
		}()
		if o.Role == "sidecar" || f.Cfg.Source.Capture == config.CaptureExtension {
			// The native extension path: frames from the extension's socket
			// into the same assembly, log and applier.
			h.Set("streaming", true, nil)
			return f.CaptureExtension(ctx, CaptureOptions{})
		}
		return f.Capture(ctx, CaptureOptions{
			Streaming: nil,
			Session: func(s *relay.Session) {
				mu.Lock()
				sess = s
				mu.Unlock()
				h.Set("streaming", true, nil)
			},
		})
	})

	if o.Role == "all" && f.Cfg.Target != nil {
		applierHealth := obs.NewHealth()
		start("applier", f.Cfg.Run.Listen.Applier, applierHealth, func(ctx context.Context, h *obs.Health) error {
			tgt, err := f.ConnectTarget(ctx)
			if err != nil {
				return err
			}
			defer tgt.Close(context.Background())
			if f.Cfg.Target.CreateTables {
				if err := f.createTargetTables(ctx, tgt); err != nil {
					return err
				}
			}
			a, err := f.Applier(tgt)
			if err != nil {
				return err
			}
			h.Set("applying", true, nil)
			var last apply.Checkpoint
			return f.Apply(ctx, tgt, a, func(cp apply.Checkpoint) bool {
				l := labels("applier")
				m.TxnsApplied.WithLabelValues(l...).Add(float64(max(0, cp.TxnsApplied-last.TxnsApplied)))
				m.TxnsSkipped.WithLabelValues(l...).Add(float64(max(0, cp.TxnsSkipped-last.TxnsSkipped)))
				m.RowsApplied.WithLabelValues(l...).Add(float64(max(0, cp.RowsApplied-last.RowsApplied)))
				m.CheckpointLSN.WithLabelValues(l...).Set(float64(cp.EndLSN))
				m.LastProgressSecond.WithLabelValues(l...).Set(float64(time.Now().Unix()))
				for _, c := range f.Log.Stats().Cursors {
					if c.Name == ApplierCursor {
						m.CursorLagEntries.WithLabelValues(l...).Set(float64(c.LagOffsets))
					}
				}
				h.Detail("checkpoint_lsn", lsnString(cp.EndLSN))
				last = cp
				return false
			})
		})
	}
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
	go func() { wg.Wait(); close(errc) }()
	for err := range errc {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// supervise runs body until ctx ends, restarting it after errors with
// capped, jittered exponential backoff. A quarantined unit is not retried
// hot: the backoff runs to its cap, since only an operator can fix it.
func supervise(ctx context.Context, component string, log *slog.Logger, h *obs.Health, m *obs.Metrics, labels []string,
	body func(context.Context, *obs.Health) error) {
	backoff := backoffMin
	for ctx.Err() == nil {
		m.Up.WithLabelValues(labels...).Set(1)
		started := time.Now()
		err := body(ctx, h)
		if ctx.Err() != nil {
			h.Set("stopped", false, nil)
			m.Up.WithLabelValues(labels...).Set(0)
			return
		}
		m.Up.WithLabelValues(labels...).Set(0)
		m.Restarts.WithLabelValues(labels...).Inc()
		if time.Since(started) > 5*backoffMax {
			backoff = backoffMin // it ran well for a while: start over
		}
		if apply.IsQuarantined(err) {
			backoff = backoffMax
		}
		h.Set("backing off", false, err)
		log.Error("component stopped; restarting", "component", component, "err", err, "backoff", backoff)
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(backoff*2, backoffMax)
	}
}
