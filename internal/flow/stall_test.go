package flow_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// The product page's 21:06 step, on real processes: a relay and an
// applier run as separate services; the applier is frozen (SIGSTOP) while
// the source commits. The slot stays clean, the relay keeps publishing,
// and the log grows; status must then exit 1 naming the stalled consumer
// (the sink's cursor), how long it has been still, the log's growth and
// retention headroom in hours, and the actions; check --config grades the
// same finding; the relay's metrics carry it for the alert rule. Before
// the freeze, with both running and caught up, status names no stall.
func TestStalledConsumerNamed(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, crashSchema)
	dst.CreateDB(t, "shop_copy")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	relayPort := freePort(t)
	body := fmt.Sprintf(`version: 2
flow: shop
source:
  id: src1
  database_url: %q
  owns_slot: true
  tables: [public.orders, public.line_items, public.counters]
transport:
  local: {dir: %s, stalled_consumer_after: 2s}
target: {database_url: %q, create_tables: true}
run:
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, src.URL("postgres"), filepath.Join(dir, "data"), dst.URL("shop_copy"), relayPort, freePort(t))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int) {
		t.Helper()
		// stdout only: a warning on stderr is not part of the report.
		out, err := exec.Command(bin, args...).Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	relay := &proc{t: t, name: "relay", bin: bin, dir: dir, args: []string{"run", "--config", cfg, "--role", "relay"}}
	applier := &proc{t: t, name: "applier", bin: bin, dir: dir, args: []string{"run", "--config", cfg, "--role", "applier"}}
	defer func() {
		for _, p := range []*proc{applier, relay} {
			if p.cmd != nil {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
			}
			p.signal(syscall.SIGKILL)
		}
		if t.Failed() {
			t.Log(relay.logs(), applier.logs())
		}
	}()
	relay.start()
	applier.start()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	type statusDoc struct {
		Log struct {
			Cursors []struct {
				Name    string `json:"name"`
				Lag     uint64 `json:"lag_entries"`
				Stalled *struct {
					Seconds       float64  `json:"seconds"`
					Growth        *float64 `json:"log_growth_bytes_per_second"`
					HeadroomHours *float64 `json:"retention_headroom_hours"`
					Limit         string   `json:"retention_limit"`
				} `json:"stalled"`
			} `json:"cursors"`
		} `json:"log"`
		Problems []struct{ Code, Message, Fix string } `json:"problems"`
	}
	status := func() (statusDoc, string, int) {
		out, code := run("status", "--config", cfg, "--format", "json")
		var st statusDoc
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status json (exit %d): %v\n%s", code, err, out)
		}
		return st, out, code
	}
	src.Exec(t, `INSERT INTO orders SELECT g, g, 'first' FROM generate_series(1, 50) g`)
	// Running and caught up: the applier has applied what the relay
	// published (its cursor at the log's end), and nothing is stalled.
	waitFor("the applier to catch up", func() bool {
		st, _, _ := status()
		return len(st.Log.Cursors) == 1 && st.Log.Cursors[0].Lag == 0
	})
	time.Sleep(3 * time.Second) // longer than stalled_consumer_after: a caught-up consumer is never stalled
	if st, out, _ := status(); hasProblem(st.Problems, "consumer_stalled") {
		t.Fatalf("a caught-up applier is named stalled:\n%s", out)
	}

	// Freeze the applier, then commit: the relay publishes, the log grows.
	if err := applier.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	src.Exec(t, `INSERT INTO orders SELECT g, g, repeat('x', 2000) FROM generate_series(1001, 4000) g`)
	waitFor("status to name the stalled consumer", func() bool {
		st, _, code := status()
		return code == 1 && hasProblem(st.Problems, "consumer_stalled")
	})
	st, out, code := status()
	if code != 1 {
		t.Fatalf("status exit %d with a frozen applier, want 1\n%s", code, out)
	}
	var p struct{ Code, Message, Fix string }
	for _, q := range st.Problems {
		if q.Code == "consumer_stalled" {
			p = q
		}
	}
	for _, want := range []string{"consumer applier", "STALLED", "has not moved for", "behind the log's end", "retention headroom ~", "free disk"} {
		if !strings.Contains(p.Message, want) {
			t.Errorf("the stalled-consumer problem does not say %q:\n%s", want, p.Message)
		}
	}
	for _, want := range []string{"systemctl restart trellara-applier@shop", "--role applier", "trellara repair-plan --config"} {
		if !strings.Contains(p.Fix, want) {
			t.Errorf("the fix does not name %q:\n%s", want, p.Fix)
		}
	}
	c := st.Log.Cursors[0]
	if c.Stalled == nil || c.Stalled.Seconds < 2 || c.Stalled.Growth == nil || c.Stalled.HeadroomHours == nil || c.Stalled.Limit != "disk_free" {
		t.Errorf("cursor %s stall figures: %+v", c.Name, c.Stalled)
	}
	// The slot is clean: the relay confirmed what it published.
	if hasProblem(st.Problems, "slot_inactive_retaining_wal") {
		t.Errorf("the slot is blamed for the applier's stall:\n%s", out)
	}
	text, _ := run("status", "--config", cfg)
	if !regexp.MustCompile(`PROBLEM: consumer applier \(sink default's applier\) is STALLED`).MatchString(text) {
		t.Errorf("status text does not name the stalled consumer:\n%s", text)
	}

	// check --config grades it, with the same actions.
	chk, code := run("check", "--config", cfg, "--format", "json")
	if code != 1 || !strings.Contains(chk, `"code": "consumer_stalled"`) || !strings.Contains(chk, "systemctl restart trellara-applier@shop") {
		t.Errorf("check --config with a stalled consumer: exit %d, want 1 with finding consumer_stalled\n%s", code, chk)
	}

	// The relay exports it for the alert rule (TrellaraConsumerStalled).
	waitFor("the relay to export the stall", func() bool {
		v, ok := metric(t, relayPort, "trellara_log_consumer_stalled_seconds")
		return ok && v >= 2
	})
	if v, ok := metric(t, relayPort, "trellara_log_retention_headroom_seconds"); !ok || v <= 0 {
		t.Errorf("trellara_log_retention_headroom_seconds = %v (present %v) while a consumer is stalled", v, ok)
	}

	// Thawed, it catches up, and the problem is gone.
	if err := applier.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor("the thawed applier to catch up", func() bool {
		st, _, _ := status()
		return !hasProblem(st.Problems, "consumer_stalled") && st.Log.Cursors[0].Lag == 0
	})
}

func hasProblem(ps []struct{ Code, Message, Fix string }, code string) bool {
	for _, p := range ps {
		if p.Code == code {
			return true
		}
	}
	return false
}

// metric reads one series of the relay's /metrics (the flow's labels).
func metric(t *testing.T, port int, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*\} (\S+)$`).FindStringSubmatch(b.String())
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}
