package check

import (
	"fmt"
	"math"
	"time"
)

// WAL is the WAL headroom section's data.
type WAL struct {
	CurrentLSN string `json:"current_lsn"`
	// LSNSource is pg_current_wal_lsn on a primary; on a standby the
	// receive (or replay) position.
	LSNSource         string   `json:"lsn_source"`
	SampleSeconds     float64  `json:"sample_seconds"`
	SampledBytesPerS  *float64 `json:"sampled_bytes_per_second"`
	AverageBytesPerS  *float64 `json:"average_bytes_per_second"` // pg_stat_wal since stats_reset (14+)
	AverageSeconds    *float64 `json:"average_window_seconds"`   // how long that average covers
	RateBytesPerS     float64  `json:"rate_bytes_per_second"`    // the higher of the two
	RateBasis         string   `json:"rate_basis"`               // sampled | average | none
	MaxSlotKeepBytes  *int64   `json:"max_slot_wal_keep_size_bytes"`
	RetainedBytes     int64    `json:"retained_bytes"` // most WAL held by any slot
	HeadroomBytes     *int64   `json:"headroom_bytes"` // only when retention is capped
	HeadroomHours     *float64 `json:"headroom_hours"` // headroom at the current rate
	HoursPerFreeGiB   *float64 `json:"hours_per_free_gib"`
	WALDirectoryBytes *int64   `json:"wal_directory_bytes"` // pg_ls_waldir (pg_monitor)
	MaxWALSizeBytes   *int64   `json:"max_wal_size_bytes"`
	// SuggestedKeepSize is the max_slot_wal_keep_size a finding suggests,
	// with its derivation; nil when no finding suggests one.
	SuggestedKeepSize *KeepSizeAdvice `json:"suggested_max_slot_wal_keep_size"`
}

// currentLSNQuery reads the newest WAL position this server knows. A standby
// cannot call pg_current_wal_lsn; its receive position grows at the
// primary's rate (replay if streaming has not started).
const currentLSNQuery = `SELECT (CASE WHEN pg_is_in_recovery()
	THEN coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
	ELSE pg_current_wal_lsn() END)::text`

func (in *inspector) readLSN() (LSN, bool, error) {
	var s *string
	if err := in.q.QueryRow(in.ctx, currentLSNQuery).Scan(&s); err != nil {
		return 0, false, &QueryError{What: "current WAL position", Err: err}
	}
	if s == nil {
		return 0, false, nil
	}
	l, err := parseLSN(*s)
	if err != nil {
		return 0, false, err
	}
	return l, true, nil
}

func (in *inspector) walSampleStart() error {
	w := &in.r.WAL
	w.LSNSource = "pg_current_wal_lsn"
	if in.r.Server.InRecovery {
		w.LSNSource = "pg_last_wal_receive_lsn"
	}
	l, ok, err := in.readLSN()
	if err != nil {
		return err
	}
	in.walStart, in.haveLSN = l, ok
	if !ok {
		in.r.note("WAL position: this standby has neither received nor replayed WAL yet; retained WAL and rates are unknown")
	}
	return nil
}

func (in *inspector) walSampleEnd(elapsed time.Duration) error {
	w := &in.r.WAL
	w.SampleSeconds = math.Round(elapsed.Seconds()*1000) / 1000
	if in.haveLSN {
		l, ok, err := in.readLSN()
		if err != nil {
			return err
		}
		if ok {
			w.CurrentLSN = l.String()
			if l >= in.walStart && elapsed > 0 {
				r := float64(l-in.walStart) / elapsed.Seconds()
				w.SampledBytesPerS = &r
			}
		}
	}
	// The long-run average catches a quiet sample on a server that is busy
	// at other times; using the higher rate keeps the hours conservative.
	if ok, err := in.exists("pg_catalog.pg_stat_wal"); err != nil {
		return err
	} else if ok && !in.r.Server.InRecovery {
		var bytes, seconds *float64
		if _, err := in.optional("pg_stat_wal (average WAL rate)", func() error {
			return in.q.QueryRow(in.ctx, `SELECT wal_bytes::float8, extract(epoch FROM now() - stats_reset)::float8
				FROM pg_catalog.pg_stat_wal`).Scan(&bytes, &seconds)
		}); err != nil {
			return err
		}
		if bytes != nil && seconds != nil && *seconds > 0 {
			avg := *bytes / *seconds
			w.AverageBytesPerS, w.AverageSeconds = &avg, seconds
		}
	}
	w.RateBasis = "none"
	if w.SampledBytesPerS != nil && *w.SampledBytesPerS > 0 {
		w.RateBytesPerS, w.RateBasis = *w.SampledBytesPerS, "sampled"
	}
	if w.AverageBytesPerS != nil && *w.AverageBytesPerS > w.RateBytesPerS {
		w.RateBytesPerS, w.RateBasis = *w.AverageBytesPerS, "average"
	}
	var dir *int64
	if _, err := in.optional("WAL directory size (pg_ls_waldir, needs pg_monitor)", func() error {
		return in.q.QueryRow(in.ctx, "SELECT coalesce(sum(size), 0)::bigint FROM pg_ls_waldir()").Scan(&dir)
	}); err != nil {
		return err
	}
	w.WALDirectoryBytes = dir
	return nil
}

func hoursText(h float64) string {
	if math.IsInf(h, 0) || math.IsNaN(h) {
		return "unbounded"
	}
	return fmtDuration(time.Duration(h * float64(time.Hour)))
}

func secs(s int64) time.Duration { return time.Duration(s) * time.Second }

// walRules grades WAL headroom and then the slots, which need the rate.
func (in *inspector) walRules() {
	w := &in.r.WAL
	sec := in.r.section(SectionWAL)
	rate := w.RateBytesPerS
	maxKeep := int64(0)
	known := false
	if s, ok := in.setting("max_slot_wal_keep_size"); ok {
		if v, ok := settingBytes(s.Setting, s.Unit); ok {
			maxKeep, known = v, true
			w.MaxSlotKeepBytes = &v
		}
	} else if in.r.Server.Major < 13 {
		// The cap arrived in 13; before it, slot retention is unbounded.
		maxKeep, known = -1, true
	}
	var holding []Slot
	for _, s := range in.r.Slots {
		if s.Temporary || s.Invalidated || s.RetainedBytes == nil {
			continue
		}
		holding = append(holding, s)
		if *s.RetainedBytes > w.RetainedBytes {
			w.RetainedBytes = *s.RetainedBytes
		}
	}
	if s, ok := in.setting("max_wal_size"); ok {
		if v, ok := settingBytes(s.Setting, s.Unit); ok {
			w.MaxWALSizeBytes = &v
		}
	}
	advise := func(currentCap int64) (*KeepSizeAdvice, string) {
		a := adviseKeepSize(keepSizeInputs{
			MaxWALSize: w.MaxWALSizeBytes, Retained: w.RetainedBytes,
			LongRunRate: w.AverageBytesPerS, LongRunSeconds: w.AverageSeconds, CurrentCap: currentCap,
		})
		return &a, in.setAction("max_slot_wal_keep_size", "'"+a.Value+"'") +
			"\n-- " + a.Value + " = " + a.Derivation +
			"\n-- keep it below the free space of the pg_wal filesystem; a slot past it is invalidated instead of filling the disk"
	}
	advice, capAction := advise(0)
	if rate > 0 {
		h := float64(1<<30) / rate / 3600
		w.HoursPerFreeGiB = &h
	}

	rateText := fmt.Sprintf("no WAL written during the %.1fs sample; rerun with --sample-seconds 60 under normal load for a projection", w.SampleSeconds)
	switch w.RateBasis {
	case "sampled":
		rateText = fmt.Sprintf("writing %s (sampled over %.1fs)", fmtRate(rate), w.SampleSeconds)
	case "average":
		rateText = fmt.Sprintf("writing %s (average since statistics reset; the %.1fs sample was quieter)", fmtRate(rate), w.SampleSeconds)
	}
	sec.Lines = append(sec.Lines, rateText)
	if w.CurrentLSN != "" {
		sec.Lines = append(sec.Lines, fmt.Sprintf("current position %s (%s)", w.CurrentLSN, w.LSNSource))
	}
	if w.WALDirectoryBytes != nil {
		sec.Lines = append(sec.Lines, "pg_wal holds "+fmtBytes(*w.WALDirectoryBytes))
	}

	switch {
	case !known:
		sec.Summary = "max_slot_wal_keep_size not visible · " + rateText
	case maxKeep < 0:
		sec.Lines = append(sec.Lines, "max_slot_wal_keep_size = -1: slot retention is bounded only by free disk")
		if len(holding) == 0 {
			sec.Summary = "no slot retains WAL · retention would be unbounded"
		} else {
			sec.Summary = fmt.Sprintf("unbounded · slots retain %s", fmtBytes(w.RetainedBytes))
			if w.HoursPerFreeGiB != nil {
				sec.Summary += fmt.Sprintf(" · each GB of free disk lasts ~%s at current rate", hoursText(*w.HoursPerFreeGiB))
			}
		}
		w.SuggestedKeepSize = advice
		in.r.add(Finding{Severity: Notice, Code: "slot_wal_unbounded", Section: SectionWAL,
			Title:  "max_slot_wal_keep_size = -1: a stalled consumer can fill the source disk",
			Detail: "With no cap, PostgreSQL keeps WAL for a slot whose consumer stopped until pg_wal's disk is full, and then the primary stops. With a cap the slot is invalidated instead and only that consumer needs a re-seed.",
			Action: capAction})
	default:
		sec.Lines = append(sec.Lines, "max_slot_wal_keep_size = "+fmtBytes(maxKeep))
		if len(holding) == 0 {
			sec.Summary = fmt.Sprintf("no slot retains WAL · capped at %s per slot", fmtBytes(maxKeep))
			break
		}
		head := maxKeep - w.RetainedBytes
		for _, s := range holding {
			if s.SafeWALSize != nil && *s.SafeWALSize < head {
				head = *s.SafeWALSize
			}
		}
		head = max(head, 0)
		w.HeadroomBytes = &head
		if rate <= 0 {
			sec.Summary = fmt.Sprintf("%s before the first slot is invalidated · no WAL rate to project", fmtBytes(head))
			break
		}
		hours := float64(head) / rate / 3600
		w.HeadroomHours = &hours
		sec.Summary = fmt.Sprintf("~%s at current rate (%s before a slot is invalidated)", hoursText(hours), fmtBytes(head))
		if hours < 24 {
			sev := Warning
			if hours < 6 {
				sev = High
			}
			var act string
			w.SuggestedKeepSize, act = advise(maxKeep)
			in.r.add(Finding{Severity: sev, Code: "wal_headroom_low", Section: SectionWAL,
				Title:  fmt.Sprintf("WAL headroom ~%s: the slowest slot is invalidated after %s more WAL", hoursText(hours), fmtBytes(head)),
				Detail: "A consumer that cannot catch up within that time loses its slot and must be re-seeded.",
				Action: act + "\n-- or let the lagging consumer catch up first"})
		}
	}
	if a := w.SuggestedKeepSize; a != nil {
		sec.Lines = append(sec.Lines, "suggested max_slot_wal_keep_size '"+a.Value+"' = "+a.Derivation)
	}
	in.slotRules(rate, maxKeep, known, capAction)
}
