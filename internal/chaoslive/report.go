package chaoslive

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// Fault kinds a live chaos run knows.
const (
	KindRelay   = "relay"   // SIGKILL of the relay process (run --role relay)
	KindApplier = "applier" // SIGKILL of the applier process (run --role applier)
	KindSidecar = "sidecar" // SIGKILL of the sidecar process (run --role sidecar, capture: extension)
	KindSource  = "source"  // chaos.source_restart
	KindTarget  = "target"  // chaos.target_restart
	KindNetwork = "network" // a cut in the TCP proxy between Trellara and a server
	KindDisk    = "disk"    // disk full on the log directory
	KindBroker  = "broker"  // a Kafka broker outage
)

// AllKinds lists every kind in report order.
var AllKinds = []string{KindRelay, KindApplier, KindSidecar, KindSource, KindTarget, KindNetwork, KindDisk, KindBroker}

// DefaultKinds is what --faults selects when not given.
var DefaultKinds = []string{KindRelay, KindApplier, KindSource, KindTarget, KindNetwork, KindDisk}

// Fault is one injected fault and its timings, in seconds from the
// injection. A nil timing was not reached (see Error) or, for detection,
// not observed (the flow never reported itself not ready).
type Fault struct {
	Seq       int      `json:"seq"`
	Kind      string   `json:"kind"`
	What      string   `json:"what"`
	AtSeconds float64  `json:"at_seconds"` // since the run started
	SourceLSN string   `json:"source_lsn"` // the source's WAL position when the fault began
	Detect    *float64 `json:"detect_seconds"`
	Ready     *float64 `json:"ready_seconds"`
	CaughtUp  *float64 `json:"caught_up_seconds"`
	Note      string   `json:"note,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// Dist is a distribution of recovery times, in seconds.
type Dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	Max float64 `json:"max"`
}

// KindSummary is one fault kind's status and recovery distribution.
type KindSummary struct {
	Kind     string `json:"kind"`
	Status   string `json:"status"` // injected, not requested, not configured: ..., not applicable: ..., not available: ...
	Injected int    `json:"injected"`
	Detect   Dist   `json:"detect"`
	Ready    Dist   `json:"ready"`
	CaughtUp Dist   `json:"caught_up"`
}

// Violation is a broken invariant or a failed recovery.
type Violation struct {
	AtSeconds float64 `json:"at_seconds"`
	Source    string  `json:"source"` // reader, recovery, process, verify
	Detail    string  `json:"detail"`
}

// VerifyResult is one `trellara verify` run.
type VerifyResult struct {
	AfterFaults int     `json:"after_faults"`
	Final       bool    `json:"final"`
	Verdict     string  `json:"verdict"` // CONVERGED, DIVERGED, BEHIND, ERROR
	ExitCode    int     `json:"exit_code"`
	Seconds     float64 `json:"seconds"`
	Detail      string  `json:"detail,omitempty"`
}

// Report is a live chaos run's result.
type Report struct {
	Flow          string         `json:"flow"`
	Config        string         `json:"config"`
	Workload      string         `json:"workload"`
	Seed          uint64         `json:"seed"`
	Duration      string         `json:"duration"`
	Started       time.Time      `json:"started"`
	Elapsed       float64        `json:"elapsed_seconds"`
	Processes     []string       `json:"processes"`
	Faults        []Fault        `json:"faults"`
	Kinds         []KindSummary  `json:"kinds"`
	Committed     int64          `json:"transactions_committed"`
	WorkloadErrs  int64          `json:"workload_errors"`
	Reader        ReaderSummary  `json:"reader"`
	Violations    []Violation    `json:"violations"`
	Verifies      []VerifyResult `json:"verifies"`
	Samples       []Sample       `json:"samples"`
	Leaks         []LeakFinding  `json:"leaks"`
	NotCovered    []string       `json:"not_covered"`
	ProcessExits  int            `json:"unexpected_process_exits"`
	Verdict       string         `json:"verdict"` // PASS or FAIL
	VerdictReason string         `json:"verdict_reason"`
}

// ReaderSummary is what the target reader saw.
type ReaderSummary struct {
	Observations int64        `json:"observations"`
	Reconnects   int64        `json:"reconnects"`
	Last         *Observation `json:"last,omitempty"`
}

// percentile is the nearest-rank percentile of sorted xs.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func dist(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return Dist{N: len(s), P50: percentile(s, 50), P95: percentile(s, 95), Max: s[len(s)-1]}
}

// summarize fills Kinds from Faults and the statuses decided at start.
func (r *Report) summarize(status map[string]string) {
	r.Kinds = nil
	for _, k := range AllKinds {
		ks := KindSummary{Kind: k, Status: status[k]}
		var d, rd, c []float64
		for _, f := range r.Faults {
			if f.Kind != k {
				continue
			}
			ks.Injected++
			if f.Detect != nil {
				d = append(d, *f.Detect)
			}
			if f.Ready != nil {
				rd = append(rd, *f.Ready)
			}
			if f.CaughtUp != nil {
				c = append(c, *f.CaughtUp)
			}
		}
		ks.Detect, ks.Ready, ks.CaughtUp = dist(d), dist(rd), dist(c)
		r.Kinds = append(r.Kinds, ks)
	}
}

func secs(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fs", *p)
}

// WriteText writes the report for a terminal.
func WriteText(w io.Writer, r *Report) {
	fmt.Fprintf(w, "chaos live: flow %s, seed %d, %s planned, %.0fs elapsed\n", r.Flow, r.Seed, r.Duration, r.Elapsed)
	fmt.Fprintf(w, "workload: %s\n", r.Workload)
	fmt.Fprintf(w, "processes: %s\n\n", strings.Join(r.Processes, "; "))
	fmt.Fprintf(w, "%-4s %-8s %8s  %-28s %8s %8s %10s  %s\n", "#", "kind", "at", "what", "detect", "ready", "caught-up", "note")
	for _, f := range r.Faults {
		note := f.Note
		if f.Error != "" {
			note = "ERROR " + f.Error
		}
		fmt.Fprintf(w, "%-4d %-8s %7.1fs  %-28s %8s %8s %10s  %s\n", f.Seq, f.Kind, f.AtSeconds, f.What, secs(f.Detect), secs(f.Ready), secs(f.CaughtUp), note)
	}
	fmt.Fprintf(w, "\nrecovery time per kind (seconds from injection; p50 / p95 / max)\n")
	for _, k := range r.Kinds {
		if k.Injected == 0 {
			fmt.Fprintf(w, "  %-8s %s\n", k.Kind, k.Status)
			continue
		}
		fmt.Fprintf(w, "  %-8s n=%-3d detect %.2f/%.2f/%.2f  ready %.2f/%.2f/%.2f  caught-up %.2f/%.2f/%.2f\n", k.Kind, k.Injected,
			k.Detect.P50, k.Detect.P95, k.Detect.Max, k.Ready.P50, k.Ready.P95, k.Ready.Max, k.CaughtUp.P50, k.CaughtUp.P95, k.CaughtUp.Max)
	}
	fmt.Fprintf(w, "\ntransactions committed: %d (workload errors while a server was down: %d)\n", r.Committed, r.WorkloadErrs)
	fmt.Fprintf(w, "reader: %d observations of the target, %d reconnects", r.Reader.Observations, r.Reader.Reconnects)
	if o := r.Reader.Last; o != nil {
		fmt.Fprintf(w, ", last: %d accounts, sum %d, %d history rows", o.Accounts, o.Sum, o.History)
	}
	fmt.Fprintln(w)
	for _, v := range r.Verifies {
		label := fmt.Sprintf("after %d faults", v.AfterFaults)
		if v.Final {
			label = "final"
		} else if v.AfterFaults == 0 {
			label = "before the first fault"
		}
		fmt.Fprintf(w, "verify (%s): %s in %.1fs\n", label, v.Verdict, v.Seconds)
	}
	if len(r.Leaks) > 0 {
		fmt.Fprintln(w, "resource trends (second half of the run):")
		for _, l := range r.Leaks {
			fmt.Fprintf(w, "  %-28s %s\n", l.Series, l.Summary())
		}
	}
	fmt.Fprintf(w, "violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  VIOLATED at %.1fs (%s): %s\n", v.AtSeconds, v.Source, v.Detail)
	}
	if len(r.NotCovered) > 0 {
		fmt.Fprintln(w, "not covered:")
		for _, n := range r.NotCovered {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	fmt.Fprintf(w, "verdict: %s (%s)\n", r.Verdict, r.VerdictReason)
}
