package chaoslive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/chaoslive"
	"github.com/trellara/trellara/internal/cli"
	"github.com/trellara/trellara/internal/pgtest"
)

// asTrellara makes this test binary the trellara CLI for the flow's
// processes chaos live starts (no separate build).
const asTrellara = "TRELLARA_CHAOSLIVE_TEST_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(asTrellara) == "1" {
		os.Exit(cli.Main(append([]string{"trellara"}, os.Args[1:]...), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// restartCommand is the pg_ctl command that restarts c (as the postgres
// user when running as root), and a cleanup that stops the server pg_ctl
// started, which pgtest no longer tracks.
func restartCommand(t *testing.T, c *pgtest.Cluster) string {
	t.Helper()
	pgctl := filepath.Join(c.BinDir(), "pg_ctl")
	log := filepath.Join(filepath.Dir(c.DataDir()), "pg_ctl.log")
	as := ""
	if os.Geteuid() == 0 {
		as = "runuser -u postgres -- "
	}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(c.DataDir(), "postmaster.pid")); err == nil {
			_ = exec.Command("/bin/sh", "-c", as+pgctl+" -D "+c.DataDir()+" -m immediate -w stop").Run()
		}
	})
	return fmt.Sprintf("%s%s -D %s -l %s -m fast -w -t 60 restart", as, pgctl, c.DataDir(), log)
}

// flowConfig writes a flow over src and dst with the chaos workload's
// tables and restart commands for both servers.
func flowConfig(t *testing.T, src, dst *pgtest.Cluster, dir string) string {
	t.Helper()
	cfg := filepath.Join(dir, "trellara.yml")
	body := fmt.Sprintf(`version: 2
environment: development
flow: chaos
source:
  id: src1
  database_url: %q
  owns_slot: true
  tables: [public.trellara_chaos_accounts, public.trellara_chaos_history]
transport:
  local: {dir: %s, retention: {max_bytes: 1GiB}}
target:
  database_url: %q
  create_tables: true
run:
  evaluate: true
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
chaos:
  source_restart: %q
  target_restart: %q
`, src.URL("postgres"), filepath.Join(dir, "data"), dst.URL("postgres"), freePort(t), freePort(t), restartCommand(t, src), restartCommand(t, dst))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestLiveChaos: the flow's own processes under the transfer workload,
// with a SIGKILL of the relay and of the applier, a source restart through
// chaos.source_restart and a network cut, each recovered (ready, caught
// up); every verify CONVERGED and the reader saw no half transaction.
// Bounded (about a minute of faults) so it runs with the package tests.
func TestLiveChaos(t *testing.T) {
	pgtest.Require(t)
	if testing.Short() {
		t.Skip("live chaos starts real servers and processes for about a minute")
	}
	src := pgtest.Start(t, pgtest.Options{})
	dst := pgtest.Start(t, pgtest.Options{})
	kinds := []string{chaoslive.KindRelay, chaoslive.KindApplier, chaoslive.KindSource, chaoslive.KindNetwork}
	dir := t.TempDir()
	// Disk full needs a size-limited filesystem: a tmpfs where this test
	// may mount one (root), else the kind is left out.
	if os.Geteuid() == 0 && exec.Command("mount", "-t", "tmpfs", "-o", "size=128m", "tmpfs", dir).Run() == nil {
		t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
		kinds = append(kinds, chaoslive.KindDisk)
	} else {
		t.Log("no tmpfs could be mounted here: the disk-full fault is left out of this run")
	}
	cfg := flowConfig(t, src, dst, dir)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	rep, err := chaoslive.Run(context.Background(), chaoslive.Options{
		ConfigPath:  cfg,
		Duration:    70 * time.Second,
		Kinds:       kinds,
		Seed:        7,
		Binary:      exe,
		Env:         []string{asTrellara + "=1"},
		WorkDir:     work,
		GapMin:      2 * time.Second,
		GapMax:      4 * time.Second,
		SampleEvery: time.Second,
		Rate:        50,
	})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	chaoslive.WriteText(&text, rep)
	t.Log("\n" + text.String())
	if rep.Verdict != "PASS" {
		for _, name := range []string{"relay.log", "applier.log"} {
			b, _ := os.ReadFile(filepath.Join(work, name))
			t.Logf("%s (tail):\n%s", name, tailString(string(b), 4000))
		}
		t.Fatalf("verdict %s: %s", rep.Verdict, rep.VerdictReason)
	}
	for _, k := range kinds[:3] {
		n := 0
		for _, f := range rep.Faults {
			if f.Kind == k && f.CaughtUp != nil {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no recovered %s fault", k)
		}
	}
	if rep.Committed == 0 || rep.Reader.Observations == 0 {
		t.Errorf("workload committed %d, reader observed %d", rep.Committed, rep.Reader.Observations)
	}
	last := rep.Verifies[len(rep.Verifies)-1]
	if !last.Final || last.Verdict != "CONVERGED" {
		t.Errorf("last verify %+v", last)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}

// TestLiveChaosRefusesProduction: a production flow is refused by name
// before anything starts.
func TestLiveChaosRefusesProduction(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	body := `version: 2
environment: production
flow: prod
source:
  id: src1
  database_url: {env: SRC_URL}
  tables: [public.trellara_chaos_accounts, public.trellara_chaos_history]
transport:
  local: {dir: /var/lib/trellara/prod}
target:
  database_url: {env: DST_URL}
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := chaoslive.Run(context.Background(), chaoslive.Options{ConfigPath: cfg, Duration: time.Second, Binary: "/bin/false"})
	if err == nil || !strings.Contains(err.Error(), chaoslive.ErrProduction.Error()) {
		t.Fatalf("err = %v, want %v", err, chaoslive.ErrProduction)
	}
}
