package flow

import (
	"context"

	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/obs"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/segmentlog"
)

// A stalled consumer.
//
// The relay publishes to the local log and only then confirms the source
// slot, so a consumer that stops reading (a frozen applier, a hung
// program on package consumer) leaves the slot clean: the pressure lands
// on the log, which keeps what the consumer has not read. Nothing on the
// source shows it; the log's files do:
//
//	last_commit_at   the consumer's cursor file was last replaced (every
//	                 cursor commit replaces it): when it last moved
//	last_append_at   the newest segment file was last written: when the
//	                 log's end last moved
//	oldest pending   the source commit time of the first entry the
//	                 consumer has not read
//
// A consumer is stalled when it has entries to read (lag_entries > 0),
// the log's end moved after its cursor did (last_append_at >
// last_commit_at), and it has had that work for at least
// transport.local.stalled_consumer_after (default 2m) without moving:
//
//	stalled since = max(last_commit_at, oldest pending's commit time)
//
// (the later of the two: a consumer that committed a minute ago has not
// been still for longer, and one that had nothing to read until an entry
// committed at T has had work only since T). A consumer that moves keeps
// replacing its cursor file, so a busy one is never stalled, however far
// behind it is; a flow at rest appends nothing, so none of its consumers
// is stalled either.
//
// The log's growth rate is measured from the log itself: the bytes the
// consumer has not read (all appended while it was still) over the stall.
// The retention headroom is what the log may still grow at that rate
// before something gives:
//
//	expire_past_retention: true    retention.max_bytes minus what the log
//	                               retains, and retention.max_age minus
//	                               the age of the oldest pending entry:
//	                               then retention expires the consumer,
//	                               which must copy its tables again
//	expire_past_retention: false   the free space of the log's filesystem:
//	                               retention keeps what the consumer needs,
//	                               and once the disk is full the relay
//	                               stops publishing and the source slot
//	                               starts retaining WAL
//
// (the free disk bounds the first case too). The headroom is the earliest
// of these, in hours.

// ConsumerStall is how long a consumer of the local log has been still
// while the log's end moved, and what that leaves.
type ConsumerStall struct {
	Since   time.Time `json:"since"`
	Seconds float64   `json:"seconds"`
	// LogGrowthBytesPerSecond is how fast the log grew while the consumer
	// was still: the bytes it has not read over the stall.
	LogGrowthBytesPerSecond *float64 `json:"log_growth_bytes_per_second"`
	// RetentionHeadroomBytes and RetentionHeadroomHours are how much more
	// the log may grow, and for how long at that rate, before
	// RetentionLimit gives; nil when not known.
	RetentionHeadroomBytes *int64   `json:"retention_headroom_bytes"`
	RetentionHeadroomHours *float64 `json:"retention_headroom_hours"`
	// RetentionLimit is the bound that gives first: retention.max_bytes,
	// retention.max_age or disk_free.
	RetentionLimit string `json:"retention_limit"`
}

// ProblemConsumerStalled is the status problem for a stalled consumer.
const ProblemConsumerStalled = "consumer_stalled"

// logTimes are the log-wide inputs of the stall rule, read once per report.
type logTimes struct {
	now          time.Time
	lastAppendAt time.Time // zero when not known
	diskFree     *int64
}

// readLogTimes reads when l's end last moved and the free space of its
// filesystem; ls gets the free space and the threshold.
func (f *Flow) readLogTimes(l *segmentlog.Log, ls *LogStatus, now time.Time) logTimes {
	lt := logTimes{now: now}
	if at, ok, err := l.LastAppendAt(); err == nil && ok {
		lt.lastAppendAt = at
		u := at.UTC()
		ls.LastAppendAt = &u
	}
	dir := ls.Dir
	if loc := f.Cfg.Transport.Local; loc != nil {
		dir = loc.LogDir()
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(dir, &sfs); dir != "" && err == nil {
		free := int64(sfs.Bavail) * int64(sfs.Bsize)
		lt.diskFree = &free
		ls.DiskFreeBytes = &free
	}
	ls.StalledAfterSeconds = f.stalledAfter().Seconds()
	return lt
}

func (f *Flow) stalledAfter() time.Duration {
	if l := f.Cfg.Transport.Local; l != nil && l.StalledConsumerAfter > 0 {
		return l.StalledConsumerAfter
	}
	return config.DefaultStalledConsumerAfter
}

// consumerStall applies the rule above to cursor cs of the log ls, whose
// first unread entry is oldest (nil when unreadable); nil when cs is not
// stalled.
func (f *Flow) consumerStall(cs *CursorStatus, ls *LogStatus, oldest *pb.Envelope, lt logTimes) *ConsumerStall {
	if cs.LagEntries == 0 || cs.PastRetention || lt.lastAppendAt.IsZero() {
		return nil
	}
	var since time.Time
	if cs.LastCommitAt != nil {
		if !lt.lastAppendAt.After(*cs.LastCommitAt) {
			return nil // the log's end has not moved since the consumer did
		}
		since = *cs.LastCommitAt
	}
	var pendingSince time.Time
	if oldest != nil && oldest.CommitTimeUnixMicros != 0 {
		pendingSince = time.UnixMicro(oldest.CommitTimeUnixMicros)
		if pendingSince.After(since) {
			since = pendingSince
		}
	}
	if since.IsZero() {
		return nil // nothing says when it last moved or had work
	}
	since = minTime(since, lt.now)
	stalled := lt.now.Sub(since)
	if stalled < f.stalledAfter() {
		return nil
	}
	st := &ConsumerStall{Since: since.UTC(), Seconds: math.Round(stalled.Seconds()*10) / 10}
	// Everything the consumer has not read was appended while it was
	// still: that over the stall is the log's growth rate (an average, so
	// one burst is not projected as a steady rate).
	if w := stalled.Seconds(); w >= 1 {
		r := float64(cs.LagBytes) / w
		st.LogGrowthBytesPerSecond = &r
	}
	loc := f.Cfg.Transport.Local
	headroom := func(limit string, bytes int64) {
		bytes = max(bytes, 0)
		var hours *float64
		if st.LogGrowthBytesPerSecond != nil {
			h := float64(bytes) / *st.LogGrowthBytesPerSecond / 3600
			hours = &h
		}
		if st.RetentionLimit == "" || (hours != nil && (st.RetentionHeadroomHours == nil || *hours < *st.RetentionHeadroomHours)) {
			st.RetentionLimit, st.RetentionHeadroomBytes, st.RetentionHeadroomHours = limit, &bytes, hours
		}
	}
	if lt.diskFree != nil {
		headroom("disk_free", *lt.diskFree)
	}
	if loc != nil && loc.ExpirePastRetention {
		if loc.Retention.MaxBytes > 0 {
			headroom("retention.max_bytes", int64(loc.Retention.MaxBytes)-ls.RetainedBytes)
		}
		if loc.Retention.MaxAge > 0 && !pendingSince.IsZero() {
			left := loc.Retention.MaxAge - lt.now.Sub(pendingSince)
			h := max(left, 0).Hours()
			if st.RetentionHeadroomHours == nil || h < *st.RetentionHeadroomHours {
				st.RetentionLimit, st.RetentionHeadroomHours = "retention.max_age", &h
				st.RetentionHeadroomBytes = nil
				if st.LogGrowthBytesPerSecond != nil {
					b := int64(*st.LogGrowthBytesPerSecond * max(left, 0).Seconds())
					st.RetentionHeadroomBytes = &b
				}
			}
		}
	}
	return st
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// stalledConsumerProblems names each stalled consumer of the local log
// (the rule above): who it is, how long it has been still, how fast the
// log grows and how many hours of retention that leaves, and what to do.
func stalledConsumerProblems(st *Status, configPath string) []StatusProblem {
	out := []StatusProblem{}
	if st.Log == nil {
		return out
	}
	for _, c := range st.Log.Cursors {
		if c.Stalled == nil {
			continue
		}
		msg, fix := stallText(st.Flow, c, st.Log, configPath)
		out = append(out, StatusProblem{Code: ProblemConsumerStalled, Message: msg, Fix: fix})
	}
	return out
}

// stallText is a stalled consumer's message and fix, shared by status and
// check --config.
func stallText(flow string, c CursorStatus, ls *LogStatus, configPath string) (msg, fix string) {
	s := c.Stalled
	who := fmt.Sprintf("consumer %s", c.Name)
	if c.Kind == "sink" {
		who = fmt.Sprintf("consumer %s (sink %s's applier)", c.Name, c.Sink)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s is STALLED: its cursor has not moved for %s (since %s) while the log grew; it is at offset %d, %s (%s) behind the log's end",
		who, durationText(time.Duration(s.Seconds*float64(time.Second))), s.Since.Format(time.RFC3339), c.Offset,
		entries(c.LagEntries), bytesString(c.LagBytes))
	if s.LogGrowthBytesPerSecond != nil {
		fmt.Fprintf(&b, "; the log grows %s/s", bytesString(int64(*s.LogGrowthBytesPerSecond)))
	}
	switch {
	case s.RetentionHeadroomHours != nil:
		fmt.Fprintf(&b, "; retention headroom ~%s (%s)", hoursText(*s.RetentionHeadroomHours), limitText(s, ls))
	case s.RetentionHeadroomBytes != nil:
		fmt.Fprintf(&b, "; retention headroom %s (%s; no growth rate measured yet)", bytesString(*s.RetentionHeadroomBytes), limitText(s, ls))
	}
	b.WriteString(". The source slot stays clean: the log, not the primary, holds what the consumer has not read")
	if c.Kind == "sink" {
		fix = fmt.Sprintf("1. restart the applier of sink %s: systemctl restart %s (the packaged applier; with one process per flow, %s), or stop and start the process running %s (a process stopped with SIGSTOP resumes with kill -CONT PID); "+
			"2. if it stalls again, %s and %s name what it waits on (an open quarantine, an unreachable target)",
			c.Sink, shell.Quote("trellara-applier@"+flow), shell.Quote("trellara@"+flow), shell.Trellara("run", configPath, "--role", "applier", "--sink", c.Sink),
			shell.Trellara("repair-plan", configPath), shell.Trellara("status", configPath, "--view", "diagnostics"))
	} else {
		fix = fmt.Sprintf("1. restart the program reading the log as consumer %s (for stream tail: %s); "+
			"2. if it is gone for good, the log keeps what it has not read until retention expires it (transport.local.expire_past_retention: true) or the disk fills",
			c.Name, shell.Trellara("stream tail", configPath, "--consumer", c.Name, "--commit", "--follow"))
	}
	return b.String(), fix
}

func limitText(s *ConsumerStall, ls *LogStatus) string {
	switch s.RetentionLimit {
	case "retention.max_bytes":
		return "until transport.local.retention.max_bytes, when retention expires the consumer and its tables must be copied again"
	case "retention.max_age":
		return "until transport.local.retention.max_age, when retention expires the consumer and its tables must be copied again"
	default:
		free := ""
		if ls.DiskFreeBytes != nil {
			free = " " + bytesString(*ls.DiskFreeBytes)
		}
		return fmt.Sprintf("the free disk%s at %s: retention keeps what the consumer needs, and once the disk is full the relay stops and the source slot retains WAL", free, ls.Dir)
	}
}

// hoursText renders hours as "7.4h", or minutes under one hour.
func hoursText(h float64) string {
	if h < 1 {
		return fmt.Sprintf("%.0fm", h*60)
	}
	return fmt.Sprintf("%.1fh", h)
}

// durationText renders a duration to the second: "4m12s".
func durationText(d time.Duration) string { return d.Round(time.Second).String() }

// StalledConsumerFindings are the stalled consumers of st's log as
// trellara check --config grades them: warning, high when the retention
// headroom is under 6 h. The lines list every consumer of the log.
func StalledConsumerFindings(st *Status, configPath string) (summary string, lines []string, stalled []StalledFinding) {
	if st.Log == nil || !st.Log.Exists {
		return "no local log yet: the flow has not run here", nil, nil
	}
	for _, c := range st.Log.Cursors {
		line := fmt.Sprintf("consumer %-12s %s at %d · lag %s, %s", c.Name, c.Kind, c.Offset, entries(c.LagEntries), bytesString(c.LagBytes))
		if c.Stalled != nil {
			line += " · STALLED " + durationText(time.Duration(c.Stalled.Seconds*float64(time.Second)))
			msg, fix := stallText(st.Flow, c, st.Log, configPath)
			high := c.Stalled.RetentionHeadroomHours != nil && *c.Stalled.RetentionHeadroomHours < 6
			title := fmt.Sprintf("consumer %s of the flow's log is stalled: still for %s while the log grew", c.Name,
				durationText(time.Duration(c.Stalled.Seconds*float64(time.Second))))
			if h := c.Stalled.RetentionHeadroomHours; h != nil {
				title += fmt.Sprintf("; retention headroom ~%s", hoursText(*h))
			}
			stalled = append(stalled, StalledFinding{Consumer: c.Name, Title: title, Message: msg, Fix: fix, High: high})
		}
		lines = append(lines, line)
	}
	summary = fmt.Sprintf("%s · %s", Plural(len(st.Log.Cursors), "consumer"), bytesString(st.Log.RetainedBytes))
	if len(stalled) > 0 {
		summary += fmt.Sprintf(" · %d stalled", len(stalled))
	}
	return summary, lines, stalled
}

// StalledFinding is one stalled consumer, for check --config.
type StalledFinding struct {
	Consumer string
	Title    string
	Message  string
	Fix      string
	High     bool // retention headroom under 6 h
}

// exportStall sets the relay's stalled-consumer series from the local log
// (the rule above): the longest stall, and the least headroom among the
// stalled consumers.
func (f *Flow) exportStall(ctx context.Context, m *obs.RelayMetrics, labels []string) {
	if f.Log == nil {
		return // a broker flow: consumer-group lag is in status
	}
	if !f.Log.ReadOnly() {
		// The appliers in other processes move their cursors on disk.
		if err := f.Log.ReloadCursors(); err != nil {
			return
		}
	}
	ls := &LogStatus{Dir: f.dir}
	f.logStatus(ctx, f.Log, ls)
	var longest float64
	var headroom *float64
	for _, c := range ls.Cursors {
		s := c.Stalled
		if s == nil {
			continue
		}
		longest = max(longest, s.Seconds)
		if s.RetentionHeadroomHours != nil && (headroom == nil || *s.RetentionHeadroomHours*3600 < *headroom) {
			h := *s.RetentionHeadroomHours * 3600
			headroom = &h
		}
	}
	m.LogConsumerStalledSeconds.WithLabelValues(labels...).Set(longest)
	if headroom == nil {
		m.LogRetentionHeadroomSeconds.DeleteLabelValues(labels...)
	} else {
		m.LogRetentionHeadroomSeconds.WithLabelValues(labels...).Set(*headroom)
	}
}

func entries(n uint64) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}
