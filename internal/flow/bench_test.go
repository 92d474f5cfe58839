package flow_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/internal/transport"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
)

func currentLSN(b *testing.B, c *pgtest.Cluster) uint64 {
	var s string
	if err := c.Connect(context.Background()).QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		b.Fatal(err)
	}
	v, _ := pglogrepl.ParseLSN(s)
	return uint64(v)
}

// BenchmarkRelayVsRecvlogical drains the same pgoutput history twice: with
// pg_recvlogical to /dev/null (the walsender's own output rate: the
// ceiling) and with the relay into the fsync'd local segment log.
func BenchmarkRelayVsRecvlogical(b *testing.B) {
	pgtest.Require(b)
	recv := filepath.Join(pgtestBin(b), "pg_recvlogical")
	if _, err := os.Stat(recv); err != nil {
		b.Skip("pg_recvlogical not installed beside the server")
	}
	c := pgtest.Start(b, pgtest.Options{})
	c.Exec(b, pgtest.TPCBSchema)
	ctx := context.Background()
	conn := c.Connect(ctx)
	c.Exec(b, `SELECT pg_create_logical_replication_slot('recv', 'pgoutput')`, `SELECT pg_create_logical_replication_slot('relay', 'pgoutput')`)
	txns := pgtest.BenchTxns()
	pgtest.RunTPCB(b, c, txns, 4)
	end := currentLSN(b, c)
	walBytes := float64(end)
	_ = conn

	b.ResetTimer()
	t0 := time.Now()
	cmd := exec.Command(recv, "-d", c.URL("postgres"), "--slot", "recv", "--start", "--endpos", pglogrepl.LSN(end).String(),
		"-o", "proto_version=2", "-o", "publication_names=pub", "-f", "/dev/null", "--no-loop")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("pg_recvlogical: %v\n%s", err, out)
	}
	recvSecs := time.Since(t0).Seconds()

	dir := b.TempDir()
	log, _, err := segmentlog.Open(dir, segmentlog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	rc, err := pgconn.Connect(ctx, c.ReplicationURL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close(ctx)
	var durable uint64
	s := relay.NewSession(rc, transport.Local{Log: log}, relay.Resume{}, relay.Config{
		SourceID: "bench", Slot: "relay", Publication: "pub", Streaming: true,
		Assembler: relay.AssemblerOptions{SpillDir: dir},
		OnDurable: func(e uint64) { durable = e },
		Stop:      func() bool { return durable >= end },
	})
	t1 := time.Now()
	if err := s.Run(ctx); err != nil {
		b.Fatal(err)
	}
	relaySecs := time.Since(t1).Seconds()
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(txns)/recvSecs, "recvlogical_txn/s")
	b.ReportMetric(float64(txns)/relaySecs, "relay_txn/s")
	b.ReportMetric(recvSecs/relaySecs, "relay/recvlogical")
	b.ReportMetric(float64(st.Bytes)/relaySecs/1e6, "relay_envelope_MB/s")
	b.Logf("%d transactions, WAL end %s: pg_recvlogical %.2fs, relay (fsync always, %d units, %d bytes) %.2fs, ratio %.2f (wal %.0f)",
		txns, pglogrepl.LSN(end), recvSecs, st.Published, st.Bytes, relaySecs, recvSecs/relaySecs, walBytes)
}

func pgtestBin(b *testing.B) string {
	if v := os.Getenv("TRELLARA_PG_BIN"); v != "" {
		return v
	}
	out, err := exec.Command("bash", "-c", "ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1").Output()
	if err != nil {
		b.Skip("no PostgreSQL bin directory")
	}
	return string(bytes.TrimSpace(out))
}

// BenchmarkApplyVsNativeReplication applies the same TPC-B-like history to
// two identical targets: one by native logical replication (CREATE
// SUBSCRIPTION), one by `trellara run --local`, each catching up from a
// backlog, one after the other. Commit-to-apply latency is measured from a
// source-side clock_timestamp() to a target-side default, per row.
func BenchmarkApplyVsNativeReplication(b *testing.B) {
	pgtest.Require(b)
	bin := buildCLIB(b)
	src := pgtest.Start(b, pgtest.Options{})
	native := pgtest.Start(b, pgtest.Options{})
	trel := pgtest.Start(b, pgtest.Options{})
	src.Exec(b, pgtest.TPCBSchema)
	targetSchema := `
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE tellers (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE branches (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE history (id bigserial PRIMARY KEY, aid int, tid int, bid int, delta int, mtime timestamptz, filler text, applied_at timestamptz DEFAULT clock_timestamp());`
	native.Exec(b, targetSchema)
	trel.Exec(b, targetSchema)
	ctx := context.Background()

	// Both consumers start from the same point with empty targets: copy
	// the static tables first, then let each catch up on the backlog.
	src.Exec(b, `SELECT pg_create_logical_replication_slot('native', 'pgoutput')`)
	// The native target gets the static rows by hand (copy_data = false);
	// Trellara's first run snapshots them.
	for _, t := range []*pgtest.Cluster{native} {
		t.Exec(b, `INSERT INTO accounts SELECT g, 0, repeat('a', 80) FROM generate_series(1, 100000) g`,
			`INSERT INTO tellers SELECT g, 0, repeat('t', 80) FROM generate_series(1, 100) g`,
			`INSERT INTO branches SELECT g, 0, repeat('b', 80) FROM generate_series(1, 10) g`)
	}
	dir := b.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	if out, err := exec.Command(bin, "init", "--source-database-url", src.URL("postgres"), "--target-database-url", trel.URL("postgres"),
		"--table", "public.history", "--table", "public.accounts", "--table", "public.tellers", "--table", "public.branches",
		"--flow", "bench", "--output", cfg, "--evaluate").CombinedOutput(); err != nil {
		b.Fatalf("init: %v\n%s", err, out)
	}
	// A first bounded run creates the slot and snapshots (history is empty).
	if out, err := exec.Command(bin, "run", "--config", cfg, "--local").CombinedOutput(); err != nil {
		b.Fatalf("first run: %v\n%s", err, out)
	}
	txns := pgtest.BenchTxns()
	pgtest.RunTPCB(b, src, txns, 4)
	end := currentLSN(b, src)

	b.ResetTimer()
	t0 := time.Now()
	native.Exec(b, fmt.Sprintf(`CREATE SUBSCRIPTION sub CONNECTION '%s' PUBLICATION pub WITH (create_slot = false, slot_name = 'native', copy_data = false)`,
		src.URL("postgres")))
	poll := native.Connect(ctx)
	for {
		var s *string
		if err := poll.QueryRow(ctx, `SELECT latest_end_lsn::text FROM pg_stat_subscription WHERE subname = 'sub'`).Scan(&s); err == nil && s != nil {
			v, _ := pglogrepl.ParseLSN(*s)
			if uint64(v) >= end {
				var n int
				_ = poll.QueryRow(ctx, `SELECT count(*) FROM history`).Scan(&n)
				if n >= txns {
					break
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	nativeSecs := time.Since(t0).Seconds()
	native.Exec(b, `ALTER SUBSCRIPTION sub DISABLE`)

	t1 := time.Now()
	if out, err := exec.Command(bin, "run", "--config", cfg, "--local").CombinedOutput(); err != nil {
		b.Fatalf("trellara run: %v\n%s", err, out)
	}
	trelSecs := time.Since(t1).Seconds()
	b.StopTimer()

	p99 := func(c *pgtest.Cluster) float64 {
		rows, err := c.Connect(ctx).Query(ctx, `SELECT extract(epoch FROM applied_at - mtime) FROM history`)
		if err != nil {
			b.Fatal(err)
		}
		var ds []float64
		for rows.Next() {
			var d float64
			_ = rows.Scan(&d)
			ds = append(ds, d)
		}
		sort.Float64s(ds)
		if len(ds) == 0 {
			return 0
		}
		return ds[len(ds)*99/100]
	}
	var nn, tn int
	_ = native.Connect(ctx).QueryRow(ctx, `SELECT count(*) FROM history`).Scan(&nn)
	_ = trel.Connect(ctx).QueryRow(ctx, `SELECT count(*) FROM history`).Scan(&tn)
	if nn != tn {
		b.Fatalf("native applied %d history rows, trellara %d", nn, tn)
	}
	b.ReportMetric(float64(txns)/nativeSecs, "native_txn/s")
	b.ReportMetric(float64(txns)/trelSecs, "trellara_txn/s")
	b.ReportMetric(nativeSecs/trelSecs, "trellara/native")
	b.Logf("%d TPC-B-like transactions from a backlog: native %.2fs, trellara run --local %.2fs (including process start, connect and verify-free catch-up); "+
		"backlog p99 commit-to-apply: native %.1fs, trellara %.1fs", txns, nativeSecs, trelSecs, p99(native), p99(trel))
}

func buildCLIB(b *testing.B) string {
	out := filepath.Join(b.TempDir(), "trellara")
	cmd := exec.Command("go", "build", "-o", out, "github.com/trellara/trellara/cmd/trellara")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, o)
	}
	return out
}
