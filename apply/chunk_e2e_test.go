package apply

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

// e2eWorkload is the pgoutput stream of n source transactions on
// e2e_items(id, txn, v) and e2e_log(txn): every transaction logs itself
// once and inserts some items; every fifth is large (chunked by the
// relay), every seventh is streamed with a rolled-back subtransaction
// whose rows must never appear. It returns the wire messages and, per
// committed transaction, the number of items it leaves.
func e2eWorkload(seed uint64, n int) ([]pgoutput.Message, map[int]int) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	items := &pgoutput.Relation{RelationID: 16501, Namespace: "public", Name: "e2e_items", ReplicaIdentity: 'd',
		Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 23, TypeModifier: -1},
			{Name: "txn", TypeOID: 23, TypeModifier: -1}, {Name: "v", TypeOID: 25, TypeModifier: -1}}}
	logRel := &pgoutput.Relation{RelationID: 16502, Namespace: "public", Name: "e2e_log", ReplicaIdentity: 'd',
		Columns: []pgoutput.RelationColumn{{Name: "txn", TypeOID: 23, TypeModifier: -1}}}
	txt := func(s string) pgoutput.Column { return pgoutput.Column{Kind: pgoutput.ColumnText, Data: []byte(s)} }
	want := map[int]int{}
	var msgs []pgoutput.Message
	lsn := pgoutput.LSN(0x3000000)
	id := 0
	for t := 1; t <= n; t++ {
		xid := pgoutput.XID(1000 + t)
		k := 1 + rng.IntN(4)
		if t%5 == 0 {
			k = 150 + rng.IntN(100)
		}
		row := func(x pgoutput.XID) *pgoutput.Insert {
			id++
			return &pgoutput.Insert{Xid: x, RelationID: items.RelationID,
				New: []pgoutput.Column{txt(strconv.Itoa(id)), txt(strconv.Itoa(t)), txt(fmt.Sprintf("payload-%d-%032d", t, id))}}
		}
		commit := lsn + 0x100
		if t%7 == 0 {
			// Streamed: two blocks, a subtransaction rolled back between.
			sub := pgoutput.XID(900000 + t)
			it, lg := *items, *logRel
			it.Xid, lg.Xid = xid, xid
			msgs = append(msgs, &pgoutput.StreamStart{Xid: xid, FirstSegment: true}, &it, &lg,
				&pgoutput.Insert{Xid: xid, RelationID: logRel.RelationID, New: []pgoutput.Column{txt(strconv.Itoa(t))}})
			for range k {
				msgs = append(msgs, row(xid))
			}
			msgs = append(msgs, &pgoutput.StreamStop{}, &pgoutput.StreamStart{Xid: xid}, &it)
			for range 3 {
				msgs = append(msgs, row(sub))
			}
			msgs = append(msgs, &pgoutput.StreamStop{}, &pgoutput.StreamAbort{Xid: xid, SubXid: sub},
				&pgoutput.StreamCommit{Xid: xid, CommitLSN: commit, EndLSN: commit + 0x28, CommitTime: pgoutput.Timestamp(t)})
		} else {
			msgs = append(msgs, &pgoutput.Begin{FinalLSN: commit, Xid: xid, CommitTime: pgoutput.Timestamp(t)}, items, logRel,
				&pgoutput.Insert{RelationID: logRel.RelationID, New: []pgoutput.Column{txt(strconv.Itoa(t))}})
			for range k {
				msgs = append(msgs, row(0))
			}
			msgs = append(msgs, &pgoutput.Commit{CommitLSN: commit, EndLSN: commit + 0x28, CommitTime: pgoutput.Timestamp(t)})
		}
		want[t] = k
		lsn = commit + 0x100
	}
	return msgs, want
}

// logSource reads a segment log from a cursor and reports errDrained at
// the end of the log; onChunk, if set, runs before a CHUNK is handed out.
type logSource struct {
	rd      *segmentlog.Reader
	log     *segmentlog.Log
	onChunk func(b *pb.Boundary)
}

func (s *logSource) Next(ctx context.Context) (uint64, []byte, error) {
	if s.rd.Offset() >= s.log.NextOffset() {
		return 0, nil, errDrained
	}
	off, p, err := s.rd.Next(ctx)
	if err == nil && s.onChunk != nil {
		if e, derr := envelope.Decode(p); derr == nil && e.Boundary.Kind == pb.UnitKind_UNIT_KIND_CHUNK {
			s.onChunk(e.Boundary)
		}
	}
	return off, p, err
}

// TestChunkEndToEnd: the relay's assembler (small chunk and memory bounds,
// so large transactions spill and are chunked) publishes into a segment
// log; the applier reads it through its cursor. The target server is
// SIGKILLed while the applier is inside a chunk sequence. After crash
// recovery nothing of that transaction is visible, and a new applier
// resuming from the cursor applies every committed transaction exactly
// once. With synchronous_commit off the kill can also lose the last
// commits before the sequence; the cursor must not have passed them.
func TestChunkEndToEnd(t *testing.T) {
	for _, mode := range []string{SyncCommitOn, SyncCommitOff} {
		t.Run("synchronous_commit="+mode, func(t *testing.T) { chunkEndToEnd(t, mode) })
	}
}

func chunkEndToEnd(t *testing.T, mode string) {
	c, conn := target(t, pgtest.Options{}) // fsync on: the kill must not lose durable commits
	exec(t, conn, "CREATE TABLE e2e_items (id int PRIMARY KEY, txn int NOT NULL, v text NOT NULL)",
		"CREATE TABLE e2e_log (txn int NOT NULL)")
	const seed, n = 424242, 40
	t.Logf("workload seed %d, %d transactions", seed, n)
	msgs, want := e2eWorkload(seed, n)

	lg, _, err := segmentlog.Open(t.TempDir(), segmentlog.Options{SegmentBytesMax: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	tr := transport.Local{Log: lg}
	asm := capture.NewAssembler(capture.AssemblerOptions{SourceID: testSource, ChunkBytesMax: 2 << 10, MemoryBytesMax: 8 << 10,
		SpillDir: t.TempDir()}, func(e *pb.Envelope, _ uint64, _ bool) error {
		if e == nil {
			return nil
		}
		b, err := envelope.Encode(e)
		if err != nil {
			return err
		}
		_, err = tr.Publish(context.Background(), b)
		return err
	})
	var dec pgoutput.Decoder
	for i, m := range msgs {
		at := pgoutput.LSN(0x1000 + i)
		dm, err := dec.Decode(pgoutput.Append(nil, m), at)
		if err != nil {
			t.Fatalf("message %d (%T): %v", i, m, err)
		}
		if err := asm.Handle(dm, at); err != nil {
			t.Fatal(err)
		}
	}
	st := asm.Stats()
	if st.ChunkedTxns < 5 || st.Spilled == 0 || st.AbortedSubxid == 0 {
		t.Fatalf("workload did not exercise chunking, spilling and aborted subtransactions: %+v", st)
	}
	t.Logf("assembler: %+v; log holds %d entries", st, lg.NextOffset())

	const cursor = "applier"
	if err := lg.CommitCursor(cursor, 0); err != nil {
		t.Fatal(err)
	}
	run := func(tconn *pgx.Conn, onChunk func(*pb.Boundary)) (*Applier, error) {
		rd, err := lg.NewCursorReader(cursor)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		a := newApplier(t, tconn, func(c *Config) { c.MaxBatchTxns, c.SynchronousCommit = 4, mode })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err = a.Run(ctx, &logSource{rd: rd, log: lg, onChunk: onChunk}, transport.LocalCursor{Log: lg, Name: cursor}, nil)
		if errors.Is(err, errDrained) {
			err = nil
		}
		return a, err
	}

	// Run 1: kill the target when the applier asks for chunk 2 of the
	// second chunked transaction, its target transaction holding chunks 0
	// and 1.
	chunkZeros := 0
	a, err := run(conn, func(b *pb.Boundary) {
		if b.ChunkIndex == 0 {
			chunkZeros++
		}
		if chunkZeros == 2 && b.ChunkIndex == 2 {
			c.Kill()
		}
	})
	if !IsTransient(err) {
		t.Fatalf("Run with the target killed mid-sequence = %v, want *TransientError", err)
	}
	cp := a.Checkpoint()
	c.Restart()
	conn2 := connect(t, c.URL("target"))
	applied := queryInt(t, conn2, "SELECT count(*) FROM e2e_log")
	got := readStatus(t, conn2).Checkpoint
	if got.TxnsApplied != applied || got.CommitLSN > cp.CommitLSN || (mode == SyncCommitOn && got.CommitLSN != cp.CommitLSN) {
		t.Errorf("after crash recovery the checkpoint is %+v with %d logged transactions; the applier last committed %+v", got, applied, cp)
	}
	// Whole transactions only: each logged transaction has all its items,
	// every other transaction none.
	checkWhole := func(conn *pgx.Conn) {
		t.Helper()
		for txn, k := range want {
			logged := queryInt(t, conn, "SELECT count(*) FROM e2e_log WHERE txn = $1", txn)
			items := queryInt(t, conn, "SELECT count(*) FROM e2e_items WHERE txn = $1", txn)
			if logged > 1 || (logged == 1 && items != int64(k)) || (logged == 0 && items != 0) {
				t.Errorf("transaction %d: logged %d times with %d of its %d items", txn, logged, items, k)
			}
		}
	}
	checkWhole(conn2)
	// The kill falls in the middle: some applied, not all. With
	// asynchronous commits the target may lose every commit it had not
	// flushed yet (on a loaded machine, all of them), which the next run
	// must then apply again: none is fine there.
	if applied >= n || (applied == 0 && mode == SyncCommitOn) {
		t.Errorf("the kill left %d of %d transactions applied; it should fall in the middle", applied, n)
	}
	// Synchronous: the cursor follows every commit. Asynchronous: it
	// follows the flushed ones, which the crash cannot have lost.
	off, ok, _ := lg.CursorOffset(cursor)
	if mode == SyncCommitOn && (!ok || (cp.HasOffset && off != cp.Offset+1)) {
		t.Errorf("cursor at %d (registered %v), checkpoint offset %d", off, ok, cp.Offset)
	}
	if !ok || (got.HasOffset && off > got.Offset+1) || (!got.HasOffset && off != 0) {
		t.Errorf("cursor at %d (registered %v) is past the recovered checkpoint offset %d (%v)", off, ok, got.Offset, got.HasOffset)
	}

	// Run 2: resume from the cursor to the end of the log.
	a2, err := run(conn2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := a2.Stats(); s.ChunkedTxns == 0 {
		t.Errorf("resumed run applied no chunk sequence: %+v", s)
	}
	if got := queryInt(t, conn2, "SELECT count(*) FROM e2e_log"); got != n {
		t.Errorf("%d transactions logged, want %d", got, n)
	}
	if dup := queryInt(t, conn2, "SELECT count(*) FROM (SELECT txn FROM e2e_log GROUP BY txn HAVING count(*) > 1) d"); dup != 0 {
		t.Errorf("%d transactions applied twice", dup)
	}
	checkWhole(conn2)
}
