package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsExamples keeps docs/CONFIG.md true: every ```yaml block in it is a
// valid configuration, and its redaction example is what Redact produces.
func TestDocsExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "CONFIG.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 2 {
		t.Fatalf("found %d yaml examples", len(blocks))
	}
	for i, b := range blocks {
		if _, err := Parse([]byte(b[1])); err != nil {
			t.Errorf("docs/CONFIG.md yaml example %d does not validate: %v", i+1, err)
		}
	}

	ex := regexp.MustCompile("(?s)Example\\. Input:\n\n```text\n(.*?)```\n\nOutput:\n\n```text\n# Redacted copy[^\n]*\n(.*?)```").FindStringSubmatch(string(doc))
	if ex == nil {
		t.Fatal("redaction example not found")
	}
	out, err := Redact([]byte(ex[1]))
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	got = got[strings.Index(got, "\n\n")+2:] // drop the header comment
	if got != ex[2] {
		t.Errorf("redaction example out of date:\n got:\n%s\nwant:\n%s", got, ex[2])
	}
}
