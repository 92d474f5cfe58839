package apply

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
)

// TestQuarantineAtomicity: a batch of four transactions whose third fails
// on its third row. The first two commit, none of the third is visible, the
// fourth is not applied, the checkpoint and cursor stay before the third,
// and the unit is quarantined with its SQLSTATE and envelope. After the
// target is fixed, a rerun applies it and marks it replayed.
func TestQuarantineAtomicity(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn,
		"CREATE TABLE items (id int PRIMARY KEY, qty int CHECK (qty >= 0))",
		"INSERT INTO items VALUES (500, 0)") // a row the source does not have: the conflict
	items := relation("public", "items", 'd', "id*", "qty")
	bad := newTxn(30).insert(items, vals("31", "1")...).insert(items, vals("32", "1")...).
		insert(items, vals("500", "1")...).insert(items, vals("33", "1")...).encode(t)
	payloads := [][]byte{
		newTxn(10).insert(items, vals("11", "1")...).insert(items, vals("12", "1")...).encode(t),
		newTxn(20).insert(items, vals("21", "1")...).encode(t),
		bad,
		newTxn(40).insert(items, vals("41", "1")...).encode(t),
	}
	cur := &recCursor{}
	a := newApplier(t, conn, nil)
	// All four are queued before Run starts, so they form one batch.
	err := drain(t, a, cur, 0, payloads)

	var qe *QuarantinedError
	if !errors.As(err, &qe) {
		t.Fatalf("Run = %v, want *QuarantinedError", err)
	}
	if qe.CommitLSN != 30 || qe.SQLState != "23505" || qe.Relation != "public.items" || qe.Unit != "transaction" || qe.ID == 0 {
		t.Errorf("QuarantinedError = %+v", qe)
	}
	for _, want := range []string{"commit LSN 0/1E", "public.items", "23505", "quarantined (id",
		"trellara status --config test.yml --view quarantine", "trellara repair-plan --config test.yml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error message lacks %q:\n%s", want, err)
		}
	}
	if got := queryString(t, conn, "SELECT string_agg(id::text, ',' ORDER BY id) FROM items"); got != "11,12,21,500" {
		t.Errorf("items = %s, want the first two transactions only (11,12,21) plus the planted 500", got)
	}
	st := readStatus(t, conn)
	if st.Checkpoint.CommitLSN != 20 || st.Checkpoint.TxnsApplied != 2 || st.Checkpoint.Offset != 1 {
		t.Errorf("checkpoint = %+v, want commit LSN 20, 2 txns, offset 1", st.Checkpoint)
	}
	if last, _ := cur.last(); last != 1 {
		t.Errorf("cursor at %d, want 1 (the last committed unit)", last)
	}
	if st.QuarantineOpen != 1 || len(st.Quarantine) != 1 {
		t.Fatalf("quarantine = %+v", st)
	}
	q := st.Quarantine[0]
	if q.CommitLSN != 30 || q.Offset != 2 || q.SQLState != "23505" || q.Relation != "public.items" || !strings.Contains(q.Error, "duplicate key") {
		t.Errorf("quarantine entry = %+v", q)
	}
	var stored []byte
	if err := conn.QueryRow(context.Background(), "SELECT envelope FROM trellara.quarantine WHERE id = $1", q.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, bad) {
		t.Error("quarantined envelope differs from the unit's bytes")
	}

	// Running again without a fix meets the same failure: one open row,
	// attempts counted, nothing else applied.
	err = drain(t, newApplier(t, conn, nil), cur, 2, payloads[2:])
	if !IsQuarantined(err) {
		t.Fatalf("second run = %v", err)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM trellara.quarantine"); n != 1 {
		t.Errorf("%d quarantine rows after a repeated failure, want 1", n)
	}
	if n := queryInt(t, conn, "SELECT attempts FROM trellara.quarantine"); n != 2 {
		t.Errorf("attempts = %d, want 2", n)
	}

	// Fix the target, replay: the unit applies, its row is marked replayed.
	exec(t, conn, "DELETE FROM items WHERE id = 500")
	mustDrain(t, newApplier(t, conn, nil), cur, 2, payloads[2:])
	if got := queryString(t, conn, "SELECT string_agg(id::text, ',' ORDER BY id) FROM items"); got != "11,12,21,31,32,33,41,500" {
		t.Errorf("items after replay = %s", got)
	}
	st = readStatus(t, conn)
	if st.QuarantineOpen != 0 || st.QuarantineTotal != 1 || st.Checkpoint.CommitLSN != 40 || st.Checkpoint.TxnsApplied != 4 {
		t.Errorf("after replay: %+v", st)
	}
}

// TestQuarantineKinds: the failures that must stop the flow, each with its
// code.
func TestQuarantineKinds(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, "CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL, d date)",
		"CREATE TABLE deferred (id int PRIMARY KEY, parent int REFERENCES t (id) DEFERRABLE INITIALLY DEFERRED)")
	tr := relation("public", "t", 'd', "id*", "n", "d")
	missing := relation("public", "missing", 'd', "id*")
	nokey := relation("public", "t", 'd', "id", "n", "d")
	deferred := relation("public", "deferred", 'd', "id*", "parent")
	// A target whose default is asynchronous commit: the applier must not
	// inherit it (the cursor moves once COMMIT returns).
	exec(t, conn, "SET synchronous_commit = off")
	none := pb.OldTuple_OLD_TUPLE_NONE
	cases := []struct {
		name     string
		txn      *txn
		sqlstate string
		relation string
		text     string
	}{
		{"missing table", newTxn(10).insert(missing, tv("1")), "42P01", "public.missing", "does not exist"},
		{"type error", newTxn(10).insert(tr, vals("1", "1", "not a date")...), "22007", "public.t", "invalid input syntax"},
		{"not null", newTxn(10).insert(tr, tv("1"), null(), null()), "23502", "public.t", "null value"},
		{"update of a missing row", newTxn(10).update(tr, none, nil, vals("9", "1", "2024-01-01")), "", "public.t", "matched 0 target rows"},
		{"delete of a missing row", newTxn(10).delete(tr, pb.OldTuple_OLD_TUPLE_KEY, []*pb.Value{tv("9"), null(), null()}), "", "public.t", "matched 0 target rows"},
		{"no key", newTxn(10).update(nokey, none, nil, vals("1", "1", "2024-01-01")), "", "public.t", "no replica identity key"},
		{"deferred constraint at commit", newTxn(10).insert(deferred, vals("1", "77")...), "23503", "", "foreign key"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newApplier(t, conn, func(cfg *Config) { cfg.Flow = "kinds" + string(rune('a'+i)) })
			err := drain(t, a, nil, 0, [][]byte{c.txn.encode(t)})
			var qe *QuarantinedError
			if !errors.As(err, &qe) {
				t.Fatalf("Run = %v, want *QuarantinedError", err)
			}
			if qe.SQLState != c.sqlstate || qe.Relation != c.relation || !strings.Contains(err.Error(), c.text) {
				t.Errorf("got SQLSTATE %q relation %q:\n%v\nwant SQLSTATE %q relation %q containing %q", qe.SQLState, qe.Relation, err, c.sqlstate, c.relation, c.text)
			}
		})
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM t"); n != 0 {
		t.Errorf("%d rows in t after failures only", n)
	}
	if got := queryString(t, conn, "SHOW synchronous_commit"); got != "local" {
		t.Errorf("applier session synchronous_commit = %s, want local", got)
	}
}

// TestRedelivery: applying the same log twice changes nothing the second
// time and counts every unit as skipped.
func TestRedelivery(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, "CREATE TABLE acc (id int PRIMARY KEY, bal numeric)", "CREATE TABLE hist (id int PRIMARY KEY, acc int, delta numeric)")
	acc := relation("public", "acc", 'd', "id*", "bal")
	hist := relation("public", "hist", 'd', "id*", "acc", "delta")
	var payloads [][]byte
	payloads = append(payloads,
		snapshotBatch(t, acc, 100, 0, vals("1", "0"), vals("2", "0")),
		snapshotBatch(t, acc, 100, 1, vals("3", "0")),
		snapshotEnd(t, acc, 100, 2))
	bal := map[int]int{1: 0, 2: 0, 3: 0}
	for i := 1; i <= 200; i++ {
		id := 1 + i%3
		bal[id] += i
		payloads = append(payloads, newTxn(uint64(100+i*10)).
			update(acc, pb.OldTuple_OLD_TUPLE_NONE, nil, vals(strconv.Itoa(id), strconv.Itoa(bal[id]))).
			insert(hist, vals(strconv.Itoa(i), strconv.Itoa(id), strconv.Itoa(i))...).encode(t))
	}
	dump := func() string {
		return queryString(t, conn, "SELECT md5(string_agg(a::text, ',' ORDER BY id)) || md5((SELECT string_agg(h::text, ',' ORDER BY id) FROM hist h)) FROM acc a")
	}
	mustDrain(t, newApplier(t, conn, func(c *Config) { c.MaxBatchTxns = 16 }), nil, 0, payloads)
	first := dump()
	st1 := readStatus(t, conn)

	a := newApplier(t, conn, nil)
	cur := &recCursor{}
	mustDrain(t, a, cur, 0, payloads)
	if dump() != first {
		t.Error("target changed when the log was redelivered")
	}
	st2, err := a.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st2.Checkpoint.TxnsSkipped != int64(len(payloads)) || st2.Checkpoint.TxnsApplied != 200 ||
		st2.Checkpoint.CommitLSN != st1.Checkpoint.CommitLSN || st2.Checkpoint.RowsApplied != 403 {
		t.Errorf("after redelivery: checkpoint %+v, want %d skipped, 200 applied, 403 rows", st2.Checkpoint, len(payloads))
	}
	if s := a.Stats(); s.TxnsSkipped != int64(len(payloads)) || s.TxnsApplied != 0 {
		t.Errorf("stats = %+v", s)
	}
	if last, _ := cur.last(); last != uint64(len(payloads)-1) {
		t.Errorf("cursor at %d after redelivery, want %d", last, len(payloads)-1)
	}
	if got := queryString(t, conn, "SELECT bal::text FROM acc WHERE id = 2"); got != strconv.Itoa(bal[2]) {
		t.Errorf("acc 2 balance = %s, want %d", got, bal[2])
	}
}

// TestSnapshotSequence: batch gaps and short snapshots stop the flow; the
// relation is ready only once the stream passes its boundary.
func TestSnapshotSequence(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, "CREATE TABLE s (id int PRIMARY KEY, v text)")
	s := relation("public", "s", 'd', "id*", "v")
	b0 := snapshotBatch(t, s, 100, 0, vals("1", "a"))
	b1 := snapshotBatch(t, s, 100, 1, vals("2", "b"))
	b3 := snapshotBatch(t, s, 100, 3, vals("4", "d"))

	if err := drain(t, newApplier(t, conn, nil), nil, 0, [][]byte{b0, b1, b0, b3}); !errors.Is(err, ErrSequence) {
		t.Fatalf("gap: Run = %v, want ErrSequence", err)
	}
	if err := drain(t, newApplier(t, conn, nil), nil, 4, [][]byte{snapshotEnd(t, s, 100, 3)}); !errors.Is(err, ErrSequence) {
		t.Fatalf("short snapshot: Run = %v, want ErrSequence", err)
	}
	st := readStatus(t, conn)
	if len(st.Snapshots) != 1 || st.Snapshots[0].NextBatch != 2 || st.Snapshots[0].Done || st.Checkpoint.TxnsSkipped != 1 {
		t.Fatalf("status = %+v", st)
	}
	// A batch holds only inserts of the relation it names: a row of
	// another relation stops the flow and nothing of the batch is copied.
	other := relation("public", "t", 'd', "id*", "v")
	e := &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: testSource, CommitLsn: 100, EndLsn: 100,
		Relations: []*pb.Relation{s, other},
		Rows: []*pb.Row{{Seq: 0, Op: pb.Op_OP_INSERT, NewTuple: vals("3", "c")},
			{Seq: 1, Op: pb.Op_OP_INSERT, RelationIndex: 1, NewTuple: vals("5", "e")}},
		Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_SNAPSHOT, ChunkIndex: 2, SnapshotRelation: "public.s"}}
	envelope.Seal(e)
	mixed, err := envelope.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := drain(t, newApplier(t, conn, nil), nil, 4, [][]byte{mixed}); !errors.Is(err, ErrSequence) || !strings.Contains(err.Error(), "holds row 1 for public.t") {
		t.Fatalf("batch with a row of another relation: Run = %v, want ErrSequence naming row 1 of public.t", err)
	}
	if got := queryString(t, conn, "SELECT count(*)::text FROM s"); got != "2" {
		t.Fatalf("s holds %s rows after the refused batch, want 2", got)
	}
	// A duplicate snapshot row is refused data: quarantined as a snapshot unit.
	exec(t, conn, "INSERT INTO s VALUES (3, 'planted')")
	err = drain(t, newApplier(t, conn, nil), nil, 5, [][]byte{snapshotBatch(t, s, 100, 2, vals("3", "c"))})
	var qe *QuarantinedError
	if !errors.As(err, &qe) || qe.Unit != "snapshot" || qe.SQLState != "23505" {
		t.Fatalf("duplicate snapshot row: %v", err)
	}
	exec(t, conn, "DELETE FROM s WHERE id = 3")
	mustDrain(t, newApplier(t, conn, nil), nil, 5, [][]byte{
		snapshotBatch(t, s, 100, 2, vals("3", "c")),
		snapshotEnd(t, s, 100, 3),
	})
	st = readStatus(t, conn)
	if p := st.Snapshots[0]; !p.Done || p.Rows != 3 || p.Ready || st.QuarantineOpen != 0 {
		t.Fatalf("after the end marker: %+v (want done, 3 rows, not ready before any stream transaction)", st)
	}
	mustDrain(t, newApplier(t, conn, nil), nil, 7, [][]byte{newTxn(150).insert(s, vals("9", "stream")...).encode(t)})
	if st = readStatus(t, conn); !st.Snapshots[0].Ready {
		t.Errorf("not ready after the stream passed the boundary: %+v", st.Snapshots[0])
	}
	if got := queryString(t, conn, "SELECT string_agg(id || v, ',' ORDER BY id) FROM s"); got != "1a,2b,3c,9stream" {
		t.Errorf("s = %s", got)
	}
}

// TestLargeTransaction: a source transaction bigger than one pipeline round
// trip is still all or nothing.
func TestLargeTransaction(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, "CREATE TABLE big (id int PRIMARY KEY, v text)")
	r := relation("public", "big", 'd', "id*", "v")
	const rows = 3*pipelineStmtsMax + 17
	good, bad := newTxn(10), newTxn(20)
	for i := range rows {
		good.insert(r, vals(strconv.Itoa(i), "v")...)
		id := rows + i
		if i == rows-5 {
			id = 3 // already there: fails in the last round trip
		}
		bad.insert(r, vals(strconv.Itoa(id), "v")...)
	}
	a := newApplier(t, conn, func(c *Config) { c.MaxBatchRows = 100 })
	err := drain(t, a, nil, 0, [][]byte{good.encode(t), bad.encode(t)})
	if !IsQuarantined(err) {
		t.Fatalf("Run = %v, want the second transaction quarantined", err)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM big"); n != rows {
		t.Errorf("big has %d rows, want exactly the first transaction's %d", n, rows)
	}
	if s := a.Stats(); s.TxnsApplied != 1 || s.RowsApplied != rows {
		t.Errorf("stats = %+v", s)
	}
}
