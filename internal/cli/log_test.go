package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/segmentlog"
)

// Logs are JSON lines in every mode, not only in the service: here a
// short command's lifecycle record (the local log rebuilding a damaged
// index while the flow opens) under --verbose.
func TestCommandLogsAreJSON(t *testing.T) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, "data", "log")
	// Small segments: a sealed segment gets an index file.
	l, _, err := segmentlog.Open(logDir, segmentlog.Options{SegmentBytesMax: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := l.Append(make([]byte, 32<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	idx, _ := filepath.Glob(filepath.Join(logDir, "*.idx"))
	if len(idx) == 0 {
		t.Fatalf("no index file in %s", logDir)
	}
	if err := os.WriteFile(idx[0], []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "trellara.yml")
	body := fmt.Sprintf(`version: 2
flow: logs
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
	_, stderr, _ := run(t, "run", "--config", cfg, "--local", "--verbose")
	found := false
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.Contains(line, "rebuilding index") {
			continue
		}
		found = true
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if rec["level"] != "INFO" || rec["msg"] != "segmentlog: rebuilding index" {
			t.Fatalf("log record %v", rec)
		}
	}
	if !found {
		t.Fatalf("no index-rebuild record in stderr:\n%s", stderr)
	}
}
