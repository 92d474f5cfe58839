package flow

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/obs"
	"github.com/trellara/trellara/segmentlog"
)

// The applier's lag is measured from the log: seconds since the oldest
// unapplied transaction committed, and WAL bytes from the checkpoint to the
// newest unit's end; both 0 once everything in the log is applied.
func TestApplierLagFromLog(t *testing.T) {
	log, _, err := segmentlog.Open(filepath.Join(t.TempDir(), "log"), segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if err := log.CommitCursor(ApplierCursor, log.FirstOffset()); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	units := []struct {
		commit, end uint64
		age         time.Duration
	}{{0x1000, 0x1010, 2 * time.Hour}, {0x2000, 0x2010, time.Hour}, {0x3000, 0x3010, time.Second}}
	for _, u := range units {
		e := &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: "src1", Xid: 7, CommitLsn: u.commit, EndLsn: u.end,
			CommitTimeUnixMicros: now.Add(-u.age).UnixMicro(), Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION}}
		envelope.Seal(e)
		b, err := envelope.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := log.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	f := &Flow{Cfg: &config.Config{Flow: "svc", Source: config.Source{ID: "src1"}}, Log: log}
	m := obs.NewMetrics(obs.Build{})
	l := f.labels(obs.ServiceApplier)
	ar := &applierRun{}
	check := func(step string, minSeconds, maxSeconds, bytes float64) {
		t.Helper()
		f.exportApplierLag(context.Background(), m.Applier, l, ar, ApplierCursor)
		s := value(t, m.Applier.LagSeconds.WithLabelValues(l...))
		if s < minSeconds || s > maxSeconds {
			t.Errorf("%s: lag %.0f s, want %.0f..%.0f", step, s, minSeconds, maxSeconds)
		}
		if b := value(t, m.Applier.LagBytes.WithLabelValues(l...)); b != bytes {
			t.Errorf("%s: lag %v bytes, want %v", step, b, bytes)
		}
	}
	// Nothing applied: from the first unit waiting to the newest's end.
	check("nothing applied", 7200, 7200+600, 0x3010-0x1000)
	if err := log.CommitCursor(ApplierCursor, 1); err != nil {
		t.Fatal(err)
	}
	ar.set(apply.Checkpoint{CommitLSN: 0x1000, EndLSN: 0x1010})
	check("first applied", 3600, 3600+600, 0x3010-0x1010)
	if err := log.CommitCursor(ApplierCursor, 3); err != nil {
		t.Fatal(err)
	}
	ar.set(apply.Checkpoint{CommitLSN: 0x3000, EndLSN: 0x3010})
	check("caught up", 0, 0, 0)
	if got := value(t, m.Applier.CursorLagEntries.WithLabelValues(l...)); got != 0 {
		t.Errorf("cursor lag %v entries", got)
	}
}

func value(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var d dto.Metric
	if err := g.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetGauge().GetValue()
}

// status reads a log another process holds (read-only, as an applier does)
// and reports every consumer: its kind, its lag in entries, bytes and
// seconds, and when it last committed.
func TestStatusReportsEveryConsumerOnAHeldLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	w, _, err := segmentlog.Open(dir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // the writer holds the log throughout
	now := time.Now()
	for i, age := range []time.Duration{time.Hour, time.Minute, time.Second} {
		e := &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: "src1", Xid: 7, CommitLsn: uint64(0x1000 * (i + 1)), EndLsn: uint64(0x1000*(i+1) + 0x10),
			CommitTimeUnixMicros: now.Add(-age).UnixMicro(), Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION}}
		envelope.Seal(e)
		b, err := envelope.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	// The default sink's applier is caught up; a tail consumer read one.
	if err := w.CommitCursor(ApplierCursor, 3); err != nil {
		t.Fatal(err)
	}
	if err := w.CommitCursor("tailer", 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := segmentlog.Open(dir, segmentlog.Options{}); err == nil {
		t.Fatal("a second writer opened the log")
	}
	ro, err := segmentlog.OpenReadOnly(dir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	f := &Flow{Cfg: &config.Config{Flow: "svc", Source: config.Source{ID: "src1"},
		Sinks: []config.Sink{{Name: config.DefaultSinkName}}}}
	ls := &LogStatus{}
	f.logStatus(context.Background(), ro, ls)
	if ls.NextOffset != 3 || len(ls.Cursors) != 2 {
		t.Fatalf("log status %+v", ls)
	}
	got := map[string]CursorStatus{}
	for _, c := range ls.Cursors {
		got[c.Name] = c
		if c.LastCommitAt == nil || now.Sub(*c.LastCommitAt) > time.Hour {
			t.Errorf("cursor %s: last commit %v", c.Name, c.LastCommitAt)
		}
		if c.LagSeconds == nil {
			t.Fatalf("cursor %s: no lag in seconds", c.Name)
		}
	}
	a, tl := got[ApplierCursor], got["tailer"]
	if a.Kind != "sink" || a.Sink != config.DefaultSinkName || a.LagEntries != 0 || a.LagBytes != 0 || *a.LagSeconds != 0 {
		t.Errorf("applier: %+v (lag %v s)", a, *a.LagSeconds)
	}
	// The tailer's oldest unread entry committed a minute ago; its bytes
	// are the two entries it has not read, not the whole log.
	if tl.Kind != "consumer" || tl.LagEntries != 2 || *tl.LagSeconds < 60 || *tl.LagSeconds > 600 ||
		tl.LagBytes <= 0 || tl.LagBytes >= ls.RetainedBytes {
		t.Errorf("tailer: %+v (lag %v s, retained %d)", tl, *tl.LagSeconds, ls.RetainedBytes)
	}
}
