package flow

import (
	"testing"
	"time"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/config"
)

// TestConsumerStallRule pins the stalled-consumer rule (stall.go) on its
// inputs: which consumers are stalled, since when, and which retention
// limit gives first.
func TestConsumerStallRule(t *testing.T) {
	now := time.Date(2026, 12, 2, 21, 6, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	env := func(d time.Duration) *pb.Envelope { return &pb.Envelope{CommitTimeUnixMicros: now.Add(d).UnixMicro()} }
	free := int64(36 << 30)
	newFlow := func(expire bool) *Flow {
		l := config.DefaultLocal()
		l.Dir, l.ExpirePastRetention = "/x", expire
		l.Retention.MaxBytes = 50 << 30
		return &Flow{Cfg: &config.Config{Transport: config.Transport{Local: l}}}
	}
	for _, tc := range []struct {
		what         string
		expire       bool
		lag          uint64
		lagBytes     int64
		committed    *time.Time
		oldest       *pb.Envelope
		appended     time.Duration
		retained     int64
		wantSeconds  float64 // 0: not stalled
		wantLimit    string
		wantHeadroom float64 // hours, when wantLimit is set
	}{
		{what: "caught up", lag: 0, committed: at(-time.Hour), appended: -time.Minute},
		{what: "the log did not move after the consumer", lag: 5, committed: at(-5 * time.Minute), oldest: env(-time.Hour), appended: -6 * time.Minute},
		{what: "still, under the threshold", lag: 5, committed: at(-10 * time.Minute), oldest: env(-time.Minute), appended: -time.Second},
		// Idle and caught up since 20:00, work since 21:04: stalled 2m, not 66m.
		{what: "stalled since its first pending entry", lag: 5, lagBytes: 120 << 20, committed: at(-66 * time.Minute), oldest: env(-2 * time.Minute),
			appended: -time.Second, wantSeconds: 120, wantLimit: "disk_free", wantHeadroom: float64(free) / float64(1<<20) / 3600},
		// A consumer that moved a minute ago has been still for a minute only.
		{what: "stalled since its last commit", lag: 5, lagBytes: 60 << 20, committed: at(-3 * time.Minute), oldest: env(-time.Hour),
			appended: -time.Second, wantSeconds: 180, wantLimit: "disk_free", wantHeadroom: float64(free) / float64(60<<20) * 180 / 3600},
		{what: "expire: max_bytes gives first", expire: true, lag: 5, lagBytes: 120 << 20, committed: at(-66 * time.Minute), oldest: env(-2 * time.Minute),
			appended: -time.Second, retained: 49 << 30, wantSeconds: 120, wantLimit: "retention.max_bytes", wantHeadroom: 1024.0 / 3600},
	} {
		f := newFlow(tc.expire)
		cs := &CursorStatus{Name: "applier", LagEntries: tc.lag, LagBytes: tc.lagBytes, LastCommitAt: tc.committed}
		ls := &LogStatus{RetainedBytes: tc.retained}
		got := f.consumerStall(cs, ls, tc.oldest, logTimes{now: now, lastAppendAt: now.Add(tc.appended), diskFree: &free})
		switch {
		case tc.wantSeconds == 0 && got != nil:
			t.Errorf("%s: stalled %+v, want not stalled", tc.what, got)
		case tc.wantSeconds == 0:
		case got == nil:
			t.Errorf("%s: not stalled, want %vs", tc.what, tc.wantSeconds)
		case got.Seconds != tc.wantSeconds || got.RetentionLimit != tc.wantLimit || got.RetentionHeadroomHours == nil ||
			*got.RetentionHeadroomHours < tc.wantHeadroom*0.999 || *got.RetentionHeadroomHours > tc.wantHeadroom*1.001:
			t.Errorf("%s: %+v (headroom %v h), want %vs, limit %s, ~%.2f h", tc.what, got, fderef(got.RetentionHeadroomHours), tc.wantSeconds, tc.wantLimit, tc.wantHeadroom)
		}
	}
}

func fderef(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
