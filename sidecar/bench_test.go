package sidecar

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

// BenchmarkSidecarVsRelay drains the same TPC-B-like history twice on one
// server, each into its own fsync'd local segment log: with the external
// relay from a pgoutput slot (protocol 2, streaming, as `trellara run`),
// and with the extension's decoder worker and this sidecar. Both stop at
// the same fence. Reports both rates and sidecar/relay.
func BenchmarkSidecarVsRelay(b *testing.B) {
	// The schema and its 100 000-row load first, without workers; then the
	// pgoutput slot; then the decoder creates its slot: both start after
	// the load and before the workload.
	l := startLive(b, "", map[string]string{"logical_decoding_work_mem": "64MB"})
	ctx := context.Background()
	l.c.Exec(b, pgtest.TPCBSchema)
	l.c.Exec(b, `SELECT pg_create_logical_replication_slot('relay', 'pgoutput')`)
	l.configure(b, map[string]string{"trellara.database": "postgres",
		"trellara.tables": "public.accounts, public.tellers, public.branches, public.history"})
	l.waitFor(b, "the decoder's slot", 30*time.Second, func() bool {
		return l.query(b, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'trellara'`) == "1"
	})
	txns := pgtest.BenchTxns()
	pgtest.RunTPCB(b, l.c, txns, 4)
	fence := l.fence(b, "bench")

	b.ResetTimer()
	var relaySecs, relayGo, walsenderCPU float64
	var rs *relay.Session
	runRelay := func() {
		relayLog, _, err := segmentlog.Open(b.TempDir(), segmentlog.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer relayLog.Close()
		rc, err := relay.Connect(ctx, l.c.ReplicationURL("postgres"))
		if err != nil {
			b.Fatal(err)
		}
		defer rc.Close(ctx)
		var relayDurable uint64
		rs, err = relay.NewSession(rc, transport.Local{Log: relayLog}, relay.Resume{}, relay.Options{
			SourceID: "bench", Slot: "relay", Publication: "pub", Streaming: true,
			Assembler: capture.AssemblerOptions{SpillDir: b.TempDir()},
			OnDurable: func(e uint64) { relayDurable = e },
			Stop:      func() bool { return relayDurable > fence },
		})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			// The walsender appears once the session starts streaming.
			for i := 0; i < 100 && walsenderPID.Load() == 0; i++ {
				time.Sleep(10 * time.Millisecond)
				if p, err := strconv.Atoi(l.query(b, `SELECT pid FROM pg_stat_activity WHERE backend_type = 'walsender'`)); err == nil {
					walsenderPID.Store(int64(p))
				}
			}
		}()
		self0 := pgtest.SelfCPU().Seconds()
		t0 := time.Now()
		if err := rs.Run(ctx); err != nil {
			b.Fatal(err)
		}
		relaySecs = time.Since(t0).Seconds()
		relayGo = pgtest.SelfCPU().Seconds() - self0
		walsenderCPU = pgtest.ProcCPU(int(walsenderPID.Load()))
	}

	var sideSecs, sideGo, decCPU, sockCPU float64
	var s *Sidecar
	runSidecar := func() {
		sideLog, _, err := segmentlog.Open(b.TempDir(), segmentlog.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer sideLog.Close()
		// The workers' CPU is read when the fence is acknowledged: once the
		// sidecar disconnects the decoder restarts (by design) and its
		// process is gone.
		decPID, _ := strconv.Atoi(l.query(b, `SELECT pid FROM pg_stat_activity WHERE backend_type = 'trellara decoder'`))
		sockPID := pgtest.ProcByTitle("trellara socket server")
		dec0, sock0 := pgtest.ProcCPU(decPID), pgtest.ProcCPU(sockPID)
		var acked atomic.Uint64
		s, err = New(Options{Dial: l.dialer(b), ServerUID: l.uid, SocketPath: l.sock, Transport: transport.Local{Log: sideLog}, SourceID: "bench",
			Assembler: capture.AssemblerOptions{SpillDir: b.TempDir()}, OnDurable: func(e uint64) { acked.Store(e) },
			Stop: func() bool {
				if acked.Load() <= fence {
					return false
				}
				if decCPU == 0 {
					decCPU, sockCPU = pgtest.ProcCPU(decPID)-dec0, pgtest.ProcCPU(sockPID)-sock0
				}
				return true
			}})
		if err != nil {
			b.Fatal(err)
		}
		self0 := pgtest.SelfCPU().Seconds()
		t1 := time.Now()
		if err := s.Run(ctx); err != nil {
			b.Fatal(err)
		}
		sideSecs = time.Since(t1).Seconds()
		sideGo = pgtest.SelfCPU().Seconds() - self0
	}

	// TRELLARA_BENCH_ORDER=sidecar-first swaps the order, so that two runs
	// give the ABBA sequence (relay, sidecar, sidecar, relay).
	// Each path runs under a profiler label (path=relay, path=sidecar),
	// inherited by the goroutines it starts, so that a -cpuprofile splits
	// by path: go tool pprof -tagfocus path=sidecar.
	runRelay, runSidecar = labelled("relay", runRelay), labelled("sidecar", runSidecar)
	order := "relay-first"
	if os.Getenv("TRELLARA_BENCH_ORDER") == "sidecar-first" {
		order = "sidecar-first"
		runSidecar()
		runRelay()
	} else {
		runRelay()
		runSidecar()
	}
	b.StopTimer()

	rst, sst := rs.Stats(), s.Stats()
	if rst.Published != sst.Published || rst.Bytes != sst.Bytes {
		b.Fatalf("the two paths published different histories: relay %d units %d bytes, sidecar %d units %d bytes",
			rst.Published, rst.Bytes, sst.Published, sst.Bytes)
	}
	b.ReportMetric(float64(txns)/relaySecs, "relay_txn/s")
	b.ReportMetric(float64(txns)/sideSecs, "sidecar_txn/s")
	b.ReportMetric(relaySecs/sideSecs, "sidecar/relay")
	b.Logf("%d TPC-B-like transactions (%d units, %d envelope bytes each path), %s: relay %.2fs, extension+sidecar %.2fs (%d frames), ratio %.2f",
		txns, sst.Published, sst.Bytes, order, relaySecs, sideSecs, sst.Frames, relaySecs/sideSecs)
	if dst := os.Getenv("TRELLARA_BENCH_SERVERLOG"); dst != "" {
		lb, _ := os.ReadFile(l.c.LogPath())
		_ = os.WriteFile(dst, lb, 0o644)
	}
	b.Logf("CPU seconds: relay path walsender %.2f + Go %.2f; extension path decoder %.2f + socket worker %.2f + Go %.2f",
		walsenderCPU, relayGo, decCPU, sockCPU, sideGo)
}

var walsenderPID atomic.Int64

// labelled runs f under the profiler label path=name.
func labelled(name string, f func()) func() {
	return func() { pprof.Do(context.Background(), pprof.Labels("path", name), func(context.Context) { f() }) }
}
