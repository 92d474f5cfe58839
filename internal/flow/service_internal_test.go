package flow

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/apply"
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
