package config

import "testing"

func TestParseTableName(t *testing.T) {
	ok := map[string]TableName{
		"public.sales":        {"public", "sales"},
		"Public.Sales":        {"public", "sales"},
		`"Public"."Sales"`:    {"Public", "Sales"},
		`public."line.items"`: {"public", "line.items"},
		`public."a""b"`:       {"public", `a"b`},
		"s1.t$2":              {"s1", "t$2"},
		`"my schema".t`:       {"my schema", "t"},
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
	if got := (TableName{"public", "Sales"}).String(); got != `public."Sales"` {
		t.Errorf("String = %s", got)
	}
}
