package flow_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// restFlow is a pgbench flow (accounts, branches and tellers; history
// stays out of the publication) for the commands of a flow at rest.
type restFlow struct {
	t        *testing.T
	bin, dir string
	cfg      string
	src, dst *pgtest.Cluster
}

func newRestFlow(t *testing.T) *restFlow {
	t.Helper()
	pgtest.Require(t)
	f := &restFlow{t: t, bin: buildCLI(t), dir: t.TempDir()}
	f.src = pgtest.Start(t, pgtest.Options{NoFsync: true})
	f.dst = pgtest.Start(t, pgtest.Options{NoFsync: true})
	f.pgbench("-i", "-q", "-s", "1")
	f.cfg = filepath.Join(f.dir, "trellara.yml")
	body := fmt.Sprintf(`version: 2
flow: rest
source:
  id: src1
  database_url: %q
  owns_slot: true
  tables: [public.pgbench_accounts, public.pgbench_branches, public.pgbench_tellers]
transport:
  local: {dir: %s}
target:
  database_url: %q
  create_tables: true
run:
  evaluate: true
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, f.src.URL("postgres"), filepath.Join(f.dir, "data"), f.dst.URL("postgres"), freePort(t), freePort(t))
	if err := os.WriteFile(f.cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *restFlow) pgbench(args ...string) {
	f.t.Helper()
	cmd := exec.Command("/usr/lib/postgresql/15/bin/pgbench", append(args, f.src.URL("postgres"))...)
	if out, err := cmd.CombinedOutput(); err != nil {
		f.t.Fatalf("pgbench %v: %v\n%s", args, err, out)
	}
}

// run runs a trellara command with --config; stdout and stderr apart.
func (f *restFlow) run(args ...string) (stdout, stderr string, code int) {
	f.t.Helper()
	cmd := exec.Command(f.bin, append(args[:1:1], append([]string{"--config", f.cfg}, args[1:]...)...)...)
	cmd.Dir = f.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// verifyJSON runs verify --format json and decodes the parts checked.
type restVerdict struct {
	Verdict   string   `json:"verdict"`
	Recovery  string   `json:"recovery"`
	Notes     []string `json:"notes"`
	Watermark struct {
		CaughtUp bool `json:"caught_up"`
		Pending  *struct {
			Transactions int64 `json:"transactions"`
			InLog        int64 `json:"in_log"`
			InSlot       int64 `json:"in_slot"`
			AtLeast      bool  `json:"at_least"`
		} `json:"pending"`
	} `json:"watermark"`
}

func (f *restFlow) verify(args ...string) (restVerdict, string, int) {
	f.t.Helper()
	out, errOut, code := f.run(append([]string{"verify", "--format", "json"}, args...)...)
	var v restVerdict
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		f.t.Fatalf("verify JSON (exit %d): %v\n%s\n%s", code, err, out, errOut)
	}
	return v, out, code
}

// slotRestart is the slot's restart_lsn and whether it is active.
func (f *restFlow) slot() (confirmed string, active bool) {
	f.t.Helper()
	conn := f.src.Connect(f.t.Context())
	defer conn.Close(f.t.Context())
	if err := conn.QueryRow(f.t.Context(), `SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = 'trellara_rest'`).Scan(&confirmed, &active); err != nil {
		f.t.Fatal(err)
	}
	return confirmed, active
}

// A flow at rest after a pgbench workload and a CHECKPOINT verifies
// CONVERGED ten times in a row, and status has no problem: verify writes
// no fence at rest, and the WAL that autovacuum, checkpoints and the
// history table (outside the publication) leave past the slot's confirmed
// position is not a committed change to the flow's tables. One committed
// change with the flow stopped is BEHIND naming that 1 transaction, and a
// change only to a table outside the publication stays CONVERGED.
func TestVerifyAtRest(t *testing.T) {
	f := newRestFlow(t)
	if out, errOut, code := f.run("run", "--local"); code != 0 {
		t.Fatalf("first run: exit %d\n%s\n%s", code, out, errOut)
	}
	f.pgbench("-c", "2", "-t", "300", "-n")
	if out, errOut, code := f.run("run", "--local", "--verify"); code != 0 {
		t.Fatalf("run --local --verify after the workload: exit %d\n%s\n%s", code, out, errOut)
	}
	f.src.Exec(t, `VACUUM ANALYZE`, `CHECKPOINT`)
	confirmed, _ := f.slot()
	logBefore := dirDigest(t, filepath.Join(f.dir, "data", "log"))
	for i := range 10 {
		v, out, code := f.verify()
		if code != 0 || v.Verdict != "CONVERGED" || v.Watermark.Pending == nil || v.Watermark.Pending.Transactions != 0 || !v.Watermark.CaughtUp {
			t.Fatalf("verify %d at rest: exit %d, want CONVERGED with nothing pending\n%s", i+1, code, out)
		}
	}
	if after := dirDigest(t, filepath.Join(f.dir, "data", "log")); after != logBefore {
		t.Errorf("the local log changed over ten verifies at rest:\nbefore %s\nafter  %s", logBefore, after)
	}
	if now, active := f.slot(); now != confirmed || active {
		t.Errorf("slot after ten verifies: confirmed %s (was %s), active %v; verify at rest must not move or hold it", now, confirmed, active)
	}
	conn := f.src.Connect(t.Context())
	var fences int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_logical_slot_peek_binary_changes('trellara_rest', NULL, NULL,
		'proto_version', '1', 'publication_names', 'trellara_rest', 'messages', 'true') WHERE get_byte(data, 0) = 77`).Scan(&fences); err != nil {
		t.Fatal(err)
	}
	conn.Close(t.Context())
	if fences != 0 {
		t.Errorf("%d logical messages past the slot after verifying at rest; verify at rest writes no fence", fences)
	}
	if out, errOut, code := f.run("status"); code != 0 || strings.Contains(out, "PROBLEM") {
		t.Fatalf("status of a flow at rest: exit %d, want 0 and no PROBLEM\n%s\n%s", code, out, errOut)
	}

	// Only a table outside the publication changes.
	f.src.Exec(t, `INSERT INTO pgbench_history VALUES (1, 1, 1, 5, now(), 'x')`)
	if v, out, code := f.verify(); code != 0 || v.Verdict != "CONVERGED" || v.Watermark.Pending.Transactions != 0 {
		t.Fatalf("verify after a change outside the publication: exit %d, want CONVERGED\n%s", code, out)
	}

	// One committed change to a flow table, the flow stopped.
	f.src.Exec(t, `UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1`)
	v, out, code := f.verify()
	p := v.Watermark.Pending
	if code != 3 || v.Verdict != "BEHIND" || p == nil || p.Transactions != 1 || p.InSlot != 1 || p.InLog != 0 ||
		v.Recovery != "trellara run --config "+f.cfg+" --local --verify" {
		t.Fatalf("verify after one committed change at rest: exit %d, want BEHIND with 1 pending transaction at the source\n%s", code, out)
	}
	text, _, code := f.run("verify")
	if code != 3 || !strings.HasPrefix(text, "BEHIND: 1 committed transaction to the flow's tables not applied on the target (0 in the log, 1 at the source") ||
		!strings.Contains(text, "fix: start or catch up the pipeline: trellara run --config "+f.cfg+" --local --verify") {
		t.Fatalf("verify (text) after one committed change at rest: exit %d\n%s", code, text)
	}
	if out, errOut, code := f.run("run", "--local", "--verify"); code != 0 {
		t.Fatalf("the printed recovery: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, out, code := f.verify(); code != 0 || v.Verdict != "CONVERGED" {
		t.Fatalf("verify after the recovery: exit %d\n%s", code, out)
	}
}

// A transaction captured into the local log but not applied (the relay
// ran alone) is pending in the log, not at the source: counted once.
func TestVerifyAtRestCountsTheLog(t *testing.T) {
	f := newRestFlow(t)
	if out, errOut, code := f.run("run", "--local"); code != 0 {
		t.Fatalf("first run: exit %d\n%s\n%s", code, out, errOut)
	}
	relay := exec.Command(f.bin, "run", "--config", f.cfg, "--role", "relay")
	relay.Dir = f.dir
	logf, err := os.Create(filepath.Join(f.dir, "relay.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	relay.Stdout, relay.Stderr = logf, logf
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = relay.Process.Signal(syscall.SIGTERM)
			_ = relay.Wait()
		}
	}
	defer stop()
	waitUntil(t, "the relay streams", func() bool { _, active := f.slot(); return active }, func() string { b, _ := os.ReadFile(logf.Name()); return string(b) })
	f.src.Exec(t, `UPDATE pgbench_tellers SET tbalance = tbalance + 1 WHERE tid = 1`)
	conn := f.src.Connect(t.Context())
	var end string
	if err := conn.QueryRow(t.Context(), `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the relay confirms the update", func() bool {
		var done bool
		_ = conn.QueryRow(t.Context(), `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = 'trellara_rest'`, end).Scan(&done)
		return done
	}, func() string { b, _ := os.ReadFile(logf.Name()); return string(b) })
	conn.Close(t.Context())
	stop()
	v, out, code := f.verify()
	p := v.Watermark.Pending
	if code != 3 || v.Verdict != "BEHIND" || p == nil || p.Transactions != 1 || p.InLog != 1 || p.InSlot != 0 {
		t.Fatalf("verify with one unapplied transaction in the log: exit %d, want BEHIND with 1 pending in the log\n%s", code, out)
	}
	if out, errOut, code := f.run("run", "--local", "--verify"); code != 0 {
		t.Fatalf("run --local --verify: exit %d\n%s\n%s", code, out, errOut)
	}
}

// shellWords splits a printed command line as a POSIX shell would, for
// the quoting shell.Trellara prints: single quotes and plain words.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			cur.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ' || r == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// slotActive reports whether the flow's slot is held by a process.
func slotActive(t *testing.T, src *pgtest.Cluster, slot string) bool {
	t.Helper()
	conn := src.Connect(t.Context())
	defer conn.Close(t.Context())
	var active bool
	if err := conn.QueryRow(t.Context(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err != nil {
		t.Fatal(err)
	}
	return active
}

// The page's DROP COLUMN: `run --local` stops with a plan whose first
// recovery is the reseed of the table; typed as printed with no service
// running, the reseed runs the flow's pipeline itself, ends CONVERGED, and
// leaves the flow at rest (slot released, no process holding the log):
// the next run and verify converge. reseed --all-tables at rest likewise.
func TestReseedAtRestAfterDropColumn(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE "Sales" (id int PRIMARY KEY, amount int NOT NULL, gone text)`,
		`INSERT INTO "Sales" SELECT g, g * 10, 'g' || g FROM generate_series(1, 200) g`)
	f := newSchemaFlow(t, src, dst, `public."Sales"`)
	f.mustConverge("first run")
	src.Exec(t, `ALTER TABLE "Sales" DROP COLUMN gone`, `INSERT INTO "Sales" VALUES (201, 2010)`, `UPDATE "Sales" SET amount = 0 WHERE id = 1`)
	out, code := f.run("run", "--local")
	if code == 0 {
		t.Fatalf("run over DROP COLUMN: exit 0, want a stop at the schema change\n%s", out)
	}
	recovery := ""
	if _, after, ok := strings.Cut(out, "Recovery: "); ok {
		recovery, _, _ = strings.Cut(after, ". Recovery:")
	}
	want := `trellara reseed --config ` + f.cfg + ` --table 'public."Sales"'`
	if recovery != want {
		t.Fatalf("the first recovery printed is %q, want %q\n%s", recovery, want, out)
	}
	words := shellWords(t, want)
	cmd := exec.Command(f.bin, words[1:]...)
	cmd.Dir = f.dir
	rout, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", want, rout)
	if err != nil || !strings.Contains(string(rout), `CONVERGED public."Sales"`) {
		t.Fatalf("%s, typed as printed at rest: %v\n%s", want, err, rout)
	}
	if slotActive(t, src, "trellara_ddl") {
		t.Errorf("slot still active after the reseed: the flow must be left at rest")
	}
	if out, code := f.run("verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("verify after the reseed at rest: exit %d\n%s", code, out)
	}
	f.mustConverge("run --local --verify after the reseed")

	// --all-tables, at rest, likewise.
	src.Exec(t, `UPDATE "Sales" SET amount = 7 WHERE id <= 5`)
	if out, code := f.run("reseed", "--all-tables"); code != 0 || !strings.Contains(out, `CONVERGED public."Sales"`) {
		t.Fatalf("reseed --all-tables at rest: exit %d\n%s", code, out)
	}
	if slotActive(t, src, "trellara_ddl") {
		t.Errorf("slot still active after reseed --all-tables: the flow must be left at rest")
	}
	if out, code := f.run("verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("verify after reseed --all-tables at rest: exit %d\n%s", code, out)
	}
}

// semantics on a flow at rest runs the pipeline itself and removes its
// tables only once the target has applied every change to them; beside a
// running service it uses the service. Either way the flow is intact: the
// next `run --local --verify` is CONVERGED, and no semantics table is left.
func TestSemanticsLeavesTheFlowIntact(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v int)`, `INSERT INTO items VALUES (1, 1)`)
	f := newSchemaFlow(t, src, dst, "public.items")
	f.mustConverge("first run")
	noTables := func(when string) {
		t.Helper()
		for _, c := range []*pgtest.Cluster{src, dst} {
			conn := c.Connect(t.Context())
			var n int
			err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'trellara_semantics%'`).Scan(&n)
			conn.Close(t.Context())
			if err != nil || n != 0 {
				t.Fatalf("%s: %d semantics tables left (%v)", when, n, err)
			}
		}
	}

	out, code := f.run("semantics", "--duration", "2s", "--wait", "60s")
	if code != 0 || !strings.Contains(out, "no half-applied transaction observed") {
		t.Fatalf("semantics at rest: exit %d\n%s", code, out)
	}
	noTables("after semantics at rest")
	if slotActive(t, src, "trellara_ddl") {
		t.Errorf("slot still active after semantics at rest: the flow must be left at rest")
	}
	f.mustConverge("run --local --verify after semantics at rest")

	stop := f.startService()
	out, code = f.run("semantics", "--duration", "2s", "--wait", "60s")
	stop()
	if code != 0 || !strings.Contains(out, "no half-applied transaction observed") {
		t.Fatalf("semantics beside the service: exit %d\n%s\nservice:\n%s", code, out, f.serviceLog())
	}
	noTables("after semantics beside the service")
	f.mustConverge("run --local --verify after semantics beside the service")
}

// dirDigest lists every file under dir (but the writer's LOCK file) with
// the SHA-256 of its bytes.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "LOCK" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(&b, "%s %x; ", rel, sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
