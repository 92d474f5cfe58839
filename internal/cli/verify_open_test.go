package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/segmentlog"
)

// verify only talks to the databases, so it runs while another process
// (the service) holds the flow's local log: it must not take the log's
// lock. Here the log is held open in this process, and verify gets as far
// as connecting to the (unreachable) source.
func TestVerifyRunsBesideTheLogHolder(t *testing.T) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, "data", "log")
	held, _, err := segmentlog.Open(logDir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := filepath.Join(dir, "trellara.yml")
	body := fmt.Sprintf(`version: 2
flow: beside
source:
  id: src1
  database_url: "postgres://127.0.0.1:1/src?connect_timeout=1"
  owns_slot: true
  tables: [public.t]
transport:
  local: {dir: %s}
target:
  database_url: "postgres://127.0.0.1:1/dst?connect_timeout=1"
`, filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "verify", "--config", cfg)
	if code != ExitError || strings.Contains(stderr, "lock") || !strings.Contains(stderr, "127.0.0.1") {
		t.Fatalf("verify beside a held log: exit %d, want 2 from the unreachable source, not the log's lock:\n%s", code, stderr)
	}
}

// verify --table names a table the flow does not capture: refused by name
// with the flow's tables (exit 2, a usage error), before any database is
// reached, and no verdict is stored for status and repair-plan.
func TestVerifyRefusesATableOutsideTheFlow(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	body := fmt.Sprintf(`version: 2
flow: outside
source:
  id: src1
  database_url: "postgres://127.0.0.1:1/src?connect_timeout=1"
  owns_slot: true
  tables: [public.t, public.u]
transport:
  local: {dir: %s}
target:
  database_url: "postgres://127.0.0.1:1/dst?connect_timeout=1"
`, filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "verify", "--config", cfg, "--table", "public.t", "--table", "public.audit_log")
	if code != ExitError || !strings.Contains(stderr, "public.audit_log is not one of the flow's tables (public.t, public.u)") || strings.Contains(stderr, "127.0.0.1") {
		t.Fatalf("verify --table outside the flow: exit %d, want 2 naming the table and the flow's tables, before connecting:\n%s", code, stderr)
	}
	stdout, _, code := run(t, "verify", "--config", cfg, "--table", "public.audit_log", "--format", "json")
	if code != ExitError || !strings.Contains(stdout, `"code": "usage"`) {
		t.Fatalf("verify --table outside the flow, JSON: exit %d, want 2 with error code usage:\n%s", code, stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "last-verify.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused verify stored a verdict (last-verify.json: %v)", err)
	}
}
