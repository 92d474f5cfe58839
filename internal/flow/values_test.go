package flow_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/internal/pgtest"
)

// isoSettings is the oracle's view: the settings under which the test reads
// and writes values. Spelled out here, not taken from the code under test,
// so that dropping a pinned setting there cannot also change the oracle.
var isoSettings = map[string]string{
	"client_encoding": "UTF8", "DateStyle": "ISO, YMD", "IntervalStyle": "postgres",
	"extra_float_digits": "3", "TimeZone": "UTC", "bytea_output": "hex", "lc_monetary": "C",
	"xmloption": "content", "array_nulls": "on", "standard_conforming_strings": "on",
}

// isoConn opens a connection to database postgres under isoSettings.
func isoConn(t *testing.T, c *pgtest.Cluster) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range isoSettings {
		cfg.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func execAll(t *testing.T, conn *pgx.Conn, sql ...string) {
	t.Helper()
	for _, s := range sql {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
	}
}

// hostile sets each setting at the database level, where every new session
// (Trellara's included) picks it up unless it pins its own.
func hostile(t *testing.T, conn *pgx.Conn, settings [][2]string) {
	t.Helper()
	for _, kv := range settings {
		execAll(t, conn, "ALTER DATABASE postgres SET "+kv[0]+" = '"+kv[1]+"'")
	}
}

// nonCMonetaryLocale returns an installed locale whose money text differs
// from C's, or "" when the machine has none.
func nonCMonetaryLocale(t *testing.T, conn *pgx.Conn) string {
	for _, l := range []string{"de_DE.utf8", "de_DE.UTF-8", "fr_FR.utf8", "fr_FR.UTF-8", "nl_NL.utf8", "ja_JP.utf8"} {
		var got string
		if err := conn.QueryRow(context.Background(), `SELECT set_config('lc_monetary', $1, false)`, l).Scan(&got); err == nil {
			execAll(t, conn, `RESET lc_monetary`)
			return l
		}
	}
	return ""
}

// kindsColumns are every column of the kinds table, in order.
const kindsColumns = `id, arr, tarr, nul, j, jb, n, b, ts, tsn, d, tm, ttz, iv, ivs, e, dom, t, u, f, f4, pt, m, x, r, dr, tr, total`

// Every type of TestTypesEndToEnd, and the ones whose text depends on a
// session setting, cross snapshot and stream while both databases set every
// such setting to something else: different on each side, so a value
// rendered by one and read by the other under their own settings would be
// changed or refused. The target must hold exactly the source's values.
func TestTypesUnderHostileSessionSettings(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	sc, dc := isoConn(t, src), isoConn(t, dst)
	ddl := []string{
		`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`,
		`CREATE DOMAIN positive AS int CHECK (VALUE > 0)`,
	}
	execAll(t, sc, ddl...)
	execAll(t, dc, ddl...)
	execAll(t, sc, `CREATE TABLE kinds (
		id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		arr int[], tarr text[], nul text[], j json, jb jsonb, n numeric(20,6), b bytea,
		ts timestamptz, tsn timestamp, d date, tm time, ttz timetz, iv interval, ivs interval[],
		e mood, dom positive, t text, u uuid, f float8, f4 float4, pt point, m money, x xml,
		r int4range, dr daterange, tr tstzrange,
		total int GENERATED ALWAYS AS (dom * 2) STORED)`)
	const cols = `arr, tarr, nul, j, jb, n, b, ts, tsn, d, tm, ttz, iv, ivs, e, dom, t, u, f, f4, pt, m, x, r, dr, tr`
	// Written under ISO settings: day above 12 and at most 12, negative and
	// mixed-sign intervals, thirds in both float widths, a NULL array
	// element, an XML fragment, non-ASCII text.
	insert := `INSERT INTO kinds (` + cols + `) VALUES
		('{1,2,NULL}', '{"a b","c,d","","NULL"}', '{x,NULL}', '{"k": [1, "x"]}', '{"k": {"z": null}}', 12345.678901,
		 '\x00ff105c27', '2024-02-29 12:34:56.789+05:30', '2024-01-02 03:04:05.678901', '2024-01-13', '23:59:59.999999',
		 '12:00:00+05:30', '-1 day -02:00:00', '{"-1 day +02:00:00","1 mon -3 days 04:05:06.5"}', 'happy', 7,
		 E'tab\there\nnewline \\ backslash caf\u00e9', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 1/3::float8, (1/3.0)::float4,
		 '(0.1,-2.5e-7)', 1234567.89, 'a<b>c</b>d', '[1,10)', '[2024-01-02,2024-12-31)',
		 '[2024-01-02 00:00:00+00,2024-01-13 23:30:00-03:30)'),
		('{}', '{}', '{NULL}', 'null', '[]', 0, '', '-infinity', 'infinity', '2024-01-02', '00:00',
		 '00:00:00-09:30', '-1 day +02:00:00', '{}', 'sad', 1, '', NULL, 'NaN', '-0', '(0,0)', -0.01, '<r/>', 'empty', 'empty', NULL),
		(NULL, NULL, NULL, NULL, NULL, NULL, NULL, '0044-03-15 12:00:00+00 BC', NULL, '0044-03-15 BC', NULL, NULL,
		 '-00:00:00.000001', NULL, 'ok', 2, NULL, NULL, 2/3::float8, 1e-40::float4, NULL, NULL, NULL, NULL, NULL, NULL)`
	execAll(t, sc, insert)

	srcHostile := [][2]string{
		{"DateStyle", "SQL, DMY"}, {"IntervalStyle", "sql_standard"}, {"extra_float_digits", "0"},
		{"TimeZone", "Asia/Kolkata"}, {"bytea_output", "escape"}, {"client_encoding", "LATIN1"},
		{"xmloption", "document"}, {"array_nulls", "off"},
	}
	if l := nonCMonetaryLocale(t, sc); l != "" {
		srcHostile = append(srcHostile, [2]string{"lc_monetary", l})
	} else {
		t.Log("no locale other than C is installed: lc_monetary stays C on both sides, so money crosses " +
			"but a hostile lc_monetary is not exercised here")
	}
	hostile(t, sc, srcHostile)
	hostile(t, dc, [][2]string{
		{"DateStyle", "SQL, MDY"}, {"IntervalStyle", "postgres_verbose"}, {"extra_float_digits", "-3"},
		{"TimeZone", "America/St_Johns"}, {"bytea_output", "escape"}, {"client_encoding", "WIN1251"},
		{"xmloption", "document"}, {"array_nulls", "off"}, {"standard_conforming_strings", "off"},
	})

	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	run := mustRunner(t, bin, dir)
	run("init", "--source-database-url", src.URL("postgres"), "--target-database-url", dst.URL("postgres"),
		"--table", "public.kinds", "--flow", "kinds", "--evaluate", "--output", cfg)
	run("run", "--config", cfg, "--local")
	// The stream: the snapshot's rows again, fresh literals, an update
	// that touches some, a delete.
	execAll(t, sc, `INSERT INTO kinds (`+cols+`) SELECT `+cols+` FROM kinds`, insert,
		`UPDATE kinds SET e = 'ok', jb = jb || '{"more": true}', n = n + 1, d = d + 11,
		 iv = iv - interval '3 hours', f = f / 3, ts = ts + interval '1 minute' WHERE id % 2 = 0`,
		`DELETE FROM kinds WHERE id = 3`)
	if out := run("run", "--config", cfg, "--local", "--verify"); !strings.Contains(out, "CONVERGED") {
		t.Fatalf("not converged:\n%s", out)
	}

	rows := func(conn *pgx.Conn) []string {
		t.Helper()
		r, err := conn.Query(context.Background(), `SELECT ROW(`+kindsColumns+`)::text FROM kinds ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want, got := rows(sc), rows(dc)
	if len(want) != 8 {
		t.Fatalf("source has %d rows, want 8", len(want))
	}
	if !slices.Equal(want, got) {
		for i := range max(len(want), len(got)) {
			var w, g string
			if i < len(want) {
				w = want[i]
			}
			if i < len(got) {
				g = got[i]
			}
			if w != g {
				t.Errorf("row %d differs\nsource: %s\ntarget: %s", i, w, g)
			}
		}
	}
	// The values the defect changed, spelled out: the comparison above
	// would also pass if both sides had been written wrong.
	var d, iv, f, f4, nul, mny string
	if err := dc.QueryRow(context.Background(), `SELECT d::text, iv::text, f::text, f4::text, nul::text, m::text
		FROM kinds WHERE id = 1`).Scan(&d, &iv, &f, &f4, &nul, &mny); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][3]string{
		{"date", d, "2024-01-13"}, {"interval", iv, "-1 days -02:00:00"}, {"float8", f, "0.3333333333333333"},
		{"float4", f4, "0.33333334"}, {"text[]", nul, "{x,NULL}"}, {"money", mny, "$1,234,567.89"},
	} {
		if c[1] != c[2] {
			t.Errorf("target %s = %s, want %s", c[0], c[1], c[2])
		}
	}
}
