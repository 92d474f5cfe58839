package config

import (
	"strings"
	"testing"
)

func TestSinksParse(t *testing.T) {
	c, err := Parse([]byte(readTestdata(t, "sinks.yml")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Target != nil {
		t.Errorf("Target = %+v, want nil with sinks", c.Target)
	}
	if got := strings.Join(c.SinkNames(), ","); got != "reporting,search" {
		t.Fatalf("sinks = %s, want reporting,search (file order)", got)
	}
	rep, _ := c.Sink("reporting")
	search, _ := c.Sink("search")
	for _, tc := range []struct{ name, got, want string }{
		{"reporting cursor", rep.Cursor(), "applier.reporting"},
		{"search cursor", search.Cursor(), "applier.search"},
		{"reporting listen (base port + index 0)", rep.Listen, DefaultApplierListen},
		{"search listen (set)", search.Listen, "127.0.0.1:9510"},
		{"reporting mode", string(rep.Target.Mode), "strict"},
		{"reporting schema", rep.Target.Schema, DefaultTargetSchema},
		{"search mode", string(search.Target.Mode), "partitioned"},
		{"search schema", search.Target.Schema, "trellara_meta"},
		{"reporting url", rep.Target.DatabaseURL.Env, "TRELLARA_REPORTING_URL"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// A single target section is the sink named default, whose cursor keeps
// the name flows have always used.
func TestSingleTargetIsDefaultSink(t *testing.T) {
	c, err := Parse([]byte(readTestdata(t, "local.yml")))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sinks) != 1 || c.Sinks[0].Name != DefaultSinkName || c.Sinks[0].Target != c.Target {
		t.Fatalf("sinks = %+v, want the target as sink default", c.Sinks)
	}
	if got := c.Sinks[0].Cursor(); got != "applier" {
		t.Errorf("cursor = %q, want applier", got)
	}
	if c.Sinks[0].Listen != DefaultApplierListen {
		t.Errorf("listen = %q, want %q", c.Sinks[0].Listen, DefaultApplierListen)
	}
	// Written as sinks: {default: ...}, the flow keeps the same cursor.
	d, err := Parse([]byte(edit(t, readTestdata(t, "local.yml"), "target:\n", "sinks:\n default:\n  target:\n  ",
		"  mode: strict\n", "    mode: strict\n")))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Sinks[0].Cursor(); got != "applier" {
		t.Errorf("sinks.default cursor = %q, want applier", got)
	}
}

func TestSinksDefaultListenIsBasePlusIndex(t *testing.T) {
	c, err := Parse([]byte(edit(t, readTestdata(t, "sinks.yml"), "    listen: 127.0.0.1:9510\n", "") +
		"run: {listen: {applier: ':9600'}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := c.Sinks[0].Listen, c.Sinks[1].Listen; a != ":9600" || b != ":9601" {
		t.Errorf("listen = %q, %q; want :9600, :9601", a, b)
	}
}

func TestSinksErrors(t *testing.T) {
	sinks := readTestdata(t, "sinks.yml")
	local := readTestdata(t, "local.yml")
	tests := []struct {
		name string
		in   string
		path string
		line int
		want string
	}{
		{"bad name", edit(t, sinks, "  search:\n", "  Search!:\n"), "sinks.Search!", 13, "not a valid sink name"},
		{"duplicate", edit(t, sinks, "  search:\n", "  reporting:\n"), "sinks.reporting", 13, "duplicate sink (first named on line 11)"},
		{"empty", edit(t, sinks, "  reporting:\n    target: {database_url: {env: TRELLARA_REPORTING_URL}}\n  search:\n    target:\n      database_url: {env: TRELLARA_SEARCH_URL}\n      mode: partitioned\n      schema: trellara_meta\n    listen: 127.0.0.1:9510\n", ""),
			"sinks", 10, "is empty"},
		{"list", edit(t, sinks, "  reporting:\n    target: {database_url: {env: TRELLARA_REPORTING_URL}}\n  search:\n    target:\n      database_url: {env: TRELLARA_SEARCH_URL}\n      mode: partitioned\n      schema: trellara_meta\n    listen: 127.0.0.1:9510\n", "  - reporting\n"),
			"sinks", 11, "must be a mapping"},
		{"unknown key", edit(t, sinks, "    listen: 127.0.0.1:9510\n", "    listn: 127.0.0.1:9510\n"), "sinks.search.listn", 18, "did you mean listen?"},
		{"no target", edit(t, sinks, "    target: {database_url: {env: TRELLARA_REPORTING_URL}}\n", "    listen: 127.0.0.1:9520\n"), "sinks.reporting.target", 11, "required"},
		{"no database_url", edit(t, sinks, "{database_url: {env: TRELLARA_REPORTING_URL}}", "{mode: strict}"), "sinks.reporting.target.database_url", 12, "required"},
		{"bad mode", edit(t, sinks, "mode: partitioned", "mode: eventual"), "sinks.search.target.mode", 16, "must be strict or partitioned"},
		{"same database", edit(t, sinks, "TRELLARA_SEARCH_URL", "TRELLARA_REPORTING_URL"), "sinks.search.target.database_url", 15, "same database as sink reporting"},
		{"same listen as relay", edit(t, sinks, "listen: 127.0.0.1:9510", "listen: 127.0.0.1:9401"), "sinks.search.listen", 18, "same address as run.listen.relay"},
		{"same listen as sink", edit(t, sinks, "listen: 127.0.0.1:9510", "listen: 127.0.0.1:9402"), "sinks.search.listen", 18, "same address as sink reporting's applier"},
		{"bad listen", edit(t, sinks, "listen: 127.0.0.1:9510", "listen: 9510"), "sinks.search.listen", 18, "not host:port"},
		{"target and sinks", local + "sinks:\n  reporting:\n    target: {database_url: {env: TRELLARA_REPORTING_URL}}\n", "sinks", 17, "cannot be combined with target: (line 12)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatal("no error")
			}
			errs := validationErrors(t, err)
			for _, e := range errs {
				if e.Path == tc.path && strings.Contains(e.Message, tc.want) {
					if e.Line != tc.line {
						t.Errorf("line = %d, want %d: %v", e.Line, tc.line, e)
					}
					return
				}
			}
			t.Fatalf("no error at %q containing %q; got:\n%v", tc.path, tc.want, err)
		})
	}
}

func TestSinksSecretsResolvePerSink(t *testing.T) {
	c, err := Parse([]byte(readTestdata(t, "sinks.yml")))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TRELLARA_SOURCE_URL": "postgres://s/db", "TRELLARA_REPORTING_URL": "postgres://r/db"}
	_, err = c.ResolveSecretsWith(fakeResolver{env: env})
	if err == nil || !strings.Contains(err.Error(), "sinks.search.target.database_url") {
		t.Fatalf("err = %v, want the unresolved sinks.search.target.database_url named", err)
	}
	env["TRELLARA_SEARCH_URL"] = "postgres://q/db"
	sec, err := c.ResolveSecretsWith(fakeResolver{env: env})
	if err != nil {
		t.Fatal(err)
	}
	if got := sec.SinkDatabaseURLs["search"].Reveal(); got != "postgres://q/db" {
		t.Errorf("search url = %q", got)
	}
	if got := sec.TargetDatabaseURL.Reveal(); got != "postgres://r/db" {
		t.Errorf("TargetDatabaseURL = %q, want the first sink's", got)
	}
}

func TestSinksMarshalRoundTrip(t *testing.T) {
	c, err := Parse([]byte(readTestdata(t, "sinks.yml")))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if strings.Join(d.SinkNames(), ",") != "reporting,search" || d.Sinks[1].Target.Mode != ModePartitioned || d.Sinks[1].Listen != "127.0.0.1:9510" {
		t.Errorf("round trip lost sinks: %+v", d.Sinks)
	}
}
