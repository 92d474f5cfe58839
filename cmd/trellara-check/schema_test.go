package main

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
)

// fieldSpec is one row of the JSON schema table in docs/CLI.md.
type fieldSpec struct {
	types    []string // string, integer, number, boolean, object, array, null
	optional bool
}

func loadSchema(t *testing.T) map[string]fieldSpec {
	t.Helper()
	doc, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	begin := strings.Index(s, "<!-- trellara-check-json-schema:begin -->")
	end := strings.Index(s, "<!-- trellara-check-json-schema:end -->")
	if begin < 0 || end < begin {
		t.Fatal("docs/CLI.md has no trellara-check JSON schema block")
	}
	spec := map[string]fieldSpec{}
	for _, line := range strings.Split(s[begin:end], "\n") {
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")
		if len(cells) < 5 || !strings.Contains(cells[1], "`") {
			continue
		}
		path := strings.Trim(strings.TrimSpace(cells[1]), "`")
		types := strings.Split(strings.TrimSpace(cells[2]), "\x00")
		spec[path] = fieldSpec{types: types, optional: strings.Contains(cells[3], "(optional")}
	}
	if len(spec) < 50 {
		t.Fatalf("parsed only %d schema rows from docs/CLI.md", len(spec))
	}
	return spec
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		if x == float64(int64(x)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}

// validateSchema checks a report against docs/CLI.md both ways: every field
// emitted is documented with its type, and every documented required field
// is present wherever its parent is.
func validateSchema(t *testing.T, raw string) {
	t.Helper()
	spec := loadSchema(t)
	var root map[string]any
	if err := json.Unmarshal([]byte(raw), &root); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		if path != "" {
			fs, ok := spec[path]
			if !ok {
				t.Errorf("JSON field %s is not documented in docs/CLI.md", path)
				return
			}
			got := jsonType(v)
			okType := false
			for _, want := range fs.types {
				if want == got || (want == "number" && got == "integer") {
					okType = true
				}
			}
			if !okType {
				t.Errorf("JSON field %s is %s, docs/CLI.md says %s", path, got, strings.Join(fs.types, "|"))
			}
		}
		switch x := v.(type) {
		case map[string]any:
			prefix := path
			if prefix != "" {
				prefix += "."
			}
			for k, child := range x {
				walk(prefix+k, child)
			}
			// Required children of this object.
			var missing []string
			for p, fs := range spec {
				rest, ok := strings.CutPrefix(p, prefix)
				if !ok || strings.ContainsAny(rest, ".[") || fs.optional || rest == "" {
					continue
				}
				if _, present := x[rest]; !present {
					missing = append(missing, p)
				}
			}
			sort.Strings(missing)
			for _, p := range missing {
				t.Errorf("documented field %s missing from JSON", p)
			}
		case []any:
			for _, child := range x {
				walk(path+"[]", child)
			}
		}
	}
	walk("", root)
}
