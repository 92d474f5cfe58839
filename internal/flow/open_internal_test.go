package flow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/segmentlog"
)

// Open creates the flow's directory (log, pins, checkpoints) for the
// service's user only.
func TestOpenCreatesPrivateFlowDir(t *testing.T) {
	old := syscall.Umask(0) // the mode asked for is the mode set; no test here runs in parallel
	defer syscall.Umask(old)
	dir := t.TempDir()
	flowDir := filepath.Join(dir, "state", "sales")
	cfg := filepath.Join(dir, "trellara.yml")
	body := `version: 2
flow: sales
source:
  id: store_001
  database_url: "postgres://localhost/sales"
  tables: [public.sales]
transport:
  local: {dir: ` + flowDir + `}
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, d := range []string{filepath.Join(dir, "state"), flowDir, filepath.Join(flowDir, "log")} {
		info, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Mode().Perm(); got != 0o700 {
			t.Errorf("%s: mode %04o, want 0700", d, got)
		}
	}
}

// The local log's errors name no command; the flow adds its own recovery
// (the full re-snapshot of this config, or starting the relay first).
func TestLogErrorAddsRecovery(t *testing.T) {
	f := &Flow{Cfg: &config.Config{Flow: "sales"}, ConfigPath: "/etc/trellara/sales.yml"}
	corrupt := fmt.Errorf("read: %w", &segmentlog.CorruptionError{Path: "/log/0.seg", Reason: "bad checksum"})
	if got := f.logError(corrupt).Error(); !strings.HasSuffix(got, ", or "+shell.Resnapshot(f.ConfigPath)) {
		t.Errorf("corruption: %q", got)
	}
	past := &segmentlog.PastRetentionError{Consumer: "sink-a", Offset: 1, FirstOffset: 5}
	if got := f.sinkLogError(config.Sink{Name: "a"}, past).Error(); !strings.Contains(got, shell.Resnapshot(f.ConfigPath)) || !strings.Contains(got, "sink a") {
		t.Errorf("past retention: %q", got)
	}
	noEnd := fmt.Errorf("%w: /log: missing", segmentlog.ErrNoDurableEnd)
	if got := f.logError(noEnd); !errors.Is(got, segmentlog.ErrNoDurableEnd) || !strings.Contains(got.Error(), shell.Trellara("run", f.ConfigPath, "--role", "relay")) {
		t.Errorf("no durable end: %q", got)
	}
}
