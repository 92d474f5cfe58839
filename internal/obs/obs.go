// Package obs is the observability surface of the long-running services:
// /livez, /readyz, /healthz and Prometheus /metrics, and the JSON logger.
//
// The metric contract (docs/METRICS.md): every Trellara metric is named
// trellara_* and carries exactly three labels — service (relay | applier),
// source_id (source.id) and dataset_id (the flow name). The one exception
// is trellara_build_info, whose labels (version, commit, go_version) name
// the binary. Each role has its own registry on its own port, so scraping
// both ports counts nothing twice; the process-level collectors (go_*,
// process_*) and trellara_build_info are on the relay's port only.
// Transaction ids, LSNs and error strings are never labels: they go to
// logs and /healthz. LSNs are exported as *_lsn_bytes gauges: the
// position as a byte offset in the WAL. TestMetricContract locks the names.
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

// Health is a component's state as /readyz and /healthz report it.
type Health struct {
	mu        sync.Mutex
	ready     bool
	state     string
	lastError string
	since     time.Time
	details   map[string]any
	readies   uint64 // transitions to ready
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
	if ready && !h.ready {
		h.readies++
	}
	h.state, h.ready = state, ready
	h.lastError = ""
	if err != nil {
		h.lastError = err.Error()
	}
}

// Readies counts the times the component became ready: a supervisor
// compares it around a run to tell a component that worked and then failed
// from one that never got going.
func (h *Health) Readies() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.readies
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

// Handler serves the four endpoints for one component; /metrics serves
// that component's registry.
func Handler(metrics prometheus.Gatherer, h *Health) http.Handler {
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
	mux.Handle("/metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	return readOnly(mux)
}

// readOnly answers only GET and HEAD: the endpoints are read-only and have
// no authentication, so no other method may reach a handler (405, with
// Allow).
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: these endpoints answer GET and HEAD only", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
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
