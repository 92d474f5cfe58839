package flow_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// A new snapshot never copies into a target table that already holds rows:
// rows the flow did not copy are refused with the exact TRUNCATE, before
// anything is created on the source; rows an earlier snapshot of the flow
// copied (its slot and local state lost) are refused naming run --cleanup,
// which empties exactly those tables. Both recoveries, followed literally,
// end CONVERGED with every row once.
func TestSnapshotRefusesFilledTarget(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE "Orders" (id int PRIMARY KEY, v text)`, `INSERT INTO "Orders" SELECT g, 'v' FROM generate_series(1, 100) g`,
		`CREATE TABLE other (id int PRIMARY KEY)`, `INSERT INTO other SELECT generate_series(1, 10)`)
	dst.Exec(t, `CREATE TABLE "Orders" (id int PRIMARY KEY, v text)`, `INSERT INTO "Orders" VALUES (1, 'v'), (1000, 'target only')`,
		// Not configured: never emptied by the flow.
		`CREATE TABLE bystander (id int)`, `INSERT INTO bystander VALUES (1)`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	run := cliRunner(t, bin, dir)
	if out, code := run("init", "--source-database-url", src.URL("postgres"), "--target-database-url", dst.URL("postgres"),
		"--table", `public."Orders"`, "--table", "public.other", "--flow", "filled", "--evaluate", "--output", cfg); code != 0 {
		t.Fatalf("init: %s", out)
	}
	ctx := context.Background()
	srcConn, tgt := src.Connect(ctx), dst.Connect(ctx)
	scalar := func(db *pgtest.Cluster, q string) int64 {
		t.Helper()
		var n int64
		if err := db.Connect(ctx).QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	same := func() {
		t.Helper()
		for _, q := range []string{`SELECT count(*) FROM "Orders"`, `SELECT sum(id) FROM "Orders"`, `SELECT count(*) FROM other`} {
			if s, d := scalar(src, q), scalar(dst, q); s != d {
				t.Fatalf("%s: source %d, target %d", q, s, d)
			}
		}
		if n := scalar(dst, `SELECT count(*) FROM bystander`); n != 1 {
			t.Fatalf("a table outside the flow lost rows: %d left", n)
		}
	}

	// Preflight says so first, with the same fix the run gives.
	out, code := run("preflight", "--config", cfg)
	if code == 0 || !strings.Contains(out, "target rows") || !strings.Contains(out, `TRUNCATE "public"."Orders"`) {
		t.Fatalf("preflight does not report the filled target table: exit %d\n%s", code, out)
	}
	out, code = run("run", "--config", cfg, "--local")
	if code == 0 {
		t.Fatalf("the snapshot started into a target table holding rows:\n%s", out)
	}
	want := `TRUNCATE "public"."Orders"`
	if !strings.Contains(out, want) || strings.Contains(out, "public.other") {
		t.Fatalf("refusal does not name exactly %s:\n%s", want, out)
	}
	var slots, pubs int
	if err := srcConn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_publication)`).Scan(&slots, &pubs); err != nil || slots+pubs != 0 {
		t.Fatalf("the refused run left %d slots and %d publications (%v)", slots, pubs, err)
	}
	stmt := regexp.MustCompile(`TRUNCATE [^;]+`).FindString(out)
	if _, err := tgt.Exec(ctx, stmt); err != nil {
		t.Fatalf("the statement the refusal names (%q) fails: %v", stmt, err)
	}
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run after the TRUNCATE: exit %d\n%s", code, out)
	}
	same()

	// The slot and local state lost while the target keeps what the flow
	// copied: the refusal names cleanup, which empties just those tables.
	src.Exec(t, `SELECT pg_drop_replication_slot('trellara_filled')`, `INSERT INTO "Orders" VALUES (101, 'new')`)
	if err := os.RemoveAll(filepath.Join(dir, "trellara-data", "filled")); err != nil {
		t.Fatal(err)
	}
	out, code = run("run", "--config", cfg, "--local")
	m := regexp.MustCompile(`trellara (run --config \S+ --cleanup)`).FindStringSubmatch(out)
	if code == 0 || m == nil {
		t.Fatalf("a new snapshot over the flow's own rows: exit %d, no cleanup named:\n%s", code, out)
	}
	if out, code := run(strings.Fields(m[1])...); code != 0 || !strings.Contains(out, `emptied target table public."Orders"`) {
		t.Fatalf("trellara %s: exit %d\n%s", m[1], code, out)
	}
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run after the cleanup: exit %d\n%s", code, out)
	}
	same()
}
