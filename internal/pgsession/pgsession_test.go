package pgsession_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/trellara/trellara/internal/pgsession"
	"github.com/trellara/trellara/internal/pgtest"
)

// required is every setting that changes a value's text, with the value
// Trellara's log, applier and verify assume. Written out here so that
// dropping or changing one in the package goes red.
var required = map[string]string{
	"client_encoding":             "UTF8",
	"DateStyle":                   "ISO, YMD",
	"IntervalStyle":               "postgres",
	"extra_float_digits":          "3",
	"TimeZone":                    "UTC",
	"bytea_output":                "hex",
	"lc_monetary":                 "C",
	"xmloption":                   "content",
	"array_nulls":                 "on",
	"standard_conforming_strings": "on",
}

func TestPinnedHasEveryRequiredSetting(t *testing.T) {
	have := map[string]string{}
	for _, s := range pgsession.Pinned() {
		if _, dup := have[strings.ToLower(s.Name)]; dup {
			t.Errorf("%s is pinned twice", s.Name)
		}
		have[strings.ToLower(s.Name)] = s.Value
		if s.Why == "" {
			t.Errorf("%s: no reason given", s.Name)
		}
	}
	for name, want := range required {
		got, ok := have[strings.ToLower(name)]
		switch {
		case !ok:
			t.Errorf("%s is not pinned", name)
		case got != want:
			t.Errorf("%s pinned to %q, want %q", name, got, want)
		}
	}
}

func TestPinReplacesEverySpelling(t *testing.T) {
	cfg, err := pgconn.ParseConfig("postgres://u@localhost/db?datestyle=SQL&TIMEZONE=Asia/Kolkata&application_name=mine")
	if err != nil {
		t.Fatal(err)
	}
	pgsession.Pin(cfg)
	for k, v := range cfg.RuntimeParams {
		if want, ok := required[k]; ok && v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
	for _, gone := range []string{"datestyle", "TIMEZONE"} {
		if v, ok := cfg.RuntimeParams[gone]; ok {
			t.Errorf("the connection string's %s = %q is still sent beside the pinned value", gone, v)
		}
	}
	for name, want := range required {
		if cfg.RuntimeParams[name] != want {
			t.Errorf("%s = %q, want %q", name, cfg.RuntimeParams[name], want)
		}
	}
	if cfg.RuntimeParams["application_name"] != "mine" {
		t.Errorf("an unrelated parameter was touched: %v", cfg.RuntimeParams)
	}
	if cfg.AfterConnect == nil {
		t.Error("Pin does not confirm the settings after connecting")
	}
}

// The pinned settings win over every other place a setting can come from —
// database, role, the connection string's options and parameters — on
// ordinary and replication connections, and Confirm refuses a session that
// runs without them (what a pooler that drops startup parameters gives).
func TestPinnedSettingsWinOnARealServer(t *testing.T) {
	pgtest.Require(t)
	c := pgtest.Start(t, pgtest.Options{NoFsync: true})
	c.Exec(t,
		`ALTER DATABASE postgres SET DateStyle = 'SQL, DMY'`,
		`ALTER DATABASE postgres SET IntervalStyle = 'sql_standard'`,
		`ALTER DATABASE postgres SET extra_float_digits = 0`,
		`ALTER DATABASE postgres SET TimeZone = 'Asia/Kolkata'`,
		`ALTER DATABASE postgres SET bytea_output = 'escape'`,
		`ALTER DATABASE postgres SET client_encoding = 'LATIN1'`,
		`ALTER DATABASE postgres SET xmloption = 'document'`,
		`ALTER ROLE postgres SET array_nulls = off`,
		`ALTER ROLE postgres SET standard_conforming_strings = off`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	monetary := hostileMonetary(ctx, t, c)
	// What the same query shows in each session: the ISO forms once pinned.
	const sample = `SELECT pg_catalog.current_setting('client_encoding'), pg_catalog.current_setting('DateStyle'),
		pg_catalog.current_setting('IntervalStyle'), pg_catalog.current_setting('extra_float_digits'),
		pg_catalog.current_setting('TimeZone'), pg_catalog.current_setting('bytea_output'),
		pg_catalog.current_setting('lc_monetary'), pg_catalog.current_setting('xmloption'),
		pg_catalog.current_setting('array_nulls'), pg_catalog.current_setting('standard_conforming_strings'),
		'2024-01-13'::date::text, '-1 day -02:00:00'::interval::text, (1/3::float8)::text,
		'2024-02-29 12:00:00+00'::timestamptz::text, E'\\x00ff'::bytea::text`
	names := []string{"client_encoding", "DateStyle", "IntervalStyle", "extra_float_digits", "TimeZone",
		"bytea_output", "lc_monetary", "xmloption", "array_nulls", "standard_conforming_strings"}
	isoValues := []string{"2024-01-13", "-1 days -02:00:00", "0.3333333333333333", "2024-02-29 12:00:00+00", `\x00ff`}
	read := func(conn *pgconn.PgConn) []string {
		t.Helper()
		res, err := conn.Exec(ctx, sample).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range res[0].Rows[0] {
			out = append(out, string(v))
		}
		return out
	}

	// Unpinned, the hostile settings are in force: the test's premise.
	plain, err := pgconn.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(context.Background())
	got := read(plain)
	for i, name := range names {
		if got[i] == required[name] && !(name == "lc_monetary" && !monetary) {
			t.Errorf("unpinned session already has %s = %s; the test proves nothing for it", name, got[i])
		}
	}
	if err := pgsession.Confirm(ctx, plain); err == nil {
		t.Error("Confirm accepted a session without the pinned settings")
	} else if !strings.Contains(err.Error(), "DateStyle") {
		t.Errorf("Confirm does not name the setting: %v", err)
	}

	// Pinned, over a connection string that asks for other values twice.
	hostileURL := c.URL("postgres") + "&DATESTYLE=German&options=" + strings.ReplaceAll(
		url.QueryEscape("-c IntervalStyle=iso_8601 -c TimeZone=America/St_Johns -c extra_float_digits=-3"), "+", "%20")
	for _, u := range []string{hostileURL, hostileURL + "&replication=database"} {
		cfg, err := pgconn.ParseConfig(u)
		if err != nil {
			t.Fatal(err)
		}
		pgsession.Pin(cfg)
		conn, err := pgconn.ConnectConfig(ctx, cfg) // Confirm runs here
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		got := read(conn)
		conn.Close(context.Background())
		for i, name := range names {
			if got[i] != required[name] {
				t.Errorf("%s: %s = %q, want %q", u, name, got[i], required[name])
			}
		}
		for i, want := range isoValues {
			if g := got[len(names)+i]; g != want {
				t.Errorf("%s: value %d renders as %q, want %q", u, i, g, want)
			}
		}
	}
}

// hostileMonetary sets lc_monetary of database postgres to an installed
// locale other than C, and reports whether one exists.
func hostileMonetary(ctx context.Context, t *testing.T, c *pgtest.Cluster) bool {
	t.Helper()
	conn, err := pgconn.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, l := range []string{"de_DE.utf8", "de_DE.UTF-8", "fr_FR.utf8", "fr_FR.UTF-8", "nl_NL.utf8", "ja_JP.utf8"} {
		if _, err := conn.Exec(ctx, "ALTER DATABASE postgres SET lc_monetary = '"+l+"'").ReadAll(); err == nil {
			return true
		}
	}
	t.Log("no locale other than C is installed: a hostile lc_monetary is not exercised (the pinned value still is)")
	return false
}
