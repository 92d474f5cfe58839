package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gather returns a registry's families as name → label names of each
// series (sorted, as the registry reports them).
func gather(t *testing.T, g prometheus.Gatherer) map[string][][]string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][][]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var keys []string
			for _, lp := range m.GetLabel() {
				keys = append(keys, lp.GetName())
			}
			out[mf.GetName()] = append(out[mf.GetName()], keys)
		}
	}
	return out
}

// TestMetricContract locks the metric names of each role and their labels:
// dashboards and alerts are written against them, so a rename is a
// breaking change. Each role's registry holds only its own series, so the
// two ports never serve the same one.
func TestMetricContract(t *testing.T) {
	m := NewMetrics(Build{Version: "v1.2.3", Commit: "abc", GoVersion: "go1.26"})
	for _, f := range m.Relay.create {
		f([]string{ServiceRelay, "src", "flow"})
	}
	for _, f := range m.Applier.create {
		f([]string{ServiceApplier, "src", "flow"})
	}
	want := map[string][]string{
		ServiceRelay: {
			"trellara_build_info", "trellara_component_restarts_total", "trellara_component_up",
			"trellara_last_progress_timestamp_seconds", "trellara_log_consumer_stalled_seconds", "trellara_log_retained_bytes",
			"trellara_log_retention_headroom_seconds", "trellara_log_segments",
			"trellara_relay_acknowledged_lsn_bytes", "trellara_relay_lag_bytes", "trellara_relay_published_bytes_total",
			"trellara_relay_published_units_total", "trellara_relay_slot_retained_wal_bytes",
		},
		ServiceApplier: {
			"trellara_applier_apply_latency_seconds", "trellara_applier_checkpoint_lsn_bytes", "trellara_applier_lag_bytes",
			"trellara_applier_lag_seconds", "trellara_applier_quarantine_open", "trellara_applier_rows_applied_total",
			"trellara_applier_transactions_applied_total", "trellara_applier_transactions_skipped_total",
			"trellara_component_restarts_total", "trellara_component_up", "trellara_last_progress_timestamp_seconds",
			"trellara_log_cursor_lag_entries",
		},
	}
	for service, reg := range map[string]prometheus.Gatherer{ServiceRelay: m.Relay.Registry, ServiceApplier: m.Applier.Registry} {
		var names []string
		for name, series := range gather(t, reg) {
			if !strings.HasPrefix(name, "trellara_") {
				continue
			}
			names = append(names, name)
			wantLabels := []string{"dataset_id", "service", "source_id"}
			if name == "trellara_build_info" {
				wantLabels = []string{"commit", "go_version", "version"}
			}
			for _, keys := range series {
				if !slices.Equal(keys, wantLabels) {
					t.Errorf("%s: %s has labels %v, want %v", service, name, keys, wantLabels)
				}
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, want[service]) {
			t.Errorf("%s metric names changed:\n got %v\nwant %v", service, names, want[service])
		}
	}
}

// The process-level collectors and trellara_build_info are on the relay's
// registry only: one process, counted once.
func TestProcessCollectorsOnce(t *testing.T) {
	m := NewMetrics(Build{Version: "v1.2.3", Commit: "abc1234", GoVersion: "go1.26.8"})
	relay, applier := gather(t, m.Relay.Registry), gather(t, m.Applier.Registry)
	for _, name := range []string{"go_goroutines", "go_info", "process_cpu_seconds_total", "process_resident_memory_bytes", "trellara_build_info"} {
		if relay[name] == nil {
			t.Errorf("relay registry lacks %s", name)
		}
		if applier[name] != nil {
			t.Errorf("applier registry has %s: scraping both ports would count the process twice", name)
		}
	}
	mfs, err := m.Relay.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "trellara_build_info" {
			continue
		}
		got := map[string]string{}
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if got["version"] != "v1.2.3" || got["commit"] != "abc1234" || got["go_version"] != "go1.26.8" ||
			mf.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Fatalf("trellara_build_info %v = %v", got, mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
}

// LSNs are positions, not quantities to average: every metric carrying one
// says it is a byte offset (*_lsn_bytes), and is a gauge.
func TestLSNMetricsAreByteGauges(t *testing.T) {
	names, err := ContractNames()
	if err != nil {
		t.Fatal(err)
	}
	var lsn []string
	for _, n := range names {
		if strings.Contains(n, "lsn") {
			lsn = append(lsn, n)
			if !strings.HasSuffix(n, "_lsn_bytes") {
				t.Errorf("%s: an LSN metric is named *_lsn_bytes", n)
			}
		}
	}
	if !slices.Equal(lsn, []string{"trellara_applier_checkpoint_lsn_bytes", "trellara_relay_acknowledged_lsn_bytes"}) {
		t.Errorf("LSN metrics %v", lsn)
	}
	m := NewMetrics(Build{})
	m.Relay.AcknowledgedLSNBytes.WithLabelValues(ServiceRelay, "s", "d").Set(0x16B374D48)
	mfs, _ := m.Relay.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "trellara_relay_acknowledged_lsn_bytes" && mf.GetMetric()[0].GetGauge().GetValue() != 0x16B374D48 {
			t.Fatalf("acknowledged LSN exported as %v", mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
}

// Forget removes a renamed flow's series and nothing else.
func TestForget(t *testing.T) {
	m := NewMetrics(Build{})
	m.Applier.Up.WithLabelValues(ServiceApplier, "src", "old").Set(0)
	m.Applier.Up.WithLabelValues(ServiceApplier, "src", "kept").Set(1)
	m.Applier.ApplyLatency.WithLabelValues(ServiceApplier, "src", "old").Observe(1)
	m.Applier.Forget("src", "old")
	got := gather(t, m.Applier.Registry)
	if len(got["trellara_component_up"]) != 1 || got["trellara_applier_apply_latency_seconds"] != nil {
		t.Fatalf("after Forget: %v", got)
	}
}

// Durations are logged in human units, never as integer nanoseconds, and
// every line is JSON.
func TestLoggerJSONHumanDurations(t *testing.T) {
	var buf bytes.Buffer
	NewLogger(&buf, slog.LevelInfo).Info("component stopped", "retry_in", 1500*time.Millisecond,
		slog.Group("g", "every", 10*time.Second))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not JSON: %q", buf.String())
	}
	if rec["retry_in"] != "1.5s" || rec["g"].(map[string]any)["every"] != "10s" {
		t.Fatalf("durations logged as %v, %v: %s", rec["retry_in"], rec["g"], buf.String())
	}
}

func TestHealthEndpoints(t *testing.T) {
	h := NewHealth()
	srv := httptest.NewServer(Handler(NewMetrics(Build{}).Applier.Registry, h))
	defer srv.Close()
	get := func(p string) int {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("/livez") != 200 || get("/readyz") != 503 || get("/healthz") != 503 || get("/metrics") != 200 {
		t.Fatal("a starting component must be live but not ready")
	}
	h.Set("streaming", true, nil)
	if get("/readyz") != 200 || get("/healthz") != 200 {
		t.Fatal("a streaming component must be ready")
	}
	h.Set("backing off", false, errString("target unreachable"))
	resp, _ := srv.Client().Get(srv.URL + "/healthz")
	var b strings.Builder
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(b.String(), "target unreachable") {
		t.Fatalf("healthz %d %s", resp.StatusCode, b.String())
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// The endpoints are read-only and unauthenticated: every path answers GET
// and HEAD, and any other method gets 405 with Allow, over a real listener.
//
// Mutation tried: Handler returning mux without readOnly — POST, PUT and
// DELETE answer 200 (0335858's behaviour): red.
func TestEndpointsAnswerOnlyGetAndHead(t *testing.T) {
	h := NewHealth()
	h.Set("running", true, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, wait, err := Serve(ctx, "127.0.0.1:0", Handler(prometheus.NewRegistry(), h))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = wait() }()
	for _, path := range []string{"/livez", "/readyz", "/healthz", "/metrics", "/nope"} {
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, "TRACE"} {
			req, _ := http.NewRequest(m, "http://"+addr+path, strings.NewReader("x"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := http.StatusOK
			switch {
			case m != http.MethodGet && m != http.MethodHead:
				want = http.StatusMethodNotAllowed
			case path == "/nope":
				want = http.StatusNotFound
			}
			if resp.StatusCode != want || (want == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != "GET, HEAD") {
				t.Errorf("%s %s: %d (Allow %q), want %d", m, path, resp.StatusCode, resp.Header.Get("Allow"), want)
			}
		}
	}
}
