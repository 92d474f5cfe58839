package flow_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// memRowsDefault is the transaction size of BenchmarkRunLocalMemory when
// TRELLARA_MEM_ROWS is unset: the 1.5M rows (≈ 90 MB of row data).
const memRowsDefault = 1_500_000

// memTableSQL is the large transaction's table: four columns, about 60
// bytes of row data per row.
const memTableSQL = `CREATE TABLE big (id bigint PRIMARY KEY, n int NOT NULL, label text, at timestamptz)`

// memInsertSQL commits rows rows into big in one transaction.
func memInsertSQL(rows int) string {
	return fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, md5(g::text), '2026-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, %d) g`, rows)
}

// memFlowConfig is a run --local flow of table big from src to target with
// the default bounds (memory_bytes_max, chunk size, batch sizes).
func memFlowConfig(b testing.TB, dir, srcURL, targetURL string) string {
	return localFlowConfig(b, dir, "mem", "mem", srcURL, targetURL, "public.big")
}

// localFlowConfig writes dir/trellara.yml: flow (source id) of tables from
// src to target over a local log in dir/data (fsync always) with the
// default bounds; TRELLARA_MEM_SOURCE_MEMORY sets source.memory_bytes_max.
func localFlowConfig(b testing.TB, dir, flow, id, srcURL, targetURL string, tables ...string) string {
	b.Helper()
	cfg := filepath.Join(dir, "trellara.yml")
	extra := ""
	if v := os.Getenv("TRELLARA_MEM_SOURCE_MEMORY"); v != "" {
		extra = "\n  memory_bytes_max: " + v
	}
	body := fmt.Sprintf(`version: 2
flow: %s
source:
  id: %s
  database_url: %q
  owns_slot: true
  tables: [%s]%s
transport:
  local: {dir: %s, fsync: always}
target:
  database_url: %q
run:
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, flow, id, srcURL, strings.Join(tables, ", "), extra, filepath.Join(dir, "data"), targetURL, freePort(b), freePort(b))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	return cfg
}

// memRun is one measured `trellara run --local --verify`.
type memRun struct {
	peakKiB int64 // the child's VmHWM at exit
	secs    float64
	out     string
}

// runLocalPeak runs `bin run --config cfg --local --verify` to its exit
// (CONVERGED) and returns the child's peak resident set (VmHWM), read
// from /proc while it runs: the last reading before exit is the peak,
// since VmHWM only grows.
func runLocalPeak(b testing.TB, bin, cfg string) memRun {
	b.Helper()
	cmd := exec.Command(bin, "run", "--config", cfg, "--local", "--verify")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	exited := startProcess(b, cmd)
	peak := samplePeak(cmd.Process.Pid)
	err := <-exited
	peakKiB := peak()
	if err != nil {
		b.Fatalf("trellara run --local --verify: %v\n%s", err, out.String())
	}
	return memRun{peakKiB: peakKiB, secs: time.Since(t0).Seconds(), out: out.String()}
}

// startProcess starts cmd and returns the channel its Wait's result
// arrives on.
func startProcess(b testing.TB, cmd *exec.Cmd) <-chan error {
	b.Helper()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited
}

// samplePeak reads process pid's VmHWM every 20 ms until the function it
// returns is called, which returns the highest reading in KiB: the peak,
// since VmHWM only grows (a process already gone reads 0).
func samplePeak(pid int) func() int64 {
	stop, peakc := make(chan struct{}), make(chan int64, 1)
	go func() {
		var peak int64
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if kb := procStatusKiB(pid, "VmHWM:"); kb > peak {
				peak = kb
			}
			select {
			case <-stop:
				peakc <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 { close(stop); return <-peakc }
}

// procStatusKiB reads one "Name: N kB" field of /proc/PID/status; 0 when
// the process is gone.
func procStatusKiB(pid int, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, field) {
			if f := strings.Fields(l); len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

// BenchmarkRunLocalMemory (make bench-mem) commits one transaction of
// TRELLARA_MEM_ROWS rows (default 1.5M, ≈ 90 MB of row data; a comma list
// such as 1500000,4500000 runs each size on fresh clusters) into a
// four-column table and measures `trellara run --local --verify` applying
// it to CONVERGED: the process's peak resident set (VmHWM of the child,
// read from /proc while it runs) and its wall time. The flow takes its
// (empty) snapshot with a first run before the transaction, so the
// measured run carries only the one large transaction, in chunks.
// No assertion on the figures: they are evidence (docs/EVIDENCE.md).
func BenchmarkRunLocalMemory(b *testing.B) {
	pgtest.Require(b)
	bin := trellaraBin(b)
	sizes := []int{memRowsDefault}
	if v := os.Getenv("TRELLARA_MEM_ROWS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("TRELLARA_MEM_ROWS=%q: want positive row counts separated by commas", v)
			}
			sizes = append(sizes, n)
		}
	}
	for _, rows := range sizes {
		r := runLocalMemory(b, bin, rows)
		if os.Getenv("TRELLARA_MEM_OUT") != "" {
			b.Log(r.out)
		}
		b.Logf("one transaction of %d rows: run --local --verify peak RSS %.0f MiB, %.1fs", rows, float64(r.peakKiB)/1024, r.secs)
		b.ReportMetric(float64(r.peakKiB)/1024, fmt.Sprintf("peak_RSS_MiB/%d_rows", rows))
	}
}

// runLocalMemory measures one transaction of rows rows on fresh clusters.
func runLocalMemory(b testing.TB, bin string, rows int) memRun {
	// The source must keep the transaction's WAL until the slot consumes
	// it, so no checkpoint may recycle it mid-run. wal_sender_timeout stays
	// at its default minute: the relay keeps the walsender alive while it
	// publishes one large transaction (relay
	// TestRelayStaysAliveWhilePublishingALargeTransaction).
	src := pgtest.Start(b, pgtest.Options{Settings: map[string]string{"max_wal_size": "32GB"}})
	defer src.Stop()
	tgt := pgtest.Start(b, pgtest.Options{Settings: map[string]string{"max_wal_size": "32GB"}})
	defer tgt.Stop()
	src.Exec(b, memTableSQL)
	tgt.Exec(b, memTableSQL)
	dir := b.TempDir()
	cfg := memFlowConfig(b, dir, src.URL("postgres"), tgt.URL("postgres"))
	if out, err := exec.Command(bin, "run", "--config", cfg, "--local").CombinedOutput(); err != nil {
		b.Fatalf("trellara first run (slot and snapshot): %v\n%s", err, out)
	}
	// Not src.Exec: its statements time out after a minute, and 15M rows
	// take longer on a loaded machine.
	ctx := context.Background()
	sconn := src.Connect(ctx)
	if _, err := sconn.Exec(ctx, memInsertSQL(rows)); err != nil {
		b.Fatalf("insert %d rows: %v", rows, err)
	}
	sconn.Close(ctx)
	r := runLocalPeak(b, bin, cfg)
	var got int
	conn := tgt.Connect(ctx)
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM big`).Scan(&got); err != nil || got != rows {
		b.Fatalf("target holds %d rows (err %v), want %d", got, err, rows)
	}
	return r
}

// TestRunLocalMemoryHarness runs the memory harness once at a small size
// (a smoke of the measurement path: flow, chunked transaction, child
// process, /proc reading); it asserts the applied rows and that a peak
// was read, never a size.
func TestRunLocalMemoryHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers and builds the CLI")
	}
	pgtest.Require(t)
	r := runLocalMemory(t, trellaraBin(t), 100_000) // more than one 4 MiB chunk
	if r.peakKiB <= 0 {
		t.Fatalf("no VmHWM read for the run --local child\n%s", r.out)
	}
}
