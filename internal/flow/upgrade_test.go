package flow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
)

// previousRelease is the version the upgrade test starts from. The project
// has no tags; f637245 is the last commit landed as a release before the
// current cycle's state migrations (the acks file replacing idle-ack,
// DURABLE written on open, pins.json with column shapes, verify result
// format 2, the target's checkpoint and snapshot_progress tables).
const previousRelease = "f637245"

// buildPreviousRelease extracts commit previousRelease from git history
// into a temporary directory (git archive, so the worktree is untouched)
// and builds its CLI. It skips only when the history is not there, as in
// a shallow clone ("git fetch --unshallow" restores it).
func buildPreviousRelease(t *testing.T, previousRelease string) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("upgrade test needs the git history to build %s: not in a git checkout (%v)", previousRelease, err)
	}
	root := strings.TrimSpace(string(top))
	if err := exec.Command("git", "-C", root, "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
		t.Skipf("upgrade test needs commit %s in the git history (a shallow clone? run: git fetch --unshallow): %v", previousRelease, err)
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", previousRelease)
	extract := exec.Command("tar", "-x", "-C", src)
	var err1, err2 bytes.Buffer
	archive.Stderr, extract.Stderr = &err1, &err2
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	extract.Stdin = pipe
	if err := extract.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", previousRelease, err, err1.String())
	}
	if err := extract.Wait(); err != nil {
		t.Fatalf("extract %s: %v\n%s", previousRelease, err, err2.String())
	}
	out := filepath.Join(t.TempDir(), "trellara-"+previousRelease)
	build := exec.Command("go", "build", "-o", out, "./cmd/trellara")
	build.Dir = src
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build trellara %s: %v\n%s", previousRelease, err, b)
	}
	return out
}

func listState(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, rel)
		}
		return nil
	})
	sort.Strings(names)
	return names
}

// TestUpgradeFromPreviousRelease runs a flow with the previous release's
// binary (bounded runs and the service), SIGKILLs a bounded run
// mid-stream while the workload writes, continues with the current binary
// on the same config, log, slot and target (CONVERGED, every transaction
// applied exactly once, each state migration honoured), then runs the
// previous binary on the state the current one wrote: it refuses before
// touching anything when the slot is past its log, and otherwise
// converges; and upgrades again. docs/EVIDENCE.md records the results.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	pgtest.Require(t)
	oldBin := buildPreviousRelease(t, previousRelease)
	newBin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{})
	dst := pgtest.Start(t, pgtest.Options{})
	// noise is not captured: transactions on it advance the source's WAL
	// past the last captured unit, so the relay acknowledges a position no
	// unit ends at (the previous release's idle-ack file, the acks file now).
	src.Exec(t, crashSchema, `CREATE TABLE noise (id bigserial PRIMARY KEY, v text)`)
	noise := func() { src.Exec(t, `INSERT INTO noise (v) SELECT 'x' FROM generate_series(1, 100)`) }
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "trellara.yml")
	state := filepath.Join(dir, "trellara-data", "upgrade")
	run := func(bin string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	initWith(t, oldBin, previousRelease, dir, cfgPath, src, dst)
	if out, err := run(oldBin, "run", "--config", cfgPath, "--local"); err != nil {
		t.Fatalf("initial run (%s): %v\n%s", previousRelease, err, out)
	}

	ctx := context.Background()
	slotConn := src.Connect(ctx)
	defer slotConn.Close(ctx)
	// serveUntilAck runs bin's long-running service until it has recorded
	// an acknowledgement past its last unit in the state file name (noise
	// moves the source's WAL past it), then SIGKILLs it.
	serveUntilAck := func(bin, name string) string {
		t.Helper()
		cmd := exec.Command(bin, "run", "--config", cfgPath)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }()
		before, _ := os.ReadFile(filepath.Join(state, name))
		for i := 0; ; i++ {
			if i%20 == 0 {
				noise()
			}
			if b, err := os.ReadFile(filepath.Join(state, name)); err == nil && len(bytes.TrimSpace(b)) > 0 && !bytes.Equal(b, before) {
				// Wait until the acknowledgement reached the slot too.
				lsn := string(bytes.TrimSpace(b))
				if v, err := strconv.ParseUint(lsn, 10, 64); err == nil {
					lsn = fmt.Sprintf("%X/%X", v>>32, uint32(v))
				}
				var reached bool
				if err := slotConn.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_type = 'logical'`, lsn).Scan(&reached); err == nil && reached {
					return lsn
				}
			}
			if i > 600 {
				t.Fatalf("the service (%s) recorded no acknowledgement in %s:\n%s", bin, name, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	committed := 0
	workload := func(from, to int, stop <-chan struct{}) {
		conn := src.Connect(ctx)
		defer conn.Close(ctx)
		rng := rand.New(rand.NewPCG(uint64(from), 9))
		for i := from; i <= to; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := workloadTxn(ctx, conn, i, rng); err != nil {
				t.Errorf("workload txn %d: %v", i, err)
				return
			}
			committed = i
		}
	}
	workload(1, 200, nil)
	// The long-running service, idle after the workload, acknowledges the
	// noise past its last unit: the previous release records that in
	// idle-ack (a decimal LSN).
	oldIdleAck := serveUntilAck(oldBin, "idle-ack")
	if out, err := run(oldBin, "run", "--config", cfgPath, "--local"); err != nil {
		t.Fatalf("second run (%s): %v\n%s", previousRelease, err, out)
	}

	// The old binary runs while the workload writes and is SIGKILLed once
	// it has applied some of the new transactions.
	tgt := dst.Connect(ctx)
	defer tgt.Close(ctx)
	killUnderWrites(t, oldBin, previousRelease, dir, cfgPath, tgt, 220, func(stop <-chan struct{}) { workload(201, 1200, stop) })
	t.Logf("%s SIGKILLed mid-stream; %d transactions committed; state: %v", previousRelease, committed, listState(t, state))

	// The current binary continues on the same config, log, slot and target.
	runVerify := func(bin string) (string, error) {
		var out string
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if out, err = run(bin, "run", "--config", cfgPath, "--local", "--verify", "--format", "text"); err == nil ||
				!strings.Contains(out, "in use by another process") {
				break
			}
			time.Sleep(time.Second) // the killed walsender has not exited yet
		}
		return out, err
	}
	converge := func(bin, who string) {
		t.Helper()
		if out, err := runVerify(bin); err != nil || !strings.Contains(out, "CONVERGED") {
			t.Fatalf("run --local --verify (%s): %v\n%s", who, err, out)
		}
	}
	converge(newBin, "current")
	exactlyOnce(t, src, dst, committed)
	t.Logf("current binary CONVERGED; state: %v", listState(t, state))

	// Each migration of this cycle was honoured.
	// idle-ack → acks: moved, at least as far, the old file gone.
	acks := readState(t, state, "acks")
	if !lsnAtLeast(t, slotConn, acks, oldIdleAck) {
		t.Fatalf("acks holds %s, below the previous release's idle-ack %s", acks, oldIdleAck)
	}
	if _, err := os.Stat(filepath.Join(state, "idle-ack")); err == nil {
		t.Fatal("idle-ack still there after the current binary migrated it to acks")
	}
	// DURABLE is written on open.
	if _, err := os.Stat(filepath.Join(state, "log", "DURABLE")); err != nil {
		t.Fatalf("the current binary wrote no DURABLE on open: %v", err)
	}
	// pins.json gains the column shapes of the pinned relations.
	var pins struct {
		Pins      map[string]string          `json:"pins"`
		Relations map[string]json.RawMessage `json:"relations"`
	}
	if err := json.Unmarshal([]byte(readState(t, state, "pins.json")), &pins); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"public.orders", "public.line_items", "public.counters"} {
		if pins.Pins[rel] == "" || len(pins.Relations[rel]) == 0 {
			t.Fatalf("pins.json after the upgrade: %s has pin %q and shape %s", rel, pins.Pins[rel], pins.Relations[rel])
		}
	}
	// The last verify result is format 2.
	if v := verifyFormat(t, state); v != 2 {
		t.Fatalf("last-verify.json has format_version %d after the current binary's verify, want 2", v)
	}
	// The target's tables are the same version; the checkpoint and the
	// snapshot progress the previous release wrote are the ones in use.
	var version string
	var applied, done int64
	if err := tgt.QueryRow(ctx, `SELECT (SELECT value FROM trellara.meta WHERE key = 'apply_schema_version'),
		(SELECT txns_applied FROM trellara.checkpoints WHERE flow = 'upgrade'),
		(SELECT count(*) FROM trellara.snapshot_progress WHERE flow = 'upgrade' AND done)`).Scan(&version, &applied, &done); err != nil {
		t.Fatal(err)
	}
	if version != "1" || applied < int64(committed) || done != 3 {
		t.Fatalf("target state: apply_schema_version %s, txns_applied %d (%d committed), %d snapshots done", version, applied, committed, done)
	}

	// The reverse: the previous binary on the state the current one wrote.
	// (1) The current service, idle, acknowledged a position no unit in the
	// log ends at and recorded it in acks, which the previous release does
	// not read: it refuses (a gap it cannot tell from a real one), before
	// touching the log, the slot or the target.
	workload(committed+1, committed+100, nil)
	t.Logf("current service acknowledged %s past its last unit", serveUntilAck(newBin, "acks"))
	out, err := runVerify(oldBin)
	if err == nil || !strings.Contains(out, "is confirmed at") || !strings.Contains(out, "the transport holds transactions only through") {
		t.Fatalf("previous release on an acks-only acknowledgement: want the gap refusal, got %v\n%s", err, out)
	}
	t.Logf("downgrade after an idle acknowledgement refused: %s", lastLine(out))
	// (2) After a bounded run of the current binary (its fence is a unit in
	// the log past every acknowledgement), the previous release streams on
	// and converges: segments, cursor, pins with shapes, DURABLE and
	// CURSORS.LOCK, last-verify.json format 2 and the target's tables.
	if out, err := runVerify(newBin); err != nil {
		t.Fatalf("run --local --verify (current, before the downgrade): %v\n%s", err, out)
	}
	workload(committed+1, committed+200, nil)
	if out, err := run(oldBin, "status", "--config", cfgPath); !strings.Contains(out, "last verify   CONVERGED") {
		t.Fatalf("status (%s) on a format-2 last verify: %v\n%s", previousRelease, err, out)
	}
	converge(oldBin, previousRelease+" after the current")
	exactlyOnce(t, src, dst, committed)
	if v := verifyFormat(t, state); v != 1 {
		t.Fatalf("last-verify.json has format_version %d after the previous release's verify, want 1", v)
	}
	// (3) Upgrade again: the previous release's idle-ack, written beside
	// acks, is taken (the slot has it), and format 1 still reads.
	workload(committed+1, committed+100, nil)
	oldIdleAck = serveUntilAck(oldBin, "idle-ack")
	workload(committed+1, committed+100, nil)
	converge(newBin, "current, upgraded again")
	exactlyOnce(t, src, dst, committed)
	if acks := readState(t, state, "acks"); !lsnAtLeast(t, slotConn, acks, oldIdleAck) {
		t.Fatalf("acks holds %s after the second upgrade, below idle-ack %s", acks, oldIdleAck)
	}
}

// initWith runs bin's init (bin is release rev) for the crash schema's
// three tables, flow "upgrade", in evaluation mode, and moves the
// services' listeners to free loopback ports (init writes :9401 and
// :9402, which anything else on the machine may hold).
func initWith(t *testing.T, bin, rev, dir, cfgPath string, src, dst *pgtest.Cluster) {
	t.Helper()
	cmd := exec.Command(bin, "init", "--source-database-url", src.URL("postgres"), "--target-database-url", dst.URL("postgres"),
		"--table", "public.orders", "--table", "public.line_items", "--table", "public.counters", "--flow", "upgrade", "--evaluate",
		"--output", cfgPath)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("init (%s): %v\n%s", rev, err, out)
	}
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"9401", "9402"} {
		// ":9401" (f637245) or "127.0.0.1:9401" (later releases).
		d := regexp.MustCompile(`"?(127\.0\.0\.1)?:` + port + `"?`)
		if !d.Match(b) {
			t.Fatalf("init (%s) wrote no listen address on port %s:\n%s", rev, port, b)
		}
		b = d.ReplaceAll(b, []byte(fmt.Sprintf(`"127.0.0.1:%d"`, freePort(t))))
	}
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// killUnderWrites runs bin's (release rev) run --local while writes runs
// (until its stop closes), SIGKILLs the run once the target's counters
// sum past past, then stops the writes and waits for them.
func killUnderWrites(t *testing.T, bin, rev, dir, cfgPath string, tgt *pgx.Conn, past int64, writes func(stop <-chan struct{})) {
	t.Helper()
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); writes(stop) }()
	defer func() { close(stop); wg.Wait() }()
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--local")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }()
	for i := 0; ; i++ {
		var n int64
		if tgt.QueryRow(ctx, `SELECT sum(n) FROM counters`).Scan(&n) == nil && n > past {
			return
		}
		if i > 3000 {
			t.Fatalf("the %s run applied nothing new:\n%s", rev, stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readState(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func verifyFormat(t *testing.T, dir string) int {
	t.Helper()
	var v struct {
		FormatVersion int `json:"format_version"`
	}
	if err := json.Unmarshal([]byte(readState(t, dir, "last-verify.json")), &v); err != nil {
		t.Fatal(err)
	}
	return v.FormatVersion
}

// lsnAtLeast compares two X/X positions with the server's pg_lsn.
func lsnAtLeast(t *testing.T, conn *pgx.Conn, a, b string) bool {
	t.Helper()
	var ok bool
	if err := conn.QueryRow(context.Background(), `SELECT $1::pg_lsn >= $2::pg_lsn`, a, b).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// exactlyOnce compares row counts and counters of the crash schema and
// checks the counters sum to the committed transactions.
func exactlyOnce(t *testing.T, src, dst *pgtest.Cluster, committed int) {
	t.Helper()
	ctx := context.Background()
	s, d := src.Connect(ctx), dst.Connect(ctx)
	defer s.Close(ctx)
	defer d.Close(ctx)
	for _, q := range []string{`SELECT sum(n) FROM counters`, `SELECT count(*) FROM orders`, `SELECT count(*) FROM line_items`,
		`SELECT count(*) FROM orders WHERE note LIKE '%updated%'`} {
		var a, b int64
		if err := s.QueryRow(ctx, q).Scan(&a); err != nil {
			t.Fatal(err)
		}
		if err := d.QueryRow(ctx, q).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Fatalf("%s: source %d, target %d", q, a, b)
		}
	}
	var sum int64
	if err := d.QueryRow(ctx, `SELECT sum(n) FROM counters`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != int64(committed) {
		t.Fatalf("target counters sum to %d, %d transactions committed", sum, committed)
	}
}

// layeredBase is main before the data path became a library (issue 32:
// the pgcatalog package, Options in every data-path package, the protocol
// constants in envelope, the public stream API). The CLI's behaviour is
// meant to be unchanged across it.
const layeredBase = "0335858"

// TestUpgradeAcrossTheLibraryLayering: a flow started by layeredBase's
// binary (init, an initial run, then a bounded run SIGKILLed mid-stream
// while the workload writes) is continued by the current binary on the
// same config, log, slot and target: run --local --verify CONVERGED, every
// transaction applied exactly once (the counters sum to the committed
// transactions, the tables' counts equal), and the current service then
// streams on from the same state, again exactly once.
//
// Mutation tried: the current applier's redelivery check starting from 0
// instead of the target's checkpoint (apply.tryTxns, last :=
// a.cp.CommitLSN): the units the SIGKILLed run had applied but not yet
// passed in its cursor are applied again, and the first run --local
// --verify after the upgrade is not CONVERGED (red).
func TestUpgradeAcrossTheLibraryLayering(t *testing.T) {
	pgtest.Require(t)
	if testing.Short() {
		t.Skip("builds " + layeredBase + " from git history")
	}
	oldBin := buildPreviousRelease(t, layeredBase)
	newBin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{})
	dst := pgtest.Start(t, pgtest.Options{})
	src.Exec(t, crashSchema)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "trellara.yml")
	run := func(bin string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	initWith(t, oldBin, layeredBase, dir, cfgPath, src, dst)
	if out, err := run(oldBin, "run", "--config", cfgPath, "--local"); err != nil {
		t.Fatalf("initial run (%s): %v\n%s", layeredBase, err, out)
	}
	ctx := context.Background()
	committed := 0
	workload := func(from, to int, stop <-chan struct{}) {
		conn := src.Connect(ctx)
		defer conn.Close(ctx)
		rng := rand.New(rand.NewPCG(uint64(from), 32))
		for i := from; i <= to; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := workloadTxn(ctx, conn, i, rng); err != nil {
				t.Errorf("workload txn %d: %v", i, err)
				return
			}
			committed = i
		}
	}
	workload(1, 150, nil)
	tgt := dst.Connect(ctx)
	defer tgt.Close(ctx)
	killUnderWrites(t, oldBin, layeredBase, dir, cfgPath, tgt, 170, func(stop <-chan struct{}) { workload(151, 900, stop) })
	t.Logf("%s SIGKILLed mid-stream; %d transactions committed", layeredBase, committed)

	converge := func(who string) {
		t.Helper()
		var out string
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if out, err = run(newBin, "run", "--config", cfgPath, "--local", "--verify", "--format", "text"); err == nil ||
				!strings.Contains(out, "in use by another process") {
				break
			}
			time.Sleep(time.Second) // the killed walsender has not exited yet
		}
		if err != nil || !strings.Contains(out, "CONVERGED") {
			t.Fatalf("run --local --verify (%s): %v\n%s", who, err, out)
		}
	}
	converge("current, after " + layeredBase)
	exactlyOnce(t, src, dst, committed)

	// The current service streams on from the state the bounded runs left.
	svc := exec.Command(newBin, "run", "--config", cfgPath)
	svc.Dir = dir
	var svcOut bytes.Buffer
	svc.Stdout, svc.Stderr = &svcOut, &svcOut
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	workload(committed+1, committed+150, nil)
	for i := 0; ; i++ {
		var n int64
		if tgt.QueryRow(ctx, `SELECT sum(n) FROM counters`).Scan(&n) == nil && n == int64(committed) {
			break
		}
		if i > 6000 {
			_ = svc.Process.Signal(syscall.SIGKILL)
			_ = svc.Wait()
			t.Fatalf("the current service did not apply through transaction %d:\n%s", committed, svcOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = svc.Process.Signal(syscall.SIGTERM)
	if err := svc.Wait(); err != nil {
		t.Logf("service exit after SIGTERM: %v", err)
	}
	converge("current, after its service")
	exactlyOnce(t, src, dst, committed)
}
