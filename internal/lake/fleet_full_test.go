//go:build full

package lake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/lake"
	"github.com/trellara/trellara/internal/lake/lakeread"
	"github.com/trellara/trellara/internal/pgtest"
)

const schema = `
CREATE TABLE items (id bigint PRIMARY KEY, v text, n int NOT NULL);
CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO items SELECT g, 'seed ' || g, 0 FROM generate_series(1, 20) g;
INSERT INTO counters SELECT g, 0 FROM generate_series(1, 5) g;
`

// txn commits one two-table transaction: an insert, an update, sometimes
// a delete and a key change, and a counter bump (a transaction written
// twice or not at all shows in the counter).
func txn(ctx context.Context, conn *pgx.Conn, i int, rng *rand.Rand) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	id := 1000 + i
	if _, err := tx.Exec(ctx, `INSERT INTO items VALUES ($1, $2, 0)`, id, fmt.Sprintf("row %d", i)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE items SET n = n + 1, v = v || '+' WHERE id = $1`, 1+rng.IntN(20)); err != nil {
		return err
	}
	switch i % 7 {
	case 3:
		if _, err := tx.Exec(ctx, `DELETE FROM items WHERE id = $1`, id-2); err != nil {
			return err
		}
	case 5:
		if _, err := tx.Exec(ctx, `UPDATE items SET id = id + 100000 WHERE id = $1`, id-4); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE counters SET n = n + 1 WHERE id = $1`, 1+i%5); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

type fleetEnv struct {
	t       *testing.T
	bin     string
	dir     string
	fleet   string
	sources []*pgtest.Cluster
	ids     []string
	f       *lake.Fleet
	// catalogURL is the SQL catalog's PostgreSQL URL.
	catalogURL string
	// opener is how checkIndependently reads the warehouse's files (nil:
	// lakeread.FileOpener, a file:// warehouse).
	opener lakeread.Opener
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func buildFull(t testing.TB) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "trellara-full")
	cmd := exec.Command("go", "build", "-tags", "full", "-o", out, "github.com/trellara/trellara/cmd/trellara-full")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build trellara-full: %v\n%s", err, b)
	}
	return out
}

func newFleet(t *testing.T, n int, catalog *pgtest.Cluster) *fleetEnv {
	return newFleetAt(t, n, catalog, "")
}

// newFleetAt is newFleet with warehouse as fleet.yml's lake lines for the
// warehouse ("": a file:// warehouse in the test's directory).
func newFleetAt(t *testing.T, n int, catalog *pgtest.Cluster, warehouse string) *fleetEnv {
	e := &fleetEnv{t: t, bin: buildFull(t), dir: t.TempDir()}
	var srcs strings.Builder
	for i := range n {
		c := pgtest.Start(t, pgtest.Options{})
		c.Exec(t, schema)
		id := fmt.Sprintf("db%d", i+1)
		cfg := filepath.Join(e.dir, id+".yml")
		writeSourceFlow(t, cfg, "", id, c.URL("postgres"), localTransport(filepath.Join(e.dir, id)), freePort(t), freePort(t))
		fmt.Fprintf(&srcs, "  - config: %s.yml\n", id)
		e.sources, e.ids = append(e.sources, c), append(e.ids, id)
	}
	t.Setenv("LAKE_CATALOG_URL", catalog.URL("postgres"))
	e.catalogURL = catalog.URL("postgres")
	e.fleet = filepath.Join(e.dir, "fleet.yml")
	if warehouse == "" {
		warehouse = "  warehouse: file://" + filepath.Join(e.dir, "warehouse") + "\n"
	}
	body := fmt.Sprintf(`version: 1
fleet: test
sources:
%slake:
  catalog: {kind: sql-postgres, uri: {env: LAKE_CATALOG_URL}}
%s  namespace: fanin
epochs: {close_interval: 1s, max_lag: 3s}
run: {listen: "127.0.0.1:%d", commit_every: 300ms}
`, srcs.String(), warehouse, freePort(t))
	if err := os.WriteFile(e.fleet, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := lake.LoadFleet(e.fleet)
	if err != nil {
		t.Fatal(err)
	}
	e.f = f
	return e
}

// writeSourceFlow writes the flow config of fan-in test source id at path: the
// schema's two tables, a slot the relay owns, the transport's YAML lines
// (localTransport, or transport.kafka's), the relay's and applier's ports;
// env is its environment ("": the default).
func writeSourceFlow(t testing.TB, path, env, id, url, transport string, relayPort, applierPort int) {
	t.Helper()
	if env != "" {
		env = "environment: " + env + "\n"
	}
	body := fmt.Sprintf(`version: 2
%sflow: %s
source:
  id: %s
  database_url: %q
  owns_slot: true
  tables: [public.items, public.counters]
transport:
%srun:
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, env, id, id, url, transport, relayPort, applierPort)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// localTransport is transport.local's YAML line for a log in dir.
func localTransport(dir string) string { return "  local: {dir: " + dir + ", fsync: always}\n" }

// start runs fleet run as a subprocess, with env added.
func (e *fleetEnv) start(env ...string) *exec.Cmd {
	return startLogged(e.t, filepath.Join(e.dir, "fleet.log"), env, e.bin, "fleet", "run", "--config", e.fleet, "--verbose")
}

// startLogged starts name with args (and env added to the test's), its
// output appended to logPath; it is killed when the test ends.
func startLogged(t testing.TB, logPath string, env []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	return cmd
}

func (e *fleetEnv) cli(args ...string) (string, string, int) {
	cmd := exec.Command(e.bin, append(args, "--config", e.fleet)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func (e *fleetEnv) openLake() *lake.Lake {
	l, err := lake.Open(context.Background(), e.f.Lake)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(l.Close)
	return l
}

// waitEpoch waits for an epoch after id `after` that satisfies ok.
func (e *fleetEnv) waitEpoch(l *lake.Lake, after int64, what string, ok func(lake.Epoch) bool) lake.Epoch {
	e.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		eps, err := l.Epochs(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		for _, ep := range eps {
			if ep.ID > after && ok(ep) {
				return ep
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(e.dir, "fleet.log"))
	e.t.Fatalf("no epoch after %d is %s\nfleet log tail:\n%s", after, what, tail(string(b), 40))
	return lake.Epoch{}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func lastID(t *testing.T, l *lake.Lake) int64 {
	eps, err := l.Epochs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) == 0 {
		return 0
	}
	return eps[len(eps)-1].ID
}

// workload writes transactions to every running source until stop.
type workload struct {
	once    sync.Once
	mu      sync.Mutex
	paused  map[int]bool
	n       []int
	stop    chan struct{}
	wg      sync.WaitGroup
	sources []*pgtest.Cluster
}

func startWorkload(t *testing.T, sources []*pgtest.Cluster) *workload {
	w := &workload{paused: map[int]bool{}, n: make([]int, len(sources)), stop: make(chan struct{}), sources: sources}
	t.Cleanup(w.end)
	for i, c := range sources {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			var conn *pgx.Conn
			for {
				select {
				case <-w.stop:
					if conn != nil {
						conn.Close(context.Background())
					}
					return
				case <-time.After(20 * time.Millisecond):
				}
				w.mu.Lock()
				paused := w.paused[i]
				w.mu.Unlock()
				if paused {
					if conn != nil {
						conn.Close(context.Background())
						conn = nil
					}
					continue
				}
				if conn == nil {
					var err error
					if conn, err = pgx.Connect(context.Background(), c.URL("postgres")); err != nil {
						conn = nil
						continue
					}
				}
				w.mu.Lock()
				k := w.n[i]
				w.mu.Unlock()
				if err := txn(context.Background(), conn, k, rng); err != nil {
					conn.Close(context.Background())
					conn = nil
					continue
				}
				w.mu.Lock()
				w.n[i]++
				w.mu.Unlock()
			}
		}()
	}
	return w
}

func (w *workload) pause(i int, p bool) {
	w.mu.Lock()
	w.paused[i] = p
	w.mu.Unlock()
}

// end stops the workload and waits for it; once is enough, and the test's
// cleanup calls it too (before the sources stop).
func (w *workload) end() {
	w.once.Do(func() {
		close(w.stop)
		w.wg.Wait()
	})
}

// TestFleetFanIn: three sources and a PostgreSQL-backed SQL catalog under
// a write workload. A stopped source makes the next epoch
// complete_with_gaps naming it, and lake epoch refuses it; restarted, it
// catches up and a later epoch is complete. The fleet process is
// SIGKILLed between a table commit and the cursors, and between the data
// and the epoch record; after each restart the changelog has no duplicate
// (source, commit LSN, position), no epoch claims a source through rows
// the changelog did not have when it was written, and fanin verify is
// CONVERGED for all three. The changelog, read back by lakeread (no
// iceberg-go code), holds every change of each source's test_decoding
// record exactly once and nets to each source's final contents; with one
// data file left out of its view the same check is red
// (checkIndependently).
func TestFleetFanIn(t *testing.T) {
	pgtest.Require(t)
	catalog := pgtest.Start(t, pgtest.Options{})
	e := newFleet(t, 3, catalog)
	startRecord(t, e)
	l := e.openLake()
	fleet := e.start()
	w := startWorkload(t, e.sources)

	first := e.waitEpoch(l, 0, "complete", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	t.Logf("epoch %d complete", first.ID)

	// One source goes down.
	w.pause(1, true)
	e.sources[1].Stop()
	gapped := e.waitEpoch(l, lastID(t, l), "complete_with_gaps naming db2", func(ep lake.Epoch) bool {
		return ep.Status == lake.StatusGaps && strings.Join(ep.Missing(), ",") == "db2"
	})
	if se, _ := gapped.Source("db2"); !se.Offline || se.Included {
		t.Fatalf("epoch %d line of db2 = %+v, want offline and not included", gapped.ID, se)
	}
	if out, errOut, code := e.cli("lake", "epoch"); code != 1 || !strings.Contains(errOut, "db2") {
		t.Fatalf("lake epoch on a gapped epoch: exit %d, stdout %q stderr %q; want exit 1 naming db2", code, out, errOut)
	}
	if out, errOut, code := e.cli("lake", "epoch", "--allow-gaps"); code != 0 || !strings.Contains(out, lake.StatusGaps) {
		t.Fatalf("lake epoch --allow-gaps: exit %d, stdout %q stderr %q", code, out, errOut)
	}

	// Back up: it catches up and a later epoch is complete.
	e.sources[1].Restart()
	w.pause(1, false)
	back := e.waitEpoch(l, gapped.ID, "complete again", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	t.Logf("epoch %d complete after the restart", back.ID)

	// SIGKILL at an arbitrary point under load, then at the two named
	// points of a commit.
	time.Sleep(700 * time.Millisecond)
	_ = fleet.Process.Signal(syscall.SIGKILL)
	_ = fleet.Wait()
	for _, fp := range []string{"after-table-commit:kill", "before-epoch:kill"} {
		before := lastID(t, l)
		cmd := e.start("TRELLARA_LAKE_FAILPOINT=" + fp)
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("fleet run with failpoint %s ended with %v, want SIGKILL at the failpoint", fp, err)
		}
		if fp == "before-epoch:kill" && lastID(t, l) != before {
			t.Fatalf("an epoch was written after the failpoint before the epoch record")
		}
	}
	e.start()
	w.end()
	// After the workload: an epoch complete, then fanin verify.
	e.waitEpoch(l, lastID(t, l), "complete after the workload", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	out, errOut, code := e.cli("fanin", "verify", "--wait", "60s")
	if code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("fanin verify: exit %d\n%s\n%s", code, out, errOut)
	}
	for i, n := range w.n {
		if n == 0 {
			t.Fatalf("source %d committed no workload transaction", i+1)
		}
	}
	t.Logf("workload transactions per source: %v\n%s", w.n, out)

	// The read-only views over the same fleet.
	if out, errOut, code := e.cli("fleet", "report", "--format", "json"); code != 0 || !strings.Contains(out, `"db2"`) || !strings.Contains(out, `"units_behind"`) {
		t.Fatalf("fleet report: exit %d\n%s\n%s", code, out, errOut)
	}
	if out, errOut, code := e.cli("lake", "plan"); code != 0 || !strings.Contains(out, "db3") {
		t.Fatalf("lake plan: exit %d\n%s\n%s", code, out, errOut)
	}
	if out, errOut, code := e.cli("fleet", "scorecard", "--format", "json"); code > 1 || strings.Count(out, `"last_fanin_verify": "CONVERGED"`) != 3 {
		t.Fatalf("fleet scorecard: exit %d\n%s\n%s", code, out, errOut)
	}

	checkNoDuplicates(t, l)
	checkNoOverclaim(t, l)
	checkAgainstSource(t, l, e)
	checkIndependently(t, e)

	// A row in the lake that db2 never committed (a foreign writer):
	// fanin verify names db2, its table and the key, and only db2.
	//
	// Mutation: FaninVerify comparing each source with every source's
	// changes of the table (not split by source) is red here (every
	// source DIVERGED), as is one that skips the comparison.
	id := "987654"
	v, n := "foreign", "0"
	if err := l.AppendForeignChanges(context.Background(), "public__items", []lake.Change{{SourceID: "db2", CommitLSN: 1, Op: "insert",
		Cols: map[string]*string{"id": &id, "v": &v, "n": &n}}}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = e.cli("fanin", "verify", "--wait", "60s", "--format", "json")
	var res lake.FaninResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 || res.Verdict != lake.Diverged || len(res.Sources) != 3 {
		t.Fatalf("fanin verify with a foreign row: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	for _, fs := range res.Sources {
		want := lake.Converged
		if fs.SourceID == "db2" {
			want = lake.Diverged
		}
		if fs.Verdict != want {
			t.Fatalf("source %s: %s, want %s\n%s", fs.SourceID, fs.Verdict, want, out)
		}
	}
	if !strings.Contains(out, "extra in the lake: ") || !strings.Contains(out, id) {
		t.Fatalf("fanin verify does not name the foreign row's key %s:\n%s", id, out)
	}
}

// checkNoDuplicates: every (source, commit LSN, position) is in the
// changelog once.
func checkNoDuplicates(t *testing.T, l *lake.Lake) {
	t.Helper()
	for _, name := range []string{"public__items", "public__counters"} {
		changes, _, err := l.ReadChanges(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if len(changes) == 0 {
			t.Fatalf("%s: no rows", name)
		}
		seen := map[string]bool{}
		for _, c := range changes {
			k := fmt.Sprintf("%s/%d/%d", c.SourceID, c.CommitLSN, c.Seq)
			if seen[k] {
				t.Fatalf("%s: duplicate row %s (op %s)", name, k, c.Op)
			}
			seen[k] = true
		}
	}
}

// checkNoOverclaim: for every epoch and included source, every row of the
// final changelog below the epoch's through LSN was already in the table
// snapshot current when the epoch closed.
func checkNoOverclaim(t *testing.T, l *lake.Lake) {
	t.Helper()
	eps, err := l.Epochs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"public__items", "public__counters"} {
		final, _, err := l.ReadChanges(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			then, _, err := l.ReadChangesAsOf(context.Background(), name, ep.ClosedAt.UnixMilli())
			if err != nil {
				t.Fatal(err)
			}
			had := map[string]bool{}
			for _, c := range then {
				had[fmt.Sprintf("%s/%d/%d", c.SourceID, c.CommitLSN, c.Seq)] = true
			}
			for _, c := range final {
				se, ok := ep.Source(c.SourceID)
				if !ok || c.CommitLSN >= se.ThroughLSN {
					continue
				}
				if !had[fmt.Sprintf("%s/%d/%d", c.SourceID, c.CommitLSN, c.Seq)] {
					t.Fatalf("epoch %d claims %s through %X but %s's row at commit %X seq %d was not committed when it closed",
						ep.ID, c.SourceID, se.ThroughLSN, name, c.CommitLSN, c.Seq)
				}
			}
		}
	}
}

// checkAgainstSource reads the changelog back through iceberg-go's scan
// and compares the counters' net state with each source, independently
// of fanin verify.
func checkAgainstSource(t *testing.T, l *lake.Lake, e *fleetEnv) {
	t.Helper()
	changes, _, err := l.ReadChanges(context.Background(), "public__counters")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range e.sources {
		id := e.ids[i]
		want := map[string]string{}
		conn := c.Connect(context.Background())
		rows, err := conn.Query(context.Background(), "SELECT id::text, n::text FROM counters")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k, n string
			if err := rows.Scan(&k, &n); err != nil {
				t.Fatal(err)
			}
			want[k] = n
		}
		rows.Close()
		conn.Close(context.Background())
		got := map[string]string{}
		var mine []lake.Change
		for _, ch := range changes {
			if ch.SourceID == id {
				mine = append(mine, ch)
			}
		}
		for _, r := range lake.NetState(mine, []string{"id"}, []string{"id", "n"}) {
			got[*r["id"]] = *r["n"]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s counters: lake %v, source %v", id, got, want)
		}
	}
}
