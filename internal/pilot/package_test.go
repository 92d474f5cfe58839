package pilot

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/config"
)

// The last guard: a file holding a resolved credential, or the password
// inside a connection string, stops the package, naming the file only.
func TestScanSecretsRefusesACredential(t *testing.T) {
	sec := config.Secrets{SourceDatabaseURL: config.NewSecret("postgres://app:Pw-in-url-99@db:5432/sales")}
	for name, data := range map[string]string{
		"password alone": `{"note": "auth failed for Pw-in-url-99"}`,
		"whole URL":      `postgres://app:Pw-in-url-99@db:5432/sales`,
	} {
		p := &Package{Files: map[string][]byte{}}
		p.Put("status.json", "status", []byte(data))
		err := scanSecrets(p, sec)
		if !errors.Is(err, ErrSecret) || !strings.Contains(err.Error(), "status.json") || strings.Contains(err.Error(), "Pw-in-url") {
			t.Errorf("%s: %v, want ErrSecret naming status.json and not the value", name, err)
		}
	}
	p := &Package{Files: map[string][]byte{}}
	p.Put("status.json", "status", []byte(`{"source": "postgres://<redacted>@db:5432/sales"}`))
	if err := scanSecrets(p, sec); err != nil {
		t.Errorf("a redacted URL refused: %v", err)
	}
}

// Read refuses a package whose files do not match the manifest.
func TestReadChecksManifest(t *testing.T) {
	p := &Package{Files: map[string][]byte{}, Manifest: Manifest{FormatVersion: FormatVersion, Files: []FileInfo{}}}
	p.Put("a.json", "a", []byte(`{}`))
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(bytes.NewReader(buf.Bytes()), nil); err != nil {
		t.Fatalf("an intact package: %v", err)
	}
	p.Files["a.json"] = []byte(`{"x":1}`)
	buf.Reset()
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(bytes.NewReader(buf.Bytes()), nil); err == nil || !strings.Contains(err.Error(), "a.json") {
		t.Errorf("an altered file: %v, want an error naming a.json", err)
	}
}
