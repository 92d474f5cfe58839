package flow_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/trellara/trellara/internal/pgtest"
)

// checkJSONAgainst validates out against docs/json's schemaFile, with the
// other schemas it refers to loaded.
func checkJSONAgainst(t *testing.T, schemaFile, out string, refs ...string) {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	for _, name := range append([]string{"envelope.schema.json", schemaFile}, refs...) {
		fh, err := os.Open(filepath.Join("..", "..", "docs", "json", name))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.AddResource("https://trellara.dev/json/"+name, doc); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Compile("https://trellara.dev/json/" + schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("output does not match docs/json/%s: %v\n%s", schemaFile, err, out)
	}
}

// With schema.on_blocked: hold_table, DROP COLUMN on t1 while t2 is
// written holds only t1: capture goes on, t2's rows after the change
// (one in the same transaction as a held t1 row) reach the target, t1's
// rows after the change do not; status, verify, repair-plan and ddl-plan
// show t1 HELD with `trellara reseed --config F --table public.t1`; that
// reseed, with the service running, takes the change over, ends
// CONVERGED, and t1 is no longer held.
func TestHoldTableKeepsOtherTablesFlowing(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE t1 (id int PRIMARY KEY, k int NOT NULL, extra text)`, `CREATE TABLE t2 (id int PRIMARY KEY, v text)`,
		`INSERT INTO t1 SELECT g, g, 'x' FROM generate_series(1, 50) g`, `INSERT INTO t2 VALUES (1, 'a')`)
	f := newSchemaFlow(t, src, dst, "public.t1", "public.t2")
	cfg, err := os.ReadFile(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.cfg, append(cfg, "schema:\n  on_blocked: hold_table\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	f.mustConverge("first run")

	src.Exec(t, `ALTER TABLE t1 DROP COLUMN extra`,
		`INSERT INTO t1 (id, k) VALUES (100, 100)`,
		`INSERT INTO t2 VALUES (2, 'same transaction as a held row'); DELETE FROM t1 WHERE id = 2`,
		`UPDATE t1 SET k = k + 1000 WHERE id = 1`,
		`INSERT INTO t2 VALUES (3, 'after')`)
	if out, code := f.run("run", "--local"); code != 0 {
		t.Fatalf("run over a held change: exit %d, want capture to go on\n%s", code, out)
	}
	tc := dst.Connect(context.Background())
	defer tc.Close(context.Background())
	ids := func(table string) string {
		t.Helper()
		var s string
		if err := tc.QueryRow(context.Background(), `SELECT coalesce(string_agg(id::text, ' ' ORDER BY id), '') FROM `+pgx.Identifier{table}.Sanitize()+` WHERE id <= 3 OR id >= 100`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := ids("t2"); got != "1 2 3" {
		t.Fatalf("target t2 holds %q, want 1 2 3: t2 keeps flowing past t1's change", got)
	}
	if got := ids("t1"); got != "1 2 3" {
		t.Fatalf("target t1 holds %q, want 1 2 3: no row of t1 after its held change is applied", got)
	}
	reseed := "trellara reseed --config " + f.cfg + " --table public.t1"

	// status: t1 HELD with its recovery; the hold barrier's contract.
	out, code := f.runStdout("status", "--view", "diagnostics", "--format", "json")
	checkJSONAgainst(t, "status.schema.json", out, "verify.schema.json")
	var st struct {
		Held []struct {
			Table, Command string
			Kinds          []string
		} `json:"held_tables"`
		Problems []struct{ Code, Fix string } `json:"problems"`
		statusBarriers
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if code != 1 || len(st.Held) != 1 || st.Held[0].Table != "public.t1" || st.Held[0].Command != reseed || strings.Join(st.Held[0].Kinds, ",") != "drop_column" {
		t.Fatalf("status: exit %d, held %+v, want public.t1 held (drop_column) with %q\n%s", code, st.Held, reseed, out)
	}
	var hold []string
	for _, b := range st.Barriers {
		if b.Relation == "public.t1" && strings.Join(b.Kinds, ",") == "hold" {
			for _, p := range b.Phases {
				if p.Done {
					hold = append(hold, p.Phase+"/"+p.Sink)
				}
			}
		}
	}
	if strings.Join(hold, " ") != "published/ held/ applied/default" {
		t.Fatalf("the hold barrier's phases done: %v, want published, held, applied on default\n%s", hold, out)
	}
	if out, code := f.run("run", "--local", "--verify"); code != 1 || !strings.Contains(out, "HELD") || !strings.Contains(out, reseed) ||
		strings.Contains(out, "DIVERGED") || strings.Contains(out, "BEHIND") {
		t.Fatalf("verify: exit %d, want HELD naming %q\n%s", code, reseed, out)
	}
	if out, code := f.run("repair-plan"); code != 1 || !strings.Contains(out, "public.t1 is HELD") || !strings.Contains(out, reseed) {
		t.Fatalf("repair-plan: exit %d\n%s", code, out)
	}
	if out, code := f.run("schema", "ddl-plan"); code != 1 || !strings.Contains(out, "drop_column") || !strings.Contains(out, "only this table is held") || !strings.Contains(out, reseed) {
		t.Fatalf("ddl-plan: exit %d\n%s", code, out)
	}

	// Recovery: the reseed, with the flow running; t1 is written
	// throughout and t2 keeps flowing.
	stop := f.startService()
	src.Exec(t, `INSERT INTO t1 (id, k) VALUES (101, 101)`, `INSERT INTO t2 VALUES (4, 'service')`)
	if out, code := f.run("reseed", "--table", "public.t1", "--chunk-rows", "7", "--wait", "60s"); code != 0 || !strings.Contains(out, "CONVERGED public.t1") {
		stop()
		t.Fatalf("reseed of the held table: exit %d\n%s\nservice:\n%s", code, out, f.serviceLog())
	}
	src.Exec(t, `INSERT INTO t1 (id, k) VALUES (102, 102)`, `UPDATE t1 SET k = 7 WHERE id = 3`, `INSERT INTO t2 VALUES (5, 'after the reseed')`)
	if out, code := f.run("verify", "--wait", "120s"); code != 0 || !strings.Contains(out, "CONVERGED") {
		stop()
		t.Fatalf("verify after the reseed: exit %d\n%s\nservice:\n%s", code, out, f.serviceLog())
	}
	stop()
	out, _ = f.runStdout("status", "--format", "json")
	st.Held = nil
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Held) != 0 {
		t.Fatalf("after the reseed, status still holds %+v (%v)\n%s", st.Held, err, out)
	}
	var released int
	if err := tc.QueryRow(context.Background(), `SELECT count(*) FROM trellara.barriers WHERE relation = 'public.t1' AND 'hold' = ANY(kinds) AND released_at IS NOT NULL`).Scan(&released); err != nil || released == 0 {
		t.Fatalf("the target's hold of t1 was not released at the handoff (%d, %v)", released, err)
	}
	if got := ids("t2"); got != "1 2 3" {
		t.Fatalf("target t2 holds %q", got)
	}
	f.mustConverge("run after the reseed")
}
