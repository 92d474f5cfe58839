package apply

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

const resumeDDL = `
CREATE TABLE rs (id int PRIMARY KEY, v text NOT NULL);
CREATE TABLE rs_log (txn int NOT NULL);` // no key: a transaction applied twice leaves two rows

// resumeLog publishes n transactions to a fresh segment log: transaction i
// inserts rs row i and rs_log row i, and every third one also updates the
// row before it.
func resumeLog(t *testing.T, n int, opts segmentlog.Options) *segmentlog.Log {
	t.Helper()
	lg, _, err := segmentlog.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	rs := relation("public", "rs", 'd', "id*", "v")
	log := relation("public", "rs_log", 'd', "txn")
	for i := range n {
		x := newTxn(uint64(0x10000+0x100*i)).insert(rs, vals(strconv.Itoa(i), "new")...)
		if i%3 == 2 {
			x.update(rs, pb.OldTuple_OLD_TUPLE_NONE, nil, vals(strconv.Itoa(i-1), "updated by "+strconv.Itoa(i)))
		}
		x.insert(log, tv(strconv.Itoa(i)))
		if _, err := lg.Append(x.encode(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.CommitCursor("applier", 0); err != nil {
		t.Fatal(err)
	}
	return lg
}

// runUntil runs a fresh applier from the log's "applier" cursor until the
// checkpoint reaches offset last.
func runUntil(t *testing.T, conn *pgx.Conn, lg *segmentlog.Log, last uint64) (*Applier, error) {
	t.Helper()
	rd, err := transport.NewCursorReader(lg, "applier")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	// One transaction per batch, so the run stops exactly at last.
	a := newApplier(t, conn, func(c *Config) { c.MaxBatchTxns = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = a.Run(ctx, rd, transport.LocalCursor{Log: lg, Name: "applier"}, func(cp Checkpoint) bool {
		return cp.HasOffset && cp.Offset >= last
	})
	return a, err
}

func cursorAt(t *testing.T, lg *segmentlog.Log) uint64 {
	t.Helper()
	off, ok, err := lg.CursorOffset("applier")
	if err != nil || !ok {
		t.Fatalf("cursor: %d %v %v", off, ok, err)
	}
	return off
}

// TestResumeFromTheTargetCheckpoint: the target's checkpoint, not the log
// cursor, decides where applying starts. A cursor behind the checkpoint is
// a redelivery (skipped); a cursor ahead of it means the target lost
// commits, and the applier goes back to the offset after the checkpoint's
// unit, so every transaction ends up applied exactly once.
func TestResumeFromTheTargetCheckpoint(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, resumeDDL)
	const n = 40
	lg := resumeLog(t, n, segmentlog.Options{})

	if _, err := runUntil(t, conn, lg, 14); err != nil {
		t.Fatal(err)
	}
	// Behind: the cursor write was lost; 5..14 are redelivered and skipped.
	if err := lg.ResetCursor("applier", 5); err != nil {
		t.Fatal(err)
	}
	a, err := runUntil(t, conn, lg, 24)
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.TxnsSkipped != 10 || s.TxnsApplied != 10 {
		t.Errorf("from a cursor behind the checkpoint: %d skipped, %d applied; want 10 and 10", s.TxnsSkipped, s.TxnsApplied)
	}
	// Ahead: the target lost 25..34, which the cursor had passed.
	if err := lg.CommitCursor("applier", 35); err != nil {
		t.Fatal(err)
	}
	a, err = runUntil(t, conn, lg, n-1)
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.TxnsSkipped != 0 || s.TxnsApplied != 15 {
		t.Errorf("from a cursor ahead of the checkpoint: %d skipped, %d applied; want 0 and 15", s.TxnsSkipped, s.TxnsApplied)
	}

	if got := queryInt(t, conn, "SELECT count(DISTINCT txn) FROM rs_log"); got != n {
		t.Errorf("%d distinct transactions applied, want %d", got, n)
	}
	if dup := queryInt(t, conn, "SELECT count(*) FROM (SELECT txn FROM rs_log GROUP BY txn HAVING count(*) <> 1) d"); dup != 0 {
		t.Errorf("%d transactions applied more than once", dup)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM rs WHERE v LIKE 'updated%'"); got != n/3 {
		t.Errorf("%d rows updated, want %d", got, n/3)
	}
	cp := readStatus(t, conn).Checkpoint
	if cp.TxnsApplied != n || cp.TxnsSkipped != 10 || cp.Offset != n-1 {
		t.Errorf("checkpoint %+v, want %d applied, 10 skipped, offset %d", cp, n, n-1)
	}
	if got := cursorAt(t, lg); got != n {
		t.Errorf("cursor at %d, want %d", got, n)
	}
}

// TestResumeRefusesWhenTheLogLostTheGap: the target's checkpoint is behind
// the cursor and retention already removed the units in between. The
// applier applies nothing and refuses with the recovery.
func TestResumeRefusesWhenTheLogLostTheGap(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, resumeDDL)
	const n = 40
	lg := resumeLog(t, n, segmentlog.Options{SegmentBytesMax: 512, IndexIntervalBytes: 128, Retention: segmentlog.Retention{MaxBytes: 1}})
	if _, err := runUntil(t, conn, lg, 4); err != nil {
		t.Fatal(err)
	}
	if err := lg.CommitCursor("applier", 30); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.ApplyRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	if lg.FirstOffset() <= 5 {
		t.Fatalf("retention kept offset %d on: the test needs offset 5 gone", lg.FirstOffset())
	}

	_, err := runUntil(t, conn, lg, n-1)
	var be *CheckpointBehindError
	if !errors.As(err, &be) {
		t.Fatalf("Run = %v, want *CheckpointBehindError", err)
	}
	if be.Offset != 4 || be.Cursor != 30 || be.Oldest != lg.FirstOffset() {
		t.Errorf("error fields %+v", be)
	}
	for _, want := range []string{"offset 30", "log offset 4", "run --config test.yml --cleanup", "run --config test.yml --local"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM rs_log"); got != 5 {
		t.Errorf("the refusing run left %d transactions applied, want the 5 from before", got)
	}
	if got := cursorAt(t, lg); got != 30 {
		t.Errorf("the refusing run moved the cursor to %d", got)
	}
}
