package flow_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// `trellara init --capture extension` writes source.capture: extension and
// the server's socket path, and preflight on that path checks the preload,
// trellara.database, trellara.tables, the decoder's slot, the socket and
// its owner and the OS user, each failure with its exact ALTER SYSTEM and
// restart: on a server without the preload it names
// ALTER SYSTEM SET shared_preload_libraries; on one with the extension it
// passes as the server's OS user and fails as another user, and a table
// missing from trellara.tables names ALTER SYSTEM SET trellara.tables.
func TestExtensionInitAndPreflight(t *testing.T) {
	pgtest.Require(t)
	built := trellaraBin(t)
	target := pgtest.Start(t, pgtest.Options{NoFsync: true})
	target.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)

	preflight := func(as osUser, bin, cfg string, src *pgtest.Cluster) (string, error) {
		cmd := as.command(bin, "preflight", "--config", cfg)
		cmd.Env = append(os.Environ(), "TRELLARA_SOURCE_URL="+src.URL("postgres"), "TRELLARA_TARGET_URL="+target.URL("postgres"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	initFlow := func(as osUser, bin, dir string, src *pgtest.Cluster, extra ...string) string {
		t.Helper()
		cfg := filepath.Join(dir, "trellara.yml")
		args := append([]string{"init", "--capture", "extension", "--source-database-url", src.URL("postgres"),
			"--target-database-url", target.URL("postgres"), "--output", cfg}, extra...)
		if out, err := as.command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("trellara %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return cfg
	}

	// A server that does not preload trellara.
	plain := pgtest.Start(t, pgtest.Options{NoFsync: true})
	plain.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	me := osUser{uid: os.Geteuid(), gid: os.Getegid()}
	dir := t.TempDir()
	cfg := initFlow(me, built, dir, plain, "--table", "public.t", "--socket", "/tmp/trellara-test-none.sock")
	body, err := os.ReadFile(cfg)
	if err != nil || !strings.Contains(string(body), "capture: extension") || !strings.Contains(string(body), "socket: /tmp/trellara-test-none.sock") ||
		!strings.Contains(string(body), "dir: /var/lib/trellara-sidecar/") {
		t.Fatalf("init --capture extension --socket wrote (%v), want the capture, the socket and a log directory the sidecar unit may write:\n%s", err, body)
	}
	out, err := preflight(me, built, cfg, plain)
	if err == nil || !strings.Contains(out, "fix: ALTER SYSTEM SET shared_preload_libraries = 'trellara'; then restart the server: systemctl restart postgresql (or pg_ctl restart -D ") {
		t.Fatalf("preflight on a server without the preload (%v):\n%s", err, out)
	}

	// A server with the extension, decoding public.t and public.u.
	src, sock := extSource(t, nil)
	src.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`, `CREATE TABLE u (id int PRIMARY KEY, n bigint)`, `CREATE TABLE w (id int PRIMARY KEY)`)
	target.Exec(t, `CREATE TABLE u (id int PRIMARY KEY, n bigint)`, `CREATE TABLE w (id int PRIMARY KEY)`)
	as := serverUser(t, src)
	bin := as.copyBin(t, built)
	dir = as.tempDir(t)
	cfg = initFlow(as, bin, dir, src, "--table", "public.t", "--table", "public.u")
	if body, err := os.ReadFile(cfg); err != nil || !strings.Contains(string(body), "socket: "+sock) || strings.Contains(string(body), "owns_slot: true") {
		t.Fatalf("init --capture extension without --socket: want the server's %s (%v):\n%s", sock, err, body)
	}
	out, err = preflight(as, bin, cfg, src)
	t.Logf("preflight on the extension path:\n%s", out)
	if err != nil || !strings.Contains(out, "preflight passed") {
		t.Fatalf("preflight on the extension path as the server's OS user (%v):\n%s", err, out)
	}
	if as.cred != nil {
		// This process is another user than the server's.
		if out, err := preflight(me, built, cfg, src); err == nil || !strings.Contains(out, "FAIL  OS user") {
			t.Fatalf("preflight as another OS user than the server's (%v):\n%s", err, out)
		}
	}
	os.Remove(cfg)
	cfg = initFlow(as, bin, dir, src, "--table", "public.t", "--table", "public.w")
	if out, err := preflight(as, bin, cfg, src); err == nil ||
		!strings.Contains(out, `fix: ALTER SYSTEM SET trellara.tables = 'public.t, public.u, public.w'; then restart the server`) {
		t.Fatalf("preflight with a table the decoder does not send (%v):\n%s", err, out)
	}
}
