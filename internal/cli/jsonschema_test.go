package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/pgtest"
)

// schemaDir holds one JSON Schema per command (docs/json).
var schemaDir = filepath.Join(repoRoot, "docs", "json")

// schemaFile names the schema of a command's JSON output.
func schemaFile(command string) string {
	if command == "trellara" || command == "fleet" || command == "lake" {
		return "envelope.schema.json" // a failure before any command ran
	}
	return strings.ReplaceAll(command, " ", "-") + ".schema.json"
}

// jsonValidator compiles docs/json's schemas.
type jsonValidator struct {
	c       *jsonschema.Compiler
	schemas map[string]*jsonschema.Schema
}

func newJSONValidator(t *testing.T) *jsonValidator {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	entries, err := os.ReadDir(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		f, err := os.Open(filepath.Join(schemaDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if err := c.AddResource("https://trellara.dev/json/"+e.Name(), doc); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
	}
	return &jsonValidator{c: c, schemas: map[string]*jsonschema.Schema{}}
}

// check validates one command's stdout against its command's schema (the
// envelope's "command" picks it) and returns the decoded object.
func (v *jsonValidator) check(t *testing.T, what, stdout string) map[string]any {
	t.Helper()
	var head struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal([]byte(stdout), &head); err != nil || head.Command == "" {
		t.Fatalf("%s: stdout is not one JSON envelope (%v):\n%s", what, err, stdout)
	}
	name := schemaFile(head.Command)
	s, ok := v.schemas[name]
	if !ok {
		var err error
		if s, err = v.c.Compile("https://trellara.dev/json/" + name); err != nil {
			t.Fatalf("%s: schema %s: %v", what, name, err)
		}
		v.schemas[name] = s
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(stdout)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		t.Errorf("%s: output does not match docs/json/%s: %v\n%s", what, name, err, stdout)
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(stdout), &m)
	return m
}

// jsonRun runs a command with --format json and checks its output against
// the schema, the exit code against want, and ok against the exit code.
func (v *jsonValidator) jsonRun(t *testing.T, want int, args ...string) map[string]any {
	t.Helper()
	out, errOut, code := run(t, append(args, "--format", "json")...)
	what := strings.Join(args, " ")
	if code != want {
		t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, code, want, out, errOut)
	}
	m := v.check(t, what, out)
	if ok, _ := m["ok"].(bool); ok != (code == 0) {
		t.Errorf("%s: ok %v with exit %d", what, m["ok"], code)
	}
	return m
}

// Every command's real output, on success and on failure, matches its
// JSON Schema in docs/json; failures carry the error object on stdout.
func TestJSONOutputsMatchSchemas(t *testing.T) {
	pg := pgtest.Start(t, pgtest.Options{NoFsync: true})
	pg.CreateDB(t, "shop")
	pg.CreateDB(t, "shop_target")
	pg.ExecDB(t, "shop",
		`CREATE TABLE public.users (id int PRIMARY KEY, name text NOT NULL, email text UNIQUE)`,
		`CREATE TABLE public.posts (id bigint PRIMARY KEY, user_id int NOT NULL, body text)`,
		`INSERT INTO public.users SELECT g, 'u' || g, 'u' || g || '@example.com' FROM generate_series(1, 50) g`,
		`INSERT INTO public.posts SELECT g, 1 + g % 50, repeat('p', g) FROM generate_series(1, 200) g`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	v := newJSONValidator(t)

	m := v.jsonRun(t, ExitOK, "init", "--source-database-url", pg.URL("shop"), "--target-database-url", pg.URL("shop_target"),
		"--table", "public.users", "--table", "public.posts", "--evaluate", "--output", cfg)
	if m["flow"] != "shop" {
		t.Errorf("init named the flow %v, want the database's name shop", m["flow"])
	}
	v.jsonRun(t, ExitOK, "config", "validate", "--config", cfg)
	v.jsonRun(t, ExitOK, "check", "--config", cfg)
	v.jsonRun(t, ExitOK, "preflight", "--config", cfg)
	v.jsonRun(t, ExitOK, "run", "--config", cfg, "--local", "--verify")
	// The target tables the evaluation flow created carry the source's
	// unique indexes (users.email), not only its primary keys.
	pg.ExecDB(t, "shop_target", `DO $$ BEGIN
		IF (SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		    WHERE c.relname = 'users' AND i.indisunique AND NOT i.indisprimary) <> 1 THEN
			RAISE EXCEPTION 'the created target table public.users lacks the source''s unique index on email';
		END IF; END $$`)
	pg.ExecDB(t, "shop", `INSERT INTO public.users VALUES (51, 'late', NULL)`)
	v.jsonRun(t, ExitOK, "run", "--config", cfg, "--local")
	// The flow at rest, caught up: CONVERGED; one committed change the
	// target lacks: BEHIND (exit 3) naming it, validated like the rest.
	if vr := v.jsonRun(t, ExitOK, "verify", "--config", cfg); vr["verdict"] != "CONVERGED" {
		t.Errorf("standalone verify of a caught-up flow at rest: verdict %v, want CONVERGED", vr["verdict"])
	}
	pg.ExecDB(t, "shop", `INSERT INTO public.users VALUES (53, 'pending', NULL)`)
	vr := v.jsonRun(t, ExitBehind, "verify", "--config", cfg)
	wm, _ := vr["watermark"].(map[string]any)
	if pending, _ := wm["pending"].(map[string]any); vr["verdict"] != "BEHIND" || pending["transactions"] != float64(1) {
		t.Errorf("standalone verify with one change pending at rest: verdict %v, watermark %v; want BEHIND with 1 pending transaction", vr["verdict"], vr["watermark"])
	}
	st := v.jsonRun(t, ExitOK, "status", "--config", cfg) // an inactive slot retaining a little WAL between runs is no problem
	if probs, _ := st["problems"].([]any); len(probs) != 0 {
		t.Errorf("status of a flow at rest reports problems: %v", st["problems"])
	}
	v.jsonRun(t, ExitOK, "status", "--config", cfg, "--view", "diagnostics")

	// A quarantined transaction: a target-only row holds the key.
	pg.ExecDB(t, "shop_target", `INSERT INTO public.users VALUES (52, 'target only', NULL)`)
	pg.ExecDB(t, "shop", `INSERT INTO public.users VALUES (52, 'source', NULL)`)
	_, _, _ = run(t, "run", "--config", cfg, "--local") // quarantines, then reports it
	q := v.jsonRun(t, ExitFindings, "status", "--config", cfg, "--view", "quarantine")
	if qs, _ := q["quarantine"].(map[string]any); qs == nil || qs["open"] != float64(1) {
		t.Errorf("status does not show the open quarantine: %v", q["quarantine"])
	}
	plan := v.jsonRun(t, ExitFindings, "repair-plan", "--config", cfg)
	if steps, _ := plan["steps"].([]any); len(steps) == 0 {
		t.Errorf("repair-plan has no step for the quarantine: %v", plan)
	} else if s := steps[0].(map[string]any); s["table"] != "public.users" || s["sqlstate"] != "23505" {
		t.Errorf("repair-plan step lacks its table or SQLSTATE: %v", s)
	} else if p, f := s["problem"].(string), s["fix"].(string); strings.Count(p, "SQLSTATE 23505") != 1 || strings.Contains(f, "constraint 23505") {
		t.Errorf("repair-plan repeats the SQLSTATE or calls it a constraint:\nproblem: %s\nfix: %s", p, f)
	}
	pg.ExecDB(t, "shop_target", `DELETE FROM public.users WHERE id = 52`)
	// With --verify the last verify is CONVERGED, replacing the BEHIND one
	// above, so nothing is left to repair.
	v.jsonRun(t, ExitOK, "run", "--config", cfg, "--local", "--verify")
	v.jsonRun(t, ExitOK, "repair-plan", "--config", cfg)

	loc := v.jsonRun(t, ExitOK, "stream", "locate-local", "--config", cfg, "--offset", "0")
	if rows, _ := loc["rows"].([]any); len(rows) == 0 {
		t.Errorf("locate-local printed no rows: %v", loc)
	}
	v.jsonRun(t, ExitOK, "schema", "ddl-plan", "--config", cfg)
	// A blocked schema change: capture stops at it, ddl-plan and
	// repair-plan show it.
	pg.ExecDB(t, "shop", `ALTER TABLE public.posts DROP COLUMN body`, `INSERT INTO public.posts VALUES (1000, 1)`)
	if _, errOut, code := run(t, "run", "--config", cfg, "--local"); code == ExitOK || !strings.Contains(errOut, "drop_column") {
		t.Errorf("run past a dropped column: exit %d, stderr %s", code, errOut)
	}
	dp := v.jsonRun(t, ExitFindings, "schema", "ddl-plan", "--config", cfg)
	if pend, _ := dp["pending"].([]any); len(pend) != 1 {
		t.Errorf("ddl-plan shows %d pending changes, want the dropped column: %v", len(pend), dp)
	}
	rp := v.jsonRun(t, ExitFindings, "repair-plan", "--config", cfg)
	if steps, _ := rp["steps"].([]any); len(steps) == 0 || steps[0].(map[string]any)["kind"] != "schema_change" {
		t.Errorf("repair-plan does not start with the schema change: %v", rp)
	}
	v.jsonRun(t, ExitOK, "run", "--config", cfg, "--cleanup")

	// Failures: the envelope with the error object, on stdout.
	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte("version: 2\nflow: Bad Name\nsource:\n  tables: [nope]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cv := v.jsonRun(t, ExitFindings, "config", "validate", "--config", bad)
	if errs, _ := cv["errors"].([]any); len(errs) < 2 {
		t.Errorf("config validate lists %d problems, want every one", len(errs))
	}
	for _, args := range [][]string{
		{"check", "--config", bad}, {"preflight", "--config", bad}, {"run", "--config", bad, "--local"},
		{"run", "--config", bad, "--cleanup"}, {"verify", "--config", bad}, {"status", "--config", bad},
		{"repair-plan", "--config", bad},
	} {
		m := v.jsonRun(t, ExitFindings, args...)
		if e, _ := m["error"].(map[string]any); e == nil || e["code"] != "config_invalid" {
			t.Errorf("%v: error %v, want code config_invalid", args, m["error"])
		}
	}
	// fleet and lake are built into trellara-full only: there the group
	// command takes no --config of its own.
	fleetCode := "failed" // the default edition names trellara-full as the fix
	if buildinfo.Edition == "full" {
		fleetCode = "usage"
	}
	for _, tc := range []struct {
		args []string
		code string
	}{
		{[]string{"status", "--config", cfg, "--view", "nope"}, "usage"},
		{[]string{"status", "--config", cfg, "--no-such-flag"}, "usage"},
		{[]string{"fleet", "--config", cfg}, fleetCode},
		{[]string{"lake", "--config", cfg}, fleetCode},
		{[]string{"init", "--source-database-url", pg.URL("shop"), "--table", "public.absent", "--output", filepath.Join(dir, "x.yml")}, "failed"},
	} {
		m := v.jsonRun(t, ExitError, tc.args...)
		if e, _ := m["error"].(map[string]any); e == nil || e["code"] != tc.code {
			t.Errorf("%v: error %v, want code %s", tc.args, m["error"], tc.code)
		}
	}
}
