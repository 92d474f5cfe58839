//go:build full

package lake_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/lake"
	"github.com/trellara/trellara/internal/pgtest"
)

// BenchmarkFleet is `make bench-fleet`: N sources, as databases spread over
// a few PostgreSQL clusters, each with a light steady write load (the
// two-table transaction of the fan-in tests at TRELLARA_BENCH_FLEET_RATE
// per second), run through one `fleet run` process (a relay per source and
// the lake committer) into an Iceberg changelog on a PostgreSQL SQL catalog
// and a file:// warehouse. For each N in TRELLARA_BENCH_FLEET_SOURCES it
// reports: the time to the first complete epoch; over a steady window, how
// many epochs closed and how many were complete, and the interval between
// closes (p50/p99, against close_interval); the committer's lag once the
// load stops (until an epoch includes every source through its last
// write); the fleet process's CPU and peak RSS, per source; the servers'
// CPU; the fleet's open files and the servers' connections; and fanin
// verify's verdict and time. An N holds when every steady-window epoch is
// complete and fanin verify is CONVERGED; the first N that does not is
// named with what broke. Nothing here asserts a time: a run that breaks is
// reported, not failed, so the sizes after it still run.
func BenchmarkFleet(b *testing.B) {
	pgtest.Require(b)
	sizes := benchInts(b, "TRELLARA_BENCH_FLEET_SOURCES", "100")
	clusters := benchInts(b, "TRELLARA_BENCH_FLEET_CLUSTERS", "2")[0]
	rate := benchInts(b, "TRELLARA_BENCH_FLEET_RATE_MILLI", "1000")[0] // transactions per 1000 s per source
	steady := 60 * time.Second
	if s := os.Getenv("TRELLARA_BENCH_FLEET_STEADY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("TRELLARA_BENCH_FLEET_STEADY=%q: %v", s, err)
		}
		steady = d
	}
	bin := buildFull(b)
	var rows []string
	for _, n := range sizes {
		b.Run(fmt.Sprintf("sources=%d", n), func(b *testing.B) {
			for range b.N {
				r := runFleetBench(b, bin, n, clusters, rate, steady)
				rows = append(rows, r.row())
				b.ReportMetric(r.firstComplete.Seconds(), "s-first-complete")
				b.ReportMetric(r.fleetCPU/r.wall.Seconds()*100, "fleet-%cpu")
				b.ReportMetric(float64(r.fleetHWM)/float64(n)/(1<<20), "MiB-rss/source")
			}
		})
	}
	b.Logf("machine: %s", benchMachine())
	b.Logf("| sources | clusters | rate/source | first complete | epochs complete / closed | close interval p50 / p99 | lag after load stop | fleet CPU | fleet CPU/source | fleet peak RSS | RSS/source | servers' CPU | fleet fds | server conns | fanin verify | holds |")
	b.Logf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		b.Logf("%s", r)
	}
}

func benchInts(b *testing.B, env, def string) []int {
	s := os.Getenv(env)
	if s == "" {
		s = def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			b.Fatalf("%s=%q: want positive integers separated by commas", env, s)
		}
		out = append(out, v)
	}
	return out
}

func benchMachine() string {
	cpu := ""
	if bs, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(bs), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%d CPUs (%s), load %s", runtime.NumCPU(), cpu, strings.TrimSpace(string(load)))
}

type fleetBench struct {
	n, clusters, rateMilli int
	firstComplete          time.Duration
	closed, complete       int
	intervals              []time.Duration
	lag                    time.Duration
	lagErr                 string
	wall                   time.Duration // the steady window
	fleetCPU, serverCPU    float64       // CPU seconds over the steady window
	fleetHWM               int64         // bytes
	fds, conns             int
	verify                 string
	verifyTime             time.Duration
	broke                  string
}

func (r fleetBench) row() string {
	pct := func(d time.Duration) string {
		if len(r.intervals) == 0 {
			return "-"
		}
		s := slices.Clone(r.intervals)
		slices.Sort(s)
		return s[min(len(s)-1, int(float64(len(s))*float64(d)/100))].Round(10 * time.Millisecond).String()
	}
	lag := r.lag.Round(100 * time.Millisecond).String()
	if r.lagErr != "" {
		lag = r.lagErr
	}
	holds := "yes"
	if r.broke != "" {
		holds = "no: " + r.broke
	}
	w := r.wall.Seconds()
	return fmt.Sprintf("| %d | %d | %.2f txn/s | %s | %d / %d | %s / %s | %s | %.0f%% of a core | %.2f%% | %.0f MiB | %.2f MiB | %.0f%% of a core | %d | %d | %s in %s | %s |",
		r.n, r.clusters, float64(r.rateMilli)/1000, r.firstComplete.Round(100*time.Millisecond), r.complete, r.closed, pct(50), pct(99), lag,
		r.fleetCPU/w*100, r.fleetCPU/w*100/float64(r.n), float64(r.fleetHWM)/(1<<20), float64(r.fleetHWM)/float64(r.n)/(1<<20),
		r.serverCPU/w*100, r.fds, r.conns, r.verify, r.verifyTime.Round(100*time.Millisecond), holds)
}

// runFleetBench runs one size: n sources over `clusters` servers.
func runFleetBench(b *testing.B, bin string, n, clusters, rateMilli int, steady time.Duration) fleetBench {
	r := fleetBench{n: n, clusters: clusters, rateMilli: rateMilli}
	dir := b.TempDir()
	per := (n + clusters - 1) / clusters
	settings := map[string]string{
		"max_wal_senders":       strconv.Itoa(per + 10),
		"max_replication_slots": strconv.Itoa(per + 10),
		// Per source: the relay's replication and query connections, the
		// epoch probe, the load, and fanin verify's snapshot.
		"max_connections": strconv.Itoa(4*per + 50),
		"shared_buffers":  "32MB",
	}
	var servers []*pgtest.Cluster
	for range clusters {
		servers = append(servers, pgtest.Start(b, pgtest.Options{Settings: settings}))
	}
	catalog := pgtest.Start(b, pgtest.Options{NoFsync: true})
	type source struct {
		id  string
		url string
	}
	var srcs []source
	var fleetSources strings.Builder
	ports := distinctPorts(b, 2*n+1)
	for i := range n {
		c := servers[i%clusters]
		db := fmt.Sprintf("s%04d", i+1)
		c.Exec(b, "CREATE DATABASE "+db)
		c.ExecDB(b, db, schema)
		u := c.URL(db)
		cfg := filepath.Join(dir, db+".yml")
		writeSourceFlow(b, cfg, "", db, u, localTransport(filepath.Join(dir, db)), ports[2*i], ports[2*i+1])
		fmt.Fprintf(&fleetSources, "  - config: %s.yml\n", db)
		srcs = append(srcs, source{db, u})
	}
	b.Setenv("LAKE_CATALOG_URL", catalog.URL("postgres"))
	const closeInterval = 5 * time.Second
	fleetYML := filepath.Join(dir, "fleet.yml")
	body := fmt.Sprintf(`version: 1
fleet: bench
sources:
%slake:
  catalog: {kind: sql-postgres, uri: {env: LAKE_CATALOG_URL}}
  warehouse: file://%s
  namespace: bench
epochs: {close_interval: %s, max_lag: 30s}
run: {listen: "127.0.0.1:%d", commit_every: 2s}
`, fleetSources.String(), filepath.Join(dir, "warehouse"), closeInterval, ports[2*n])
	if err := os.WriteFile(fleetYML, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := lake.LoadFleet(fleetYML)
	if err != nil {
		b.Fatal(err)
	}

	// The load: one connection per source, one transaction every
	// 1000/rateMilli seconds, the sources' phases spread over the period.
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var loadErrs atomic.Int64
	period := time.Duration(float64(time.Second) * 1000 / float64(rateMilli))
	for i, s := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, s.url)
			if err != nil {
				loadErrs.Add(1)
				return
			}
			defer conn.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(rng.Int64N(int64(period)))):
			}
			t := time.NewTicker(period)
			defer t.Stop()
			for k := 0; ; k++ {
				if err := txn(ctx, conn, k, rng); err != nil && ctx.Err() == nil {
					loadErrs.Add(1)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	defer func() { stopLoad(); wg.Wait() }()

	start := time.Now()
	cmd := exec.Command(bin, "fleet", "run", "--config", fleetYML)
	logf, err := os.Create(filepath.Join(dir, "fleet.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	pid := cmd.Process.Pid

	// The lake's tables appear with the first commit: open it then.
	var l *lake.Lake
	epochs := func() []lake.Epoch {
		if l == nil {
			if l, err = lake.Open(context.Background(), f.Lake); err != nil {
				l = nil
				return nil
			}
		}
		eps, err := l.Epochs(context.Background())
		if err != nil {
			return nil
		}
		return eps
	}
	defer func() {
		if l != nil {
			l.Close()
		}
	}()
	budget := 3*time.Minute + time.Duration(n)*time.Second/2
	var first lake.Epoch
	for first.ID == 0 {
		if time.Since(start) > budget {
			r.broke = "no complete epoch within " + budget.String()
			if eps := epochs(); len(eps) > 0 {
				last := eps[len(eps)-1]
				miss := last.Missing()
				reason := ""
				if len(miss) > 0 {
					se, _ := last.Source(miss[0])
					reason = se.Reason
				}
				r.broke += fmt.Sprintf(" (last epoch %d %s, %d sources missing, first %s: %s)", last.ID, last.Status, len(miss), strings.Join(firstN(miss, 1), ""), reason)
			} else {
				r.broke += " (no epoch closed)"
			}
			b.Logf("%s\nfleet log tail:\n%s", r.row(), tail(readFile(filepath.Join(dir, "fleet.log")), 20))
			return r
		}
		select {
		case <-exited:
			r.broke = "fleet run exited: " + tail(readFile(filepath.Join(dir, "fleet.log")), 5)
			b.Logf("%s", r.row())
			return r
		default:
		}
		for _, ep := range epochs() {
			if ep.Status == lake.StatusComplete {
				first = ep
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.firstComplete = time.Since(start)
	b.Logf("%d sources: first complete epoch %d after %s", n, first.ID, r.firstComplete.Round(100*time.Millisecond))

	// The steady window.
	cpu0, srv0 := pgtest.ProcCPU(pid), serversCPU(servers)
	t0 := time.Now()
	for time.Since(t0) < steady {
		time.Sleep(time.Second)
		r.fds = max(r.fds, countFDs(pid))
	}
	r.wall = time.Since(t0)
	r.fleetCPU, r.serverCPU = pgtest.ProcCPU(pid)-cpu0, serversCPU(servers)-srv0
	r.fleetHWM = procStatusBytes(pid, "VmHWM:")
	for _, c := range servers {
		conn := c.Connect(context.Background())
		var k int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity`).Scan(&k); err == nil {
			r.conns += k
		}
		conn.Close(context.Background())
	}
	var last time.Time
	for _, ep := range epochs() {
		if ep.ClosedAt.Before(t0) || ep.ClosedAt.After(t0.Add(r.wall)) {
			continue
		}
		r.closed++
		if ep.Status == lake.StatusComplete {
			r.complete++
		} else if r.broke == "" {
			r.broke = fmt.Sprintf("epoch %d %s, missing %d sources (%s)", ep.ID, ep.Status, len(ep.Missing()), strings.Join(firstN(ep.Missing(), 3), ", "))
		}
		if !last.IsZero() {
			r.intervals = append(r.intervals, ep.ClosedAt.Sub(last))
		}
		last = ep.ClosedAt
	}
	if r.closed == 0 && r.broke == "" {
		r.broke = "no epoch closed in the steady window"
	}
	if e := loadErrs.Load(); e > 0 && r.broke == "" {
		r.broke = fmt.Sprintf("%d load transactions failed", e)
	}

	// The committer's lag: stop the load, take each source's WAL position,
	// and wait for an epoch that includes every source through it.
	stopLoad()
	wg.Wait()
	want := map[string]uint64{}
	for _, s := range srcs {
		conn, err := pgx.Connect(context.Background(), s.url)
		if err != nil {
			b.Fatal(err)
		}
		var at uint64
		if err := conn.QueryRow(context.Background(), `SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&at); err != nil {
			b.Fatal(err)
		}
		conn.Close(context.Background())
		want[s.id] = at
	}
	stopped := time.Now()
	r.lagErr = "not caught up in 5m"
	for time.Since(stopped) < 5*time.Minute && r.lagErr != "" {
		for _, ep := range epochs() {
			if ep.ClosedAt.Before(stopped) {
				continue
			}
			ok := true
			for id, at := range want {
				se, found := ep.Source(id)
				ok = ok && found && se.Included && se.ThroughLSN >= at
			}
			if ok {
				r.lag, r.lagErr = ep.ClosedAt.Sub(stopped), ""
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if r.lagErr != "" && r.broke == "" {
		r.broke = "the lake did not catch up after the load stopped"
	}

	vs := time.Now()
	out, verr := exec.Command(bin, "fanin", "verify", "--config", fleetYML, "--wait", "5m").CombinedOutput()
	r.verifyTime = time.Since(vs)
	switch {
	case verr == nil && strings.Contains(string(out), "CONVERGED"):
		r.verify = "CONVERGED"
	default:
		r.verify = "not CONVERGED"
		if r.broke == "" {
			r.broke = "fanin verify: " + tail(string(out), 3)
		}
	}
	b.Logf("%s", r.row())
	return r
}

// distinctPorts returns k free ports, all different: each listener is
// held open until all are taken (freePort one at a time may hand the
// same ephemeral port out twice over hundreds of sources).
func distinctPorts(b *testing.B, k int) []int {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range k {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out
}

func firstN(s []string, n int) []string { return s[:min(n, len(s))] }

func readFile(p string) string {
	bs, _ := os.ReadFile(p)
	return string(bs)
}

func countFDs(pid int) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es)
}

// procStatusBytes reads a "kB" line of /proc/pid/status.
func procStatusBytes(pid int, key string) int64 {
	for _, l := range strings.Split(readFile(fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		if strings.HasPrefix(l, key) {
			f := strings.Fields(l)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v << 10
			}
		}
	}
	return 0
}

// serversCPU is the CPU seconds of every process of the servers: each
// postmaster, its children (backends, walsenders) and what it has reaped.
func serversCPU(servers []*pgtest.Cluster) float64 {
	posts := map[int]bool{}
	for _, c := range servers {
		if pid, err := strconv.Atoi(strings.SplitN(readFile(filepath.Join(c.DataDir(), "postmaster.pid")), "\n", 2)[0]); err == nil {
			posts[pid] = true
		}
	}
	var sum float64
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		self, reaped, ppid, ok := pgtest.ProcTimes(pid)
		switch {
		case !ok:
		case posts[pid]:
			sum += self + reaped
		case posts[ppid]:
			sum += self
		}
	}
	return sum
}
