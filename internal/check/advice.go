package check

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"
)

// The suggested max_slot_wal_keep_size.
//
// Two runs a minute apart must suggest the same value, so the advice never
// uses the sampled WAL rate (a second or two of a busy or quiet server).
// It takes the largest of these terms, each from an input that moves slowly:
//
//	floor          4 GiB, the smallest cap worth setting
//	max_wal_size   2 × max_wal_size: a checkpoint cycle writes up to
//	               max_wal_size, and a cap under two cycles could invalidate a
//	               consumer that is only one checkpoint behind
//	retained       2 × the most WAL one slot retains now, so setting the cap
//	               does not invalidate a slot on the spot
//	long_run_rate  48 h × the WAL rate averaged by pg_stat_wal since its
//	               stats_reset (14+), only when that window is at least 1 h:
//	               two days for a stopped consumer to be noticed and restarted
//	current_cap    2 × the current cap, only when its headroom is under 24 h
//
// and rounds it up to a power of two GiB (4, 8, 16, ... GB), so the small
// drift of the long-run average between runs does not change the value.

const (
	keepSizeFloor       = 4 << 30
	keepSizeRateWindow  = 48 * time.Hour
	keepSizeMinLongRun  = time.Hour
	keepSizeFormulaText = "max(4 GB, 2 × max_wal_size, 2 × the most WAL one slot retains, " +
		"48h × the pg_stat_wal average WAL rate when it covers at least 1h, " +
		"2 × the current max_slot_wal_keep_size when its headroom is under 24h), rounded up to a power of two GB"
)

// KeepSizeAdvice is a suggested max_slot_wal_keep_size and how it was
// derived: the same inputs always give the same advice.
type KeepSizeAdvice struct {
	Value   string         `json:"value"` // as the action sets it, e.g. "16GB"
	Bytes   int64          `json:"bytes"`
	Formula string         `json:"formula"` // the rule, the same in every report
	Terms   []KeepSizeTerm `json:"terms"`   // the terms this run had inputs for
	Omitted []string       `json:"omitted"` // terms left out, and why
	// Derivation is the formula with this run's numbers, for people.
	Derivation string `json:"derivation"`
}

// KeepSizeTerm is one term of the advice.
type KeepSizeTerm struct {
	Name  string `json:"name"`  // floor | max_wal_size | retained | long_run_rate | current_cap
	Input string `json:"input"` // the input as observed, e.g. "max_wal_size 1.0 GB"
	Bytes int64  `json:"bytes"` // the term's value
}

// keepSizeInputs are everything the advice depends on; nothing else is read.
type keepSizeInputs struct {
	MaxWALSize     *int64   // bytes; nil when not visible
	Retained       int64    // most WAL one slot retains, bytes
	LongRunRate    *float64 // pg_stat_wal average, bytes per second; nil without pg_stat_wal
	LongRunSeconds *float64 // the window that average covers
	CurrentCap     int64    // > 0 only when the current cap leaves under 24h of headroom
}

// adviseKeepSize derives the suggested max_slot_wal_keep_size (see above).
func adviseKeepSize(in keepSizeInputs) KeepSizeAdvice {
	a := KeepSizeAdvice{Formula: keepSizeFormulaText, Omitted: []string{}}
	a.Terms = append(a.Terms, KeepSizeTerm{Name: "floor", Input: "floor", Bytes: keepSizeFloor})
	if in.MaxWALSize != nil && *in.MaxWALSize > 0 {
		a.Terms = append(a.Terms, KeepSizeTerm{Name: "max_wal_size", Input: "max_wal_size " + fmtBytes(*in.MaxWALSize), Bytes: 2 * *in.MaxWALSize})
	} else {
		a.Omitted = append(a.Omitted, "max_wal_size: not visible")
	}
	a.Terms = append(a.Terms, KeepSizeTerm{Name: "retained", Input: "most WAL one slot retains " + fmtBytes(in.Retained), Bytes: 2 * in.Retained})
	switch {
	case in.LongRunRate == nil || in.LongRunSeconds == nil:
		a.Omitted = append(a.Omitted, "long_run_rate: no pg_stat_wal average (it needs PostgreSQL 14+ on a primary)")
	case *in.LongRunSeconds < keepSizeMinLongRun.Seconds():
		a.Omitted = append(a.Omitted, fmt.Sprintf("long_run_rate: pg_stat_wal covers %s since its stats_reset, under the %s needed",
			fmtDuration(time.Duration(*in.LongRunSeconds*float64(time.Second))), fmtDuration(keepSizeMinLongRun)))
	default:
		a.Terms = append(a.Terms, KeepSizeTerm{Name: "long_run_rate",
			Input: fmt.Sprintf("pg_stat_wal average %s over %s", fmtRate(*in.LongRunRate), fmtDuration(time.Duration(*in.LongRunSeconds*float64(time.Second)))),
			Bytes: int64(math.Round(*in.LongRunRate * keepSizeRateWindow.Seconds()))})
	}
	if in.CurrentCap > 0 {
		a.Terms = append(a.Terms, KeepSizeTerm{Name: "current_cap", Input: "current max_slot_wal_keep_size " + fmtBytes(in.CurrentCap), Bytes: 2 * in.CurrentCap})
	}
	var largest int64
	parts := make([]string, len(a.Terms))
	for i, t := range a.Terms {
		largest = max(largest, t.Bytes)
		switch t.Name {
		case "floor":
			parts[i] = "floor " + fmtBytes(t.Bytes)
		case "long_run_rate":
			parts[i] = fmt.Sprintf("48h × %s = %s", t.Input, fmtBytes(t.Bytes))
		default:
			parts[i] = fmt.Sprintf("2 × %s = %s", t.Input, fmtBytes(t.Bytes))
		}
	}
	gib := roundUpPow2((largest + 1<<30 - 1) >> 30)
	a.Bytes = gib << 30
	a.Value = fmt.Sprintf("%dGB", gib)
	a.Derivation = fmt.Sprintf("max(%s) = %s, rounded up to a power of two GB", strings.Join(parts, ", "), fmtBytes(largest))
	if len(a.Omitted) > 0 {
		a.Derivation += "; left out: " + strings.Join(a.Omitted, "; ")
	}
	return a
}

// roundUpPow2 returns the smallest power of two >= n (n >= 1).
func roundUpPow2(n int64) int64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(uint64(n-1))
}
