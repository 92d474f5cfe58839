package flow_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// The CPU timeline of an end-to-end run (TRELLARA_BENCH_TIMELINE=1 make
// bench-e2e). A run's CPU seconds say what it cost; on a machine whose
// cores the source, the target and the consumer share, its wall time also
// depends on how well that work overlaps. The timeline samples, every
// 100 ms, the CPU of the source cluster, the target cluster, the trellara
// process and the whole machine (/proc/stat), and sums the run up in one
// line: the cores busy on average, the share of the run during which
// every core was busy, and the tail after the source stopped decoding
// (its CPU under a fifth of a core until the end): how long it lasted and
// how many cores the target and the consumer kept busy in it. A tail at
// well under the machine's cores is time a faster overlap would win back;
// a run saturated throughout is bounded by its CPU.
//
// Sampling walks /proc (a few milliseconds per sample), so it is off by
// default and the published runs are taken without it.

// timelineEvery is the sampling interval.
const timelineEvery = 100 * time.Millisecond

// timelineOn reports whether TRELLARA_BENCH_TIMELINE asks for timelines.
func timelineOn() bool { return os.Getenv("TRELLARA_BENCH_TIMELINE") == "1" }

// tlSample is one sample: cumulative CPU seconds at an offset into the run.
type tlSample struct {
	at                             time.Duration
	source, target, trellara, busy float64
}

// cpuTimeline samples one run until finish.
type cpuTimeline struct {
	stop    chan struct{}
	done    chan struct{}
	samples []tlSample
}

// startTimeline samples src, target, the process pid() names (0: none
// yet, or none at all) and the machine until finish is called.
func startTimeline(b *testing.B, src, target *pgtest.Cluster, pid func() int) *cpuTimeline {
	b.Helper()
	t := &cpuTimeline{stop: make(chan struct{}), done: make(chan struct{})}
	t0 := time.Now()
	sample := func() {
		x := tlSample{at: time.Since(t0), source: clusterCPU(b, src), target: clusterCPU(b, target),
			trellara: pgtest.ProcCPU(pid()), busy: machineBusy()}
		if n := len(t.samples); n > 0 {
			// A process that has exited reads as 0, and a backend that
			// exited between the walk's reads can vanish from it for a
			// sample: the counters never go back.
			p := t.samples[n-1]
			x.source, x.target, x.trellara = max(x.source, p.source), max(x.target, p.target), max(x.trellara, p.trellara)
		}
		t.samples = append(t.samples, x)
	}
	sample()
	go func() {
		defer close(t.done)
		tick := time.NewTicker(timelineEvery)
		defer tick.Stop()
		for {
			select {
			case <-t.stop:
				sample()
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	return t
}

// machineBusy is the machine's busy CPU seconds so far, over every core
// (/proc/stat: everything but idle and iowait).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += n
	}
	return busy / pgtest.ClockTicks
}

// finish stops sampling and sums the run up (see the comment above).
func (t *cpuTimeline) finish() string {
	close(t.stop)
	<-t.done
	return summarizeTimeline(t.samples, runtime.NumCPU())
}

// summarizeTimeline sums samples up for a machine of cores cores.
func summarizeTimeline(s []tlSample, cores int) string {
	if len(s) < 3 {
		return "timeline: too short to sample"
	}
	last := s[len(s)-1]
	wall := (last.at - s[0].at).Seconds()
	saturated := 0.0
	srcEnd := s[0].at
	for i := 1; i < len(s); i++ {
		dt := (s[i].at - s[i-1].at).Seconds()
		if dt <= 0 {
			continue
		}
		if (s[i].busy-s[i-1].busy)/dt >= 0.9*float64(cores) {
			saturated += dt
		}
		if (s[i].source-s[i-1].source)/dt >= 0.2 {
			srcEnd = s[i].at
		}
	}
	// The tail: from the end of the source's last busy interval on.
	k := 0
	for k < len(s)-1 && s[k].at < srcEnd {
		k++
	}
	tail := (last.at - s[k].at).Seconds()
	rate := func(a, b float64, d float64) float64 {
		if d <= 0 {
			return 0
		}
		return (b - a) / d
	}
	return fmt.Sprintf("timeline: %.2f of %d cores busy on average, all busy %.0f%% of the run; source decoding until %.2fs, then %.2fs at %.2f cores (target %.2f, trellara %.2f)",
		rate(s[0].busy, last.busy, wall), cores, 100*saturated/wall, srcEnd.Seconds(), tail,
		rate(s[k].busy, last.busy, tail), rate(s[k].target, last.target, tail), rate(s[k].trellara, last.trellara, tail))
}

func TestSummarizeTimeline(t *testing.T) {
	// 10 intervals of 100 ms: the source decodes at one core for the first
	// five, the machine's two cores are busy then and one core after; the
	// target and the consumer take half a core each throughout.
	var s []tlSample
	for i := 0; i <= 10; i++ {
		at := time.Duration(i) * 100 * time.Millisecond
		src, busy := 0.1*float64(min(i, 5)), 0.2*float64(min(i, 5))+0.1*float64(max(i-5, 0))
		s = append(s, tlSample{at: at, source: src, target: 0.05 * float64(i), trellara: 0.05 * float64(i), busy: busy})
	}
	got := summarizeTimeline(s, 2)
	want := "timeline: 1.50 of 2 cores busy on average, all busy 50% of the run; source decoding until 0.50s, then 0.50s at 1.00 cores (target 0.50, trellara 0.50)"
	if got != want {
		t.Fatalf("summary\n got %s\nwant %s", got, want)
	}
}
