package flow_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/lsn"
)

// BenchmarkApplyVsNativeExtension is BenchmarkApplyVsNativeReplication
// with the Trellara side capturing through the trellara extension
// (source.capture: extension): the extension's decoder worker decodes the
// WAL inside the server, the Go sidecar of `trellara run --local` writes
// the local log from its socket, and the same applier applies it. Same
// backlog, targets, ABBA order, marker-row timing, CPU accounting and
// correctness check after every run.
//
// Every consumer is parked before the backlog (docs/EVIDENCE.md, "Method"):
// each native subscriber after its copy_data, disabled; each Trellara flow
// on its own decoder slot ("ext<run>", created after the initial load and
// before the flow's snapshot), after its snapshot (a first run with
// capture: pgoutput, as the extension exports none) and one catch-up run
// with capture: extension, so the 1M-row load and the snapshot are not in
// what the timed run decodes.
//
// Differences from BenchmarkApplyVsNativeReplication, stated in the log's
// header line:
//   - The decoder worker decodes one slot, named by a restart-only setting
//     (trellara.slot_name), so the source is restarted before every run,
//     native and Trellara alike (untimed; shared buffers start cold, the
//     OS page cache stays): with the workers pointed at the run's slot for
//     a Trellara run, and without workers (trellara.database empty) for a
//     native run and while the backlog is written.
//   - The decoder starts with the server and decodes into its bounded
//     queue (16 × 64 KiB) before the sidecar connects: at most that much
//     of the backlog is decoded before the Trellara run's clock starts
//     (its CPU is not counted either).
//   - trellara runs as the server's OS user: the extension's socket admits
//     only that user (a root sidecar is refused by its peer check).
func BenchmarkApplyVsNativeExtension(b *testing.B) {
	pgtest.Require(b)
	built := trellaraBin(b)
	txns := pgtest.BenchTxns()
	scale := benchEnv("TRELLARA_BENCH_SCALE", 10)
	rounds := benchEnv("TRELLARA_BENCH_ROUNDS", 1)
	order := abbaOrder(rounds)
	src := pgtest.Start(b, pgtest.Options{})
	pgtest.InstallExtension(b, src.BinDir())
	sock := filepath.Join(src.SocketDir(), "trellara.sock")
	tables := "public.accounts, public.tellers, public.branches, public.history, public.bench_marker"
	conf := map[string]string{
		"shared_preload_libraries":  "trellara",
		"trellara.database":         "",
		"trellara.socket_path":      sock,
		"trellara.include_messages": "on",
		// The tables of the native side's publication.
		"trellara.tables": tables,
		// Every run keeps its slots until the end: a native run one, an
		// extension run two (the decoder's and its flow's own, created by
		// the first run); three rounds need 18, above pgtest's 16.
		"max_replication_slots": "32",
		"max_wal_senders":       "32",
	}
	var n int
	ctx := context.Background()
	if err := src.Connect(ctx).QueryRow(ctx, `SELECT count(*) FROM pg_settings WHERE name = 'output_plugin_libraries'`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	if n == 1 {
		// Newer minor releases refuse output plugins not listed; a list
		// keeps pgoutput (the native walsender, the snapshot) usable.
		conf["output_plugin_libraries"] = "pgoutput, test_decoding, trellara"
	}
	setSource(b, src, conf)
	src.Exec(b, e2eSourceSchema(scale))

	as := serverUser(b, src)
	bin := as.copyBin(b, built)
	natives := map[int]nativeTarget{}
	exts := map[int]extTarget{}
	for i, isTrellara := range order {
		if isTrellara {
			slot := fmt.Sprintf("ext%d", i)
			src.Exec(b, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'trellara')`, slot))
			exts[i] = newExtTarget(b, as, bin, src, fmt.Sprintf("e2e%d", i), slot, sock)
		} else {
			natives[i] = newNativeTarget(b, src, fmt.Sprintf("native%d", i))
		}
	}
	for i, isTrellara := range order {
		if isTrellara {
			et := exts[i]
			decoderOn(b, src, et.slot, sock)
			if out, err := as.command(bin, "run", "--config", et.cfg, "--local").CombinedOutput(); err != nil {
				b.Fatalf("trellara catch-up run with capture: extension for run %d: %v\n%s", i+1, err, out)
			}
		}
	}
	setSource(b, src, map[string]string{"trellara.database": ""})
	pgbenchE2E(b, src, scale, 0, "-t", strconv.Itoa(txns/4))
	src.Exec(b, `INSERT INTO bench_marker VALUES (1)`)
	end := currentLSN(b, src)
	b.Logf("backlog: %d TPC-B transactions at scale %d (%d accounts), source WAL end %s, %d ABBA round(s); "+
		"trellara with capture: extension, run as the server's OS user; the source is restarted before every run "+
		"(untimed, both sides: the decoder's slot is a restart setting); the decoder may decode up to its queue "+
		"(16 × 64 KiB of frames) before the sidecar connects and the clock and CPU count start",
		txns/4*4, scale, 100000*scale, pglogrepl.LSN(end), rounds)
	txns = txns / 4 * 4

	runE2E(b, order, "extension", txns, func(i int) (float64, string, cpuRun) {
		et := exts[i]
		decoderOn(b, src, et.slot, sock)
		secs, detail, cpu := timeTrellaraRun(b, src, et.c, as.command(bin, "run", "--config", et.cfg, "--local"), i+1)
		decoderConfirmed(b, src, et.slot, end)
		return secs, detail, cpu
	}, func(i int) (float64, string, cpuRun) {
		setSource(b, src, map[string]string{"trellara.database": ""})
		return timeNativeRun(b, src, natives[i], i+1)
	})
}

// extTarget is a fresh target cluster with a Trellara flow configured for
// capture: extension on decoder slot slot.
type extTarget struct {
	c    *pgtest.Cluster
	cfg  string
	slot string
}

// newExtTarget makes a target and a flow into it in a directory of the
// server's user, takes the flow's initial snapshot with capture: pgoutput
// and owns_slot (as the server's user, so the log is that user's), and
// switches the config to capture: extension.
func newExtTarget(b *testing.B, as osUser, bin string, src *pgtest.Cluster, flow, slot, sock string) extTarget {
	b.Helper()
	t := pgtest.Start(b, e2eTargetSettings)
	t.Exec(b, e2eTargetSchema)
	dir := as.tempDir(b)
	cfg := writeTrellaraConfig(b, dir, flow, src, t, "  owns_slot: true\n")
	as.chown(b, cfg)
	if out, err := as.command(bin, "run", "--config", cfg, "--local").CombinedOutput(); err != nil {
		b.Fatalf("trellara first run (slot and snapshot) for %s: %v\n%s", flow, err, out)
	}
	writeTrellaraConfig(b, dir, flow, src, t, fmt.Sprintf("  capture: extension\n  socket: %s\n", sock))
	as.chown(b, cfg)
	return extTarget{c: t, cfg: cfg, slot: slot}
}

// setSource appends settings to the source's postgresql.conf (later lines
// override earlier ones; ALTER SYSTEM refuses trellara.* before the
// library is loaded) and restarts it.
func setSource(b testing.TB, src *pgtest.Cluster, conf map[string]string) {
	b.Helper()
	f, err := os.OpenFile(filepath.Join(src.DataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range conf {
		fmt.Fprintf(f, "%s = '%s'\n", k, strings.ReplaceAll(v, "'", "''"))
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	src.Restart()
}

// decoderOn restarts the source with the extension's workers decoding
// slot, and waits until the decoder holds it and the socket is there.
func decoderOn(b *testing.B, src *pgtest.Cluster, slot, sock string) {
	b.Helper()
	setSource(b, src, map[string]string{"trellara.database": "postgres", "trellara.slot_name": slot})
	ctx := context.Background()
	conn := src.Connect(ctx)
	waitFor(b, "the trellara decoder on slot "+slot, func() bool {
		var active bool
		err := conn.QueryRow(ctx, `SELECT active_pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'trellara decoder')
			FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		_, serr := os.Stat(sock)
		return err == nil && active && serr == nil
	})
}

// decoderConfirmed fails b unless the decoder's slot confirms end within a
// minute of the run: the backlog went through the extension (the sidecar
// acknowledges only what it made durable), not through another slot.
func decoderConfirmed(b *testing.B, src *pgtest.Cluster, slot string, end uint64) {
	b.Helper()
	ctx := context.Background()
	conn := src.Connect(ctx)
	var at string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&at); err != nil {
			b.Fatal(err)
		}
		if v, err := lsn.Parse(at); err == nil && uint64(v) >= end {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("decoder slot %s confirmed %s, short of the backlog's end %s: the run did not capture through the extension",
				slot, at, pglogrepl.LSN(end))
		}
	}
}

// osUser runs trellara as the source server's OS user (the owner of its
// data directory), whom the extension's socket admits.
type osUser struct {
	uid, gid int
	cred     *syscall.Credential // nil: this process's own user
}

func serverUser(b testing.TB, src *pgtest.Cluster) osUser {
	b.Helper()
	st, err := os.Stat(src.DataDir())
	if err != nil {
		b.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	u := osUser{uid: int(sys.Uid), gid: int(sys.Gid)}
	if u.uid != os.Geteuid() {
		u.cred = &syscall.Credential{Uid: sys.Uid, Gid: sys.Gid}
	}
	return u
}

// tempDir is a directory of u's, removed after the benchmark.
func (u osUser) tempDir(b testing.TB) string {
	b.Helper()
	dir, err := os.MkdirTemp("", "trellara-bench-ext-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	u.chown(b, dir)
	return dir
}

func (u osUser) chown(b testing.TB, path string) {
	b.Helper()
	if u.cred != nil {
		if err := os.Chown(path, u.uid, u.gid); err != nil {
			b.Fatal(err)
		}
	}
}

// copyBin copies the trellara binary where u can run it (a test's
// temporary directories are not).
func (u osUser) copyBin(b testing.TB, bin string) string {
	b.Helper()
	in, err := os.Open(bin)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(u.tempDir(b), "trellara")
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
	return dst
}

// command is bin with args, run as u.
func (u osUser) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred}
	return cmd
}
