package obs

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// Values of the service label. Each role has its own registry, served on
// its own port: scraping both ports counts nothing twice.
const (
	ServiceRelay   = "relay"
	ServiceApplier = "applier"
)

// Labels are the contract's labels, in this order, on every trellara_*
// series except trellara_build_info.
var Labels = []string{"service", "source_id", "dataset_id"}

// Build identifies the running binary; trellara_build_info carries it.
type Build struct {
	Version   string // git describe output, or "dev"
	Commit    string // commit hash, or "unknown"
	GoVersion string // runtime.Version()
}

// Component are the series every role exports about itself.
type Component struct {
	Up *prometheus.GaugeVec
	// Restarts counts restarts after an error: every error that stops a
	// component restarts it, so this is also its error count.
	Restarts     *prometheus.CounterVec
	LastProgress *prometheus.GaugeVec
}

// RelayMetrics are the relay's series (port run.listen.relay). The
// process-level collectors (go_*, process_*, trellara_build_info) are
// registered here too, and only here: every process that serves metrics
// runs the relay, and one process must not appear twice.
type RelayMetrics struct {
	Registry *prometheus.Registry
	Component
	PublishedUnits *prometheus.CounterVec
	PublishedBytes *prometheus.CounterVec
	// AcknowledgedLSNBytes is an LSN: the position's byte offset in the
	// WAL, exact up to 2^53 bytes (8 PiB).
	AcknowledgedLSNBytes *prometheus.GaugeVec
	// LagBytes and SlotRetainedWALBytes are read from the source's
	// pg_replication_slots, off the replication path.
	LagBytes             *prometheus.GaugeVec
	SlotRetainedWALBytes *prometheus.GaugeVec
	LogRetainedBytes     *prometheus.GaugeVec
	LogSegments          *prometheus.GaugeVec
	// LogConsumerStalledSeconds and LogRetentionHeadroomSeconds follow the
	// stalled-consumer rule of `trellara status` (internal/flow, stall.go):
	// the relay holds the log, so it still reports when the applier that
	// stalled cannot (a frozen process serves no metrics).
	LogConsumerStalledSeconds   *prometheus.GaugeVec
	LogRetentionHeadroomSeconds *prometheus.GaugeVec

	series
}

// ApplierMetrics are the applier's series (port run.listen.applier).
type ApplierMetrics struct {
	Registry *prometheus.Registry
	Component
	TxnsApplied *prometheus.CounterVec
	TxnsSkipped *prometheus.CounterVec
	RowsApplied *prometheus.CounterVec
	// CheckpointLSNBytes is an LSN as a byte offset, like
	// RelayMetrics.AcknowledgedLSNBytes.
	CheckpointLSNBytes *prometheus.GaugeVec
	QuarantineOpen     *prometheus.GaugeVec
	CursorLagEntries   *prometheus.GaugeVec
	LagBytes           *prometheus.GaugeVec
	LagSeconds         *prometheus.GaugeVec
	ApplyLatency       *prometheus.HistogramVec

	series
}

// Metrics is the contract-locked metric set: one registry per role.
type Metrics struct {
	Relay   *RelayMetrics
	Applier *ApplierMetrics
}

// ApplyLatencyBuckets bound trellara_applier_apply_latency_seconds: 5 ms
// to one hour, the range between a healthy pipeline and a page.
var ApplyLatencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// NewMetrics registers the contract metrics on two fresh registries.
func NewMetrics(b Build) *Metrics {
	rb := newBuilder()
	RegisterProcess(rb.reg, b)
	r := &RelayMetrics{
		Registry:             rb.reg,
		Component:            rb.component(),
		PublishedUnits:       rb.counter("trellara_relay_published_units_total", "envelopes made durable in the transport"),
		PublishedBytes:       rb.counter("trellara_relay_published_bytes_total", "envelope bytes made durable in the transport"),
		AcknowledgedLSNBytes: rb.gauge("trellara_relay_acknowledged_lsn_bytes", "LSN confirmed to the source slot, as a byte offset in the WAL"),
		LagBytes: rb.gauge("trellara_relay_lag_bytes",
			"source WAL bytes past the slot's confirmed position (pg_current_wal_lsn() - confirmed_flush_lsn), read every 10 s"),
		SlotRetainedWALBytes: rb.gauge("trellara_relay_slot_retained_wal_bytes",
			"WAL bytes the source keeps for the slot (pg_current_wal_lsn() - restart_lsn), read every 10 s"),
		LogRetainedBytes: rb.gauge("trellara_log_retained_bytes", "bytes retained by the local segment log"),
		LogSegments:      rb.gauge("trellara_log_segments", "segments in the local log"),
		LogConsumerStalledSeconds: rb.gauge("trellara_log_consumer_stalled_seconds",
			"longest time a consumer of the local log has not moved while the log's end did, once past transport.local.stalled_consumer_after; 0 when none is stalled (trellara status names it)"),
		LogRetentionHeadroomSeconds: rb.gauge("trellara_log_retention_headroom_seconds",
			"while a consumer is stalled: seconds the log may still grow at its measured rate before retention expires the consumer or the disk fills; absent when none is stalled"),
	}
	r.series = rb.s

	ab := newBuilder()
	a := &ApplierMetrics{
		Registry:           ab.reg,
		Component:          ab.component(),
		TxnsApplied:        ab.counter("trellara_applier_transactions_applied_total", "source transactions applied at the target"),
		TxnsSkipped:        ab.counter("trellara_applier_transactions_skipped_total", "redelivered source transactions detected and skipped"),
		RowsApplied:        ab.counter("trellara_applier_rows_applied_total", "rows applied at the target"),
		CheckpointLSNBytes: ab.gauge("trellara_applier_checkpoint_lsn_bytes", "end LSN of the last applied source transaction, as a byte offset in the WAL"),
		QuarantineOpen:     ab.gauge("trellara_applier_quarantine_open", "quarantined units waiting for repair, read from the target every 10 s"),
		CursorLagEntries:   ab.gauge("trellara_log_cursor_lag_entries", "log entries the applier has not processed"),
		LagBytes: ab.gauge("trellara_applier_lag_bytes",
			"WAL bytes between the end LSN of the newest unit in the log and the applier's checkpoint; 0 when it has applied everything the log holds"),
		LagSeconds: ab.gauge("trellara_applier_lag_seconds",
			"age of the oldest log unit the applier has not applied (now - its source commit time); 0 when it has applied everything the log holds"),
		ApplyLatency: ab.histogram("trellara_applier_apply_latency_seconds",
			"per source transaction applied: seconds from its source commit to the target commit that applied it", ApplyLatencyBuckets),
	}
	a.series = ab.s
	return &Metrics{Relay: r, Applier: a}
}

// RegisterProcess adds the process-level series (go_*, process_*,
// trellara_build_info) to reg: the relay's registry, or the first
// applier's in a process that runs no relay (run --role applier).
func RegisterProcess(reg *prometheus.Registry, b Build) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(b))
}

// buildInfo is trellara_build_info: constant 1, labelled with what was
// built. It is the one trellara_* metric outside the three-label rule: its
// labels describe the binary, and have one value per process.
func buildInfo(b Build) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trellara_build_info",
		Help: "constant 1; the labels name the running binary's version, commit and Go version",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "go_version": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}

// series knows every metric of a role, to create a series of each (so the
// contract can be listed from the registry itself) and to forget a flow.
type series struct {
	create []func(labelValues []string)
	forget []func(prometheus.Labels)
}

// Forget deletes every series of the flow (source_id, dataset_id): a
// reload that renames the flow must not leave the old one's series behind,
// frozen, for alerts to fire on.
func (s series) Forget(sourceID, datasetID string) {
	for _, f := range s.forget {
		f(prometheus.Labels{"source_id": sourceID, "dataset_id": datasetID})
	}
}

// builder registers one role's metrics.
type builder struct {
	reg *prometheus.Registry
	s   series
}

func (b *builder) add(c prometheus.Collector, v *prometheus.MetricVec, create func([]string)) {
	b.reg.MustRegister(c)
	b.s.create = append(b.s.create, create)
	b.s.forget = append(b.s.forget, func(l prometheus.Labels) { v.DeletePartialMatch(l) })
}

func newBuilder() *builder { return &builder{reg: prometheus.NewRegistry()} }

func (b *builder) component() Component {
	return Component{
		Up:           b.gauge("trellara_component_up", "1 while the component is running without error, 0 while it backs off"),
		Restarts:     b.counter("trellara_component_restarts_total", "component restarts after an error (each error restarts it)"),
		LastProgress: b.gauge("trellara_last_progress_timestamp_seconds", "unix time of the component's last progress"),
	}
}

func (b *builder) gauge(name, help string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, Labels)
	b.add(v, v.MetricVec, func(l []string) { v.WithLabelValues(l...) })
	return v
}

func (b *builder) counter(name, help string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, Labels)
	b.add(v, v.MetricVec, func(l []string) { v.WithLabelValues(l...) })
	return v
}

func (b *builder) histogram(name, help string, buckets []float64) *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, Labels)
	b.add(v, v.MetricVec, func(l []string) { v.WithLabelValues(l...) })
	return v
}

// ContractNames lists, sorted, every series name the two registries can
// export: each role's metrics (one series of each created on a fresh
// set), the process-level collectors, and for a histogram its _bucket,
// _sum and _count series (for a summary the name itself, _sum and
// _count). Alert rules, the dashboard and docs are checked against it.
func ContractNames() ([]string, error) {
	m := NewMetrics(Build{Version: "v", Commit: "c", GoVersion: "go"})
	for _, f := range append(m.Relay.create, m.Applier.create...) {
		f([]string{"svc", "src", "flow"})
	}
	seen := map[string]bool{}
	for _, g := range []prometheus.Gatherer{m.Relay.Registry, m.Applier.Registry} {
		mfs, err := g.Gather()
		if err != nil {
			return nil, err
		}
		for _, mf := range mfs {
			n := mf.GetName()
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				seen[n+"_bucket"], seen[n+"_sum"], seen[n+"_count"] = true, true, true
			case dto.MetricType_SUMMARY:
				seen[n], seen[n+"_sum"], seen[n+"_count"] = true, true, true
			default:
				seen[n] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}
