package flow

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/trellara/trellara/internal/buildinfo"
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

// The long-running service over transport.kafka is refused with the
// not-implemented sentinel, which the CLI classifies by errors.Is, not by
// the message.
func TestServeKafkaIsNotImplemented(t *testing.T) {
	old := brokerFactory
	defer func() { brokerFactory = old }()
	RegisterBroker(func(*Flow) (Broker, error) { return stubBroker{}, nil })
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	body := `version: 2
flow: sales
source:
  id: store_001
  database_url: "postgres://localhost/sales"
  tables: [public.sales]
transport:
  kafka:
    brokers: [kafka-1:9093]
target:
  database_url: "postgres://localhost/target"
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Serve(context.Background(), ServiceOptions{ConfigPath: cfg, Role: "all", Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, buildinfo.ErrNotImplemented) {
		t.Fatalf("Serve: %v, want buildinfo.ErrNotImplemented", err)
	}
}

// stubBroker is a broker the service refuses before using it.
type stubBroker struct{ Broker }
