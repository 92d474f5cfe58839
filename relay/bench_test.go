package relay_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

// BenchmarkRelayCatchUp streams pgbench's TPC-B transactions
// (TRELLARA_BENCH_TXNS, default pgtest.BenchTxns) from a copy of one slot
// into a fresh segment log (fsync always) per iteration, and reports the
// relay's own CPU time (user+sys of this process around Run: the server is
// another process) besides the wall time: on a shared machine the CPU is
// the number to compare.
func BenchmarkRelayCatchUp(b *testing.B) {
	pgtest.Require(b)
	c := pgtest.Start(b, pgtest.Options{})
	c.Exec(b, pgtest.TPCBSchema)
	ctx := context.Background()
	c.Exec(b, `SELECT pg_create_logical_replication_slot('base', 'pgoutput')`)
	txns := pgtest.BenchTxns()
	pgtest.RunTPCB(b, c, txns, 4)
	end := currentLSN(b, c.Connect(ctx))
	var cpu, wall time.Duration
	var units, groups uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		slot := fmt.Sprintf("run%d", i)
		c.Exec(b, fmt.Sprintf(`SELECT pg_copy_logical_replication_slot('base', '%s')`, slot))
		log, _, err := segmentlog.Open(b.TempDir(), segmentlog.Options{})
		if err != nil {
			b.Fatal(err)
		}
		rc, err := pgconn.Connect(ctx, c.ReplicationURL("postgres"))
		if err != nil {
			b.Fatal(err)
		}
		var durable uint64
		tr := &countingTransport{Publisher: transport.Local{Log: log}}
		s, err := relay.NewSession(rc, tr, relay.Resume{}, relay.Options{SourceID: "bench", Slot: slot,
			Publication: "pub", Streaming: true,
			OnDurable: func(e uint64) { durable = e },
			Stop:      func() bool { return durable >= end }})
		if err != nil {
			b.Fatal(err)
		}
		c0, t0 := processCPU(b), time.Now()
		if err := s.Run(ctx); err != nil {
			b.Fatal(err)
		}
		wall += time.Since(t0)
		cpu += processCPU(b) - c0
		units += s.Stats().Published
		groups += tr.groups
		rc.Close(ctx)
		log.Close()
	}
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(units), "cpu-ns/txn")
	b.ReportMetric(float64(units)/wall.Seconds(), "txn/s")
	b.ReportMetric(float64(groups)/float64(b.N), "fsyncs/op")
}

// countingTransport counts PublishBatch calls (one fsync each). Run's
// publishes are sequential, so the count needs no lock.
type countingTransport struct {
	transport.Publisher
	groups uint64
}

func (c *countingTransport) PublishBatch(ctx context.Context, payloads [][]byte) error {
	c.groups++
	return c.Publisher.PublishBatch(ctx, payloads)
}

// processCPU is this process's user+sys CPU time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
