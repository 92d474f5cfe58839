package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/buildinfo"
	trellara "github.com/trellara/trellara/internal/cli"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgtest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// sample keeps the WAL window short in tests; the default (1s) is a
// user-facing choice, not something the fixtures depend on.
const sample = "0.3"

type result struct {
	code   int
	stdout string
	stderr string
	report map[string]any
}

func runCheck(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	return r
}

// checkBoth runs the text and JSON forms and returns both.
func checkBoth(t *testing.T, url string, extra ...string) (text result, js result) {
	t.Helper()
	text = runCheck(t, append([]string{url, "--sample-seconds", sample}, extra...)...)
	js = runCheck(t, append([]string{url, "--format", "json", "--sample-seconds", sample}, extra...)...)
	if err := json.Unmarshal([]byte(js.stdout), &js.report); err != nil {
		t.Fatalf("json output does not parse: %v\n%s\nstderr: %s", err, js.stdout, js.stderr)
	}
	validateSchema(t, js.stdout)
	assertActions(t, js.report)
	return text, js
}

// Masks for values that differ between runs; everything else is golden.
var masks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), "127.0.0.1:PORT"},
	{regexp.MustCompile(`PostgreSQL \d+\.\d+[^·]*·`), "PostgreSQL VERSION ·"},
	{regexp.MustCompile(`position [0-9A-F]{1,8}/[0-9A-F]{1,8}\b`), "position LSN"},
	{regexp.MustCompile(`\(sampled over [^)]*\)|\(average since statistics reset; [^)]*\)`), "(RATE BASIS)"},
	{regexp.MustCompile(`no WAL written during the [^\n]*`), "(RATE BASIS)"},
	{regexp.MustCompile(`\d+(\.\d+)? (B|kB|MB|GB|TB|PB)\b`), "SIZE"},
	{regexp.MustCompile(`~?\b\d+(d\d+h|h\d+m|h|m|s)\b`), "DUR"},
	// The summary line adds how long a slot has stalled only when the
	// sample measured a WAL rate to estimate it from; a loaded machine can
	// sample none.
	{regexp.MustCompile(`(?m)^(slots +\d+ stalled) DUR$`), "$1"},
}

func mask(s string) string {
	for _, m := range masks {
		s = m.re.ReplaceAllString(s, m.with)
	}
	return s
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	got = mask(got)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/trellara-check -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("text output differs from %s (rerun with -update if intended)\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

func findings(rep map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, f := range rep["findings"].([]any) {
		m := f.(map[string]any)
		out[m["code"].(string)] = m
	}
	return out
}

// assertActions enforces the rule that every grade-lowering finding names
// its fix.
func assertActions(t *testing.T, rep map[string]any) {
	t.Helper()
	for code, f := range findings(rep) {
		if f["severity"] != "info" && strings.TrimSpace(fmt.Sprint(f["action"])) == "" || f["action"] == nil && f["severity"] != "info" {
			t.Errorf("finding %s (%s) lowers the grade but has no action", code, f["severity"])
		}
	}
}

func expect(t *testing.T, r result, code int, grade string, codes ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d\nstderr: %s", r.code, code, r.stderr)
	}
	if r.report != nil && r.report["grade"] != grade {
		t.Errorf("grade %v, want %s; headline %v", r.report["grade"], grade, r.report["headline"])
	}
	if r.report != nil {
		got := findings(r.report)
		for _, c := range codes {
			if _, ok := got[c]; !ok {
				keys := make([]string, 0, len(got))
				for k := range got {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				t.Errorf("finding %s missing; have %v", c, keys)
			}
		}
	}
}

// TestFixtures grades the scenarios on shared clusters: one cluster serves
// every fixture that needs no special server setting (each in its own
// database), and doubles as the read-only proof.
func TestFixtures(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	defer func() { t.Logf("fixtures took %s", time.Since(t0)) }()
	c := pgtest.Start(t, pgtest.Options{
		NoFsync: true, // not a crash test; fsync only slows the fixtures down
		Settings: map[string]string{
			"log_statement":   "all",
			"log_line_prefix": "%m [%p] app=%a ",
			// Capped retention and no autovacuum keep the fixtures' output
			// stable: autovacuum would change size estimates between runs.
			"max_slot_wal_keep_size": "1GB",
			"autovacuum":             "off",
		},
		HBA: []string{"host all secretive 127.0.0.1/32 scram-sha-256"},
	})
	c.Exec(t,
		"CREATE ROLE plain LOGIN",
		"CREATE ROLE monitor LOGIN IN ROLE pg_monitor",
		"SET password_encryption = 'scram-sha-256'",
		"CREATE ROLE secretive LOGIN PASSWORD 'S3cr3t:pw@/x%'",
	)
	c.CreateDB(t, "healthy")
	c.ExecDB(t, "healthy",
		"CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL, placed_at timestamptz)",
		"CREATE TABLE customers (id int PRIMARY KEY, active bool)",
		"INSERT INTO orders SELECT g, g, now() FROM generate_series(1, 1000) g",
		"GRANT SELECT ON ALL TABLES IN SCHEMA public TO plain, monitor",
	)
	c.CreateDB(t, "nopk")
	c.ExecDB(t, "nopk",
		"CREATE TABLE events (at timestamptz, kind int)",
		"CREATE TABLE keyed (id int NOT NULL, x int)",
		"CREATE UNIQUE INDEX keyed_id ON keyed (id)",
		"CREATE TABLE ok (id int PRIMARY KEY)",
		"CREATE TABLE quiet (id int PRIMARY KEY)",
		"ALTER TABLE quiet REPLICA IDENTITY NOTHING",
	)
	c.CreateDB(t, "names")
	c.ExecDB(t, "names",
		`CREATE SCHEMA "Sch.ema ""Ü""; x"`,
		`CREATE TABLE "Sch.ema ""Ü""; x"."Sa.les ""T""; ü" ("Id" int PRIMARY KEY)`,
		`CREATE TABLE public."select" (id int PRIMARY KEY)`,
		`CREATE TABLE "Sch.ema ""Ü""; x"."No Key" (v int)`,
	)
	c.CreateDB(t, "toast")
	c.ExecDB(t, "toast",
		"CREATE DOMAIN longtext AS text",
		// Only body, meta, summary and note can hold a value past the TOAST
		// threshold: numeric, inet, short varchar and plain storage cannot.
		`CREATE TABLE docs (id int PRIMARY KEY, title varchar(200), body text, meta jsonb, price numeric,
			amount numeric(12,2), ip inet, code varchar(10), summary varchar(5000), pinned text, note longtext)`,
		"ALTER TABLE docs ALTER pinned SET STORAGE PLAIN",
		"CREATE TABLE blobs (tag int, data bytea)",
		"ALTER TABLE blobs REPLICA IDENTITY FULL",
	)

	t.Logf("cluster and fixtures ready after %s", time.Since(t0))
	before := snapshot(t, c, "healthy")
	url := func(user, db string) string {
		return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, c.Port(), db)
	}

	t.Run("healthy", func(t *testing.T) {
		text, js := checkBoth(t, c.URL("healthy"))
		expect(t, js, 0, "A")
		expect(t, text, 0, "A")
		golden(t, "healthy", text.stdout)
		if n := len(js.report["notes"].([]any)); n != 0 {
			t.Errorf("superuser run has %d notes: %v", n, js.report["notes"])
		}
	})
	t.Run("no_primary_key", func(t *testing.T) {
		text, js := checkBoth(t, c.URL("nopk"))
		expect(t, js, 1, "C", "no_replica_identity")
		f := findings(js.report)["no_replica_identity"]
		action := f["action"].(string)
		for _, want := range []string{
			"ALTER TABLE public.events REPLICA IDENTITY FULL;",
			"ALTER TABLE public.keyed REPLICA IDENTITY USING INDEX keyed_id;",
			"ALTER TABLE public.quiet REPLICA IDENTITY DEFAULT;",
		} {
			if !strings.Contains(action, want) {
				t.Errorf("action lacks %q:\n%s", want, action)
			}
		}
		if strings.Contains(action, "public.ok") {
			t.Errorf("table with a primary key listed: %s", action)
		}
		// Replica identity in words, in JSON and text alike.
		idents := map[string]string{}
		for _, tb := range js.report["tables"].([]any) {
			m := tb.(map[string]any)
			idents[m["name"].(string)] = m["replica_identity"].(string)
		}
		if want := map[string]string{"events": "default", "keyed": "default", "ok": "default", "quiet": "nothing"}; !reflect.DeepEqual(idents, want) {
			t.Errorf("replica_identity = %v, want %v", idents, want)
		}
		if !strings.Contains(text.stdout, "NO replica identity (nothing)") || regexp.MustCompile(`identity '?[dfin]'`).MatchString(text.stdout) {
			t.Errorf("replica identity not in words:\n%s", text.stdout)
		}
		golden(t, "no_primary_key", text.stdout)
	})
	t.Run("toast", func(t *testing.T) {
		text, js := checkBoth(t, c.URL("toast"))
		expect(t, js, 0, "A", "unchanged_toast", "replica_identity_full")
		note := findings(js.report)["unchanged_toast"]
		objs := fmt.Sprint(note["objects"])
		if objs != "[public.docs (body, meta, summary, note)]" {
			t.Errorf("unchanged_toast objects = %s, want only the columns that can exceed the TOAST threshold", objs)
		}
		if d := note["detail"].(string); !strings.Contains(d, "TOAST threshold (2032 bytes on this server)") || !strings.Contains(d, "Left out: numeric") {
			t.Errorf("the note does not explain its rule: %s", d)
		}
		for _, tb := range js.report["tables"].([]any) {
			m := tb.(map[string]any)
			if m["name"] == "docs" && fmt.Sprint(m["toast_columns"]) != "[body meta summary note]" {
				t.Errorf("tables[docs].toast_columns = %v", m["toast_columns"])
			}
		}
		golden(t, "toast", text.stdout)
	})
	t.Run("role_without_pg_monitor", func(t *testing.T) {
		text, js := checkBoth(t, url("plain", "healthy"))
		expect(t, js, 1, "C", "role_cannot_replicate", "no_pg_monitor")
		notes := fmt.Sprint(js.report["notes"])
		for _, want := range []string{"output_plugin_libraries", "pg_ls_waldir"} {
			if !strings.Contains(notes, want) {
				t.Errorf("notes do not say %s was hidden: %s", want, notes)
			}
		}
		golden(t, "role_without_pg_monitor", text.stdout)
	})
	t.Run("role_with_pg_monitor", func(t *testing.T) {
		text, js := checkBoth(t, url("monitor", "healthy"))
		expect(t, js, 1, "C", "role_cannot_replicate")
		if _, ok := findings(js.report)["no_pg_monitor"]; ok {
			t.Error("pg_monitor member reported as lacking pg_monitor")
		}
		if n := len(js.report["notes"].([]any)); n != 0 {
			t.Errorf("pg_monitor run has notes: %v", js.report["notes"])
		}
		golden(t, "role_with_pg_monitor", text.stdout)
	})
	t.Run("write_config", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "trellara.yml")
		r := runCheck(t, c.URL("nopk"), "--sample-seconds", sample, "--write-config", path)
		if r.code != 1 { // grade C; the config is still written (no critical blocker)
			t.Errorf("exit %d, want 1 (grade C)\n%s", r.code, r.stderr)
		}
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("config not written: %v\n%s", err, r.stderr)
		}
		for _, want := range []string{"version: 2\n", "database_url: {env: TRELLARA_SOURCE_URL}", `- "public.ok"`, `# left out "public.events": no_replica_identity`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("config lacks %q:\n%s", want, body)
			}
		}
		if r := runCheck(t, c.URL("nopk"), "--sample-seconds", sample, "--write-config", path); r.code != 2 {
			t.Errorf("overwrote an existing config: exit %d", r.code)
		}
	})
	t.Run("write_config_quoted_names", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "trellara.yml")
		r := runCheck(t, c.URL("names"), "--sample-seconds", sample, "--write-config", path)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("config not written (exit %d): %v\n%s", r.code, err, r.stderr)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("config written with mode %v, want 0600", fi.Mode().Perm())
		}
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse(body)
		if err != nil {
			t.Fatalf("the written config does not parse: %v\n%s", err, body)
		}
		want := []config.TableName{{Schema: "Sch.ema \"Ü\"; x", Name: "Sa.les \"T\"; ü"}, {Schema: "public", Name: "select"}}
		if !slices.Equal(cfg.Source.Tables, want) {
			t.Errorf("the written config names tables %v, want %v\n%s", cfg.Source.Tables, want, body)
		}
		if !strings.Contains(string(body), `# left out "\"Sch.ema \"\"Ü\"\"; x\".\"No Key\""`) {
			t.Errorf("the keyless table is not named in its parseable form:\n%s", body)
		}
	})
	t.Run("password_never_shown", func(t *testing.T) {
		const pw = "S3cr3t:pw@/x%"
		escaped := "S3cr3t%3Apw%40%2Fx%25"
		good := fmt.Sprintf("postgres://secretive:%s@127.0.0.1:%d/healthy?sslmode=disable", escaped, c.Port())
		bad := fmt.Sprintf("postgres://secretive:%s-wrong@127.0.0.1:%d/healthy?sslmode=disable", escaped, c.Port())
		malformed := fmt.Sprintf("postgres://secretive:%s@127.0.0.1:%d/healthy?sslmode=bogus", escaped, c.Port())
		kv := fmt.Sprintf("host=127.0.0.1 port=%d dbname=healthy user=secretive password=%s-wrong sslmode=disable", c.Port(), "S3cr3tKV")
		for _, tc := range []struct {
			name string
			args []string
			code int
		}{
			{"good", []string{good}, 1},
			{"good_json", []string{good, "--format", "json"}, 1},
			{"wrong", []string{bad}, 2},
			{"wrong_json", []string{bad, "--format", "json"}, 2},
			{"malformed", []string{malformed}, 2},
			{"keyvalue", []string{kv}, 2},
			{"bad_flag", []string{good, "--format", "yaml"}, 2},
		} {
			r := runCheck(t, append(tc.args, "--sample-seconds", sample)...)
			if r.code != tc.code {
				t.Errorf("%s: exit %d, want %d\n%s", tc.name, r.code, tc.code, r.stderr)
			}
			for _, secret := range []string{pw, escaped, "S3cr3tKV", "S3cr3t"} {
				if strings.Contains(r.stdout, secret) || strings.Contains(r.stderr, secret) {
					t.Errorf("%s: output contains the password (%q)\nstdout: %s\nstderr: %s", tc.name, secret, r.stdout, r.stderr)
				}
			}
		}
	})

	// Read-only proof: the catalogs we could have touched are unchanged, and
	// the server log shows only SELECT and SHOW from our sessions.
	t.Run("read_only_proof", func(t *testing.T) {
		after := snapshot(t, c, "healthy")
		for k := range before {
			if before[k] != after[k] {
				t.Errorf("%s changed during the checks:\nbefore: %s\nafter:  %s", k, before[k], after[k])
			}
		}
		stmts := ourStatements(t, c.LogPath())
		if len(stmts) < 20 {
			t.Fatalf("only %d statements from trellara-check found in the server log; log_line_prefix not applied?", len(stmts))
		}
		for _, s := range stmts {
			kw := strings.ToUpper(strings.Fields(s)[0])
			if kw != "SELECT" && kw != "SHOW" {
				t.Errorf("trellara-check issued a non-read statement: %s", s)
			}
			if m := writeCall.FindString(s); m != "" {
				t.Errorf("statement calls %s: %s", m, s)
			}
		}
	})
}

// writeCall matches functions that change state even inside a SELECT.
var writeCall = regexp.MustCompile(`(?i)\b(pg_create_\w+|pg_drop_\w+|pg_switch_wal|pg_\w*advisory\w*|pg_replication_origin_\w+|pg_logical_slot_get_\w+|pg_replication_slot_advance|pg_reload_conf|pg_terminate_backend|pg_cancel_backend|pg_stat_reset\w*|nextval|setval|set_config|lo_\w+|dblink\w*)\s*\(`)

// snapshot captures what a writing grader could have changed.
func snapshot(t *testing.T, c *pgtest.Cluster, db string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	out := map[string]string{}
	for name, q := range map[string]string{
		"pg_replication_slots": "SELECT coalesce(string_agg(slot_name || ':' || coalesce(restart_lsn::text, ''), ',' ORDER BY slot_name), '') FROM pg_replication_slots",
		"pg_publication":       "SELECT coalesce(string_agg(pubname, ',' ORDER BY pubname), '') FROM pg_publication",
		"pg_class":             "SELECT count(*)::text || ':' || coalesce(max(oid)::text, '') || ':' || md5(string_agg(relname::text || relkind::text, ',' ORDER BY oid)) FROM pg_class",
		"temp schemas":         "SELECT count(*)::text FROM pg_namespace WHERE nspname LIKE 'pg_temp_%' AND has_schema_privilege(oid, 'USAGE') AND EXISTS (SELECT 1 FROM pg_class WHERE relnamespace = pg_namespace.oid)",
	} {
		var v string
		if err := conn.QueryRow(ctx, q).Scan(&v); err != nil {
			t.Fatalf("snapshot %s: %v", name, err)
		}
		out[name] = v
	}
	return out
}

// ourStatements returns every statement logged for application_name
// trellara-check (multi-line statements joined).
func ourStatements(t *testing.T, logPath string) []string {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	inOurs := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	prefix := regexp.MustCompile(`^\d{4}-\d\d-\d\d \S+ \S+ \[\d+\] app=(\S*) (\w+):\s+(.*)$`)
	for sc.Scan() {
		line := sc.Text()
		m := prefix.FindStringSubmatch(line)
		if m == nil {
			// A continuation line of a multi-line statement.
			if inOurs && len(out) > 0 {
				out[len(out)-1] += " " + strings.TrimSpace(line)
			}
			continue
		}
		inOurs = false
		if m[1] != "trellara-check" {
			continue
		}
		if m[2] == "LOG" && strings.HasPrefix(m[3], "statement: ") {
			out = append(out, strings.TrimPrefix(m[3], "statement: "))
			inOurs = true
		} else if m[2] == "LOG" && (strings.HasPrefix(m[3], "execute") || strings.HasPrefix(m[3], "duration")) {
			t.Errorf("unexpected extended-protocol statement: %s", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWALLevelReplica: a server without logical decoding is graded F and
// --write-config refuses, naming the blocker.
func TestWALLevelReplica(t *testing.T) {
	t.Parallel()
	c := pgtest.Start(t, pgtest.Options{NoFsync: true, Settings: map[string]string{"wal_level": "replica", "max_slot_wal_keep_size": "1GB"}})
	c.Exec(t, "CREATE TABLE t (id int PRIMARY KEY)")
	text, js := checkBoth(t, c.URL("postgres"))
	expect(t, js, 1, "F", "wal_level_not_logical")
	f := findings(js.report)["wal_level_not_logical"]
	if f["severity"] != "critical" || !strings.Contains(f["action"].(string), "ALTER SYSTEM SET wal_level = logical;") {
		t.Errorf("wal_level finding: %v", f)
	}
	golden(t, "wal_level_replica", text.stdout)

	path := filepath.Join(t.TempDir(), "trellara.yml")
	r := runCheck(t, c.URL("postgres"), "--sample-seconds", sample, "--write-config", path)
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("config written despite a critical blocker")
	}
	if !strings.Contains(r.stderr, "critical blocker") || !strings.Contains(r.stderr, "wal_level is replica") {
		t.Errorf("refusal does not list the blocker:\n%s", r.stderr)
	}
}

// TestStalledSlot: an inactive slot retaining WAL with unbounded retention
// is a headroom risk named in hours; with a cap, hours until invalidation.
func TestStalledSlot(t *testing.T) {
	t.Parallel()
	c := pgtest.Start(t, pgtest.Options{NoFsync: true, Settings: map[string]string{"autovacuum": "off"}})
	c.Exec(t,
		"CREATE TABLE t (id bigserial PRIMARY KEY, v text)",
		"SELECT pg_create_logical_replication_slot('stalled_consumer', 'pgoutput')",
		"INSERT INTO t (v) SELECT repeat('x', 200) FROM generate_series(1, 20000)",
		"SELECT pg_switch_wal()",
		"INSERT INTO t (v) SELECT repeat('y', 200) FROM generate_series(1, 20000)",
	)
	// A steady writer, so the sampled rate is real rather than zero.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			_, _ = conn.Exec(ctx, "INSERT INTO t (v) SELECT repeat('z', 200) FROM generate_series(1, 20)")
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	t.Run("unbounded", func(t *testing.T) {
		text, js := checkBoth(t, c.URL("postgres"))
		expect(t, js, 1, "D", "slot_stalled_unbounded", "slot_wal_unbounded")
		f := findings(js.report)["slot_stalled_unbounded"]
		if !strings.Contains(f["title"].(string), "each GB of free disk lasts ~") {
			t.Errorf("headroom not named in time: %s", f["title"])
		}
		if !strings.Contains(f["action"].(string), "SELECT pg_drop_replication_slot('stalled_consumer');") ||
			!strings.Contains(f["action"].(string), "ALTER SYSTEM SET max_slot_wal_keep_size = ") {
			t.Errorf("action: %s", f["action"])
		}
		wal := js.report["wal"].(map[string]any)
		if h, ok := wal["hours_per_free_gib"].(float64); !ok || h <= 0 {
			t.Errorf("hours_per_free_gib = %v", wal["hours_per_free_gib"])
		}
		if r, _ := wal["retained_bytes"].(float64); r < 1<<20 {
			t.Errorf("retained_bytes = %v, want > 1 MiB", wal["retained_bytes"])
		}
		// A fresh server has no long-run WAL rate, so the advice rests on the
		// 4 GB floor whatever the writer did during the sample.
		adv, _ := wal["suggested_max_slot_wal_keep_size"].(map[string]any)
		if adv["value"] != "4GB" || !strings.Contains(f["action"].(string), "max_slot_wal_keep_size = '4GB';") ||
			!strings.Contains(fmt.Sprint(adv["derivation"]), "max(floor 4.0 GB, 2 × max_wal_size 1.0 GB = 2.0 GB") {
			t.Errorf("suggested cap %v", adv)
		}
		golden(t, "stalled_slot", text.stdout)
	})
	t.Run("capped", func(t *testing.T) {
		c.Exec(t, "ALTER SYSTEM SET max_slot_wal_keep_size = '256MB'", "SELECT pg_reload_conf()")
		text, js := checkBoth(t, c.URL("postgres"))
		// The writer makes WAL fast enough that 256MB lasts minutes: high.
		expect(t, js, 1, "D", "slot_inactive")
		wal := js.report["wal"].(map[string]any)
		if h, ok := wal["headroom_hours"].(float64); !ok || h <= 0 {
			t.Errorf("headroom_hours = %v", wal["headroom_hours"])
		}
		if !strings.Contains(findings(js.report)["slot_inactive"]["title"].(string), "invalidated in ~") {
			t.Errorf("slot_inactive title lacks hours: %v", findings(js.report)["slot_inactive"]["title"])
		}
		if low, ok := findings(js.report)["wal_headroom_low"]; ok {
			adv, _ := wal["suggested_max_slot_wal_keep_size"].(map[string]any)
			if !strings.Contains(low["action"].(string), fmt.Sprintf("max_slot_wal_keep_size = '%s';", adv["value"])) ||
				!strings.Contains(fmt.Sprint(adv["derivation"]), "2 × current max_slot_wal_keep_size 256 MB = 512 MB") {
				t.Errorf("headroom advice %v\naction: %s", adv, low["action"])
			}
		}
		golden(t, "stalled_slot_capped", text.stdout)
	})
}

func TestUnreachable(t *testing.T) {
	r := runCheck(t, "postgres://nobody:pw-unreachable@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", "--format", "json")
	if r.code != 2 {
		t.Errorf("exit %d, want 2", r.code)
	}
	if strings.Contains(r.stdout+r.stderr, "pw-unreachable") {
		t.Errorf("password in output: %s %s", r.stdout, r.stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || m["error"] == nil {
		t.Errorf("json error object expected, got %q (%v)", r.stdout, err)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		url     string
		format  string
		sample  float64
		wantErr string
	}{
		{args: []string{"postgres://h/db", "--format", "json"}, url: "postgres://h/db", format: "json", sample: 1},
		{args: []string{"--format=json", "postgres://h/db"}, url: "postgres://h/db", format: "json", sample: 1},
		{args: []string{"--format", "json", "postgres://h/db", "--sample-seconds", "2.5"}, url: "postgres://h/db", format: "json", sample: 2.5},
		{args: []string{"--sample-seconds=3", "--", "host=h dbname=d"}, url: "host=h dbname=d", format: "text", sample: 3},
		{args: []string{"-format", "json"}, format: "json", sample: 1}, // single dash still accepted
		{args: []string{"--format", "text"}, format: "text", sample: 1},
		{args: []string{"a", "b"}, wantErr: "at most one POSTGRES_URL"},
		{args: []string{"--format", "xml"}, wantErr: "--format must be text or json"},
		{args: []string{"--sample-seconds", "0"}, wantErr: "--sample-seconds must be in"},
		{args: []string{"--no-such-flag"}, wantErr: "not defined"},
	} {
		var out, errb bytes.Buffer
		f, url, done, err := parseArgs(tc.args, &out, &errb)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: err %v, want %q", tc.args, err, tc.wantErr)
			}
			if out.Len() != 0 {
				t.Errorf("%v: a usage error wrote to stdout: %q", tc.args, out.String())
			}
			continue
		}
		if err != nil || done {
			t.Errorf("%v: err %v done %v", tc.args, err, done)
			continue
		}
		if url != tc.url || f.format != tc.format || f.sampleSeconds != tc.sample {
			t.Errorf("%v: url %q format %q sample %g", tc.args, url, f.format, f.sampleSeconds)
		}
		if f.connectTimeout != 10*time.Second || f.statementTimeout != 5*time.Second {
			t.Errorf("%v: timeouts %s %s", tc.args, f.connectTimeout, f.statementTimeout)
		}
	}
}

// TestHelpOnStdout: --help and -h print the help on stdout and exit 0,
// listing every flag with two dashes.
func TestHelpOnStdout(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		r := runCheck(t, arg)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%s: exit %d, stderr %q", arg, r.code, r.stderr)
		}
		for _, want := range []string{"USAGE:", "trellara-check [POSTGRES_URL]", "--format", "--write-config PATH",
			"--connect-timeout", "--statement-timeout", "--sample-seconds", "--version", "Exit codes: 0 grade A/B"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s: help on stdout lacks %q:\n%s", arg, want, r.stdout)
			}
		}
	}
}

// TestVersion: --version prints the version string trellara prints, from
// the variables the build stamps into internal/buildinfo.
func TestVersion(t *testing.T) {
	saved := buildinfo.Version
	defer func() { buildinfo.Version = saved }()
	buildinfo.Version = "9.8.7-stamped"
	for _, arg := range []string{"--version", "-v"} {
		r := runCheck(t, arg)
		want := "trellara-check version " + buildinfo.String() + "\n"
		if r.code != 0 || r.stdout != want || r.stderr != "" {
			t.Errorf("%s: exit %d, stdout %q (want %q), stderr %q", arg, r.code, r.stdout, want, r.stderr)
		}
		if !strings.Contains(r.stdout, "9.8.7-stamped") {
			t.Errorf("%s: the stamped version is not printed: %q", arg, r.stdout)
		}
	}
	var tr bytes.Buffer
	trellara.Main([]string{"trellara", "--version"}, &tr, io.Discard)
	if got, _ := strings.CutPrefix(tr.String(), "trellara version "); got != strings.TrimPrefix(runCheck(t, "--version").stdout, "trellara-check version ") {
		t.Errorf("trellara and trellara-check disagree: %q vs %q", tr.String(), runCheck(t, "--version").stdout)
	}
}

// TestStandby grades a streaming standby: WAL position from the receiver,
// recovery conflicts read, and before 16 logical decoding there is a blocker.
func TestStandby(t *testing.T) {
	t.Parallel()
	p := pgtest.Start(t, pgtest.Options{NoFsync: true, Settings: map[string]string{"max_slot_wal_keep_size": "1GB", "autovacuum": "off"}})
	p.Exec(t, "CREATE TABLE t (id int PRIMARY KEY)")
	s := p.StartStandby(t, pgtest.Options{NoFsync: true, Settings: map[string]string{"max_slot_wal_keep_size": "1GB", "autovacuum": "off"}})
	text, js := checkBoth(t, s.URL("postgres"))
	wal := js.report["wal"].(map[string]any)
	if wal["lsn_source"] != "pg_last_wal_receive_lsn" || wal["current_lsn"] == "" {
		t.Errorf("wal on standby: %v", wal)
	}
	conf := js.report["conflicts"].(map[string]any)
	if conf["standby"] != true || conf["database_conflicts"] == nil {
		t.Errorf("conflicts on standby: %v", conf)
	}
	if s.Major() < 16 {
		expect(t, js, 1, "F", "standby_decoding_unsupported")
		golden(t, fmt.Sprintf("standby_pg%d", s.Major()), text.stdout)
	} else if _, bad := findings(js.report)["standby_decoding_unsupported"]; bad {
		t.Errorf("standby on %d flagged as unable to decode", s.Major())
	}
}
