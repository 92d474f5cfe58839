// Package obs is the observability surface of the long-running services:
// /livez, /readyz, /healthz and Prometheus /metrics.
//
// The metric contract: every Trellara metric is named trellara_* and carries
// exactly three labels — service (relay | applier), source (source.id) and
// dataset (the flow name). Transaction ids, LSNs and error strings are never
// labels: they go to logs and /healthz. TestMetricContract locks the names.
package obs

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Labels are the only metric labels.
var Labels = []string{"service", "source", "dataset"}

// Metrics is the contract-locked metric set.
type Metrics struct {
	Registry *prometheus.Registry

	Up                 *prometheus.GaugeVec
	Restarts           *prometheus.CounterVec
	PublishedUnits     *prometheus.CounterVec
	PublishedBytes     *prometheus.CounterVec
	AcknowledgedLSN    *prometheus.GaugeVec
	TxnsApplied        *prometheus.CounterVec
	TxnsSkipped        *prometheus.CounterVec
	RowsApplied        *prometheus.CounterVec
	CheckpointLSN      *prometheus.GaugeVec
	QuarantineOpen     *prometheus.GaugeVec
	LogRetainedBytes   *prometheus.GaugeVec
	LogSegments        *prometheus.GaugeVec
	CursorLagEntries   *prometheus.GaugeVec
	LastProgressSecond *prometheus.GaugeVec
}

// NewMetrics registers the contract metrics on a fresh registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	g := func(name, help string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, Labels)
		r.MustRegister(v)
		return v
	}
	c := func(name, help string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, Labels)
		r.MustRegister(v)
		return v
	}
	return &Metrics{
		Registry:           r,
		Up:                 g("trellara_component_up", "1 while the component is running without error, 0 while it backs off"),
		Restarts:           c("trellara_component_restarts_total", "component restarts after an error"),
		PublishedUnits:     c("trellara_relay_published_units_total", "envelopes made durable in the transport"),
		PublishedBytes:     c("trellara_relay_published_bytes_total", "envelope bytes made durable in the transport"),
		AcknowledgedLSN:    g("trellara_relay_acknowledged_lsn", "position confirmed to the source slot (as a number)"),
		TxnsApplied:        c("trellara_applier_transactions_applied_total", "source transactions applied at the target"),
		TxnsSkipped:        c("trellara_applier_transactions_skipped_total", "redelivered source transactions detected and skipped"),
		RowsApplied:        c("trellara_applier_rows_applied_total", "rows applied at the target"),
		CheckpointLSN:      g("trellara_applier_checkpoint_lsn", "end LSN of the last applied source transaction (as a number)"),
		QuarantineOpen:     g("trellara_applier_quarantine_open", "quarantined units waiting for repair"),
		LogRetainedBytes:   g("trellara_log_retained_bytes", "bytes retained by the local segment log"),
		LogSegments:        g("trellara_log_segments", "segments in the local log"),
		CursorLagEntries:   g("trellara_log_cursor_lag_entries", "entries the consumer has not processed"),
		LastProgressSecond: g("trellara_last_progress_timestamp_seconds", "unix time of the component's last progress"),
	}
}

// Health is a component's state as /readyz and /healthz report it.
type Health struct {
	mu        sync.Mutex
	ready     bool
	state     string
	lastError string
	since     time.Time
	details   map[string]any
}

// NewHealth starts in state "starting", not ready.
func NewHealth() *Health {
	return &Health{state: "starting", since: time.Now(), details: map[string]any{}}
}

// Set records the state; ready components answer /readyz with 200.
func (h *Health) Set(state string, ready bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != state {
		h.since = time.Now()
	}
	h.state, h.ready = state, ready
	h.lastError = ""
	if err != nil {
		h.lastError = err.Error()
	}
}

// Detail sets a key shown by /healthz.
func (h *Health) Detail(k string, v any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.details[k] = v
}

func (h *Health) snapshot() (bool, map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]any{"state": h.state, "ready": h.ready, "since": h.since.UTC().Format(time.RFC3339)}
	if h.lastError != "" {
		out["last_error"] = h.lastError
	}
	for k, v := range h.details {
		out[k] = v
	}
	return h.ready, out
}

// Handler serves the four endpoints for one component.
func Handler(m *Metrics, h *Health) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, snap := h.snapshot()
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + snap["state"].(string) + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		ready, snap := h.snapshot()
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(snap)
	})
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	return mux
}

// Serve listens on addr until ctx ends. It returns once listening, with a
// function that waits for shutdown.
func Serve(ctx context.Context, addr string, handler http.Handler) (string, func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr().String(), func() error {
		err := <-errc
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}, nil
}
