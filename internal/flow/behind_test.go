package flow_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/trellara/trellara/lsn"

	"github.com/trellara/trellara/internal/pgtest"
)

// TestVerifyBehindCatchUpDiverged: with the pipeline stopped (the flow at
// rest) and new writes on the source, verify answers BEHIND (exit 3) with
// the number of committed transactions the target has not applied, never
// DIVERGED, and repair-plan says to catch up, never to re-copy. The
// catch-up command verify printed, run literally, converges; so does a
// standalone verify while the service runs. A real difference then, at a
// common watermark, is DIVERGED (exit 1) and repair-plan plans a repair.
func TestVerifyBehindCatchUpDiverged(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	ddl := `CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL)`
	src.Exec(t, ddl, `INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 100) g`)
	dst.Exec(t, ddl)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	run := cliRunner(t, bin, dir)
	body := fmt.Sprintf(`version: 2
flow: behind
source:
  id: src1
  database_url: %q
  owns_slot: true
  tables: [public.items]
transport:
  local: {dir: %s}
target:
  database_url: %q
run:
  evaluate: true
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, src.URL("postgres"), filepath.Join(dir, "data"), dst.URL("postgres"), freePort(t), freePort(t))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run("run", "--config", cfg, "--local"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}

	// The pipeline is stopped; the source keeps writing.
	src.Exec(t, `INSERT INTO items SELECT g, 'late ' || g FROM generate_series(101, 300) g`,
		`UPDATE items SET name = 'renamed' WHERE id <= 10`)

	// No pipeline holds the flow: verify writes no fence and answers
	// without waiting, with the two transactions (the INSERT, the UPDATE)
	// committed since the run, which are still in the slot.
	out, code := run("verify", "--config", cfg, "--format", "json")
	if code != 3 {
		t.Fatalf("verify behind: exit %d, want 3 (BEHIND)\n%s", code, out)
	}
	var res struct {
		Verdict             string   `json:"verdict"`
		WatermarkLSN        string   `json:"watermark_lsn"`
		TargetCheckpointLSN string   `json:"target_checkpoint_lsn"`
		LagBytes            uint64   `json:"lag_bytes"`
		LagAgeSeconds       *float64 `json:"lag_age_seconds"`
		Recovery            string   `json:"recovery"`
		Notes               []string `json:"notes"`
		Watermark           struct {
			WaitedSeconds float64 `json:"waited_seconds"`
			Pending       *struct {
				Transactions int64 `json:"transactions"`
				InLog        int64 `json:"in_log"`
				InSlot       int64 `json:"in_slot"`
				AtLeast      bool  `json:"at_least"`
			} `json:"pending"`
		} `json:"watermark"`
		Tables []struct {
			Verdict    string `json:"verdict"`
			Recovery   string `json:"recovery"`
			SampleKeys []any  `json:"sample_keys"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("verify JSON: %v\n%s", err, out)
	}
	lsnForm := regexp.MustCompile(`^[0-9A-F]+/[0-9A-F]+$`)
	if res.Verdict != "BEHIND" || !lsnForm.MatchString(res.WatermarkLSN) || !lsnForm.MatchString(res.TargetCheckpointLSN) {
		t.Fatalf("verify JSON: verdict %q watermark %q checkpoint %q, want BEHIND and X/X LSNs\n%s", res.Verdict, res.WatermarkLSN, res.TargetCheckpointLSN, out)
	}
	wm, _ := lsn.Parse(res.WatermarkLSN)
	cp, _ := lsn.Parse(res.TargetCheckpointLSN)
	if cp >= wm || res.LagBytes != uint64(wm-cp) {
		t.Errorf("lag_bytes %d, want watermark %s - checkpoint %s > 0", res.LagBytes, wm, cp)
	}
	if res.LagAgeSeconds == nil || *res.LagAgeSeconds < 0 {
		t.Errorf("lag_age_seconds %v, want the time since the target last applied (its checkpoint row records it)", res.LagAgeSeconds)
	}
	wantCatchUp := "trellara run --config " + cfg + " --local --verify"
	if res.Recovery != wantCatchUp {
		t.Errorf("recovery %q, want %q", res.Recovery, wantCatchUp)
	}
	if p := res.Watermark.Pending; res.Watermark.WaitedSeconds != 0 || p == nil || p.Transactions != 2 || p.InSlot != 2 || p.InLog != 0 || p.AtLeast {
		t.Errorf("waited %gs, pending %+v; want no wait and 2 pending transactions, both at the source", res.Watermark.WaitedSeconds, p)
	}
	for _, tr := range res.Tables {
		if tr.Verdict != "BEHIND" || tr.Recovery != "" || len(tr.SampleKeys) == 0 {
			t.Errorf("table verdict %s recovery %q samples %v, want BEHIND with no repair and the example keys", tr.Verdict, tr.Recovery, tr.SampleKeys)
		}
	}

	// An explicit --wait is honoured: a service might be starting.
	out, code = run("verify", "--config", cfg, "--wait", "1s")
	t.Logf("verify:\n%s", out)
	if code != 3 || !strings.HasPrefix(out, "BEHIND: 2 committed transactions to the flow's tables not applied on the target (0 in the log, 2 at the source") ||
		!strings.Contains(out, "(waited 1s)") ||
		!strings.Contains(out, "fix: start or catch up the pipeline: "+wantCatchUp) ||
		strings.Contains(out, "DIVERGED") || strings.Contains(out, "CONVERGED") || !strings.Contains(out, "may only be waiting to be applied") {
		t.Fatalf("verify behind (text): exit %d\n%s", code, out)
	}

	out, code = run("status", "--config", cfg)
	t.Logf("status:\n%s", out)
	// A flow at rest whose slot retains a little WAL is no problem.
	if code != 0 || !strings.Contains(out, "last verify   BEHIND: 2 committed transactions") || strings.Contains(out, "PROBLEM") || !strings.Contains(out, "next: "+wantCatchUp) {
		t.Errorf("status after a BEHIND verify: exit %d\n%s", code, out)
	}

	out, code = run("repair-plan", "--config", cfg)
	t.Logf("repair-plan:\n%s", out)
	if code != 1 || !strings.Contains(out, "behind, not diverged") || !strings.Contains(out, "start or catch up the pipeline: "+wantCatchUp) ||
		strings.Contains(out, "re-copy") || strings.Contains(out, "resnapshot") || strings.Contains(out, "diverged at the last verify") {
		t.Fatalf("repair-plan after BEHIND: exit %d\n%s", code, out)
	}

	// The command verify printed, run as printed.
	out, code = run(strings.Fields(res.Recovery)[1:]...)
	if code != 0 || !strings.Contains(out, "CONVERGED: 1 of 1 tables match") || strings.Contains(out, "NOT caught up") {
		t.Fatalf("%s: exit %d, want CONVERGED\n%s", res.Recovery, code, out)
	}
	if out, code = run("repair-plan", "--config", cfg); code != 0 {
		t.Fatalf("repair-plan after catching up: exit %d\n%s", code, out)
	}

	// While the service runs, a standalone verify waits for it to apply
	// the verify's fence and compares at that common watermark.
	svc := exec.Command(bin, "run", "--config", cfg)
	svc.Dir = dir
	svcLog, err := os.Create(filepath.Join(dir, "service.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer svcLog.Close()
	svc.Stdout, svc.Stderr = svcLog, svcLog
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = svc.Process.Signal(syscall.SIGTERM)
		_ = svc.Wait()
	}
	defer stop()
	src.Exec(t, `INSERT INTO items SELECT g, 'served ' || g FROM generate_series(301, 400) g`)
	// An explicit --wait: the service may not have taken the slot yet.
	out, code = run("verify", "--config", cfg, "--wait", "120s")
	stop()
	if code != 0 || !strings.HasPrefix(out, "CONVERGED: 1 of 1 tables match") || !strings.Contains(out, "; caught up") {
		b, _ := os.ReadFile(svcLog.Name())
		t.Fatalf("verify while the service runs: exit %d, want CONVERGED\n%s\nservice:\n%s", code, out, b)
	}

	// A real difference, at a common watermark: the run applies up to its
	// fence and verifies while its applier runs.
	dst.Exec(t, `DELETE FROM items WHERE id = 7`)
	out, code = run("run", "--config", cfg, "--local", "--verify")
	if code != 1 || !regexp.MustCompile(`(?m)^DIVERGED: 1 of 1 tables differ`).MatchString(out) ||
		!strings.Contains(out, "missing at target: 7") || !strings.Contains(out, "; caught up") || strings.Contains(out, "BEHIND") {
		t.Fatalf("run --verify over a deleted target row: exit %d, want DIVERGED at a common watermark\n%s", code, out)
	}
	out, code = run("repair-plan", "--config", cfg)
	if code != 1 || !strings.Contains(out, "public.items diverged at the last verify") || strings.Contains(out, "catch up the pipeline") {
		t.Fatalf("repair-plan after DIVERGED: exit %d\n%s", code, out)
	}
}
