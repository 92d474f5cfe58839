package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chaos live and qualify refuse a production flow by name (exit 2) before
// starting anything, and an unknown fault kind is a usage error.
func TestChaosLiveRefusals(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prod.yml")
	body := `version: 2
environment: production
flow: prod
source:
  id: src1
  database_url: {env: SRC_URL}
  tables: [public.trellara_chaos_accounts, public.trellara_chaos_history]
transport:
  local: {dir: ` + filepath.Join(dir, "data") + `}
target:
  database_url: {env: DST_URL}
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"chaos", "live", "--config", cfg, "--duration", "1s"},
		{"qualify", "--config", cfg, "--duration", "1s", "--format", "json"},
	} {
		out, errOut, code := run(t, args...)
		if code != ExitError || !strings.Contains(out+errOut, "refuses environment: production") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("a refused run created the flow's state")
	}
	out, errOut, code := run(t, "chaos", "live", "--config", cfg, "--faults", "relay,meteor")
	if code != ExitError || !strings.Contains(out+errOut, `unknown fault kind "meteor"`) {
		t.Errorf("--faults meteor: exit %d\n%s%s", code, out, errOut)
	}
}
