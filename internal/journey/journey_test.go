// Package journey types the product page's evaluation path, in the page's
// order and as printed, against real PostgreSQL servers, with the built
// binaries a user runs — and then the page's four "How you falsify it"
// steps. A command is given only what the page or the previous command's
// own output tells the user to add.
package journey

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgtest"
)

// user is a shell in the evaluation's working directory, with the
// environment the page's commands assume ($POSTGRES_URL) and whatever the
// commands' output told the user to export.
type user struct {
	t   *testing.T
	bin string // directory with trellara, trellara-check, trellara-full
	dir string
	env []string
}

// build compiles the three binaries once for the test, as make build does.
// It first reads every Go file of the module: go test's cache keys a test
// on the files it opens, and the binaries it builds are made of all of
// them, so a change anywhere reruns this test instead of replaying a pass.
func build(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".go") || d.Name() == "go.mod" || d.Name() == "go.sum") {
			_, err := os.ReadFile(path)
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, b := range []struct{ name, tags string }{{"trellara", ""}, {"trellara-check", ""}, {"trellara-full", "full"}} {
		args := []string{"build", "-o", filepath.Join(out, b.name)}
		if b.tags != "" {
			args = append(args, "-tags", b.tags)
		}
		cmd := exec.Command("go", append(args, "github.com/trellara/trellara/cmd/"+b.name)...)
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.name, err, o)
		}
	}
	return out
}

func (u *user) command(line ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(u.bin, line[0]), line[1:]...)
	cmd.Dir = u.dir
	cmd.Env = append(os.Environ(), u.env...)
	return cmd
}

// run types one command line and returns its output and exit code.
func (u *user) run(line ...string) (string, int) {
	u.t.Helper()
	cmd := u.command(line...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		u.t.Fatalf("%s: %v", strings.Join(line, " "), err)
	}
	u.t.Logf("$ %s   (exit %d)\n%s", strings.Join(line, " "), code, out.String())
	return out.String(), code
}

// must types a command that must exit with want and print every word of
// contains.
func (u *user) must(want int, line string, contains ...string) string {
	u.t.Helper()
	out, code := u.run(strings.Fields(line)...)
	if code != want {
		u.t.Fatalf("%s: exit %d, want %d\n%s", line, code, want, out)
	}
	for _, c := range contains {
		if !strings.Contains(out, c) {
			u.t.Fatalf("%s: the output does not say %q\n%s", line, c, out)
		}
	}
	return out
}

// service starts a long-running command (its output in a log file) and
// returns it; it is SIGKILLed at the end of the test if still running.
func (u *user) service(name string, line ...string) *exec.Cmd {
	u.t.Helper()
	cmd := u.command(line...)
	logf, err := os.OpenFile(filepath.Join(u.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		u.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		u.t.Fatal(err)
	}
	u.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	return cmd
}

func (u *user) stop(cmd *exec.Cmd) {
	u.t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		u.t.Errorf("%s did not stop within 60s of SIGTERM; killing it", cmd.Path)
		_ = cmd.Process.Kill()
	}
}

// waitReady polls a service's /readyz until it answers 200.
func (u *user) waitReady(addr string) {
	u.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	u.t.Fatalf("%s/readyz did not answer 200 within 2m", addr)
}

// eventually types line until it exits want and says every word of
// contains, for up to limit.
func (u *user) eventually(limit time.Duration, want int, line string, contains ...string) string {
	u.t.Helper()
	deadline := time.Now().Add(limit)
	var out string
	var code int
	for {
		out, code = u.run(strings.Fields(line)...)
		ok := code == want
		for _, c := range contains {
			ok = ok && strings.Contains(out, c)
		}
		if ok {
			return out
		}
		if time.Now().After(deadline) {
			u.t.Fatalf("%s: after %s still exit %d (want %d and %q)\n%s", line, limit, code, want, contains, out)
		}
		time.Sleep(time.Second)
	}
}

// The OLTP workload the page's source runs meanwhile: multi-statement
// transactions on the flow's table, a DELETE and INSERT of one key,
// updates beside a TOAST value, in one transaction each.
type workload struct {
	stop      chan struct{}
	wg        sync.WaitGroup
	committed atomic.Int64
	pause     atomic.Bool
}

func startWorkload(t *testing.T, url string, seed uint64) *workload {
	w := &workload{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Errorf("workload: %v", err)
			return
		}
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewPCG(seed, 7))
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			if w.pause.Load() {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			k := 1 + rng.IntN(500)
			_, err := conn.Exec(context.Background(), fmt.Sprintf(`BEGIN;
UPDATE public.sales SET amount = amount + 1 WHERE id = %[1]d;
DELETE FROM public.sales WHERE id = %[2]d;
INSERT INTO public.sales (id, amount, note) VALUES (%[2]d, %[3]d, 'reinserted') ON CONFLICT (id) DO NOTHING;
UPDATE public.sales SET note = note WHERE id = %[1]d;
COMMIT`, k, 1+rng.IntN(500), rng.IntN(1000)))
			if err != nil {
				// A source restarted under the workload: reconnect.
				conn.Close(context.Background())
				time.Sleep(200 * time.Millisecond)
				if conn, err = pgx.Connect(context.Background(), url); err != nil {
					t.Errorf("workload: reconnect: %v", err)
					return
				}
				continue
			}
			w.committed.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return w
}

func (w *workload) end() { close(w.stop); w.wg.Wait() }

const salesSchema = `CREATE TABLE public.sales (id int PRIMARY KEY, amount int NOT NULL, note text, body text);
INSERT INTO public.sales SELECT g, g, 'n' || g, CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 300) END FROM generate_series(1, 500) g;`

// TestEvaluationPathAsPrinted is issue 28's acceptance: the page's
// evaluation path typed in order ends CONVERGED with claims 1-3 PASS, and
// each "How you falsify it" step gives the page's answer.
func TestEvaluationPathAsPrinted(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.CreateDB(t, "shop")
	src.ExecDB(t, "shop", salesSchema)
	u := &user{t: t, bin: build(t), dir: t.TempDir()}
	postgresURL := src.URL("shop")
	u.env = append(u.env, "POSTGRES_URL="+postgresURL)

	// 60s · Assess a real source. Read-only: it passes (grade A or B).
	u.must(0, "trellara-check "+postgresURL+" --format text", "nothing was created")

	// 15m · A verified flow on a laptop: the documented public loop.
	w := startWorkload(t, postgresURL, 1)
	out := u.must(0, "trellara init --source-database-url "+postgresURL+" --table public.sales --evaluate", "export TRELLARA_TARGET_URL=")
	// init names no target for the page's line; it prints the two
	// commands that make one. The user types them.
	var createdb string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "createdb ") {
			createdb = l
		}
	}
	if createdb == "" || !strings.Contains(createdb, "shop_target") {
		t.Fatalf("init printed no createdb line for the target:\n%s", out)
	}
	src.CreateDB(t, "shop_target") // what the printed createdb does (no createdb binary is assumed here)
	u.env = append(u.env, "TRELLARA_TARGET_URL="+src.URL("shop_target"))

	u.must(0, "trellara check --config trellara.yml --format text")
	u.must(0, "trellara preflight --config trellara.yml", "preflight passed")
	// The writes of the morning end; the evaluation loop runs on what they
	// left (run --local catches up with what was committed when it
	// started: writes after it would make the next verify, at rest,
	// rightly BEHIND; verify under writes is TestVerifyUnderHotWritesIsExact).
	w.end()
	u.must(0, "trellara run --config trellara.yml --local --verify --format text", "CONVERGED")
	// A flow at rest: the page's next two commands, as printed.
	u.must(0, "trellara verify --config trellara.yml", "CONVERGED")
	u.must(0, "trellara status --config trellara.yml --view report --format text")

	// 1 day · Break it on purpose.
	u.must(0, "trellara chaos run")
	u.must(0, "trellara chaos report --output report.html")
	if _, err := os.Stat(filepath.Join(u.dir, "report.html")); err != nil {
		t.Fatalf("chaos report wrote no report.html: %v", err)
	}

	// 2 wks · Pilot with an evidence package.
	score := u.must(0, "trellara pilot-scorecard --config trellara.yml --format text")
	for _, claim := range []string{"1", "2", "3"} {
		if !claimPasses(score, claim) {
			t.Errorf("pilot-scorecard: claim %s does not PASS on a healthy evaluation flow:\n%s", claim, score)
		}
	}
	u.must(0, "trellara pilot-package --config trellara.yml --output ./pkg")
	if st, err := os.Stat(filepath.Join(u.dir, "pkg", "manifest.json")); err != nil || st.IsDir() {
		t.Fatalf("pilot-package --output ./pkg wrote no pkg/manifest.json: %v", err)
	}

	cfg, err := config.Load(filepath.Join(u.dir, "trellara.yml"))
	if err != nil {
		t.Fatal(err)
	}

	// Claim 1: stall a consumer on purpose and watch which disk grows.
	t.Run("stalled consumer is named", func(t *testing.T) {
		// The documented key that says how long a consumer may stand still
		// before it counts as stalled (default 2m), shortened so the test
		// does not wait two minutes (docs/CONFIG.md).
		path := filepath.Join(u.dir, "trellara.yml")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.Replace(b, []byte("    expire_past_retention:"), []byte("    stalled_consumer_after: 5s\n    expire_past_retention:"), 1)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		u.must(0, "trellara config validate --config trellara.yml")
		relay := u.service("relay", "trellara", "run", "--config", "trellara.yml", "--role", "relay")
		applier := u.service("applier", "trellara", "run", "--config", "trellara.yml", "--role", "applier")
		u.waitReady(cfg.Run.Listen.Relay)
		u.waitReady(cfg.Run.Listen.Applier)
		if err := applier.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		src.ExecDB(t, "shop", `INSERT INTO public.sales (id, amount, note, body) SELECT g, g, 'stall', repeat('x', 2000) FROM generate_series(10001, 30000) g`)
		u.eventually(2*time.Minute, 1, "trellara status --config trellara.yml", "STALLED", "consumer applier")
		_ = applier.Process.Signal(syscall.SIGCONT)
		u.stop(applier)
		u.stop(relay)
	})

	// Claim 2: try to observe a half-applied transaction (flow at rest;
	// semantics drives the pipeline itself and leaves the flow intact).
	t.Run("semantics", func(t *testing.T) {
		u.must(0, "trellara semantics --config trellara.yml", "0 violations")
		u.must(0, "trellara run --config trellara.yml --local --verify", "CONVERGED")
	})

	// Claim 3: kill the relay or the applier mid-flow, then verify.
	t.Run("SIGKILL then verify", func(t *testing.T) {
		w := startWorkload(t, postgresURL, 3)
		svc := u.service("service", "trellara", "run", "--config", "trellara.yml")
		for i := range 3 {
			u.waitReady(cfg.Run.Listen.Relay)
			time.Sleep(time.Duration(300+rand.IntN(1500)) * time.Millisecond)
			if err := svc.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_, _ = svc.Process.Wait()
			t.Logf("SIGKILL %d of the service", i+1)
			svc = u.service(fmt.Sprintf("service-%d", i+1), "trellara", "run", "--config", "trellara.yml")
		}
		w.end()
		u.waitReady(cfg.Run.Listen.Relay)
		u.eventually(2*time.Minute, 0, "trellara verify --config trellara.yml", "CONVERGED")
		u.stop(svc)
		u.must(0, "trellara verify --config trellara.yml", "CONVERGED")
	})

	// Claim 4: take a source offline, let an epoch close, and check that
	// the epoch record admits the gap.
	t.Run("offline source is a named gap", func(t *testing.T) {
		other := pgtest.Start(t, pgtest.Options{NoFsync: true})
		other.CreateDB(t, "store2")
		other.CreateDB(t, "store2_target")
		other.ExecDB(t, "store2", salesSchema)
		u.must(0, "trellara init --source-database-url "+other.URL("store2")+" --target-database-url "+other.URL("store2_target")+
			" --table public.sales --source-id store2 --evaluate --output store2.yml")
		u.must(0, "trellara-full fleet init --config fleet.yml --source trellara.yml --source store2.yml --close-interval 2s --max-lag 6s")
		fleet := u.service("fleet", "trellara-full", "fleet", "run", "--config", "fleet.yml")
		u.eventually(3*time.Minute, 0, "trellara-full lake epoch --config fleet.yml", "complete")
		other.Stop()
		out := u.eventually(3*time.Minute, 1, "trellara-full lake epoch --config fleet.yml", "complete_with_gaps", "store2")
		if strings.Contains(out, "status complete ") {
			t.Errorf("lake epoch rounds the gap away:\n%s", out)
		}
		u.must(1, "trellara-full fleet scorecard --config fleet.yml", "store2")
		u.stop(fleet)
	})
}

// claimPasses reads the scorecard's text for claim n's verdict.
func claimPasses(score, n string) bool {
	for _, l := range strings.Split(score, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == n || f[0] == "claim" && len(f) > 2 && f[1] == n) {
			return strings.Contains(strings.ToUpper(l), "PASS")
		}
	}
	return false
}
