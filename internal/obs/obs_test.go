package obs

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestMetricContract locks the metric names and their labels: dashboards
// and alerts are written against them, so a rename is a breaking change.
func TestMetricContract(t *testing.T) {
	m := NewMetrics()
	l := []string{"relay", "src", "flow"}
	m.Up.WithLabelValues(l...).Set(1)
	m.Restarts.WithLabelValues(l...).Inc()
	m.PublishedUnits.WithLabelValues(l...).Inc()
	m.PublishedBytes.WithLabelValues(l...).Inc()
	m.AcknowledgedLSN.WithLabelValues(l...).Set(1)
	m.TxnsApplied.WithLabelValues(l...).Inc()
	m.TxnsSkipped.WithLabelValues(l...).Inc()
	m.RowsApplied.WithLabelValues(l...).Inc()
	m.CheckpointLSN.WithLabelValues(l...).Set(1)
	m.QuarantineOpen.WithLabelValues(l...).Set(1)
	m.LogRetainedBytes.WithLabelValues(l...).Set(1)
	m.LogSegments.WithLabelValues(l...).Set(1)
	m.CursorLagEntries.WithLabelValues(l...).Set(1)
	m.LastProgressSecond.WithLabelValues(l...).Set(1)
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
		for _, metric := range mf.GetMetric() {
			var keys []string
			for _, lp := range metric.GetLabel() {
				keys = append(keys, lp.GetName())
			}
			if !slices.Equal(keys, []string{"dataset", "service", "source"}) {
				t.Errorf("%s has labels %v", mf.GetName(), keys)
			}
		}
	}
	want := []string{
		"trellara_applier_checkpoint_lsn", "trellara_applier_quarantine_open", "trellara_applier_rows_applied_total",
		"trellara_applier_transactions_applied_total", "trellara_applier_transactions_skipped_total",
		"trellara_component_restarts_total", "trellara_component_up", "trellara_last_progress_timestamp_seconds",
		"trellara_log_cursor_lag_entries", "trellara_log_retained_bytes", "trellara_log_segments",
		"trellara_relay_acknowledged_lsn", "trellara_relay_published_bytes_total", "trellara_relay_published_units_total",
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("metric names changed:\n got %v\nwant %v", names, want)
	}
}

func TestHealthEndpoints(t *testing.T) {
	h := NewHealth()
	srv := httptest.NewServer(Handler(NewMetrics(), h))
	defer srv.Close()
	get := func(p string) int {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("/livez") != 200 || get("/readyz") != 503 || get("/healthz") != 503 {
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
