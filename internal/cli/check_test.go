package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// TestCheckNamesTheSource: `trellara check` names the graded server
// (user@host:port/database) in its text header and its JSON target, and
// never the password of the configured URL.
func TestCheckNamesTheSource(t *testing.T) {
	pgtest.Require(t)
	c := pgtest.Start(t, pgtest.Options{NoFsync: true})
	c.Exec(t, "CREATE TABLE orders (id int PRIMARY KEY, note text)")
	// Trust authentication ignores the password, so it can stand in the URL
	// to prove it is never shown.
	const pw = "pw-never-shown"
	srcURL := fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", pw, c.Port())
	cfg := filepath.Join(t.TempDir(), "trellara.yml")
	body := fmt.Sprintf(`version: 2
environment: development
flow: shop
source:
  id: shop
  database_url: %q
  publication: trellara_shop
  slot: trellara_shop
  tables: [public.orders]
transport:
  local: {dir: %s, fsync: always, retention: {max_bytes: 1GiB}}
target:
  database_url: %q
`, srcURL, filepath.Join(filepath.Dir(cfg), "data"), srcURL)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("postgres@127.0.0.1:%d/postgres", c.Port())

	out, errOut, code := run(t, "check", "--config", cfg)
	if code != ExitOK && code != ExitFindings {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "trellara-check · "+want+" · PostgreSQL ") || strings.Contains(out, "·  ·") {
		t.Errorf("text header does not name the source %s:\n%s", want, out)
	}

	js, errOut, code := run(t, "check", "--config", cfg, "--format", "json")
	if code != ExitOK && code != ExitFindings {
		t.Fatalf("json: exit %d\n%s%s", code, js, errOut)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("json: %v\n%s", err, js)
	}
	if rep["target"] != want {
		t.Errorf(`"target" = %q, want %q`, rep["target"], want)
	}
	if strings.Contains(out+js+errOut, pw) {
		t.Error("the source password appears in the output")
	}
}
