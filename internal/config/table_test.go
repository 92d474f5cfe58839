package config

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestParseTableName(t *testing.T) {
	ok := map[string]TableName{
		"public.sales":        {Schema: "public", Name: "sales"},
		"Public.Sales":        {Schema: "public", Name: "sales"},
		`"Public"."Sales"`:    {Schema: "Public", Name: "Sales"},
		`public."line.items"`: {Schema: "public", Name: "line.items"},
		`public."a""b"`:       {Schema: "public", Name: `a"b`},
		"s1.t$2":              {Schema: "s1", Name: "t$2"},
		`"my schema".t`:       {Schema: "my schema", Name: "t"},
	}
	for in, want := range ok {
		got, err := ParseTableName(in)
		if err != nil || got != want {
			t.Errorf("ParseTableName(%q) = %v, %v; want %v", in, got, err, want)
		}
		back, err := ParseTableName(got.String())
		if err != nil || back != got {
			t.Errorf("round trip %q via %q: %v %v", in, got.String(), back, err)
		}
	}
	for _, in := range []string{"", "sales", "public.", ".sales", "a.b.c", `"".t`, `"unterminated.t`, "1s.t", "public.sales ",
		"public.sales;drop", "public." + string(make([]byte, 64))} {
		if got, err := ParseTableName(in); err == nil {
			t.Errorf("ParseTableName(%q) = %v, want error", in, got)
		}
	}
	if got := (TableName{Schema: "public", Name: "Sales"}).String(); got != `public."Sales"` {
		t.Errorf("String = %s", got)
	}
}

// Every name PostgreSQL accepts — mixed case, dots, quotes, spaces,
// semicolons, keywords, non-ASCII — renders to a text form that parses back
// to the same table, and to SQL that is exactly pgx's quoting.
func TestTableNameRoundTrip(t *testing.T) {
	parts := []string{"sales", "Sales", "a.b", `a"b`, `"`, "with space", "x; DROP TABLE y", "select", "user", "ünï", "日本",
		"t$1", "_x", "1abc", "a\nb", `""."`, "A.B.C"}
	for _, s := range parts {
		for _, n := range parts {
			tn := TableName{Schema: s, Name: n}
			back, err := ParseTableName(tn.String())
			if err != nil || back != tn {
				t.Errorf("%#v: String %q parses to %#v, %v", tn, tn.String(), back, err)
			}
			if got, want := tn.Sanitize(), (pgx.Identifier{s, n}).Sanitize(); got != want {
				t.Errorf("%#v: Sanitize %q, pgx %q", tn, got, want)
			}
		}
	}
	for in, want := range map[string]string{"select": `"select"`, "sales": "sales", "Sales": `"Sales"`, "a b": `"a b"`, `a"b`: `"a""b"`} {
		if got := QuoteIdent(in); got != want {
			t.Errorf("QuoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzTableName: whatever ParseTableName accepts renders back to itself.
func FuzzTableName(f *testing.F) {
	for _, s := range []string{"public.sales", `"Sch.ema ""Ü""; x"."Sa.les ""T""; ü"`, `public."select"`, `"a"."b"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tn, err := ParseTableName(s)
		if err != nil {
			return
		}
		back, err := ParseTableName(tn.String())
		if err != nil || back != tn {
			t.Fatalf("%q -> %#v -> %q -> %#v, %v", s, tn, tn.String(), back, err)
		}
	})
}
