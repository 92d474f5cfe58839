package sbom

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

var opts = Options{
	Product:   "trellara",
	Version:   "v1.2.3-4-gabcdef0",
	Module:    "github.com/trellara/trellara",
	Timestamp: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	Tool:      "trellara-sbom",
}

// The test binary itself carries Go build information, so it stands in for
// a release binary.
func TestGenerateFromTestBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := Generate([]string{self}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if doc.BOMFormat != "CycloneDX" || doc.SpecVersion != "1.5" || doc.Version != 1 {
		t.Errorf("header = %s %s %d", doc.BOMFormat, doc.SpecVersion, doc.Version)
	}
	if !regexp.MustCompile(`^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(doc.SerialNumber) {
		t.Errorf("serialNumber %q is not an RFC 9562 v8 urn:uuid", doc.SerialNumber)
	}
	if doc.Metadata.Timestamp != "2026-11-30T12:00:00Z" {
		t.Errorf("timestamp = %q", doc.Metadata.Timestamp)
	}
	app := doc.Components[0]
	if app.Type != "application" || len(app.Hashes) != 1 || len(app.Hashes[0].Content) != 64 {
		t.Errorf("first component = %+v, want the binary with its SHA-256", app)
	}
	refs := map[string]bool{}
	for _, c := range doc.Components {
		if refs[c.BOMRef] {
			t.Errorf("duplicate bom-ref %s", c.BOMRef)
		}
		refs[c.BOMRef] = true
	}
	if !refs["pkg:golang/std@"+runtime.Version()] {
		t.Errorf("no std component for %s", runtime.Version())
	}
	// Every module the binary links appears with its go.sum hash in hex.
	info, _ := debug.ReadBuildInfo()
	for _, d := range info.Deps {
		if d.Replace != nil {
			continue
		}
		ref := "pkg:golang/" + d.Path + "@" + d.Version
		if !refs[ref] {
			t.Errorf("module %s missing", ref)
		}
	}
	// Every dependency ref names a component or the product.
	refs[doc.Metadata.Component.BOMRef] = true
	for _, dep := range doc.Dependencies {
		for _, r := range append([]string{dep.Ref}, dep.DependsOn...) {
			if !refs[r] {
				t.Errorf("dependency ref %s names no component", r)
			}
		}
	}

	// Same input, same bytes.
	again, err := Generate([]string{self}, opts)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := doc.Write(&a); err != nil {
		t.Fatal(err)
	}
	if err := again.Write(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two runs over the same binary differ")
	}
	var generic map[string]any
	if err := json.Unmarshal(a.Bytes(), &generic); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
}

func TestModuleHash(t *testing.T) {
	c, err := module(&debug.Module{Path: "example.com/m", Version: "v1.0.0", Sum: "h1:g12B9UwVnzGhueNavwioyEEpAmqMe1E/BN9ES+8ovkE="})
	if err != nil {
		t.Fatal(err)
	}
	if want := "835d81f54c159f31a1b9e35abf08a8c84129026a8c7b513f04df444bef28be41"; len(c.Hashes) != 1 || c.Hashes[0].Content != want {
		t.Errorf("hashes = %+v, want SHA-256 %s", c.Hashes, want)
	}
	if c.PURL != "pkg:golang/example.com/m@v1.0.0" {
		t.Errorf("purl = %q", c.PURL)
	}
	if _, err := module(&debug.Module{Path: "example.com/m", Version: "v1.0.0", Sum: "h1:short"}); err == nil {
		t.Error("malformed hash accepted")
	}
	r, err := module(&debug.Module{Path: "example.com/m", Version: "v1.0.0", Replace: &debug.Module{Path: "../m"}})
	if err != nil || r.BOMRef != "pkg:golang/../m" || r.PURL != "" || len(r.Properties) != 1 {
		t.Errorf("local replacement = %+v, %v", r, err)
	}
}

func TestNotAGoBinary(t *testing.T) {
	if _, err := Generate([]string{"sbom.go"}, opts); err == nil {
		t.Error("a non-binary was accepted")
	}
}
