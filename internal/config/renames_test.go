package config

import (
	"reflect"
	"strings"
	"testing"
)

// schema.renames: parsed into ColumnRename values, written back by Marshal,
// and every mistake reported at the entry's field with the fix.
func TestSchemaRenames(t *testing.T) {
	local := readTestdata(t, "local.yml")
	with := func(entries string) string {
		return edit(t, local, "  unknown_table_policy: block\n", "  unknown_table_policy: block\n  renames:\n"+entries)
	}
	c, err := Parse([]byte(with("    - table: public.sales\n      from: note\n      to: remark\n    - {table: '\"public\".\"line_items\"', from: Qty, to: quantity}\n")))
	if err != nil {
		t.Fatal(err)
	}
	want := []ColumnRename{{TableName{Schema: "public", Name: "sales"}, "note", "remark"}, {TableName{Schema: "public", Name: "line_items"}, "Qty", "quantity"}}
	if !reflect.DeepEqual(c.Schema.Renames, want) {
		t.Fatalf("renames = %+v, want %+v", c.Schema.Renames, want)
	}
	out := roundTrip(t, c)
	if !strings.Contains(string(out), "renames:") || !strings.Contains(string(out), "from: Qty") {
		t.Fatalf("Marshal did not write the renames:\n%s", out)
	}

	tests := []struct {
		name, entries, path string
		line                int
		want, fix           string
	}{
		{"not a list", "    table: public.sales\n", "schema.renames", 18, "must be a list", "- {table: public.orders, from: note, to: remark}"},
		{"entry not a mapping", "    - public.sales\n", "schema.renames[0]", 18, "must be a mapping", "{table: public.orders, from: note, to: remark}"},
		{"unknown key", "    - {table: public.sales, form: note, to: remark}\n", "schema.renames[0].form", 18, "did you mean from?", "docs/CONFIG.md"},
		{"table missing", "    - {from: note, to: remark}\n", "schema.renames[0].table", 18, "required", "table: public.orders"},
		{"table unqualified", "    - {table: sales, from: note, to: remark}\n", "schema.renames[0].table", 18, "must be schema-qualified", "public.orders"},
		{"table not configured", "    - {table: public.orders, from: note, to: remark}\n", "schema.renames[0].table", 18,
			`"public.orders" is not one of source.tables`, "add public.orders to source.tables"},
		{"from missing", "    - {table: public.sales, to: remark}\n", "schema.renames[0].from", 18, "required", "from: note"},
		{"to missing", "    - {table: public.sales, from: note}\n", "schema.renames[0].to", 18, "required", "to: remark"},
		{"from is to", "    - {table: public.sales, from: note, to: note}\n", "schema.renames[0].to", 18, `the same as from ("note")`, "new name"},
		{"too long", "    - {table: public.sales, from: note, to: " + strings.Repeat("x", 64) + "}\n", "schema.renames[0].to", 18, "63-byte", "at most 63 bytes"},
		{"from twice", "    - {table: public.sales, from: note, to: remark}\n    - {table: PUBLIC.sales, from: note, to: memo}\n",
			"schema.renames[1].from", 19, "already renamed by schema.renames[0]", "keep one entry per renamed column"},
		{"to twice", "    - {table: public.sales, from: note, to: remark}\n    - {table: public.sales, from: memo, to: remark}\n",
			"schema.renames[1].to", 19, "already the new name in schema.renames[0]", "keep one entry per renamed column"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(with(tc.entries)))
			if err == nil {
				t.Fatal("no error")
			}
			errs := validationErrors(t, err)
			e := errs[0]
			for _, x := range errs {
				if x.Path == tc.path {
					e = x
				}
			}
			if e.Path != tc.path || !strings.Contains(e.Message, tc.want) || !strings.Contains(e.Message, tc.path) ||
				!strings.Contains(e.Fix, tc.fix) || (tc.line != 0 && e.Line != tc.line) {
				t.Fatalf("got %q at %s line %d (fix %q), want %q at %s line %d (fix containing %q)", e.Message, e.Path, e.Line, e.Fix,
					tc.want, tc.path, tc.line, tc.fix)
			}
		})
	}
	// The same column renamed in two tables is two renames.
	two := with("    - {table: public.sales, from: note, to: remark}\n    - {table: public.line_items, from: note, to: remark}\n")
	if _, err := Parse([]byte(two)); err != nil {
		t.Fatal(err)
	}

	// RenamesYAML writes the section a message tells the user to add: in
	// place of the file's schema section, it reads back as the renames.
	odd := []ColumnRename{{TableName{Schema: "public", Name: "Sales"}, "it's: x", "y"}}
	text := RenamesYAML(odd)
	if !strings.HasPrefix(text, "schema:\n  renames:\n    - table: ") {
		t.Fatalf("RenamesYAML:\n%s", text)
	}
	c, err = Parse([]byte(edit(t, local, "schema:\n  unknown_table_policy: block\n", text, "public.line_items]", `public.line_items, public."Sales"]`)))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if !reflect.DeepEqual(c.Schema.Renames, odd) {
		t.Fatalf("RenamesYAML read back as %+v, want %+v", c.Schema.Renames, odd)
	}
}
