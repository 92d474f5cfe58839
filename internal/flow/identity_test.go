package flow_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/flow"
	"github.com/trellara/trellara/internal/pgtest"
)

// A configured table without a replica identity: run (bounded and the
// service's capture) refuses before it creates a publication, naming the
// ALTER TABLE that fixes it, and the source keeps accepting UPDATE and
// DELETE on the table. REPLICA IDENTITY FULL is accepted and status says so.
func TestRunRefusesTableWithoutIdentity(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t,
		`CREATE TABLE "No Key" (a int, b text)`,
		`INSERT INTO "No Key" SELECT g, 'v' || g FROM generate_series(1, 10) g`,
		`CREATE TABLE keyed (id int PRIMARY KEY, b text)`,
		`INSERT INTO keyed SELECT g, 'k' || g FROM generate_series(1, 10) g`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	run := cliRunner(t, bin, dir)
	if out, code := run("init", "--source-database-url", src.URL("postgres"), "--target-database-url", dst.URL("postgres"),
		"--table", `public."No Key"`, "--table", "public.keyed", "--flow", "ident", "--evaluate", "--output", cfg); code != 0 {
		t.Fatalf("init: %s", out)
	}
	ctx := context.Background()
	conn := src.Connect(ctx)
	untouched := func(when string) {
		t.Helper()
		var pubs, slots int
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_publication), (SELECT count(*) FROM pg_replication_slots)`).Scan(&pubs, &slots); err != nil {
			t.Fatal(err)
		}
		if pubs != 0 || slots != 0 {
			t.Fatalf("%s: the source has %d publications and %d slots, want none", when, pubs, slots)
		}
		// The source still accepts updates and deletes on the table.
		if _, err := conn.Exec(ctx, `UPDATE "No Key" SET b = b || '!' WHERE a = 1`); err != nil {
			t.Fatalf("%s: the source refuses UPDATE: %v", when, err)
		}
		if _, err := conn.Exec(ctx, `DELETE FROM "No Key" WHERE a = (SELECT max(a) FROM "No Key")`); err != nil {
			t.Fatalf("%s: the source refuses DELETE: %v", when, err)
		}
	}
	fixes := []string{`ALTER TABLE "public"."No Key" ADD PRIMARY KEY`, `ALTER TABLE "public"."No Key" REPLICA IDENTITY FULL`}
	names := func(what, out string) {
		t.Helper()
		for _, want := range fixes {
			if !strings.Contains(out, want) {
				t.Fatalf("%s does not name the fix %q:\n%s", what, want, out)
			}
		}
		if strings.Contains(out, "keyed has") {
			t.Fatalf("%s refuses the keyed table too:\n%s", what, out)
		}
	}

	out, code := run("preflight", "--config", cfg)
	if code != 1 {
		t.Fatalf("preflight: exit %d, want 1\n%s", code, out)
	}
	names("preflight", out)
	out, code = run("run", "--config", cfg, "--local")
	if code == 0 {
		t.Fatalf("run --local published a table without a replica identity:\n%s", out)
	}
	names("run --local", out)
	untouched("after run --local")

	// The service runs the same capture.
	f, err := flow.Open(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Stop at once: a capture that got past the gate ends instead of
	// streaming, and the test fails on its nil error.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = f.Capture(cctx, flow.CaptureOptions{Stop: func() bool { return true }})
	cancel()
	f.Close()
	if err == nil {
		t.Fatal("the service's capture started with a table without a replica identity")
	}
	names("the service's capture", err.Error())
	untouched("after the service's capture")

	// REPLICA IDENTITY FULL is accepted; status states it.
	src.Exec(t, `ALTER TABLE "No Key" REPLICA IDENTITY FULL`)
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run with REPLICA IDENTITY FULL: exit %d\n%s", code, out)
	}
	src.Exec(t, `UPDATE "No Key" SET b = 'changed' WHERE a < 4`, `DELETE FROM "No Key" WHERE a = 5`)
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("updates and deletes of a FULL table: exit %d\n%s", code, out)
	}
	out, code = run("status", "--config", cfg)
	if code != 0 || !strings.Contains(out, `public."No Key" · REPLICA IDENTITY FULL`) || !strings.Contains(out, "public.keyed · primary key (id)") {
		t.Fatalf("status text does not state each table's identity: exit %d\n%s", code, out)
	}
	out, code = run("status", "--config", cfg, "--format", "json")
	var st struct {
		Tables []struct {
			Table           string   `json:"table"`
			ReplicaIdentity string   `json:"replica_identity"`
			Key             []string `json:"key"`
			Identified      bool     `json:"identified"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("status json: exit %d, %v\n%s", code, err, out)
	}
	if len(st.Tables) != 2 || st.Tables[0].Table != `public."No Key"` || st.Tables[0].ReplicaIdentity != "full" || !st.Tables[0].Identified ||
		st.Tables[1].ReplicaIdentity != "default" || strings.Join(st.Tables[1].Key, ",") != "id" {
		t.Fatalf("status json tables = %+v", st.Tables)
	}
}
