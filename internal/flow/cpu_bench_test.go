package flow_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// CPU accounting for the end-to-end benchmarks. Wall-clock rates on a
// shared machine move with the neighbours' load; the CPU a run consumed
// moves far less, so every end-to-end run also reports the CPU seconds
// of each process involved:
//
//   - the source cluster (its walsender decodes for either side),
//   - the target cluster (the native apply worker, or the backend that
//     executes Trellara's statements, with the target's WAL writer and
//     checkpointer),
//   - the trellara process itself (user+sys of the child, from wait4).
//
// A cluster's CPU is its postmaster's own time, the time of every child it
// has reaped (cutime/cstime: backends and walsenders that exited during
// the run) and the time of its live children, read from /proc.

// clusterCPU is the CPU seconds the cluster's processes have consumed so
// far: the postmaster, its reaped children and its live children.
func clusterCPU(b *testing.B, c *pgtest.Cluster) float64 {
	b.Helper()
	pidFile, err := os.ReadFile(filepath.Join(c.DataDir(), "postmaster.pid"))
	if err != nil {
		b.Fatalf("cpu accounting: %v", err)
	}
	line, _, _ := strings.Cut(string(pidFile), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		b.Fatalf("cpu accounting: postmaster.pid of %s: %v", c.DataDir(), err)
	}
	self, reaped, _, ok := pgtest.ProcTimes(pm)
	if !ok {
		b.Fatalf("cpu accounting: postmaster %d of %s is gone", pm, c.DataDir())
	}
	total := self + reaped
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, r, ppid, ok := pgtest.ProcTimes(pid); ok && ppid == pm {
			total += s + r
		}
	}
	return total
}

// settledClusterCPU is clusterCPU once the cluster's backends have settled:
// a backend whose client just went away exits and is reaped by the
// postmaster, and a walk of /proc that reads the postmaster before the
// reaping and looks for the backend after it counts that backend nowhere
// (one run's target read 0.12 s instead of about 2.5 s). It reads until
// two reads 50 ms apart agree within 10 ms, for at most a second.
func settledClusterCPU(b *testing.B, c *pgtest.Cluster) float64 {
	b.Helper()
	prev := clusterCPU(b, c)
	for i := 0; i < 20; i++ {
		time.Sleep(50 * time.Millisecond)
		cur := clusterCPU(b, c)
		if cur-prev < 0.01 && cur >= prev {
			return cur
		}
		prev = cur
	}
	return prev
}

// cpuRun is the CPU one end-to-end run consumed, in seconds.
type cpuRun struct {
	source, target, trellara float64
}

func (c cpuRun) total() float64 { return c.source + c.target + c.trellara }

// cpuResult collects every run's CPU for one ABBA series.
type cpuResult struct {
	baseline, trellara []cpuRun
}

func (r *cpuResult) add(isTrellara bool, c cpuRun) {
	if isTrellara {
		r.trellara = append(r.trellara, c)
	} else {
		r.baseline = append(r.baseline, c)
	}
}

// per100k scales seconds for txns transactions to 100,000 transactions.
func per100k(secs float64, txns int) float64 { return secs * 100000 / float64(txns) }

// report logs each side's range of total CPU per 100k transactions and of
// the per-pair ratio baseline/Trellara (above 1: Trellara used less CPU).
func (r *cpuResult) report(b *testing.B, baseName, name string, txns int) {
	b.Helper()
	bh, th := r.reportScaled(b, baseName, name, "per 100k txns", func(c cpuRun) float64 { return per100k(c.total(), txns) })
	b.ReportMetric(th, name+"_cpu_s_per_100k_max")
	b.ReportMetric(bh, baseName+"_cpu_s_per_100k_max")
}

// reportTotal is report for runs of different sizes' own totals: each
// side's CPU seconds per run, unscaled.
func (r *cpuResult) reportTotal(b *testing.B, baseName, name string) {
	b.Helper()
	bh, th := r.reportScaled(b, baseName, name, "per run", cpuRun.total)
	b.ReportMetric(bh, baseName+"_cpu_s_max")
	b.ReportMetric(th, name+"_cpu_s_max")
}

// reportScaled logs each side's range of scale(run) and the per-pair
// ratio of total CPU baseline/Trellara; it returns each side's maximum.
func (r *cpuResult) reportScaled(b *testing.B, baseName, name, what string, scale func(cpuRun) float64) (baseMax, trellaraMax float64) {
	b.Helper()
	tot := func(rs []cpuRun) []float64 {
		var out []float64
		for _, c := range rs {
			out = append(out, scale(c))
		}
		return out
	}
	var ratios []float64
	for i := range r.trellara {
		if i < len(r.baseline) {
			ratios = append(ratios, r.baseline[i].total()/r.trellara[i].total())
		}
	}
	bl, bh := minMax(tot(r.baseline))
	tl, th := minMax(tot(r.trellara))
	rl, rh := minMax(ratios)
	b.Logf("cpu range %s: %s %.2f–%.2f s, %s %.2f–%.2f s, cpu %s/%s per pair %.2f–%.2f",
		what, baseName, bl, bh, name, tl, th, baseName, name, rl, rh)
	return bh, th
}

// format is the run line's CPU detail, per 100k transactions.
func (c cpuRun) format(txns int) string {
	return "cpu/100k: total " + strconv.FormatFloat(per100k(c.total(), txns), 'f', 2, 64) +
		" s = source " + strconv.FormatFloat(per100k(c.source, txns), 'f', 2, 64) +
		" + target " + strconv.FormatFloat(per100k(c.target, txns), 'f', 2, 64) +
		" + trellara " + strconv.FormatFloat(per100k(c.trellara, txns), 'f', 2, 64)
}

// TestProcTimesCountsReapedChildren pins the /proc fields the CPU
// accounting reads: a child that burns CPU and is waited for shows up in
// its parent's reaped time (cutime+cstime), which is how the backends and
// walsenders that exit during a run are counted.
func TestProcTimesCountsReapedChildren(t *testing.T) {
	_, before, _, ok := pgtest.ProcTimes(os.Getpid())
	if !ok {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	burnt := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	_, after, ppid, _ := pgtest.ProcTimes(os.Getpid())
	if ppid != os.Getppid() {
		t.Fatalf("parent pid read as %d, want %d", ppid, os.Getppid())
	}
	// The kernel counts in clock ticks: allow two. (More may have been
	// reaped meanwhile: other children of the test binary.)
	if got := after - before; got < burnt-2.0/pgtest.ClockTicks {
		t.Fatalf("reaped CPU grew by %.2f s, the child used %.2f s", got, burnt)
	}
}
