package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

// BenchmarkRelayCatchUp streams pgbench's TPC-B transactions
// (TRELLARA_BENCH_TXNS, default pgtest.BenchTxns) from a copy of one slot
// into a fresh segment log (fsync always), once with the relay's paced
// reads (PaceReads, what `trellara run` uses) and once without, in ABBA
// order across iterations (-benchtime 2x or more for both orders). Per
// variant it reports the wall rate, the relay's own CPU (user+sys of this
// process around Run: the server is another process), the walsender's
// CPU, and the relay's read system calls per transaction, which show how
// finely the stream was cut. On a shared machine the CPU is the number to
// compare. Each run is logged.
func BenchmarkRelayCatchUp(b *testing.B) {
	pgtest.Require(b)
	c := pgtest.Start(b, pgtest.Options{})
	c.Exec(b, pgtest.TPCBSchema)
	ctx := context.Background()
	c.Exec(b, `SELECT pg_create_logical_replication_slot('base', 'pgoutput')`)
	txns := pgtest.BenchTxns()
	pgtest.RunTPCB(b, c, txns, 4)
	end := currentLSN(b, c.Connect(ctx))
	admin := c.Connect(ctx)
	var sum [2]catchUpRun // paced, unpaced
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := []bool{true, false}
		if i%2 == 1 {
			order = []bool{false, true}
		}
		for _, paced := range order {
			r := relayCatchUpOnce(b, c, admin, fmt.Sprintf("run%d_%v", i, paced), paced, end)
			b.Logf("run %d %s: %.2f s, %.0f txn/s, relay CPU %.2f s, walsender CPU %.2f s, %.3f reads/txn, %d fsyncs",
				i, pacedName(paced), r.wall.Seconds(), float64(r.units)/r.wall.Seconds(), r.cpu.Seconds(), r.wsCPU,
				float64(r.reads)/float64(r.units), r.groups)
			k := 0
			if !paced {
				k = 1
			}
			sum[k].add(r)
		}
	}
	for k, name := range []string{"paced", "unpaced"} {
		r := sum[k]
		b.ReportMetric(float64(r.units)/r.wall.Seconds(), name+"-txn/s")
		b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(r.units), name+"-cpu-ns/txn")
		b.ReportMetric(r.wsCPU*1e9/float64(r.units), name+"-walsender-cpu-ns/txn")
		b.ReportMetric(float64(r.reads)/float64(r.units), name+"-reads/txn")
		b.ReportMetric(float64(r.groups)/float64(b.N), name+"-fsyncs/op")
	}
	b.ReportMetric(sum[1].wall.Seconds()/sum[0].wall.Seconds(), "paced-speedup")
	b.ReportMetric(0, "ns/op")
}

func pacedName(paced bool) string {
	if paced {
		return "paced"
	}
	return "unpaced"
}

// catchUpRun is what one relay catch-up cost.
type catchUpRun struct {
	wall, cpu     time.Duration
	wsCPU         float64 // seconds
	units, groups uint64
	reads         int64
}

func (s *catchUpRun) add(r catchUpRun) {
	s.wall += r.wall
	s.cpu += r.cpu
	s.wsCPU += r.wsCPU
	s.units += r.units
	s.groups += r.groups
	s.reads += r.reads
}

// relayCatchUpOnce drains a copy of slot base up to end into a fresh log.
func relayCatchUpOnce(b *testing.B, c *pgtest.Cluster, admin *pgx.Conn, slot string, paced bool, end uint64) catchUpRun {
	ctx := context.Background()
	c.Exec(b, fmt.Sprintf(`SELECT pg_copy_logical_replication_slot('base', '%s')`, slot))
	log, _, err := segmentlog.Open(b.TempDir(), segmentlog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	connect := pgconn.Connect
	if paced {
		connect = relay.Connect
	}
	rc, err := connect(ctx, c.ReplicationURL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close(ctx)
	var durable uint64
	tr := &countingTransport{Publisher: transport.Local{Log: log}}
	s, err := relay.NewSession(rc, tr, relay.Resume{}, relay.Options{SourceID: "bench", Slot: slot,
		Publication: "pub", Streaming: true,
		OnDurable: func(e uint64) { durable = e },
		Stop:      func() bool { return durable >= end }})
	if err != nil {
		b.Fatal(err)
	}
	// The walsender appears once the session starts streaming; its CPU is
	// read before the connection closes, when it exits.
	var wsPID int
	var ws0 float64
	found := make(chan struct{})
	go func() {
		defer close(found)
		for k := 0; k < 1000; k++ {
			_ = admin.QueryRow(ctx, `SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&wsPID)
			if wsPID != 0 {
				ws0 = pgtest.ProcCPU(wsPID)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	r0, _ := pgtest.ProcSyscalls(0)
	c0, t0 := pgtest.SelfCPU(), time.Now()
	if err := s.Run(ctx); err != nil {
		b.Fatal(err)
	}
	r := catchUpRun{wall: time.Since(t0), cpu: pgtest.SelfCPU() - c0, units: s.Stats().Published, groups: tr.groups}
	r1, _ := pgtest.ProcSyscalls(0)
	r.reads = r1 - r0
	<-found
	if wsPID != 0 {
		r.wsCPU = pgtest.ProcCPU(wsPID) - ws0
	}
	return r
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
