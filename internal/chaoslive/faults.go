package chaoslive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/lsn"
)

// schedule draws the next fault kind: every injectable kind once, in a
// seeded order, then seeded picks.
type schedule struct {
	rng   *rand.Rand
	kinds []string
	first []string
}

func newSchedule(seed uint64, kinds []string) *schedule {
	s := &schedule{rng: rand.New(rand.NewPCG(seed, 0x6368616f73)), kinds: kinds}
	s.first = append([]string(nil), kinds...)
	s.rng.Shuffle(len(s.first), func(i, j int) { s.first[i], s.first[j] = s.first[j], s.first[i] })
	return s
}

func (s *schedule) next() string {
	if len(s.first) > 0 {
		k := s.first[0]
		s.first = s.first[1:]
		return k
	}
	return s.kinds[s.rng.IntN(len(s.kinds))]
}

func (s *schedule) gap(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

// faultLoop injects faults until the duration is spent.
func (r *run) faultLoop(ctx context.Context, wl *workload, status map[string]string) {
	var kinds []string
	for _, k := range AllKinds {
		if status[k] == "injected" {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		sleep(ctx, r.o.Duration)
		return
	}
	sch := newSchedule(r.o.Seed, kinds)
	end := r.start.Add(r.o.Duration)
	for ctx.Err() == nil {
		gap := sch.gap(r.o.GapMin, r.o.GapMax)
		if time.Now().Add(gap).After(end) {
			sleep(ctx, time.Until(end))
			return
		}
		sleep(ctx, gap)
		kind := sch.next()
		f := r.inject(ctx, kind, sch)
		f.Seq = len(r.rep.Faults) + 1
		r.rep.Faults = append(r.rep.Faults, f)
		r.o.Logger.Info("chaos live: fault recovered", "seq", f.Seq, "kind", f.Kind, "what", f.What,
			"detect", secs(f.Detect), "ready", secs(f.Ready), "caught_up", secs(f.CaughtUp), "error", f.Error)
		if f.Seq%r.o.VerifyEvery == 0 {
			wl.Pause()
			r.verify(ctx, f.Seq, false)
			wl.Resume()
		}
	}
}

// watchNotReady polls endpoints until stop and returns when it first saw
// one not ready (zero if never).
func (r *run) watchNotReady(endpoints []string) (stop func() time.Time) {
	done := make(chan struct{})
	result := make(chan time.Time, 1)
	go func() {
		var seen time.Time
		defer func() { result <- seen }()
		for {
			if !r.ready(endpoints...) {
				seen = time.Now()
				return
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() time.Time { close(done); return <-result }
}

// inject performs one fault and times its recovery.
func (r *run) inject(ctx context.Context, kind string, sch *schedule) Fault {
	f := Fault{Kind: kind, AtSeconds: r.since()}
	src, err := r.sourceLSN(ctx)
	if err != nil {
		f.Error = fmt.Sprintf("read the source's WAL position: %v", err)
		r.violate("recovery", "fault %s: %s", kind, f.Error)
		return f
	}
	f.SourceLSN = lsn.Format(src)
	t0 := time.Now()
	at := func(t time.Time) *float64 { v := t.Sub(t0).Seconds(); return &v }
	var detected time.Time

	switch kind {
	case KindRelay, KindSidecar, KindApplier:
		p := r.capture
		if kind == KindApplier {
			p = r.applier
		}
		pid, err := p.kill()
		if err != nil {
			f.Error = err.Error()
			break
		}
		detected = time.Now() // the exit is observed; the supervisor restarts it
		f.What = fmt.Sprintf("SIGKILL %s pid %d", p.role, pid)
		f.Note = "detect: process exit observed"
	case KindSource, KindTarget:
		command, watch := r.cfg.Chaos.SourceRestart, []string{r.relayAt}
		if kind == KindTarget {
			command, watch = r.cfg.Chaos.TargetRestart, r.sinkAt
		}
		f.What = kind + " restart (chaos." + kind + "_restart)"
		stop := r.watchNotReady(watch)
		cctx, cancel := context.WithTimeout(ctx, r.o.RecoveryTimeout)
		out, err := exec.CommandContext(cctx, "/bin/sh", "-c", command).CombinedOutput()
		cancel()
		if err != nil {
			stop()
			f.Error = fmt.Sprintf("chaos.%s_restart failed: %v: %s", kind, err, tail(out, 300))
			break
		}
		// Give the flow its chance to notice the restart before calling it unnoticed.
		waitFor(ctx, 15*time.Second, func() bool { return !r.ready(watch...) })
		detected = stop()
		if detected.IsZero() {
			f.Note = "detect: the flow never reported not ready"
		} else {
			f.Note = "detect: /readyz false"
		}
	case KindNetwork:
		p, name, watch := r.srcProxy, "source", []string{r.relayAt}
		if sch.rng.IntN(2) == 1 {
			p, name, watch = r.dstProxies[0], "target", r.sinkAt
		}
		cut := sch.gap(2*time.Second, 6*time.Second)
		f.What = fmt.Sprintf("cut to the %s for %.1fs", name, cut.Seconds())
		stop := r.watchNotReady(watch)
		p.Cut()
		sleep(ctx, cut)
		p.Restore()
		detected = stop()
		if detected.IsZero() {
			f.Note = "detect: the flow never reported not ready during the cut"
		} else {
			f.Note = "detect: /readyz false"
		}
	case KindDisk:
		hold := sch.gap(2*time.Second, 6*time.Second)
		stop := r.watchNotReady([]string{r.relayAt})
		n, err := fillDisk(ballastPath(r.cfg.Transport.Local.Dir))
		if err != nil {
			stop()
			os.Remove(ballastPath(r.cfg.Transport.Local.Dir))
			f.Error = err.Error()
			break
		}
		f.What = fmt.Sprintf("disk full under transport.local.dir for %.1fs (%d MiB ballast)", hold.Seconds(), n>>20)
		sleep(ctx, hold)
		if err := os.Remove(ballastPath(r.cfg.Transport.Local.Dir)); err != nil {
			stop()
			f.Error = fmt.Sprintf("remove the ballast: %v", err)
			break
		}
		detected = stop()
		if detected.IsZero() {
			f.Note = "detect: the relay never reported not ready while the disk was full"
		} else {
			f.Note = "detect: /readyz false"
		}
	default:
		f.Error = "no injector for kind " + kind
	}
	if !detected.IsZero() {
		f.Detect = at(detected)
	}
	if f.Error != "" {
		r.violate("recovery", "fault %s: %s", kind, f.Error)
		return f
	}
	if !waitFor(ctx, r.o.RecoveryTimeout, func() bool { return r.ready(r.allEndpoints()...) }) {
		f.Error = fmt.Sprintf("not ready within %s", r.o.RecoveryTimeout)
		r.violate("recovery", "fault %d %s: %s (logs in %s)", len(r.rep.Faults)+1, f.What, f.Error, r.workDir)
		return f
	}
	f.Ready = at(time.Now())
	if !waitFor(ctx, r.o.RecoveryTimeout, func() bool { cp, ok := r.checkpoint(); return ok && cp >= src }) {
		cp, _ := r.checkpoint()
		f.Error = fmt.Sprintf("the target checkpoint %s did not reach the source position %s within %s", lsn.Format(cp), f.SourceLSN, r.o.RecoveryTimeout)
		r.violate("recovery", "fault %d %s: %s (logs in %s)", len(r.rep.Faults)+1, f.What, f.Error, r.workDir)
		return f
	}
	f.CaughtUp = at(time.Now())
	return f
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// verify runs `trellara verify --wait` against the flow and records it.
func (r *run) verify(ctx context.Context, after int, final bool) VerifyResult {
	v := r.runVerify(ctx, after, final)
	if v.Verdict != "CONVERGED" && (after > 0 || final) {
		r.violate("verify", "verify after %d faults: %s %s", after, v.Verdict, v.Detail)
	}
	r.rep.Verifies = append(r.rep.Verifies, v)
	return v
}

// initialVerify is the run's starting point: verify until it answers
// (the applier creates its checkpoint table once it starts applying).
func (r *run) initialVerify(ctx context.Context) VerifyResult {
	deadline := time.Now().Add(r.o.RecoveryTimeout)
	for {
		v := r.runVerify(ctx, 0, false)
		if v.Verdict != "ERROR" || time.Now().After(deadline) || ctx.Err() != nil {
			r.rep.Verifies = append(r.rep.Verifies, v)
			return v
		}
		sleep(ctx, time.Second)
	}
}

func (r *run) runVerify(ctx context.Context, after int, final bool) VerifyResult {
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, r.o.RecoveryTimeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, r.o.Binary, "verify", "--config", r.child, "--wait", r.o.RecoveryTimeout.String(), "--format", "json")
	cmd.Env = append(os.Environ(), r.o.Env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	v := VerifyResult{AfterFaults: after, Final: final, Seconds: time.Since(t0).Seconds(), ExitCode: cmd.ProcessState.ExitCode()}
	switch v.ExitCode {
	case 0:
		v.Verdict = "CONVERGED"
	case 1:
		v.Verdict = "DIVERGED"
	case 3:
		v.Verdict = "BEHIND"
	default:
		v.Verdict = "ERROR"
	}
	if v.Verdict != "CONVERGED" {
		var env struct {
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(out.Bytes(), &env) == nil && env.Error != nil {
			v.Detail = env.Error.Message
		} else {
			v.Detail = tail(append(out.Bytes(), errb.Bytes()...), 600)
		}
		if err != nil && v.Detail == "" {
			v.Detail = err.Error()
		}
	}
	return v
}

// sample records the processes' resources every SampleEvery.
func (r *run) sample(ctx context.Context) {
	for {
		s := Sample{T: r.since(), Values: map[string]float64{}}
		for _, p := range []*proc{r.capture, r.applier} {
			if pid := p.pid(); pid > 0 {
				if rss, ok := procRSS(pid); ok {
					s.Values[p.role+".rss_bytes"] = rss
				}
				if n, ok := procFDs(pid); ok {
					s.Values[p.role+".open_fds"] = n
				}
			}
		}
		if v, ok := r.metric(r.relayAt, "go_goroutines"); ok {
			s.Values[r.capture.role+".goroutines"] = v
		}
		if v, ok := r.metric(r.sinkAt[0], "go_goroutines"); ok {
			s.Values["applier.goroutines"] = v
		}
		if v, ok := dirSize(r.cfg.Transport.Local.LogDir()); ok {
			s.Values["log_bytes"] = v
		}
		if v, ok := r.slotLag(ctx); ok {
			s.Values["slot_lag_bytes"] = v
		}
		if v, ok := r.metric(r.sinkAt[0], "trellara_applier_lag_bytes"); ok {
			s.Values["apply_lag_bytes"] = v
		}
		r.mu.Lock()
		r.samples = append(r.samples, s)
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.o.SampleEvery):
		}
	}
}

func (r *run) slotLag(ctx context.Context) (float64, bool) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, r.sourceURL)
	if err != nil {
		return 0, false
	}
	defer conn.Close(cctx)
	var v float64
	if err := conn.QueryRow(cctx, "SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::float8 FROM pg_replication_slots WHERE slot_name = $1", r.cfg.Source.Slot).Scan(&v); err != nil {
		return 0, false
	}
	return v, true
}

// procRSS reads VmRSS from /proc/PID/status.
func procRSS(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}

func procFDs(pid int) (float64, bool) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, false
	}
	return float64(len(ents)), true
}

func dirSize(dir string) (float64, bool) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a segment removed by retention mid-walk
		}
		if !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return float64(n), err == nil
}

// finish decides the verdict.
func (r *run) finish(status map[string]string) {
	r.rep.Elapsed = time.Since(r.start).Seconds()
	r.rep.Processes = []string{
		shell.Command(r.o.Binary, "run", "--config", r.child, "--role", r.capture.role) + " (health " + r.relayAt + ")",
		shell.Command(r.o.Binary, "run", "--config", r.child, "--role", "applier") + " (health " + strings.Join(r.sinkAt, ", ") + ")",
	}
	r.mu.Lock()
	r.rep.Samples = r.samples
	r.rep.ProcessExits = r.exits
	r.mu.Unlock()
	if r.rep.Samples == nil {
		r.rep.Samples = []Sample{}
	}
	r.rep.Leaks = DetectLeaks(r.rep.Samples)
	if r.rep.Leaks == nil {
		r.rep.Leaks = []LeakFinding{}
	}
	if r.o.LeakCheck {
		for _, l := range r.rep.Leaks {
			if l.Leak {
				r.violate("soak", "%s grows without bound: %s", l.Series, l.Summary())
			}
		}
	}
	r.mu.Lock()
	r.rep.Violations = append([]Violation{}, r.violations...)
	r.mu.Unlock()
	r.rep.summarize(status)
	r.rep.NotCovered = nil
	for _, k := range r.rep.Kinds {
		if k.Status != "injected" {
			r.rep.NotCovered = append(r.rep.NotCovered, k.Kind+": "+k.Status)
		} else if k.Injected == 0 {
			r.rep.NotCovered = append(r.rep.NotCovered, k.Kind+": requested but the duration ended before its turn")
		}
	}
	if !r.o.LeakCheck {
		r.rep.NotCovered = append(r.rep.NotCovered, "leaks: resource trends are reported, not judged (a soak judges them: --soak)")
	}
	r.rep.NotCovered = append(r.rep.NotCovered, "the user's own workload: the run uses the built-in transfer workload")
	final := false
	for _, v := range r.rep.Verifies {
		final = final || (v.Final && v.Verdict == "CONVERGED")
	}
	switch {
	case len(r.rep.Violations) > 0:
		r.rep.Verdict, r.rep.VerdictReason = "FAIL", fmt.Sprintf("%d violations", len(r.rep.Violations))
	case !final:
		r.rep.Verdict, r.rep.VerdictReason = "FAIL", "no final CONVERGED verify"
	default:
		r.rep.Verdict = "PASS"
		r.rep.VerdictReason = fmt.Sprintf("%d faults recovered, every verify CONVERGED, 0 violations", len(r.rep.Faults))
	}
}
