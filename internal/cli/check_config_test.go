package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// `trellara check --config` checks the tables the configuration names: one
// the source lacks is a critical finding naming it, never "valid".
func TestCheckConfigNamesMissingTables(t *testing.T) {
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE public.present (id int PRIMARY KEY)`, `CREATE TABLE public."Mixed" (id int PRIMARY KEY)`,
		`CREATE VIEW public.a_view AS SELECT 1 AS id`)
	write := func(tables string) string {
		path := filepath.Join(t.TempDir(), "trellara.yml")
		body := fmt.Sprintf("version: 2\nflow: chk\nsource:\n  id: src\n  database_url: %q\n  tables: %s\ntransport:\n  local: {dir: %s}\n",
			src.URL("postgres"), tables, filepath.Join(t.TempDir(), "log"))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	cfg := write(`[public.present, public.absent, 'public."Mixed"', public.mixed, public.a_view]`)
	out, errOut, code := run(t, "check", "--config", cfg, "--format", "text")
	if code != ExitFindings {
		t.Errorf("exit %d with missing tables, want %d\n%s%s", code, ExitFindings, out, errOut)
	}
	if strings.Contains(out, " valid (") || !strings.Contains(out, "3 tables named by the configuration do not exist on the source") {
		t.Errorf("check calls a config with missing tables valid, or does not say so:\n%s", out)
	}
	for _, missing := range []string{"public.absent", "public.mixed", "public.a_view"} {
		if !strings.Contains(out, "configured table "+missing+" does not exist") {
			t.Errorf("output does not name %s:\n%s", missing, out)
		}
	}
	for _, present := range []string{"public.present", `public."Mixed"`} {
		if strings.Contains(out, "configured table "+present+" does not exist") {
			t.Errorf("output calls %s missing:\n%s", present, out)
		}
	}
	out, _, _ = run(t, "check", "--config", cfg, "--format", "json")
	if !strings.Contains(out, `"code": "configured_table_missing"`) && !strings.Contains(out, `"code":"configured_table_missing"`) {
		t.Errorf("the JSON report lacks the finding:\n%s", out)
	}

	out, _, _ = run(t, "check", "--config", write(`[public.present, 'public."Mixed"']`), "--format", "text")
	if !strings.Contains(out, " valid (flow chk, 2 tables)") || strings.Contains(out, "does not exist on the source") {
		t.Errorf("config with existing tables:\n%s", out)
	}
}
