package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A credential typed where a reference's variable name belongs is never
// echoed by any command that reads the config; each says the reference is
// invalid and how to fix it.
func TestPlantedSecretNotEchoedByCommands(t *testing.T) {
	const planted = "Hunter2!"
	cfg := filepath.Join(t.TempDir(), "trellara.yml")
	body := `version: 2
flow: sales
source:
  id: store_001
  database_url: {env: "` + planted + `"}
  tables: [public.sales]
transport:
  local: {dir: ` + filepath.Join(t.TempDir(), "log") + `}
target:
  database_url: {file: "` + planted + `"}
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"config", "validate", "--config", cfg},
		{"config", "validate", "--config", cfg, "--format", "json"},
		{"check", "--config", cfg},
		{"run", "--local", "--config", cfg},
		{"verify", "--config", cfg},
		{"status", "--config", cfg},
	} {
		out, errOut, code := run(t, args...)
		if code == 0 {
			t.Errorf("%v: exit 0", args)
		}
		all := out + errOut
		if strings.Contains(all, planted) {
			t.Errorf("%v echoes the planted secret:\n%s", args, all)
		}
		if !strings.Contains(all, "source.database_url.env: is not an environment variable name") ||
			!strings.Contains(all, "target.database_url.file: is not an absolute path") ||
			!(strings.Contains(all, "fix: write the NAME of the variable") || strings.Contains(all, `"fix": "write the NAME of the variable`)) {
			t.Errorf("%v does not say which references are invalid and how to fix them:\n%s", args, all)
		}
	}
}
