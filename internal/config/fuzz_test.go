package config

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzLoad: parsing never panics; whatever parses survives a Marshal round
// trip unchanged; Redact never panics and always yields YAML.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.yml"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"version: 2\n",
		"version: 1\nflow: x\n",
		"version: 2\nflow: &a x\nsource: {id: *a}\n",
		"version: 2\nsource:\n  <<: {id: x}\n",
		"version: 2\nsource: {database_url: 'host=h password=''x y'''}\n",
		"version: 2\nsource: {database_url: 'postgres://u:p@h1,h2/db?password=x#f'}\n",
		"version: 2\ntransport: {local: {retention: {max_bytes: 1.5GiB, max_age: 1d12h}}}\n",
		"version: 2\nsource: {tables: ['\"a\"\"b\".\"c.d\"', public.x]}\n",
		"version: 2\na: !!binary aGVsbG8=\n",
		"- [a, {b: c}]\n---\nx: 1\n",
		"version: 2\nsource: {memory_bytes_max: 99999999999999999999TiB}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := Parse(data); err == nil {
			a, err := Marshal(c)
			if err != nil {
				t.Fatalf("parsed config does not marshal: %v", err)
			}
			back, err := Parse(a)
			if err != nil {
				t.Fatalf("marshalled config does not parse: %v\n%s", err, a)
			}
			b, err := Marshal(back)
			if err != nil || !bytes.Equal(a, b) {
				t.Fatalf("round trip unstable (%v):\n%s\n---\n%s", err, a, b)
			}
		}
		if out, err := Redact(data); err == nil {
			var n yaml.Node
			if err := yaml.Unmarshal(out, &n); err != nil {
				// Multi-document output needs a decoder; only the first
				// document is checked here.
				t.Fatalf("redacted output is not YAML: %v\n%s", err, out)
			}
		}
	})
}
