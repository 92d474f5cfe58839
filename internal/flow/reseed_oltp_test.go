package flow_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
)

// caughtUp writes a mark at the source and waits until the target has it.
func caughtUp(t *testing.T, src, dst *pgtest.Cluster) {
	t.Helper()
	ctx := context.Background()
	s, d := src.Connect(ctx), dst.Connect(ctx)
	defer s.Close(ctx)
	defer d.Close(ctx)
	var id int
	if err := s.QueryRow(ctx, `INSERT INTO marks SELECT coalesce(max(id), 0) + 1 FROM marks RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var n int
		_ = d.QueryRow(ctx, `SELECT count(*) FROM marks WHERE id = $1`, id).Scan(&n)
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mark %d did not reach the target in 2 minutes", id)
		}
	}
}

// rowsEqual compares every row of table on both sides (after caughtUp),
// independently of the reseed's own verify.
func rowsEqual(t *testing.T, src, dst *pgtest.Cluster, table, what string) {
	t.Helper()
	caughtUp(t, src, dst)
	if diff := rowDiff(t, src, dst, table); diff != "" {
		t.Fatalf("%s: %s differs row by row:\n%s", what, table, diff)
	}
}

// rowDiff lists up to 20 rows of table (by id) that differ between src and
// dst, each shown by its first 100 characters and the md5 of the whole row.
func rowDiff(t *testing.T, src, dst *pgtest.Cluster, table string) string {
	t.Helper()
	read := func(c *pgtest.Cluster) map[string]string {
		conn := c.Connect(context.Background())
		defer conn.Close(context.Background())
		rows, err := conn.Query(context.Background(), fmt.Sprintf(`SELECT id::text, left(t::text, 100) || ' md5 ' || md5(t::text) FROM %s t`, table))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			m[k] = v
		}
		return m
	}
	s, d := read(src), read(dst)
	var out []string
	for k, v := range s {
		if d[k] != v && len(out) < 20 {
			out = append(out, fmt.Sprintf("id %s: source %s, target %q", k, v, d[k]))
		}
	}
	for k, v := range d {
		if _, ok := s[k]; !ok && len(out) < 20 {
			out = append(out, fmt.Sprintf("id %s: only on the target: %s", k, v))
		}
	}
	return strings.Join(out, "\n")
}

// oltpWorkload is the workload of issue 29's OLTP report: threads running
// transactions of point SELECTs, an UPDATE of an indexed column, an UPDATE
// of a non-indexed column, and a DELETE then INSERT of the same key, on
// tables oltp1..oltpN. pause stops it between transactions.
type oltpWorkload struct {
	tables, rows int
	gate         sync.RWMutex
	txns         atomicCounter
	err          atomicErr
}

type atomicCounter struct {
	mu sync.Mutex
	n  int64
}

func (c *atomicCounter) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *atomicCounter) get() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type atomicErr struct {
	mu  sync.Mutex
	err error
}

func (e *atomicErr) set(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.mu.Unlock()
}
func (e *atomicErr) get() error { e.mu.Lock(); defer e.mu.Unlock(); return e.err }

func (o *oltpWorkload) run(ctx context.Context, wg *sync.WaitGroup, src *pgtest.Cluster, threads int, seed int64) {
	for th := 0; th < threads; th++ {
		wg.Add(1)
		go func(th int) {
			defer wg.Done()
			conn := src.Connect(context.Background())
			defer conn.Close(context.Background())
			rng := rand.New(rand.NewSource(seed + int64(th)))
			for ctx.Err() == nil {
				o.gate.RLock()
				err := o.txn(conn, rng)
				o.gate.RUnlock()
				if err != nil {
					o.err.set(err)
					return
				}
				o.txns.add()
				time.Sleep(4 * time.Millisecond)
			}
		}(th)
	}
}

func (o *oltpWorkload) txn(conn *pgx.Conn, rng *rand.Rand) error {
	ctx := context.Background()
	tbl := fmt.Sprintf("oltp%d", 1+rng.Intn(o.tables))
	id := func() int { return 1 + rng.Intn(o.rows) }
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for i := 0; i < 2; i++ {
		var c string
		if err := tx.QueryRow(ctx, `SELECT c FROM `+tbl+` WHERE id = $1`, id()).Scan(&c); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE `+tbl+` SET k = k + 1 WHERE id = $1`, id()); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE `+tbl+` SET c = md5(random()::text) WHERE id = $1`, id()); err != nil {
		return err
	}
	d := id()
	if _, err := tx.Exec(ctx, `DELETE FROM `+tbl+` WHERE id = $1`, d); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+tbl+` VALUES ($1, $2, md5(random()::text), 'p') ON CONFLICT (id) DO NOTHING`, d, rng.Intn(o.rows)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// reseedRuns is the number of consecutive reseeds of the OLTP test: 3,
// or 20 with TRELLARA_LONG=1 (or TRELLARA_RESEED_RUNS=n).
func reseedRuns(t *testing.T) int {
	if s := os.Getenv("TRELLARA_RESEED_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("TRELLARA_RESEED_RUNS=%q: want a positive count", s)
		}
		return n
	}
	if os.Getenv("TRELLARA_LONG") == "1" {
		return 20
	}
	return 3
}

// runPausing runs a command like run and calls pause once, when the
// command prints a line for which at reports true, or when it exits.
func (f *schemaFlow) runPausing(at func(string) bool, pause func(), args ...string) (string, int) {
	f.t.Helper()
	cmd := exec.Command(f.bin, append(args[:1:1], append([]string{"--config", f.cfg}, args[1:]...)...)...)
	cmd.Dir = f.dir
	r, wr, err := os.Pipe()
	if err != nil {
		f.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = wr, wr
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	wr.Close()
	var out strings.Builder
	paused := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if !paused && at(sc.Text()) {
			pause()
			paused = true
		}
	}
	r.Close()
	err = cmd.Wait()
	if !paused {
		pause()
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatal(err)
	}
	return out.String(), code
}

// startServiceProc runs the flow's service and returns its process, for
// a SIGKILL.
func (f *schemaFlow) startServiceProc() *exec.Cmd {
	f.t.Helper()
	svc := exec.Command(f.bin, "run", "--config", f.cfg)
	svc.Dir = f.dir
	log, err := os.OpenFile(filepath.Join(f.dir, "service.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		f.t.Fatal(err)
	}
	svc.Stdout, svc.Stderr = log, log
	listening := func() int { return strings.Count(f.serviceLog(), `"msg":"listening"`) }
	before := listening()
	if err := svc.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = svc.Process.Kill(); _ = svc.Wait(); log.Close() })
	// The service listens once it holds the flow's lock: from then on a
	// command runs beside it, never at rest in its place (a reseed started
	// earlier would run the pipeline itself, and the service would be
	// refused the lock).
	for deadline := time.Now().Add(time.Minute); listening() <= before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			f.t.Fatalf("the service did not start listening:\n%s", f.serviceLog())
		}
	}
	return svc
}

// Consecutive reseeds of one table under an OLTP workload on four tables,
// beside a service that was SIGKILLed and restarted twice before: each
// copies, merges, hands off and verifies under the workload, ends CONVERGED,
// and after each, with the target caught up,
// every row of the table is compared source against target. Mutation: drop the merge's "touched since begin"
// exclusion (the chunk overwrites the shadow's row, deleted keys are not
// kept out): rows differ (red).
func TestReseedUnderOLTPWorkloadConverges(t *testing.T) {
	pgtest.Require(t)
	const tables, rows = 4, 20000
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	names := []string{"public.marks"}
	src.Exec(t, `CREATE TABLE marks (id int PRIMARY KEY)`)
	for i := 1; i <= tables; i++ {
		src.Exec(t, fmt.Sprintf(`CREATE TABLE oltp%d (id int PRIMARY KEY, k int NOT NULL, c text NOT NULL, pad text)`, i),
			fmt.Sprintf(`CREATE INDEX ON oltp%d (k)`, i),
			fmt.Sprintf(`INSERT INTO oltp%d SELECT g, g, md5(g::text), 'p' FROM generate_series(1, %d) g`, i, rows))
		names = append(names, fmt.Sprintf("public.oltp%d", i))
	}
	f := newSchemaFlow(t, src, dst, names...)
	f.mustConverge("first run")
	seed := time.Now().UnixNano()
	t.Logf("workload seed %d", seed)
	w := &oltpWorkload{tables: tables, rows: rows}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	w.run(ctx, &wg, src, 4, seed)
	defer func() { cancel(); wg.Wait() }()
	for i := 0; i < 2; i++ {
		svc := f.startServiceProc()
		time.Sleep(2 * time.Second) // let it apply some of the workload
		_ = svc.Process.Signal(syscall.SIGKILL)
		_ = svc.Wait()
	}
	f.startServiceProc()
	runs := reseedRuns(t)
	started, txns0 := time.Now(), w.txns.get()
	var verdictsWrong, rowsWrong int
	for i := 1; i <= runs; i++ {
		// The workload runs through the copy, every merge, the handoff and
		// the reseed's verify, and pauses once the reseed has ended, for the
		// row-by-row comparison. (On 0335858 a verify under this workload
		// was not at a consistent watermark — the target ran ahead of the
		// source snapshot by the applier's batch — and said DIVERGED in 3
		// of 3 runs where every row was equal; it now holds the applier at
		// its source snapshot's LSN: apply.HoldToken.)
		out, code := f.runPausing(func(string) bool { return false }, w.gate.Lock,
			"reseed", "--table", "public.oltp1", "--chunk-rows", "2500", "--wait", "2m")
		caughtUp(t, src, dst)
		diff := rowDiff(t, src, dst, "oltp1")
		w.gate.Unlock()
		converged := code == 0 && strings.Contains(out, "CONVERGED public.oltp1")
		if !converged {
			verdictsWrong++
		}
		if diff != "" {
			rowsWrong++
		}
		if !converged || diff != "" {
			t.Errorf("reseed %d of %d: exit %d\n%s\nrows that differ with the workload paused and the target caught up (none: the verdict alone was wrong):\n%s",
				i, runs, code, out, diff)
		}
		if err := w.err.get(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d reseeds: %d not CONVERGED, %d with rows that differ after catching up", runs, verdictsWrong, rowsWrong)
	elapsed := time.Since(started)
	cancel() // the workload ends
	wg.Wait()
	caughtUp(t, src, dst)
	for i := 1; i <= tables; i++ {
		if diff := rowDiff(t, src, dst, fmt.Sprintf("oltp%d", i)); diff != "" {
			t.Errorf("oltp%d differs after the reseeds:\n%s", i, diff)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("%d reseeds CONVERGED and equal row by row; workload %.0f txn/s over %s", runs, float64(w.txns.get()-txns0)/elapsed.Seconds(), elapsed.Round(time.Second))
}
