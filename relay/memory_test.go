package relay_test

import (
	"bufio"
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
	"github.com/trellara/trellara/relay"
)

// BenchmarkLargeTransactionMemory captures one transaction of
// TRELLARA_BENCH_TXN_MB megabytes of row data (default 256; the product
// target is 2048) with production bounds (64 MiB in memory, 4 MiB chunks)
// through a relay child process, and reports the child's peak resident
// memory (VmHWM) beside the transaction size.
func BenchmarkLargeTransactionMemory(b *testing.B) {
	pgtest.Require(b)
	mb := 256
	if v, err := strconv.Atoi(os.Getenv("TRELLARA_BENCH_TXN_MB")); err == nil && v > 0 {
		mb = v
	}
	c := pgtest.Start(b, pgtest.Options{Settings: map[string]string{"max_wal_size": "8GB", "logical_decoding_work_mem": "64MB"}})
	ctx := context.Background()
	conn := c.Connect(ctx)
	c.Exec(b, schemaSQL)
	c.Exec(b, `SELECT pg_create_logical_replication_slot('big', 'pgoutput')`)
	rows := mb * 1024
	c.Exec(b, fmt.Sprintf(`INSERT INTO orders SELECT g, g, repeat(md5(g::text), 31) FROM generate_series(1, %d) g`, rows))
	fence, err := relay.EmitFence(ctx, conn, "big")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	b.ResetTimer()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TRELLARA_RELAY_CHILD=1", "TRELLARA_LOG_DIR="+filepath.Join(dir, "log"), "TRELLARA_SLOT=big",
		"TRELLARA_REPL_URL="+c.ReplicationURL("postgres"), fmt.Sprint("TRELLARA_MEM_MAX=", 64<<20), fmt.Sprint("TRELLARA_CHUNK_MAX=", 4<<20))
	stdout, _ := cmd.StdoutPipe()
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var peak int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var v uint64
			if _, err := fmt.Sscanf(sc.Text(), "durable %d", &v); err == nil && v >= fence {
				return
			}
		}
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if kb := vmHWM(cmd.Process.Pid); kb > peak {
			peak = kb
		}
		select {
		case <-done:
			secs := time.Since(t0).Seconds()
			if kb := vmHWM(cmd.Process.Pid); kb > peak {
				peak = kb
			}
			b.StopTimer()
			b.ReportMetric(float64(mb), "txn_MB")
			b.ReportMetric(float64(peak)/1024, "peak_RSS_MiB")
			b.ReportMetric(float64(mb)/secs, "MB/s")
			b.Logf("one %d MB transaction (%d rows): relay peak RSS %.0f MiB, %.1fs", mb, rows, float64(peak)/1024, secs)
			return
		case <-tick.C:
		case <-time.After(30 * time.Minute):
			b.Fatal("relay did not reach the fence")
		}
	}
}

// vmHWM reads a process's peak resident set size in KiB.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}
