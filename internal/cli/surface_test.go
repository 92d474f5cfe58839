package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/flow"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/relay"
)

// An invalid config is exit 1 for every command that reads one, as
// docs/CLI.md's table says, in text as in JSON.
func TestInvalidConfigExitsOneEverywhere(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte("version: 2\nflow: Bad Name\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "absent.yml")
	for _, cfg := range []string{bad, missing} {
		for _, args := range [][]string{
			{"check"}, {"preflight"}, {"run", "--local"}, {"run", "--cleanup"}, {"verify"}, {"status"},
			{"repair-plan"}, {"config", "validate"}, {"stream", "locate-local", "--offset", "1"},
		} {
			for _, format := range []string{"text", "json"} {
				a := append(append([]string{}, args...), "--config", cfg, "--format", format)
				out, errOut, code := run(t, a...)
				if code != ExitFindings {
					t.Errorf("%v: exit %d with an invalid config, want %d\n%s%s", a, code, ExitFindings, out, errOut)
				}
				if format == "text" && !strings.Contains(out+errOut, "config") {
					t.Errorf("%v: the message does not name the config problem: %s%s", a, out, errOut)
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "trellara-data")); err == nil {
		t.Error("a command with an invalid config created state")
	}
}

// status creates nothing: after run --cleanup it reports that there is no
// local log instead of re-creating the flow's directory.
func TestStatusIsReadOnly(t *testing.T) {
	pg := pgtest.Start(t, pgtest.Options{NoFsync: true})
	pg.CreateDB(t, "app")
	pg.CreateDB(t, "app_copy")
	pg.ExecDB(t, "app", `CREATE TABLE public.items (id int PRIMARY KEY, v text)`, `INSERT INTO public.items VALUES (1, 'a')`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	if out, errOut, code := run(t, "init", "--source-database-url", pg.URL("app"), "--target-database-url", pg.URL("app_copy"),
		"--table", "public.items", "--evaluate", "--output", cfg); code != 0 {
		t.Fatalf("init: %d %s%s", code, out, errOut)
	}
	state := filepath.Join(dir, "trellara-data", "app")
	// Before any run, status creates nothing either.
	if _, errOut, code := run(t, "status", "--config", cfg); code == ExitError {
		t.Fatalf("status before the first run: %s", errOut)
	}
	if _, err := os.Stat(state); err == nil {
		t.Fatalf("status created %s before the first run", state)
	}
	if out, errOut, code := run(t, "run", "--config", cfg, "--local"); code != 0 {
		t.Fatalf("run: %d %s%s", code, out, errOut)
	} else if strings.ContainsAny(out+errOut, "\r\033") {
		t.Errorf("run wrote terminal control characters into redirected output: %q", out+errOut)
	}
	// Beside the process running the flow, which holds the log's lock,
	// status still reports (the log's figures are that process's).
	held, err := flow.Open(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "status", "--config", cfg)
	held.Close()
	if code == ExitError || !strings.Contains(out, "held by the process running the flow") {
		t.Errorf("status beside a running flow: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := run(t, "run", "--config", cfg, "--cleanup"); code != 0 {
		t.Fatalf("cleanup: %d %s%s", code, out, errOut)
	}
	if _, err := os.Stat(state); err == nil {
		t.Fatalf("cleanup left %s", state)
	}
	for _, args := range [][]string{{"status"}, {"status", "--view", "diagnostics"}, {"repair-plan"}} {
		out, errOut, code := run(t, append(args, "--config", cfg)...)
		if code == ExitError {
			t.Fatalf("%v after cleanup: exit %d %s%s", args, code, out, errOut)
		}
		if _, err := os.Stat(state); err == nil {
			t.Fatalf("%v re-created %s after cleanup", args, state)
		}
		if args[0] == "status" && !strings.Contains(out, "no local log at") {
			t.Errorf("status after cleanup does not say the local log is gone:\n%s", out)
		}
	}
}

// init names the flow after the database, asks for --flow when it cannot,
// refuses a table the source lacks, and prints the export lines for the
// URLs it keeps out of the file, with no password in them.
func TestInitFlowNameTablesAndExports(t *testing.T) {
	pg := pgtest.Start(t, pgtest.Options{NoFsync: true})
	pg.CreateDB(t, "blog")
	pg.ExecDB(t, "blog", `CREATE TABLE public.users (id int PRIMARY KEY)`, `CREATE TABLE public.posts (id int PRIMARY KEY)`,
		`CREATE ROLE writer LOGIN PASSWORD 's3cret-pw' SUPERUSER`)
	dir := t.TempDir()
	src := strings.Replace(pg.URL("blog"), "postgres@", "writer:s3cret-pw@", 1)
	tgt := strings.Replace(pg.URL("postgres"), "postgres@", "writer:s3cret-pw@", 1)

	cfg := filepath.Join(dir, "a.yml")
	out, errOut, code := run(t, "init", "--source-database-url", src, "--target-database-url", tgt,
		"--table", "public.users", "--table", "public.posts", "--output", cfg)
	if code != 0 {
		t.Fatalf("init: %d %s%s", code, out, errOut)
	}
	if !strings.Contains(out, "(flow blog)") {
		t.Errorf("the flow is not named after the database:\n%s", out)
	}
	if strings.Contains(out+errOut, "s3cret-pw") {
		t.Errorf("init printed the password:\n%s%s", out, errOut)
	}
	for _, v := range []string{"TRELLARA_SOURCE_URL", "TRELLARA_TARGET_URL"} {
		if !strings.Contains(out, "export "+v+"=") {
			t.Errorf("init does not print the export line for %s:\n%s", v, out)
		}
	}
	body, _ := os.ReadFile(cfg)
	if strings.Contains(string(body), "s3cret-pw") || !strings.Contains(string(body), "TRELLARA_SOURCE_URL") {
		t.Errorf("config holds the URL or lacks the reference:\n%s", body)
	}

	out, errOut, code = run(t, "init", "--source-database-url", src, "--table", "public.users", "--table", "public.nope",
		"--output", filepath.Join(dir, "b.yml"))
	if code != ExitError || !strings.Contains(errOut, "public.nope") || strings.Contains(errOut, "public.users,") {
		t.Errorf("init with a missing table: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.yml")); err == nil {
		t.Error("init wrote a config naming a table the source lacks")
	}

	noDB := strings.TrimSuffix(strings.Split(src, "?")[0], "/blog")
	t.Setenv("PGDATABASE", "")
	out, errOut, code = run(t, "init", "--source-database-url", noDB, "--table", "public.users", "--output", filepath.Join(dir, "c.yml"))
	if code != ExitError || !strings.Contains(errOut, "--flow") {
		t.Errorf("init without a database or --flow: exit %d\n%s%s", code, out, errOut)
	}
}

// Without a terminal the progress display writes plain lines: no carriage
// return, no escape code, and nothing left for an error to glue onto.
func TestProgressWithoutTTYIsPlainLines(t *testing.T) {
	var b bytes.Buffer
	d := newProgressDisplay(&b)
	d.every = 0 // every update prints
	d.update(flow.Progress{Phase: "snapshot", Snapshot: &relay.SnapshotProgress{Table: "public.a", Rows: 10}})
	d.update(flow.Progress{Phase: "applying", Published: 3, Applied: 7, Checkpoint: "0/10", Target: "0/20"})
	d.update(flow.Progress{Phase: "verifying"})
	d.update(flow.Progress{Phase: "done"})
	d.finish()
	s := b.String()
	if strings.ContainsAny(s, "\r\033") {
		t.Errorf("control characters in non-terminal progress: %q", s)
	}
	if n := strings.Count(s, "\n"); n != 3 || !strings.HasSuffix(s, "\n") {
		t.Errorf("want 3 complete lines, got %q", s)
	}
	if !strings.Contains(s, "this run 3 units published") || !strings.Contains(s, "flow total 7 transactions applied") {
		t.Errorf("counters are not labelled as per-run or total: %q", s)
	}
}

// status's words: "applied never" for a checkpoint that applied nothing,
// "1 segment", one SQLSTATE per error.
func TestStatusWords(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	since := 12.0
	for _, tc := range []struct {
		st      flow.Status
		want    []string
		notWant []string
	}{
		{flow.Status{Checkpoint: &flow.CheckpointState{CommitLSN: "0/0", EndLSN: "0/0"}}, []string{"applied never"}, []string{"0001-01-01", "s ago"}},
		{flow.Status{Checkpoint: &flow.CheckpointState{AppliedAt: &at, SecondsSinceApply: &since}}, []string{"applied 2026-01-02T03:04:05Z (12s ago)"}, nil},
		{flow.Status{Log: &flow.LogStatus{Exists: true, Segments: 1}}, []string{" 1 segment "}, []string{"1 segments"}},
		{flow.Status{Quarantine: &flow.QuarantineState{Open: 1, Entries: []flow.QuarantineEntry{{Error: `duplicate key value violates unique constraint "users_pkey" (SQLSTATE 23505)`, SQLState: "23505"}}}},
			[]string{"(SQLSTATE 23505)"}, []string{"(SQLSTATE 23505) (SQLSTATE 23505)"}},
	} {
		var b bytes.Buffer
		if err := tc.st.RenderText(&b, "quarantine"); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("want %q in:\n%s", w, b.String())
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(b.String(), w) {
				t.Errorf("%q in:\n%s", w, b.String())
			}
		}
	}
}
