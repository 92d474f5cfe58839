package flow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// extSnapshotFlow is an extension flow over oltp1, oltp2 and big (a table
// whose doc column is stored out of line) from a source with the extension
// preloaded, to a target holding the same tables empty.
type extSnapshotFlow struct {
	src, target *pgtest.Cluster
	as          osUser
	bin, cfg    string
	sock        string
	work        *oltpWorkload
}

const extSnapshotRows = 25000 // three chunks of oltp1 and oltp2 at the default 10,000 rows

func newExtSnapshotFlow(t *testing.T) *extSnapshotFlow {
	t.Helper()
	src, sock := extSource(t, map[string]string{"trellara.tables": "public.oltp1, public.oltp2, public.big"})
	schema := []string{`CREATE TABLE big (id int PRIMARY KEY, n int NOT NULL, doc text)`, `ALTER TABLE big ALTER doc SET STORAGE EXTERNAL`}
	for i := 1; i <= 2; i++ {
		schema = append(schema, fmt.Sprintf(`CREATE TABLE oltp%d (id int PRIMARY KEY, k int NOT NULL, c text NOT NULL, pad text)`, i),
			fmt.Sprintf(`CREATE INDEX ON oltp%d (k)`, i))
	}
	src.Exec(t, schema...)
	src.Exec(t, `INSERT INTO oltp1 SELECT g, g, md5(g::text), 'p' FROM generate_series(1, 25000) g`,
		`INSERT INTO oltp2 SELECT g, g, md5(g::text), 'p' FROM generate_series(1, 25000) g`,
		`INSERT INTO big SELECT g, 0, repeat(md5(g::text), 200) FROM generate_series(1, 300) g`)
	target := pgtest.Start(t, pgtest.Options{NoFsync: true})
	target.Exec(t, schema...)
	as := serverUser(t, src)
	dir := as.tempDir(t)
	cfg := writeExtFlow(t, as, dir, "extsnap", "public.oltp1, public.oltp2, public.big", src, target,
		fmt.Sprintf("  capture: extension\n  socket: %s\n", sock))
	return &extSnapshotFlow{src: src, target: target, as: as, bin: as.copyBin(t, trellaraBin(t)), cfg: cfg, sock: sock,
		work: &oltpWorkload{tables: 2, rows: extSnapshotRows}}
}

// write runs the OLTP mix on oltp1 and oltp2 (a DELETE then INSERT of one
// key, updates of an indexed and a plain column) and, beside it, updates
// of big's n that leave its out-of-line doc unchanged, and key changes of
// big, until ctx ends.
func (f *extSnapshotFlow) write(ctx context.Context, t *testing.T, wg *sync.WaitGroup) {
	f.work.run(ctx, wg, f.src, 2, 31)
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn := f.src.Connect(context.Background())
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewSource(7))
		for ctx.Err() == nil {
			id := 1 + rng.Intn(300)
			var err error
			if rng.Intn(10) == 0 {
				// A key change of a row with an unchanged TOAST value.
				_, err = conn.Exec(context.Background(), `UPDATE big SET id = id + 1000 WHERE id = $1`, id)
			} else {
				_, err = conn.Exec(context.Background(), `UPDATE big SET n = n + 1 WHERE id = $1 OR id = $1 + 1000`, id)
			}
			if err != nil {
				f.work.err.set(err)
				return
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
}

func (f *extSnapshotFlow) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := f.as.command(f.bin, append([]string{"run", "--config", f.cfg}, args...)...)
	stop := time.AfterFunc(4*time.Minute, func() { _ = cmd.Process.Kill() })
	out, err := cmd.CombinedOutput()
	stop.Stop()
	return string(out), err
}

// tablesEqual compares the md5 of every table, ordered by key, on both
// sides: a check that shares no code with verify.
func (f *extSnapshotFlow) tablesEqual(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	sum := func(c *pgtest.Cluster, table string) (string, int64) {
		conn := c.Connect(ctx)
		defer conn.Close(ctx)
		var s string
		var n int64
		if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(md5(string_agg(x::text, ',' ORDER BY id)), ''), count(*) FROM %s x`, table)).Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		return s, n
	}
	for _, table := range []string{"oltp1", "oltp2", "big"} {
		s, sn := sum(f.src, table)
		d, dn := sum(f.target, table)
		if s != d || sn != dn {
			t.Fatalf("%s: source md5 %s (%d rows), target md5 %s (%d rows)\n%s", table, s, sn, d, dn, rowDiff(t, f.src, f.target, table))
		}
	}
}

// The extension path takes its own initial snapshot: on a fresh flow,
// `run --local --verify` copies every table in watermarked chunks through
// the extension's stream while an OLTP workload writes throughout, and ends
// CONVERGED; with the writes stopped every table is equal by an
// independent md5. No pgoutput slot or publication is ever created.
//
// Mutation: the high watermark's merge ignoring the keys the stream
// deleted (mergeSQL's keys clause) resurrects big's rows whose key the
// workload changed: red (the table's verify after its handoff says
// DIVERGED).
func TestExtensionInitialSnapshotUnderWrites(t *testing.T) {
	pgtest.Require(t)
	f := newExtSnapshotFlow(t)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	f.write(ctx, t, &wg)
	time.Sleep(300 * time.Millisecond) // the workload is under way before the flow starts
	out, err := f.run(t, "--local", "--verify")
	if err != nil || !strings.Contains(out, "CONVERGED") {
		stop()
		wg.Wait()
		t.Fatalf("first run --local --verify of a fresh extension flow, with writes throughout: %v\n%s", err, out)
	}
	// Writes go on after the snapshot: the next run carries them.
	time.Sleep(500 * time.Millisecond)
	stop()
	wg.Wait()
	if err := f.work.err.get(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	if out, err := f.run(t, "--local", "--verify"); err != nil || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("second run --local --verify: %v\n%s", err, out)
	}
	f.tablesEqual(t)
	conn := f.src.Connect(context.Background())
	defer conn.Close(context.Background())
	var slots, pubs int
	if err := conn.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_replication_slots WHERE plugin = 'pgoutput'), (SELECT count(*) FROM pg_publication)`).Scan(&slots, &pubs); err != nil {
		t.Fatal(err)
	}
	if slots+pubs != 0 {
		t.Fatalf("the extension path's snapshot left %d pgoutput slots and %d publications on the source", slots, pubs)
	}
	// The recovery a gap names, as printed: a cleanup (the decoder's slot
	// stays) and a new initial snapshot over the filled tables.
	src := f.src.Connect(context.Background())
	defer src.Close(context.Background())
	if out, err := f.run(t, "--cleanup"); err != nil || !strings.Contains(out, "the extension decoder's slot stays") {
		t.Fatalf("run --cleanup of an extension flow: %v\n%s", err, out)
	}
	f.src.Exec(t, `UPDATE oltp1 SET c = 'after cleanup' WHERE id <= 10`, `DELETE FROM oltp2 WHERE id <= 10`)
	if out, err := f.run(t, "--local", "--verify"); err != nil || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run --local --verify after run --cleanup (a new initial snapshot): %v\n%s", err, out)
	}
	f.tablesEqual(t)
	var ext int
	if err := src.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ext'`).Scan(&ext); err != nil || ext != 1 {
		t.Fatalf("the decoder's slot ext after the cleanup: %d (%v), want 1", ext, err)
	}
	t.Logf("%d OLTP transactions during and after the snapshot", f.work.txns.get())
}

// A table without a primary key cannot be copied in key ranges: the first
// run refuses before recording anything, naming the table and both ways
// out, and the flow then starts once the table has a key.
func TestExtensionInitialSnapshotRefusesKeylessTable(t *testing.T) {
	pgtest.Require(t)
	f := newExtSnapshotFlow(t)
	f.src.Exec(t, `ALTER TABLE big DROP CONSTRAINT big_pkey`)
	out, err := f.run(t, "--local", "--verify")
	if err == nil || !strings.Contains(out, "public.big has no primary key on the source") ||
		!strings.Contains(out, "take the initial snapshot on the pgoutput path once") {
		t.Fatalf("run --local of an extension flow with a keyless table (%v): want the refusal naming public.big\n%s", err, out)
	}
	tc := f.target.Connect(context.Background())
	var reseeds int
	if err := tc.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'reseed\_%'`).Scan(&reseeds); err != nil {
		t.Fatal(err)
	}
	tc.Close(context.Background())
	if reseeds != 0 {
		t.Fatalf("the refusal left %d reseed tables on the target", reseeds)
	}
	f.src.Exec(t, `ALTER TABLE big ADD PRIMARY KEY (id)`)
	if out, err := f.run(t, "--local", "--verify"); err != nil || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run --local --verify once big has a key: %v\n%s", err, out)
	}
	f.tablesEqual(t)
}

// A DROP COLUMN on the extension path stops capture with a plan whose
// first recovery is the reseed of the table; `reseed --table` as printed,
// on the flow at rest (it runs the extension's capture and the applier
// itself), takes the change over: CONVERGED, and every table equal. With
// schema.on_blocked: hold_table the same change holds only its table while
// the others keep flowing, and the reseed releases it.
//
// Mutation: the reseed refusing a blocked change on the extension path (as
// it did before) turns both halves red.
func TestExtensionReseedTakesOverDropColumn(t *testing.T) {
	pgtest.Require(t)
	f := newExtSnapshotFlow(t)
	if out, err := f.run(t, "--local", "--verify"); err != nil || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	f.src.Exec(t, `ALTER TABLE oltp1 DROP COLUMN pad`, `UPDATE oltp1 SET c = 'after drop' WHERE id <= 5`, `UPDATE oltp2 SET c = 'beside' WHERE id <= 5`)
	out, err := f.run(t, "--local")
	want := "trellara reseed --config " + f.cfg + " --table public.oltp1"
	if err == nil || !strings.Contains(out, "drop_column") || !strings.Contains(out, want) {
		t.Fatalf("run --local over a DROP COLUMN on the extension path (%v): want a stop naming drop_column and %q\n%s", err, want, out)
	}
	reseed := func(table string) {
		t.Helper()
		cmd := f.as.command(f.bin, "reseed", "--config", f.cfg, "--table", table, "--chunk-rows", "4000")
		rout, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(rout), "CONVERGED "+table) {
			t.Fatalf("reseed --table %s on the extension path: %v\n%s", table, err, rout)
		}
	}
	reseed("public.oltp1")
	if out, err := f.run(t, "--local", "--verify"); err != nil || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run --local --verify after the reseed: %v\n%s", err, out)
	}
	f.tablesEqual(t)

	// hold_table: the change on big holds big alone.
	body, err := os.ReadFile(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.cfg, append(body, []byte("schema:\n  on_blocked: hold_table\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	f.src.Exec(t, `ALTER TABLE big DROP COLUMN n`, `UPDATE big SET doc = 'held' WHERE id = 1`, `UPDATE oltp2 SET c = 'flows' WHERE id <= 20`)
	if out, err := f.run(t, "--local"); err != nil {
		t.Fatalf("run --local with big held (hold_table): %v\n%s", err, out)
	}
	tc := f.target.Connect(context.Background())
	defer tc.Close(context.Background())
	var flowed int
	if err := tc.QueryRow(context.Background(), `SELECT count(*) FROM oltp2 WHERE c = 'flows'`).Scan(&flowed); err != nil || flowed != 20 {
		t.Fatalf("oltp2 while big is held: %d rows updated on the target (%v), want 20", flowed, err)
	}
	reseed("public.big")
	if out, err := f.run(t, "--local", "--verify"); err != nil || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run --local --verify after the reseed of the held table: %v\n%s", err, out)
	}
	f.tablesEqual(t)
}

// The README's evaluation path, extension column, typed from the top on a
// server with the extension preloaded (the settings preflight names, in
// place): init --capture extension --evaluate, check, preflight, run
// --local --verify with an OLTP mix writing throughout, then, at rest,
// verify and status --view report, each with the page's answer.
func TestEvaluationPathOnTheExtension(t *testing.T) {
	pgtest.Require(t)
	f := newExtSnapshotFlow(t)
	// A target with no tables: --evaluate creates them.
	f.target = pgtest.Start(t, pgtest.Options{NoFsync: true})
	dir := filepath.Dir(f.cfg)
	if err := os.Remove(f.cfg); err != nil {
		t.Fatal(err)
	}
	typed := func(want string, args ...string) string {
		t.Helper()
		cmd := f.as.command(f.bin, args...)
		cmd.Dir = dir
		stop := time.AfterFunc(4*time.Minute, func() { _ = cmd.Process.Kill() })
		out, err := cmd.CombinedOutput()
		stop.Stop()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("trellara %s: %v, want %q\n%s", strings.Join(args, " "), err, want, out)
		}
		return string(out)
	}
	typed("wrote trellara.yml", "init", "--capture", "extension", "--source-database-url", f.src.URL("postgres"),
		"--target-database-url", f.target.URL("postgres"), "--table", "public.oltp1", "--table", "public.oltp2", "--table", "public.big", "--evaluate")
	if b, err := os.ReadFile(filepath.Join(dir, "trellara.yml")); err != nil || !strings.Contains(string(b), "capture: extension") {
		t.Fatalf("init --capture extension --evaluate wrote (%v):\n%s", err, b)
	}
	typed("", "check", "--config", "trellara.yml", "--format", "text")
	typed("preflight passed", "preflight", "--config", "trellara.yml")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	f.write(ctx, t, &wg)
	typed("CONVERGED", "run", "--config", "trellara.yml", "--local", "--verify", "--format", "text")
	stop()
	wg.Wait()
	if err := f.work.err.get(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	// The writes ended after the run: the next run carries them, and the
	// flow at rest then answers as the page says.
	typed("CONVERGED", "run", "--config", "trellara.yml", "--local", "--verify", "--format", "text")
	typed("CONVERGED", "verify", "--config", "trellara.yml")
	typed("", "status", "--config", "trellara.yml", "--view", "report", "--format", "text")
	// At rest, a committed change the target lacks is counted: the
	// decoder's slot is peeked through the extension's own plugin, unmoved.
	f.src.Exec(t, `UPDATE oltp1 SET c = 'pending' WHERE id = 1`)
	cmd := f.as.command(f.bin, "verify", "--config", "trellara.yml")
	cmd.Dir = dir
	behind, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(string(behind), "BEHIND") {
		t.Fatalf("verify at rest with a pending change on the extension path: %v, want exit 3 BEHIND\n%s", err, behind)
	}
	typed("CONVERGED", "run", "--config", "trellara.yml", "--local", "--verify")
	// Claim 2 on this path: no half-applied transaction is observable
	// (the probe's tables pass the decoder's table filter by name).
	typed("0 violations", "semantics", "--config", "trellara.yml", "--duration", "4s")
	typed("CONVERGED", "run", "--config", "trellara.yml", "--local", "--verify")
	// status names the decoder, its slot and the socket with its owner.
	// (The decoder worker restarts within 2 s after a command at rest
	// borrowed its slot.)
	// Its queue is read through trellara_queue() (extension 0.3), which
	// needs CREATE EXTENSION in the flow's database: until then status says
	// so, with the fix.
	out := typed("trellara decoder worker", "status", "--config", "trellara.yml")
	if !strings.Contains(out, "queue         not readable: ") || !strings.Contains(out, "fix: CREATE EXTENSION trellara") {
		t.Fatalf("status before CREATE EXTENSION: want the queue not readable with its fix:\n%s", out)
	}
	f.src.Exec(t, `CREATE EXTENSION trellara`)
	queueLine := regexp.MustCompile(`queue         \d+ of 16 slots filled \(decoder start \d+: \d+ published, \d+ taken\), sidecar durable through [0-9A-F]+/[0-9A-F]+`)
	out = typed("trellara decoder worker", "status", "--config", "trellara.yml")
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out, "trellara decoder worker pid") || !queueLine.MatchString(out); time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("status names no running decoder worker:\n%s", out)
		}
		out = typed("trellara decoder worker", "status", "--config", "trellara.yml")
	}
	if !strings.Contains(out, "socket        "+strings.TrimSpace(f.sock)+" · present, owner uid") {
		t.Fatalf("status names no socket %s with its owner:\n%s", f.sock, out)
	}
	cmd = f.as.command(f.bin, "status", "--config", "trellara.yml", "--format", "json")
	cmd.Dir = dir
	js, _ := cmd.Output()
	checkJSONAgainst(t, "status.schema.json", string(js), "verify.schema.json")
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	if e, _ := m["extension"].(map[string]any); e == nil || e["slot"] != "ext" || e["decoder_pid"].(float64) <= 0 {
		t.Fatalf("status --format json: want extension with slot ext and a decoder pid:\n%s", js)
	} else if q, _ := e["queue"].(map[string]any); q == nil || q["slots"] != float64(16) || q["socket_pid"].(float64) <= 0 {
		t.Fatalf("status --format json: want the decoder's queue (16 slots, a socket worker pid):\n%s", js)
	}
	f.tablesEqual(t)
}
