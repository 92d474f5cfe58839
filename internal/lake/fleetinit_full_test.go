//go:build full

package lake

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeFlow writes a minimal flow config a.yml-style into dir with the
// given relay listen address.
func writeFlow(t *testing.T, dir, name, relay, applier string) string {
	t.Helper()
	body := "version: 2\nflow: " + name + "\nsource: {id: " + name + `, database_url: "postgres://x@127.0.0.1:1/db", owns_slot: true, tables: [public.t]}` +
		"\ntransport: {local: {dir: data-" + name + "}}\nrun: {listen: {relay: \"" + relay + "\", applier: \"" + applier + "\"}}\n"
	p := filepath.Join(dir, name+".yml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Two flows on one relay port: the fleet refuses them by key, before it
// runs (on 0335858 fleet run looped on "address already in use").
// Mutation: the listener check in validate removed — red.
func TestFleetRefusesSharedRelayPort(t *testing.T) {
	dir := t.TempDir()
	writeFlow(t, dir, "a", "127.0.0.1:9401", "127.0.0.1:9402")
	writeFlow(t, dir, "b", "127.0.0.1:9401", "127.0.0.1:9412")
	fy := filepath.Join(dir, "fleet.yml")
	body := "version: 1\nfleet: f\nsources:\n  - config: a.yml\n  - config: b.yml\nlake:\n  catalog: {kind: sql-sqlite, uri: lake/c.db}\n  warehouse: file://lake/wh\n"
	if err := os.WriteFile(fy, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFleet(fy)
	if err == nil {
		t.Fatal("a fleet with two relays on 127.0.0.1:9401 was accepted")
	}
	for _, want := range []string{"sources[1].config", "run.listen.relay", "127.0.0.1:9401", "sources[0]", "127.0.0.1:9421"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %s:\n%v", want, err)
		}
	}
}

// A port held by another process is a configuration error: fleet run
// stops with it, naming the source, instead of restarting forever; and a
// SQLite catalog whose directory is missing is named with its mkdir.
// Mutation: restart ignoring permanent() — RunFleet returns only at the
// deadline — red.
func TestFleetRunStopsOnAPortInUse(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	writeFlow(t, dir, "a", ln.Addr().String(), "127.0.0.1:9402")
	fy := filepath.Join(dir, "fleet.yml")
	body := "version: 1\nfleet: f\nsources:\n  - config: a.yml\nlake:\n  catalog: {kind: sql-sqlite, uri: lake/c.db}\n  warehouse: file://lake/wh\nrun: {listen: \"127.0.0.1:0\"}\n"
	if err := os.WriteFile(fy, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := LoadFleet(fy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), f.Lake); err == nil || !strings.Contains(err.Error(), "mkdir -p") {
		t.Errorf("a catalog in a missing directory: %v, want the directory named with its mkdir", err)
	}
	if err := f.Lake.CreateLocalDirs(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = RunFleet(ctx, f, RunOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if ctx.Err() != nil {
		t.Fatalf("fleet run kept restarting a relay whose port is taken (returned %v only at the deadline)", err)
	}
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "source a") {
		t.Fatalf("fleet run: %v, want the source's address in use", err)
	}
}
