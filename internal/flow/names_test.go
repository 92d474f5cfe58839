package flow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgtest"
)

// cliRunner runs the trellara binary in dir and returns its combined
// output and exit code.
func cliRunner(t *testing.T, bin, dir string) func(args ...string) (string, int) {
	return func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), code
	}
}

// mustRunner is cliRunner for steps that must succeed: a non-zero exit
// fails the test with the command's output.
func mustRunner(t *testing.T, bin, dir string) func(args ...string) string {
	run := cliRunner(t, bin, dir)
	return func(args ...string) string {
		t.Helper()
		out, code := run(args...)
		if code != 0 {
			t.Fatalf("trellara %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
}

// Names that need quoting: mixed case, dots, double quotes, spaces,
// semicolons, keywords and non-ASCII letters in the schema, table and column
// names travel from the config through preflight, the publication, the
// snapshot, the stream, the applier, verify, status and repair-plan, each
// naming the table in one form that parses back to the same table.
func TestQuotedNamesEndToEnd(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	odd := config.TableName{Schema: `Sch.ema "Ü"; x`, Name: `Sa.les "T"; ü`}
	sales := config.TableName{Schema: "public", Name: "Sales"}
	src.Exec(t,
		`CREATE SCHEMA "Sch.ema ""Ü""; x"`,
		`CREATE TABLE "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" ("Id" int PRIMARY KEY, "a.b ""c""; d" text, "ñame" text, "select" int)`,
		`INSERT INTO "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" SELECT g, 'v' || g, 'ñ' || g, g FROM generate_series(1, 50) g`,
		`CREATE TABLE public."Sales" (id int PRIMARY KEY, "Amount" numeric)`,
		`INSERT INTO public."Sales" SELECT g, g * 1.5 FROM generate_series(1, 20) g`,
		// A lower-case namesake: folding the quoted name would hit it.
		`CREATE TABLE public.sales (id int PRIMARY KEY)`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	run := cliRunner(t, bin, dir)
	must := func(args ...string) string {
		t.Helper()
		out, code := run(args...)
		if code != 0 {
			t.Fatalf("trellara %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	must("init", "--source-database-url", src.URL("postgres"), "--target-database-url", dst.URL("postgres"),
		"--table", odd.String(), "--table", `public."Sales"`, "--flow", "names", "--evaluate", "--output", cfg)
	must("preflight", "--config", cfg)

	// A publication that exists already is compared table by table: one
	// missing table is named with the statement that adds it.
	src.Exec(t, `CREATE PUBLICATION trellara_names FOR TABLE "Sch.ema ""Ü""; x"."Sa.les ""T""; ü", public.sales`)
	out, code := run("run", "--config", cfg, "--local")
	fix := regexp.MustCompile(`fix: (ALTER PUBLICATION .*)`).FindStringSubmatch(out)
	if code == 0 || fix == nil || !strings.Contains(out, "does not publish "+sales.String()+";") {
		t.Fatalf("run over a publication lacking %s: exit %d\n%s", sales, code, out)
	}
	src.Exec(t, fix[1])
	must("run", "--config", cfg, "--local") // snapshot

	var pubTables int
	ctx := context.Background()
	if err := src.Connect(ctx).QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables
		WHERE pubname = 'trellara_names' AND (schemaname, tablename) IN (($1, $2), ($3, $4))`,
		odd.Schema, odd.Name, sales.Schema, sales.Name).Scan(&pubTables); err != nil || pubTables != 2 {
		t.Fatalf("publication publishes %d of the 2 tables (%v)", pubTables, err)
	}
	// A publication the flow creates itself publishes the same tables.
	must("run", "--config", cfg, "--cleanup")
	must("run", "--config", cfg, "--local")
	if err := src.Connect(ctx).QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables
		WHERE pubname = 'trellara_names' AND (schemaname, tablename) IN (($1, $2), ($3, $4))`,
		odd.Schema, odd.Name, sales.Schema, sales.Name).Scan(&pubTables); err != nil || pubTables != 2 {
		t.Fatalf("the created publication publishes %d of the 2 tables (%v)", pubTables, err)
	}

	// The stream: inserts, updates of every column kind, a key change, deletes.
	src.Exec(t,
		`INSERT INTO "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" SELECT g, 'w' || g, NULL, -g FROM generate_series(51, 60) g`,
		`UPDATE "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" SET "a.b ""c""; d" = 'changed; "quoted"', "select" = 0 WHERE "Id" % 3 = 0`,
		`UPDATE "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" SET "Id" = 1000 WHERE "Id" = 1`,
		`DELETE FROM "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" WHERE "Id" BETWEEN 40 AND 45`,
		`UPDATE public."Sales" SET "Amount" = "Amount" + 1 WHERE id < 5`,
		`DELETE FROM public."Sales" WHERE id = 20`)
	out = must("run", "--config", cfg, "--local", "--verify")
	if !strings.Contains(out, "CONVERGED") {
		t.Fatalf("not converged:\n%s", out)
	}
	same := func(q string) {
		t.Helper()
		var s, d string
		if err := src.Connect(ctx).QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if err := dst.Connect(ctx).QueryRow(ctx, q).Scan(&d); err != nil {
			t.Fatal(err)
		}
		if s != d {
			t.Fatalf("%s:\nsource %s\ntarget %s", q, s, d)
		}
	}
	same(`SELECT string_agg(t::text, '|' ORDER BY "Id") FROM "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" t`)
	same(`SELECT string_agg(t::text, '|' ORDER BY id) FROM public."Sales" t`)
	var lower int
	if err := dst.Connect(ctx).QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'sales'`).Scan(&lower); err != nil || lower != 0 {
		t.Fatalf("the lower-case namesake public.sales was created on the target (%d, %v)", lower, err)
	}

	// status names each table in its one parseable form, in text and json.
	out = must("status", "--config", cfg)
	for _, tn := range []config.TableName{odd, sales} {
		if !strings.Contains(out, tn.String()) {
			t.Fatalf("status does not name %s:\n%s", tn, out)
		}
	}
	var st struct {
		Tables []struct {
			Table string `json:"table"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(must("status", "--config", cfg, "--format", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Tables) != 2 {
		t.Fatalf("status json lists %d tables, want 2", len(st.Tables))
	}
	for i, want := range []config.TableName{odd, sales} {
		if got, err := config.ParseTableName(st.Tables[i].Table); err != nil || got != want {
			t.Fatalf("status json table %d %q parses to %v (%v), want %v", i, st.Tables[i].Table, got, err, want)
		}
	}

	// A divergence: verify's fix for the table names it so that it parses
	// back to it, and a verify of that --table checks that table alone
	// (DIVERGED, exit 1: the flow is at rest with nothing pending).
	dst.Exec(t, `DELETE FROM "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" WHERE "Id" = 2`)
	out, code = run("run", "--config", cfg, "--local", "--verify")
	if code != 1 || !strings.Contains(out, "DIVERGED") {
		t.Fatalf("verify after a target delete: exit %d\n%s", code, out)
	}
	m := regexp.MustCompile(`fix +trellara repair-plan --config \S+ --table (.+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("verify names no repair-plan command for the table:\n%s", out)
	}
	arg := unshell(t, strings.TrimSpace(m[1]))
	if got, err := config.ParseTableName(arg); err != nil || got != odd {
		t.Fatalf("verify's --table %q parses to %v (%v), want %v\n%s", arg, got, err, odd, out)
	}
	if out, code := run("verify", "--config", cfg, "--table", arg); code != 1 || !strings.Contains(out, "DIVERGED: 1 of 1 tables differ ("+odd.String()+")") {
		t.Fatalf("verify --table %s: exit %d\n%s", arg, code, out)
	}
	if plan, code := run("repair-plan", "--config", cfg, "--table", arg); code != 1 || !strings.Contains(plan, odd.String()) {
		t.Fatalf("repair-plan --table %s: exit %d\n%s", arg, code, plan)
	}
	dst.Exec(t, `INSERT INTO "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" VALUES (2, 'v2', 'ñ2', 2)`)

	// A quarantine: status and repair-plan name the relation the same way.
	dst.Exec(t, `INSERT INTO "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" VALUES (500, 'target only', NULL, 0)`)
	src.Exec(t, `INSERT INTO "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" VALUES (500, 'source', NULL, 0)`)
	if out, code := run("run", "--config", cfg, "--local"); code != 2 || !strings.Contains(out, "quarantined") {
		t.Fatalf("run over a conflicting row: exit %d\n%s", code, out)
	}
	out, code = run("status", "--config", cfg, "--view", "quarantine")
	if code != 1 { // an open quarantine is a status problem
		t.Fatalf("status with an open quarantine: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, odd.String()+": ") {
		t.Fatalf("status --view quarantine does not name %s:\n%s", odd, out)
	}
	plan, _ := run("repair-plan", "--config", cfg)
	if !strings.Contains(plan, "on "+odd.String()+":") {
		t.Fatalf("repair-plan does not name %s:\n%s", odd, plan)
	}
	dst.Exec(t, `DELETE FROM "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" WHERE "Id" = 500`)
	if out := must("run", "--config", cfg, "--local", "--verify"); !strings.Contains(out, "CONVERGED") {
		t.Fatalf("not converged after the repair:\n%s", out)
	}
	same(`SELECT string_agg(t::text, '|' ORDER BY "Id") FROM "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" t`)
}

// unshell undoes POSIX single quoting of one word, as a shell would.
func unshell(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	for s != "" {
		if s[0] != '\'' {
			i := strings.IndexByte(s, '\'')
			if i < 0 {
				i = len(s)
			}
			if strings.ContainsAny(s[:i], " \t\"\\;$`") {
				t.Fatalf("unquoted shell metacharacters in %q", s)
			}
			b.WriteString(s[:i])
			s = s[i:]
			continue
		}
		end := strings.IndexByte(s[1:], '\'')
		if end < 0 {
			t.Fatalf("unterminated quote in %q", s)
		}
		b.WriteString(s[1 : 1+end])
		s = s[2+end:]
	}
	return b.String()
}
