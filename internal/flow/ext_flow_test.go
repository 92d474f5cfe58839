package flow_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// extSource is a source cluster with the trellara extension preloaded and
// its decoder on slot ext (database postgres, tables public.t and
// public.u), with conf added or overriding; it returns once the decoder
// holds the slot and the socket is there.
func extSource(t *testing.T, conf map[string]string) (*pgtest.Cluster, string) {
	t.Helper()
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	pgtest.InstallExtension(t, src.BinDir())
	sock := filepath.Join(src.SocketDir(), "trellara.sock")
	all := map[string]string{
		"shared_preload_libraries": "trellara",
		"trellara.database":        "postgres",
		"trellara.slot_name":       "ext",
		"trellara.socket_path":     sock,
		"trellara.tables":          "public.t, public.u",
	}
	for k, v := range conf {
		all[k] = v
	}
	ctx := context.Background()
	conn := src.Connect(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_settings WHERE name = 'output_plugin_libraries'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if n == 1 {
		// Newer minor releases refuse output plugins not listed; a list
		// keeps pgoutput (the first run's snapshot) usable.
		all["output_plugin_libraries"] = "pgoutput, test_decoding, trellara"
	}
	setSource(t, src, all)
	conn = src.Connect(ctx)
	defer conn.Close(ctx)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var active bool
		err := conn.QueryRow(ctx, `SELECT coalesce(active_pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'trellara decoder'), false)
			FROM pg_replication_slots WHERE slot_name = 'ext'`).Scan(&active)
		_, serr := os.Stat(sock)
		if err == nil && active && serr == nil {
			return src, sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trellara decoder did not take slot ext and open %s", sock)
		}
	}
}

// extFlowConfig writes a flow from src to target over tables public.t and
// public.u into dir with captureLines choosing the capture path.
func extFlowConfig(t *testing.T, as osUser, dir string, src, target *pgtest.Cluster, captureLines string) string {
	t.Helper()
	return writeExtFlow(t, as, dir, "extflow", "public.t, public.u", src, target, captureLines)
}

// writeExtFlow writes dir/trellara.yml: flow name from src to target over
// tables (a YAML list's items), its local log in dir/data, captureLines
// choosing the capture path, owned by as.
func writeExtFlow(t *testing.T, as osUser, dir, name, tables string, src, target *pgtest.Cluster, captureLines string) string {
	t.Helper()
	cfg := filepath.Join(dir, "trellara.yml")
	body := fmt.Sprintf(`version: 2
flow: %s
source:
  id: ext
  database_url: %q
%s  tables: [%s]
transport:
  local: {dir: %s, fsync: always}
target:
  database_url: %q
run:
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, name, src.URL("postgres"), captureLines, tables, filepath.Join(dir, "data"), target.URL("postgres"), freePort(t), freePort(t))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	as.chown(t, cfg)
	return cfg
}

// A table without a primary key cannot be copied in key ranges on the
// extension path, so the first run refuses and prints the recipe that takes
// the snapshot on the pgoutput path instead; following it as printed works,
// with trellara.include_messages off (its default): the extension path
// still carries Trellara's own fences (prefix trellara.), so `run --local
// --verify` on capture: extension proves convergence. The flow's first run
// takes the snapshot on the pgoutput path, changes written after it reach
// the target through the extension's decoder and the sidecar, and the
// verdict is CONVERGED.
func TestExtensionSnapshotOnPgoutputForKeylessTables(t *testing.T) {
	pgtest.Require(t)
	src, sock := extSource(t, map[string]string{"trellara.include_messages": "off"})
	schema := []string{`CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE u (id int NOT NULL, n bigint)`, `ALTER TABLE u REPLICA IDENTITY FULL`}
	src.Exec(t, append(schema, `INSERT INTO t SELECT g, 'a' || g FROM generate_series(1, 200) g`,
		`INSERT INTO u SELECT g, g * 10 FROM generate_series(1, 50) g`)...)
	target := pgtest.Start(t, pgtest.Options{NoFsync: true})
	target.Exec(t, schema...)

	as := serverUser(t, src)
	bin := as.copyBin(t, trellaraBin(t))
	dir := as.tempDir(t)
	// The first run of an extension flow with a keyless table refuses,
	// printing the recipe this test then follows.
	cfg := extFlowConfig(t, as, dir, src, target, fmt.Sprintf("  capture: extension\n  socket: %s\n", sock))
	refusal, err := as.command(bin, "run", "--config", cfg, "--local").CombinedOutput()
	_, drop, found := strings.Cut(string(refusal), "5. on the source: ")
	drop, _, _ = strings.Cut(drop, "   (")
	if err == nil || !found || !strings.Contains(string(refusal), "1. in "+cfg+" set source.capture: pgoutput and source.owns_slot: true") {
		t.Fatalf("run --local of an extension flow with keyless table u (%v): want the snapshot recipe\n%s", err, refusal)
	}
	extFlowConfig(t, as, dir, src, target, "  owns_slot: true\n")
	if out, err := as.command(bin, "run", "--config", cfg, "--local").CombinedOutput(); err != nil {
		t.Fatalf("first run (snapshot on the pgoutput path): %v\n%s", err, out)
	}
	// Changes after the log's newest transaction: the extension's slot,
	// held since before the snapshot, has them.
	src.Exec(t, `UPDATE t SET v = v || '!' WHERE id % 3 = 0`, `DELETE FROM u WHERE id > 40`,
		`INSERT INTO t SELECT g, 'b' || g FROM generate_series(201, 300) g`)
	extFlowConfig(t, as, dir, src, target, fmt.Sprintf("  capture: extension\n  socket: %s\n", sock))
	cmd := as.command(bin, "run", "--config", cfg, "--local", "--verify")
	// A fence the extension drops is never seen: the run would wait for
	// it forever.
	stop := time.AfterFunc(3*time.Minute, func() { cmd.Process.Kill() })
	out, err := cmd.CombinedOutput()
	stop.Stop()
	if err != nil || !strings.Contains(string(out), "CONVERGED") {
		t.Fatalf("run --local --verify on capture: extension with trellara.include_messages off: %v\n%s", err, out)
	}
	// Step 5: the pgoutput slot and publication go; the flow runs on.
	src.Exec(t, strings.Split(strings.TrimSuffix(drop, ";"), "; ")...)
	t.Logf("the refusal for keyless table u:\n%s", refusal)
	sc := src.Connect(context.Background())
	var left int
	if err := sc.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_replication_slots WHERE plugin = 'pgoutput') + (SELECT count(*) FROM pg_publication)`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("after step 5 (%s): %d pgoutput slots and publications left (%v)", drop, left, err)
	}
	sc.Close(context.Background())
	src.Exec(t, `UPDATE u SET n = n + 1 WHERE id = 1`)
	if out, err := as.command(bin, "run", "--config", cfg, "--local", "--verify").CombinedOutput(); err != nil || !strings.Contains(string(out), "CONVERGED") {
		t.Fatalf("run --local --verify after dropping the pgoutput slot and publication (%s): %v\n%s", drop, err, out)
	}
	var n int
	ctx := context.Background()
	tc := target.Connect(ctx)
	defer tc.Close(ctx)
	if err := tc.QueryRow(ctx, `SELECT count(*) FROM t WHERE v LIKE '%!' OR id > 200`).Scan(&n); err != nil || n != 166 {
		t.Fatalf("target rows changed after the snapshot: %d (%v), want 166 (66 updates, 100 inserts)", n, err)
	}
}
