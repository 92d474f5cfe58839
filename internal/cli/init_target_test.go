package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgtest"
)

// The page's init line has no target: init must say how to give the
// evaluation one, check and preflight must refuse until it is there, and
// the printed recipe, typed as printed, must make the flow runnable.
// Mutation: Starter left without a target section when --evaluate has no
// URL (as on 0335858) — check and preflight pass, run --local refuses.
func TestInitEvaluateWithoutTarget(t *testing.T) {
	pg := pgtest.Start(t, pgtest.Options{NoFsync: true})
	pg.CreateDB(t, "shop")
	pg.ExecDB(t, "shop", `CREATE TABLE public.sales (id int PRIMARY KEY, v text)`,
		`INSERT INTO public.sales SELECT g, 's' || g FROM generate_series(1, 50) g`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	unsetEnv(t, "TRELLARA_TARGET_URL")
	out, errOut, code := run(t, "init", "--source-database-url", pg.URL("shop"), "--table", "public.sales", "--evaluate", "--output", cfg)
	if code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "createdb ") || !strings.Contains(out, "export TRELLARA_TARGET_URL=") {
		t.Fatalf("init does not say how to give the evaluation a target:\n%s", out)
	}
	for _, cmd := range [][]string{{"check"}, {"preflight"}, {"run", "--local", "--verify"}} {
		out, errOut, code := run(t, append(cmd, "--config", cfg)...)
		if code == 0 || !strings.Contains(out+errOut, "TRELLARA_TARGET_URL") || !strings.Contains(out+errOut, "fix: ") {
			t.Errorf("%v without the target's URL: exit %d, want a refusal naming TRELLARA_TARGET_URL with a fix\n%s%s", cmd, code, out, errOut)
		}
	}
	// What init printed, done: the database created, its URL exported.
	pg.CreateDB(t, "shop_target")
	t.Setenv("TRELLARA_TARGET_URL", pg.URL("shop_target"))
	for _, cmd := range [][]string{{"check"}, {"preflight"}, {"run", "--local", "--verify"}} {
		if out, errOut, code := run(t, append(cmd, "--config", cfg)...); code != 0 {
			t.Fatalf("%v after the printed recipe: exit %d\n%s%s", cmd, code, out, errOut)
		}
	}
}

// A capture-only flow (no target section) passes preflight with a line
// saying what it cannot do, and run --local refuses with the recipe.
func TestPreflightNamesAMissingTarget(t *testing.T) {
	pg := pgtest.Start(t, pgtest.Options{NoFsync: true})
	pg.CreateDB(t, "shop")
	pg.ExecDB(t, "shop", `CREATE TABLE public.sales (id int PRIMARY KEY, v text)`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	if out, errOut, code := run(t, "init", "--source-database-url", pg.URL("shop"), "--table", "public.sales", "--output", cfg, "--flow", "shop"); code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	// The log directory init wrote is /var/lib/trellara/shop; the test's own
	// keeps the machine's state directory as the package would make it.
	body, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(dir, "state", "shop")
	if !strings.Contains(string(body), "dir: /var/lib/trellara/shop") {
		t.Fatalf("init did not write the packaged log directory:\n%s", body)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(body), "dir: /var/lib/trellara/shop", "dir: "+logDir, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TRELLARA_SOURCE_URL", pg.URL("shop"))
	out, errOut, code := run(t, "preflight", "--config", cfg)
	if !strings.Contains(out, "target") || !strings.Contains(out, "only captures") {
		t.Errorf("preflight of a capture-only flow does not name the missing target: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, "run", "--config", cfg, "--local", "--format", "json")
	if code != ExitError || !strings.Contains(out, `"fix": "add a target to the config`) {
		t.Errorf("run --local of a capture-only flow: exit %d, want 2 with the recipe as the fix\n%s%s", code, out, errOut)
	}
	// Refused means nothing was made: no log directory for a flow that cannot run.
	if _, err := os.Stat(logDir); !os.IsNotExist(err) {
		t.Errorf("the refused run --local created %s (stat: %v)", logDir, err)
	}
}

// unsetEnv removes name for the test (t.Setenv first, so it is restored).
func unsetEnv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

// Two flows made by init side by side get their own ports (on 0335858 both
// got 9401 and a fleet of them looped on "address already in use"), and a
// port something listens on is passed over. Mutation: initListen returning
// the default pair always — red.
func TestInitAssignsFreePorts(t *testing.T) {
	dir := t.TempDir()
	src := "postgres://u@127.0.0.1:1/db?connect_timeout=1"
	var relays []string
	for _, name := range []string{"a", "b", "c"} {
		cfg := filepath.Join(dir, name+".yml")
		if out, errOut, code := run(t, "init", "--source-database-url", src, "--target-database-url", src, "--table", "public.t",
			"--flow", name, "--evaluate", "--output", cfg); code != 0 {
			t.Fatalf("init %s: exit %d\n%s%s", name, code, out, errOut)
		}
		c, err := config.Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, prev := range relays {
			for _, a := range c.ListenAddrs() {
				if config.ListenConflict(prev, a.Addr) {
					t.Errorf("flow %s's %s %s takes a port of an earlier flow (%s)", name, a.Key, a.Addr, prev)
				}
			}
		}
		for _, a := range c.ListenAddrs() {
			relays = append(relays, a.Addr)
		}
	}
}
