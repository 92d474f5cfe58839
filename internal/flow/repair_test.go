package flow_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// A unit that cannot be applied is quarantined, the run stops naming the
// commands, repair-plan names the fix, and after the fix the same run
// replays it and converges.
func TestQuarantineRepairPlanReplay(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL)`, `INSERT INTO items VALUES (1, 'a')`)
	dst.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, name varchar(3) NOT NULL)`) // too narrow for what comes
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	run := cliRunner(t, bin, dir)
	if out, code := run("init", "--source-database-url", src.URL("postgres"), "--target-database-url", dst.URL("postgres"),
		"--table", "public.items", "--flow", "repair", "--evaluate", "--output", cfg); code != 0 {
		t.Fatalf("init: %s", out)
	}
	if out, code := run("run", "--config", cfg, "--local"); code != 0 {
		t.Fatalf("first run: %s", out)
	}
	src.Exec(t, `INSERT INTO items VALUES (2, 'much too long')`)
	out, code := run("run", "--config", cfg, "--local")
	if code != 2 || !strings.Contains(out, "quarantined") || !strings.Contains(out, "--view quarantine") {
		t.Fatalf("run over a bad row: exit %d\n%s", code, out)
	}
	out, code = run("status", "--config", cfg, "--view", "quarantine")
	if code != 1 || !strings.Contains(out, "1 open") || !strings.Contains(out, "22001") { // an open quarantine is a status problem
		t.Fatalf("status quarantine: exit %d\n%s", code, out)
	}
	out, code = run("repair-plan", "--config", cfg)
	if code != 1 || !strings.Contains(out, "align the target column type") {
		t.Fatalf("repair-plan: exit %d\n%s", code, out)
	}
	dst.Exec(t, `ALTER TABLE items ALTER COLUMN name TYPE text`)
	out, code = run("run", "--config", cfg, "--local", "--verify")
	if code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("replay after the fix: exit %d\n%s", code, out)
	}
	if out, code = run("repair-plan", "--config", cfg); code != 0 {
		t.Fatalf("repair-plan after the fix: exit %d\n%s", code, out)
	}
}
