package flow

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/segmentlog"
)

// A SIGHUP reload of a config with a credential typed where a reference's
// variable name belongs is refused, and the refusal log names the bad key
// and its fix but never the value.
func TestReloadRefusalDoesNotEchoPlantedSecret(t *testing.T) {
	const planted = "Hunter2!"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	body := `version: 2
flow: sales
source:
  id: store_001
  database_url: {env: "` + planted + `"}
  tables: [public.sales]
transport:
  local: {dir: ` + filepath.Join(dir, "log") + `}
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	reload, done := make(chan struct{}), make(chan error)
	stopped := errors.New("components stopped")
	got := make(chan error, 1)
	go func() {
		got <- waitReload(done, ServiceOptions{ConfigPath: cfg, Reload: reload,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	}()
	reload <- struct{}{} // unbuffered: received, then refused and logged
	done <- stopped      // received only once the refusal is handled
	if err := <-got; !errors.Is(err, stopped) {
		t.Fatalf("waitReload returned %v; a refused reload must keep the running configuration", err)
	}
	out := logs.String()
	if !strings.Contains(out, "reload refused") || !strings.Contains(out, "source.database_url.env: is not an environment variable name") ||
		!strings.Contains(out, "fix: write the NAME of the variable") {
		t.Errorf("refusal log does not name the bad reference and its fix:\n%s", out)
	}
	if strings.Contains(out, planted) {
		t.Errorf("refusal log echoes the planted secret:\n%s", out)
	}
}

// A component that got going and then failed (a server restart, a network
// cut) is restarted after the minimum backoff however often that happened
// before; one that never gets going backs off to the cap; a quarantined
// unit waits the cap at once.
func TestRestartBackoff(t *testing.T) {
	b := backoffMin
	for range 10 { // never ready: doubling to the cap
		b = min(2*restartBackoff(b, false, time.Second, errors.New("connection refused")), backoffMax)
	}
	if b != backoffMax {
		t.Fatalf("never ready: backoff %s, want the cap %s", b, backoffMax)
	}
	if got := restartBackoff(b, true, 3*time.Second, errors.New("server closed the connection")); got != backoffMin {
		t.Errorf("ready, then failed: backoff %s, want %s", got, backoffMin)
	}
	if got := restartBackoff(backoffMin, true, time.Hour, &apply.QuarantinedError{}); got != backoffMax {
		t.Errorf("quarantined: backoff %s, want %s", got, backoffMax)
	}
	if got := restartBackoff(backoffMax, false, 6*backoffMax, errors.New("x")); got != backoffMin {
		t.Errorf("a long run: backoff %s, want %s", got, backoffMin)
	}
}

// A service started while a command on the flow at rest holds the local
// log's lock waits for it and opens the flow when it ends; past
// lockWaitMax it gives up with the lock's error.
//
// Mutation tried: openForRole calling Open directly turns it red (the
// service returns the lock error at once).
func TestServiceWaitsForAtRestLock(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	body := "version: 2\nflow: sales\nsource:\n  id: store_001\n  database_url: \"postgres://127.0.0.1:1/src\"\n  tables: [public.sales]\n" +
		"transport:\n  local: {dir: " + filepath.Join(dir, "data") + "}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	logDir := f.logDir()
	f.Close()
	hold := func() io.Closer {
		h, err := segmentlog.HoldWriterLock(logDir)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	h := hold()
	var logs syncBuffer
	o := ServiceOptions{ConfigPath: cfg, Role: RoleRelay, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	got := make(chan error, 1)
	go func() {
		f, err := openForRole(t.Context(), o)
		if err == nil {
			f.Close()
		}
		got <- err
	}()
	for !strings.Contains(logs.String(), "waiting for it to finish") {
		select {
		case err := <-got:
			t.Fatalf("the service did not wait for the lock: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	h.Close()
	if err := <-got; err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}

	defer func(d time.Duration) { lockWaitMax = d }(lockWaitMax)
	lockWaitMax = time.Second
	h = hold()
	defer h.Close()
	if _, err := openForRole(t.Context(), o); !errors.Is(err, segmentlog.ErrLocked) {
		t.Fatalf("a lock held past lockWaitMax: %v, want the lock error", err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
