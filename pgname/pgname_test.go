package pgname

import (
	"strings"
	"testing"
)

func TestParseQuoteRoundTrip(t *testing.T) {
	for in, want := range map[string]Name{
		"Public.Sales":        {Schema: "public", Name: "sales"},
		`"Public"."Sales"`:    {Schema: "Public", Name: "Sales"},
		`public."line.items"`: {Schema: "public", Name: "line.items"},
		`public."select"`:     {Schema: "public", Name: "select"},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Fatalf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := Parse(got.String()); err != nil || back != got {
			t.Errorf("Parse(%q.String()) = %v, %v", in, back, err)
		}
	}
	for _, in := range []string{"sales", "public.", `public."x`, "a.b.c", "public." + strings.Repeat("x", MaxIdentifierBytes+1)} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, got)
		}
	}
	if got := (Name{Schema: "s", Name: `a"b`}).Sanitize(); got != `"s"."a""b"` {
		t.Errorf("Sanitize = %s", got)
	}
}

// FuzzParse: every name Parse accepts prints to a text Parse reads back to
// the same name, so the one printed form is also the stored form.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"public.sales", `"A"."b.c"`, `public."a""b"`, "x.y$1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		back, err := Parse(n.String())
		if err != nil || back != n {
			t.Fatalf("Parse(%q) = %v; Parse(%q) = %v, %v", s, n, n.String(), back, err)
		}
	})
}
