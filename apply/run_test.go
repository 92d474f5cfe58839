package apply

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/pgtest"
)

// TestRunControl: stop conditions, cancellation, the per-flow lock, and the
// units Run refuses.
func TestRunControl(t *testing.T) {
	c, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, "CREATE TABLE t (id int PRIMARY KEY)")
	r := relation("public", "t", 'd', "id*")
	one := newTxn(10).insert(r, tv("1")).encode(t)
	two := newTxn(20).insert(r, tv("2")).encode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	past := func(lsn uint64) func(Checkpoint) bool {
		return func(cp Checkpoint) bool { return cp.CommitLSN >= lsn }
	}

	t.Run("stop after a checkpoint", func(t *testing.T) {
		a := newApplier(t, conn, nil)
		src := &memSource{payloads: [][]byte{one, two}, block: true}
		if err := a.Run(ctx, src, nil, past(20)); err != nil {
			t.Fatalf("Run = %v, want nil once the checkpoint passed 20", err)
		}
		// Already there: returns before reading anything.
		if err := newApplier(t, conn, nil).Run(ctx, &memSource{block: true}, nil, past(20)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, ccancel)
		// Its own connection: a cancel that lands in a query (the idle
		// applier polls the target's flushed WAL position) closes it.
		own := connect(t, c.URL("target"))
		err := newApplier(t, own, nil).Run(cctx, &memSource{block: true}, nil, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	})

	t.Run("one applier per flow", func(t *testing.T) {
		other := connect(t, c.URL("target"))
		lctx, lcancel := context.WithCancel(ctx)
		running := make(chan error, 1)
		a := newApplier(t, connect(t, c.URL("target")), nil) // cancelled below: its own connection, as above
		go func() { running <- a.Run(lctx, &memSource{block: true}, nil, nil) }()
		deadline := time.Now().Add(30 * time.Second)
		for queryInt(t, other, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") == 0 {
			select {
			case e := <-running:
				t.Fatalf("first applier returned early: %v", e)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("first applier never took its lock")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := newApplier(t, other, nil).Run(ctx, &memSource{}, nil, nil); !errors.Is(err, ErrBusy) {
			t.Fatalf("second applier: %v, want ErrBusy", err)
		}
		lcancel()
		<-running
		// Released: by the applier on its way out, or, when the cancel
		// closed its connection mid-query, by the server once it sees the
		// session end (moments later).
		for queryInt(t, other, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the stopped applier's lock was never released")
			}
			time.Sleep(5 * time.Millisecond)
		}
		// Another flow, or the same one now, can run.
		if err := drain(t, newApplier(t, other, nil), nil, 0, nil); err != nil {
			t.Fatalf("after the first applier stopped: %v", err)
		}
	})

	n := 100
	refused := func(name string, payload []byte, want error, text string) {
		n++
		first := newTxn(10).insert(r, tv(strconv.Itoa(n))).encode(t)
		t.Run(name, func(t *testing.T) {
			err := drain(t, newApplier(t, conn, func(c *Config) { c.Flow = name }), nil, 7, [][]byte{first, payload})
			if (want != nil && !errors.Is(err, want)) || err == nil || !strings.Contains(err.Error(), text) {
				t.Fatalf("Run = %v, want %v mentioning %q", err, want, text)
			}
			// The unit before the refused one was applied.
			if cp := readFlow(t, conn, name); cp.CommitLSN != 10 {
				t.Errorf("checkpoint %+v, want the first unit applied", cp)
			}
		})
	}
	other := newTxn(20)
	other.e.SourceId = "another"
	refused("wrong source", other.insert(r, tv("3")).encode(t), ErrWrongSource, `from source "another"`)

	// A chunk routed to partition 1 comes from a partitioned writer (strict
	// mode's chunk sequences are all partition 0 and are applied).
	chunk := &pb.Envelope{ProtocolVersion: 1, SourceId: testSource, CommitLsn: 20, EndLsn: 20,
		Boundary:  &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_CHUNK, ChunkIndex: 0, ChunkCount: 2, TotalRows: 1, Partition: 1},
		Relations: []*pb.Relation{r}, Rows: []*pb.Row{{Op: pb.Op_OP_INSERT, NewTuple: vals("4")}}}
	envelope.Seal(chunk)
	cb, err := envelope.Encode(chunk)
	if err != nil {
		t.Fatal(err)
	}
	refused("partitioned", cb, buildinfo.ErrNotImplemented, "use target.mode: strict")

	damaged := append([]byte(nil), two...)
	damaged[5] ^= 0x40
	refused("damaged", damaged, envelope.ErrChecksum, "log offset 8 is not a valid envelope")
}

func readFlow(t *testing.T, db DB, flow string) Checkpoint {
	t.Helper()
	st, err := ReadStatus(context.Background(), db, "", flow, testSource)
	if err != nil {
		t.Fatal(err)
	}
	return st.Checkpoint
}

// TestCursorFailureStopsRun: Run commits the transport cursor on a
// goroutine of its own (cursorWriter). A cursor that cannot be committed
// still stops the flow with an error naming the offset, whether more units
// arrive after the failure (busy) or none does (idle: Run is waiting for
// the source); the cursor is not asked for any offset after the one that
// failed, and the target keeps every unit it committed.
func TestCursorFailureStopsRun(t *testing.T) {
	c, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, "CREATE TABLE t (id int PRIMARY KEY)")
	r := relation("public", "t", 'd', "id*")
	const n, failAt = 40, 9
	for _, busy := range []bool{false, true} {
		name := map[bool]string{false: "idle", true: "busy"}[busy]
		t.Run(name, func(t *testing.T) {
			exec(t, conn, "TRUNCATE t")
			if err := EnsureSchema(context.Background(), conn, ""); err != nil {
				t.Fatal(err)
			}
			exec(t, conn, "DELETE FROM trellara.checkpoints")
			payloads := make([][]byte, n)
			for i := range payloads {
				payloads[i] = newTxn(uint64(10*(i+1))).insert(r, tv(strconv.Itoa(i))).encode(t)
			}
			// The source serves the units through failAt, and the rest
			// only once the cursor failed (busy) or never (idle).
			src := &gatedSource{payloads: payloads, more: make(chan struct{}, 1)}
			src.limit.Store(failAt + 1)
			var after []uint64 // offsets asked for after the failure
			failed := false
			cur := &recCursor{check: func(off uint64) error {
				if failed {
					after = append(after, off)
					return errors.New("cursor committed again after it failed")
				}
				if off >= failAt {
					failed = true
					if busy {
						src.limit.Store(n)
						src.more <- struct{}{}
					}
					return errors.New("disk full")
				}
				return nil
			}}
			// The applier gets a connection of its own: the failure stops
			// Run by cancelling its loop, which may land in a target
			// transaction, and pgx then closes the connection (the
			// transaction rolls back).
			aconn := connect(t, c.URL("target"))
			a := newApplier(t, aconn, func(c *Config) { c.MaxBatchTxns = 1 })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := a.Run(ctx, src, cur, nil)
			if err == nil || errors.Is(err, context.DeadlineExceeded) ||
				!strings.Contains(err.Error(), "commit transport cursor at offset") || !strings.Contains(err.Error(), "disk full") {
				t.Fatalf("Run = %v, want the cursor's failure", err)
			}
			if len(after) > 0 {
				t.Errorf("cursor asked for offsets %v after its commit failed", after)
			}
			// The checkpoint row commits with the data: the target's own
			// (a commit whose reply the cancellation cut off counts there,
			// not in the applier's memory).
			got, cp := queryInt(t, conn, "SELECT count(*) FROM t"), readStatus(t, conn).Checkpoint
			if got != cp.TxnsApplied || got < failAt+1 {
				t.Errorf("target holds %d rows, its checkpoint %d transactions; want them equal and at least %d", got, cp.TxnsApplied, failAt+1)
			}
		})
	}
}
