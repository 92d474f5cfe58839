package lake

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Epoch statuses.
const (
	StatusComplete = "complete"
	StatusGaps     = "complete_with_gaps"
)

// EpochsTable is the lake table the epoch records go to, in the fleet's
// namespace.
const EpochsTable = "_trellara_epochs"

// SourceEpoch is one source's line of an epoch record.
type SourceEpoch struct {
	SourceID string `json:"source_id"`
	// Included: the source is caught up within the epoch policy's max_lag,
	// and every transaction it committed before ThroughLSN is in the
	// changelog.
	Included bool `json:"included"`
	// ThroughLSN is the source WAL position the lake is complete through
	// for this source: every transaction whose commit record lies before
	// it is in the changelog. An excluded source keeps the position of its
	// last inclusion (0: never included); it is never a position whose rows
	// are not committed.
	ThroughLSN    uint64 `json:"through_lsn"`
	Lagging       bool   `json:"lagging"`
	Offline       bool   `json:"offline"`
	Quarantined   bool   `json:"quarantined"`
	PastRetention bool   `json:"past_retention"`
	Reason        string `json:"reason,omitempty"`
}

// Epoch is one closed epoch.
type Epoch struct {
	ID       int64         `json:"epoch_id"`
	ClosedAt time.Time     `json:"closed_at"`
	Status   string        `json:"status"`
	Sources  []SourceEpoch `json:"sources"`
}

// Missing are the ids of the sources the epoch does not include.
func (e Epoch) Missing() []string {
	var out []string
	for _, s := range e.Sources {
		if !s.Included {
			out = append(out, s.SourceID)
		}
	}
	return out
}

// Source returns source id's line.
func (e Epoch) Source(id string) (SourceEpoch, bool) {
	for _, s := range e.Sources {
		if s.SourceID == id {
			return s, true
		}
	}
	return SourceEpoch{}, false
}

// StatusOf is the status an epoch with these source lines has: complete
// only when every source is included. One rule, used by the committer and
// by every reader that re-derives it.
func StatusOf(srcs []SourceEpoch) string {
	if len(srcs) == 0 {
		return StatusGaps
	}
	for _, s := range srcs {
		if !s.Included {
			return StatusGaps
		}
	}
	return StatusComplete
}

// Observation is what the committer knows about one source when it closes
// an epoch.
type Observation struct {
	SourceID string
	// Reachable: the source answered the probe.
	Reachable bool
	// WALPos is the source's WAL insert position at the probe.
	WALPos uint64
	// CaughtUp: the relay confirmed the slot at or past WALPos (every
	// transaction before WALPos is durable in the source's log) and the
	// committer then committed the log through the durable end it read
	// after that confirmation.
	CaughtUp bool
	// SlotLost: the slot is gone or its WAL was removed: the source is past
	// retention and needs a re-snapshot.
	SlotLost    bool
	Quarantined bool
	// Prev is this source's line in the previous epoch (zero: none).
	Prev SourceEpoch
	// LastIncluded is when the source was last caught up (zero: never).
	LastIncluded time.Time
	// Err is the probe's error, for Reason.
	Err string
}

// Decide is the epoch line for observation o at now under max lag maxLag.
// A source is included at WALPos only when it is caught up; a reachable
// source that is not caught up stays included at its previous position
// while it was caught up within maxLag, and is a gap past it; an
// unreachable, quarantined or past-retention source is a gap at once.
// ThroughLSN never moves past what the committer has committed.
func Decide(o Observation, now time.Time, maxLag time.Duration) SourceEpoch {
	se := SourceEpoch{SourceID: o.SourceID, ThroughLSN: o.Prev.ThroughLSN}
	switch {
	case o.Quarantined:
		se.Quarantined = true
		se.Reason = "quarantined: the committer stopped at a unit it could not write (see the fleet log)"
	case o.SlotLost:
		se.PastRetention = true
		se.Reason = "past retention: the slot is gone or lost its WAL; the source needs a reseed (a new slot and a re-snapshot)"
	case !o.Reachable:
		se.Offline = true
		se.Reason = "offline: " + o.Err
	case o.CaughtUp:
		se.Included, se.ThroughLSN = true, o.WALPos
	default:
		se.Lagging = true
		age := "never caught up"
		if !o.LastIncluded.IsZero() {
			age = "last caught up " + now.Sub(o.LastIncluded).Round(time.Second).String() + " ago"
		}
		if !o.LastIncluded.IsZero() && now.Sub(o.LastIncluded) <= maxLag && o.Prev.Included {
			se.Included = true
			se.Reason = fmt.Sprintf("lagging within max_lag %s (%s)", maxLag, age)
		} else {
			se.Reason = fmt.Sprintf("lagging past max_lag %s (%s)", maxLag, age)
		}
	}
	return se
}

// CloseEpoch builds epoch id from the source lines, sorted by source id.
func CloseEpoch(id int64, closedAt time.Time, lines []SourceEpoch) Epoch {
	lines = append([]SourceEpoch(nil), lines...)
	sort.Slice(lines, func(i, j int) bool { return lines[i].SourceID < lines[j].SourceID })
	return Epoch{ID: id, ClosedAt: closedAt.UTC(), Status: StatusOf(lines), Sources: lines}
}

// GateError is the refusal of a gapped epoch.
type GateError struct {
	Epoch Epoch
	// LatestComplete is the newest complete epoch's id, 0 if none.
	LatestComplete int64
}

func (e *GateError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lake: epoch %d is %s: missing sources %s", e.Epoch.ID, StatusGaps, strings.Join(e.Epoch.Missing(), ", "))
	for _, s := range e.Epoch.Sources {
		if !s.Included && s.Reason != "" {
			fmt.Fprintf(&b, "\n  %s: %s", s.SourceID, s.Reason)
		}
	}
	if e.LatestComplete > 0 {
		fmt.Fprintf(&b, "\nthe newest complete epoch is %d", e.LatestComplete)
	}
	b.WriteString("\nfix: bring the sources back and wait for the next epoch, or pass --allow-gaps to read a gapped epoch")
	return b.String()
}

func (e *GateError) Unwrap() error { return ErrGappedEpoch }

// Gate returns the epoch a consumer may read: the latest one, unless it
// is gapped and allowGaps is false (then a *GateError naming the missing
// sources). epochs are in any order.
func Gate(epochs []Epoch, allowGaps bool) (Epoch, error) {
	if len(epochs) == 0 {
		return Epoch{}, fmt.Errorf("lake: no epoch has closed yet (trellara-full fleet run closes one every epochs.close_interval)")
	}
	latest := epochs[0]
	var complete int64
	for _, e := range epochs {
		if e.ID > latest.ID {
			latest = e
		}
		if e.Status == StatusComplete && e.ID > complete {
			complete = e.ID
		}
	}
	if latest.Status != StatusComplete && !allowGaps {
		return latest, &GateError{Epoch: latest, LatestComplete: complete}
	}
	return latest, nil
}
