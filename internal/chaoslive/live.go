// Package chaoslive is `trellara chaos live`: the flow's own processes
// under a built-in transfer workload, with real faults injected at seeded
// times — SIGKILL of Trellara's processes, source and target restarts
// through the commands the configuration names, network cuts through a
// local TCP proxy — each timed from injection to detection, to ready and
// to caught up; a reader that holds the target to whole-transaction
// invariants throughout; `trellara verify` after every few faults and at
// the end; and resource samples judged for leaks (the soak).
package chaoslive

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/lsn"
)

// ErrProduction refuses a live chaos run against a production flow.
var ErrProduction = errors.New("chaos live refuses environment: production")

// Options configure a run.
type Options struct {
	ConfigPath string
	Duration   time.Duration
	Kinds      []string // fault kinds to inject; nil means DefaultKinds
	Seed       uint64
	// Binary is the trellara executable the flow's processes run; Env is
	// added to their environment.
	Binary string
	Env    []string
	// WorkDir holds the processes' configuration (DSNs rewritten to the
	// proxies) and logs; "" makes a temporary directory, removed after a
	// passing run.
	WorkDir string
	// VerifyEvery runs trellara verify after every N faults (default 3).
	VerifyEvery int
	// Gap bounds the seeded pause between a recovery and the next fault
	// (default 3s to 10s).
	GapMin, GapMax time.Duration
	// RecoveryTimeout bounds each stage of a recovery (default 2m).
	RecoveryTimeout time.Duration
	// SampleEvery is the resource sampling period (default 5s).
	SampleEvery time.Duration
	// LeakCheck makes a leaking series fail the run (the soak).
	LeakCheck bool
	Workers   int // workload connections (default 2)
	Rate      int // workload transactions per second (default 100)
	Logger    *slog.Logger
}

func (o *Options) defaults() {
	if o.Kinds == nil {
		o.Kinds = DefaultKinds
	}
	if o.VerifyEvery <= 0 {
		o.VerifyEvery = 3
	}
	if o.GapMin <= 0 {
		o.GapMin = 3 * time.Second
	}
	if o.GapMax < o.GapMin {
		o.GapMax = max(o.GapMin, 10*time.Second)
	}
	if o.RecoveryTimeout <= 0 {
		o.RecoveryTimeout = 2 * time.Minute
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.Rate <= 0 {
		o.Rate = 100
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// ParseKinds reads a --faults list.
func ParseKinds(s string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if !slices.Contains(AllKinds, k) {
			return nil, fmt.Errorf("--faults: unknown fault kind %q; known: %s", k, strings.Join(AllKinds, ","))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--faults: empty; name at least one of %s", strings.Join(AllKinds, ","))
	}
	return out, nil
}

// run is one live chaos run's state.
type run struct {
	o       Options
	cfg     *config.Config
	start   time.Time
	rep     *Report
	workDir string
	child   string // the processes' config file

	sourceURL  string   // direct, for the workload and LSN reads
	targetURLs []string // direct, one per sink
	proxies    map[string]*proxy
	srcProxy   *proxy
	dstProxies []*proxy

	capture *proc // relay or sidecar
	applier *proc
	relayAt string
	sinkAt  []string

	mu         sync.Mutex
	violations []Violation
	exits      int
	samples    []Sample
	http       *http.Client
}

func (r *run) since() float64 { return time.Since(r.start).Seconds() }

func (r *run) violate(source, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) < 200 {
		r.violations = append(r.violations, Violation{AtSeconds: r.since(), Source: source, Detail: fmt.Sprintf(format, args...)})
	}
}

// Run performs a live chaos run and returns its report. An error means it
// could not run (bad configuration, production, a server unreachable);
// a run that found problems returns a report whose Verdict is FAIL.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		return nil, err
	}
	if cfg.Environment == config.Production {
		return nil, fmt.Errorf("%s: %w: it kills the flow's processes and restarts its servers; run it against a development or staging copy of the flow", o.ConfigPath, ErrProduction)
	}
	if cfg.Transport.Local == nil {
		return nil, fmt.Errorf("%s: chaos live needs transport.local: the long-running service (trellara run) does not serve a Kafka transport yet", o.ConfigPath)
	}
	if len(cfg.Sinks) == 0 {
		return nil, fmt.Errorf("%s: chaos live needs a target (or sinks): the reader checks the workload's invariants there", o.ConfigPath)
	}
	var missing []string
	for _, t := range []config.TableName{AccountsTable, HistoryTable} {
		if !slices.Contains(cfg.Source.Tables, t) {
			missing = append(missing, t.Schema+"."+t.Name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: source.tables lacks the chaos workload's tables %s: add them (chaos live creates and seeds them on the source; give the target create_tables: true or create them there)",
			o.ConfigPath, strings.Join(missing, ", "))
	}
	if o.Binary == "" {
		return nil, errors.New("chaos live: no trellara binary to run the flow's processes with")
	}

	r := &run{o: o, cfg: cfg, proxies: map[string]*proxy{}, http: &http.Client{Timeout: time.Second}}
	r.rep = &Report{Flow: cfg.Flow, Config: o.ConfigPath, Workload: WorkloadName, Seed: o.Seed, Duration: o.Duration.String(), Violations: []Violation{}, Verifies: []VerifyResult{}, Leaks: []LeakFinding{}}
	status := r.kindStatus()

	if r.sourceURL, err = reveal(cfg.Source.DatabaseURL, "source.database_url"); err != nil {
		return nil, err
	}
	for _, s := range cfg.Sinks {
		u, err := reveal(s.Target.DatabaseURL, "target.database_url of sink "+s.Name)
		if err != nil {
			return nil, err
		}
		r.targetURLs = append(r.targetURLs, u)
	}
	total, err := setupWorkload(ctx, r.sourceURL)
	if err != nil {
		return nil, err
	}

	r.workDir = o.WorkDir
	removeWork := false
	if r.workDir == "" {
		if r.workDir, err = os.MkdirTemp("", "trellara-chaos-live-"); err != nil {
			return nil, fmt.Errorf("chaos live: work directory: %w", err)
		}
		removeWork = true
	} else if err := os.MkdirAll(r.workDir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos live: work directory %s: %w", r.workDir, err)
	}
	defer r.closeProxies()
	if err := r.writeChildConfig(); err != nil {
		return nil, err
	}

	r.start = time.Now()
	r.rep.Started = r.start.UTC()
	role := "relay"
	if cfg.Source.Capture == config.CaptureExtension {
		role = "sidecar"
	}
	r.relayAt = loopback(cfg.Run.Listen.Relay)
	for _, s := range cfg.Sinks {
		r.sinkAt = append(r.sinkAt, loopback(s.Listen))
	}
	r.capture = r.newProc(role)
	r.applier = r.newProc("applier")
	r.capture.start()
	r.applier.start()
	defer func() {
		r.capture.stop()
		r.applier.stop()
	}()

	finish := func() (*Report, error) {
		r.finish(status)
		if removeWork && r.rep.Verdict == "PASS" {
			os.RemoveAll(r.workDir)
		}
		return r.rep, nil
	}

	// The flow's starting point: both processes ready, snapshot and catch
	// up, then CONVERGED, before any fault.
	if !waitFor(ctx, r.o.RecoveryTimeout, func() bool { return r.ready(r.allEndpoints()...) }) {
		r.violate("process", "the flow's processes were not ready within %s of starting (logs in %s)", r.o.RecoveryTimeout, r.workDir)
		return finish()
	}
	if v := r.initialVerify(ctx); v.Verdict != "CONVERGED" {
		r.violate("verify", "the flow did not converge before the first fault: %s %s", v.Verdict, v.Detail)
		return finish()
	}

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	wl := &workload{url: r.sourceURL, workers: o.Workers, rate: o.Rate, seed: o.Seed}
	wl.start(wctx)
	rd := &reader{url: r.targetURLs[0], total: total, every: 200 * time.Millisecond, done: make(chan struct{}),
		onBad: func(d string) { r.violate("reader", "%s", d) }}
	go rd.run(wctx)
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); r.sample(sctx) }()

	r.faultLoop(ctx, wl, status)

	// Quiesce: the workload stops, the flow drains, verify answers.
	stopWork()
	wl.wait()
	<-rd.done
	r.verify(ctx, len(r.rep.Faults), true)
	// One last read of the target after the final verify.
	if conn, err := pgx.Connect(ctx, r.targetURLs[0]); err == nil {
		if obs, err := observe(ctx, conn); err == nil {
			rd.check(obs)
		}
		conn.Close(ctx)
	}
	stopSampling()
	<-sampled

	r.rep.Committed = wl.committed.Load()
	r.rep.WorkloadErrs = wl.errs.Load()
	r.rep.Reader = ReaderSummary{Observations: rd.observations.Load(), Reconnects: rd.reconnects.Load(), Last: rd.lastObservation()}
	return finish()
}

// kindStatus decides, before the run, what each fault kind can be: a
// kind that cannot be injected says why even when it was not requested.
func (r *run) kindStatus() map[string]string {
	st := map[string]string{}
	ext := r.cfg.Source.Capture == config.CaptureExtension
	for _, k := range AllKinds {
		var why string
		switch k {
		case KindRelay:
			if ext {
				why = "not applicable: capture: extension runs a sidecar, not a relay (use --faults sidecar)"
			}
		case KindSidecar:
			if !ext {
				why = "not applicable: capture: pgoutput runs no sidecar process"
			}
		case KindSource:
			if r.cfg.Chaos.SourceRestart == "" {
				why = "not configured: set chaos.source_restart to the command that restarts the source"
			}
		case KindTarget:
			if r.cfg.Chaos.TargetRestart == "" {
				why = "not configured: set chaos.target_restart to the command that restarts the target"
			}
		case KindDisk:
			why = diskStatus(r.cfg.Transport.Local.Dir)
		case KindBroker:
			why = "not built: chaos live injects no broker faults yet (over Kafka, the failure matrix's kafka family and the kfake tests cover them)"
		}
		switch {
		case why != "":
			st[k] = why
		case !slices.Contains(r.o.Kinds, k):
			st[k] = "not requested (--faults)"
		default:
			st[k] = "injected"
		}
	}
	return st
}

// reveal resolves a credential reference to the URL it names.
func reveal(ref config.SecretRef, what string) (string, error) {
	s, err := ref.Resolve()
	if err != nil {
		return "", fmt.Errorf("chaos live: %s: %w", what, err)
	}
	return s.Reveal(), nil
}

// viaProxy returns dsn with its host and port replaced by a proxy to
// them (one proxy per server).
func (r *run) viaProxy(dsn, what string) (string, *proxy, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return "", nil, fmt.Errorf("chaos live: %s is not a postgres:// URL with a host; the network-cut proxy needs one (write it as postgres://user@host:port/db)", what)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432")
	}
	p := r.proxies[host]
	if p == nil {
		if p, err = startProxy(host); err != nil {
			return "", nil, err
		}
		r.proxies[host] = p
	}
	u.Host = p.Addr()
	return u.String(), p, nil
}

func (r *run) closeProxies() {
	for _, p := range r.proxies {
		p.Close()
	}
}

// writeChildConfig writes the configuration the flow's processes run
// with: the user's, with every database URL pointed at a proxy.
func (r *run) writeChildConfig() error {
	c := *r.cfg
	src, p, err := r.viaProxy(r.sourceURL, "source.database_url")
	if err != nil {
		return err
	}
	r.srcProxy = p
	c.Source.DatabaseURL = config.InlineRef(src)
	c.Sinks = nil
	for i, s := range r.cfg.Sinks {
		u, p, err := r.viaProxy(r.targetURLs[i], "the target database_url of sink "+s.Name)
		if err != nil {
			return err
		}
		r.dstProxies = append(r.dstProxies, p)
		t := *s.Target
		t.DatabaseURL = config.InlineRef(u)
		s.Target = &t
		c.Sinks = append(c.Sinks, s)
	}
	if c.Target != nil {
		c.Target = c.Sinks[0].Target
		c.Sinks = nil
	}
	r.child = filepath.Join(r.workDir, "flow.yml")
	os.Remove(r.child)
	if err := config.CreateFile(r.child, &c); err != nil {
		return fmt.Errorf("chaos live: write %s: %w", r.child, err)
	}
	return nil
}

func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// proc is one of the flow's processes, restarted when it exits (as a
// service manager would).
type proc struct {
	r    *run
	role string
	log  string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	killing  bool
	stopping bool
	loopDone chan struct{}
}

func (r *run) newProc(role string) *proc {
	return &proc{r: r, role: role, log: filepath.Join(r.workDir, role+".log"), loopDone: make(chan struct{})}
}

// errStopping ends the supervisor loop: stop was called.
var errStopping = errors.New("stopping")

// launch starts the process; under the lock, so that stop either sees the
// new process or prevents it.
func (p *proc) launch() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return errStopping
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.r.o.Binary, "run", "--config", p.r.child, "--role", p.role)
	cmd.Env = append(os.Environ(), p.r.o.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("chaos live: start %s: %w", shell.Command(cmd.Args...), err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}()
	return nil
}

// start launches the process and keeps it running until stop.
func (p *proc) start() {
	go func() {
		defer close(p.loopDone)
		for {
			if err := p.launch(); err != nil {
				if !errors.Is(err, errStopping) {
					p.r.violate("process", "%v", err)
				}
				return
			}
			p.mu.Lock()
			exited := p.exited
			p.mu.Unlock()
			<-exited
			p.mu.Lock()
			stopping, killed := p.stopping, p.killing
			p.killing = false
			code := p.cmd.ProcessState.ExitCode()
			p.mu.Unlock()
			if stopping {
				return
			}
			if !killed {
				p.r.mu.Lock()
				p.r.exits++
				p.r.mu.Unlock()
				p.r.violate("process", "trellara run --role %s exited on its own (exit %d); its log: %s", p.role, code, p.log)
				time.Sleep(time.Second)
			}
		}
	}()
}

// kill SIGKILLs the running process and returns when its exit has been
// observed (the supervisor loop restarts it).
func (p *proc) kill() (pid int, err error) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return 0, fmt.Errorf("%s process not running", p.role)
	}
	p.killing = true
	p.mu.Unlock()
	pid = cmd.Process.Pid
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return pid, fmt.Errorf("SIGKILL %s pid %d: %w", p.role, pid, err)
	}
	<-exited
	return pid, nil
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
	}
	return p.cmd.Process.Pid
}

// stop ends the process with SIGTERM (SIGKILL after 30 s).
func (p *proc) stop() {
	p.mu.Lock()
	p.stopping = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	}
	<-p.loopDone
}

// ready reports whether every endpoint in addrs answers /readyz with 200.
func (r *run) ready(addrs ...string) bool {
	for _, a := range addrs {
		resp, err := r.http.Get("http://" + a + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

func (r *run) allEndpoints() []string { return append([]string{r.relayAt}, r.sinkAt...) }

// metric reads one series' value from a /metrics endpoint (the first
// sample of that name).
func (r *run) metric(addr, name string) (float64, bool) {
	resp, err := r.http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			return v, true
		}
	}
	return 0, false
}

// checkpoint is the lowest applier checkpoint over the sinks.
func (r *run) checkpoint() (uint64, bool) {
	var low uint64
	for i, a := range r.sinkAt {
		v, ok := r.metric(a, "trellara_applier_checkpoint_lsn_bytes")
		if !ok {
			return 0, false
		}
		if i == 0 || uint64(v) < low {
			low = uint64(v)
		}
	}
	return low, true
}

// sourceLSN is the source's current WAL insert position.
func (r *run) sourceLSN(ctx context.Context) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, r.sourceURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(cctx)
	var s string
	if err := conn.QueryRow(cctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		return 0, err
	}
	l, err := lsn.Parse(s)
	return uint64(l), err
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleep(ctx, 50*time.Millisecond)
	}
}
