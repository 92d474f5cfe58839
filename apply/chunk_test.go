package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
)

// chunks splits the transaction t into CHUNK units of at most per rows
// each, the way the relay does: same xid and LSNs, transaction-wide row
// numbers, the relation list in every chunk.
func chunks(tb testing.TB, t *txn, per int) [][]byte {
	tb.Helper()
	rows := t.e.Rows
	n := (len(rows) + per - 1) / per
	var out [][]byte
	for i := range n {
		e := proto.Clone(t.e).(*pb.Envelope)
		e.Rows = rows[i*per : min(len(rows), (i+1)*per)]
		e.Boundary = &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_CHUNK, ChunkIndex: uint32(i), ChunkCount: uint32(n), TotalRows: uint64(len(rows))}
		envelope.Seal(e)
		b, err := envelope.Encode(e)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// bigTxn inserts ids from..from+n-1 into big, one applied_log row first.
func bigTxn(lsn uint64, from, n int) *txn {
	r := relation("public", "big", 'd', "id*", "v")
	l := relation("public", "big_log", 'd', "txn")
	t := newTxn(lsn).insert(l, tv(strconv.FormatUint(lsn, 10)))
	for i := range n {
		t.insert(r, vals(strconv.Itoa(from+i), "v"+strconv.Itoa(from+i))...)
	}
	return t
}

const bigDDL = `CREATE TABLE big (id int PRIMARY KEY, v text NOT NULL); CREATE TABLE big_log (txn bigint NOT NULL)`

func cat(parts ...[][]byte) [][]byte {
	var out [][]byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(b []byte) [][]byte { return [][]byte{b} }

// TestChunkSequence: a chunked transaction between ordinary ones is applied
// whole, as one target transaction that is invisible until its final chunk
// commits; the cursor moves only at the final chunk.
func TestChunkSequence(t *testing.T) {
	c, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, bigDDL)
	x := chunks(t, bigTxn(200, 100, 50), 10) // 51 rows → 6 chunks
	payloads := cat(one(bigTxn(100, 1, 3).encode(t)), x, one(bigTxn(300, 1000, 2).encode(t)))

	// While the sequence is being applied, another session must see none
	// of it: checked each time the applier asks for the next chunk.
	watcher := connect(t, c.URL("target"))
	var observed []int64
	src := &hookSource{memSource: memSource{payloads: payloads}, before: func(i int) error {
		if i >= 2 && i <= len(x) { // about to hand out chunk i-1 (≥ 1)
			var n int64
			if err := watcher.QueryRow(context.Background(), "SELECT count(*) FROM big WHERE id >= 100 AND id < 1000").Scan(&n); err != nil {
				return err
			}
			observed = append(observed, n)
		}
		return nil
	}}
	cur := &recCursor{}
	a := newApplier(t, conn, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Run(ctx, src, cur, nil); !errors.Is(err, errDrained) {
		t.Fatal(err)
	}
	for i, n := range observed {
		if n != 0 {
			t.Errorf("before chunk %d was read, another session saw %d rows of the chunked transaction", i+1, n)
		}
	}
	if len(observed) != len(x)-1 {
		t.Errorf("observed %d times, want %d", len(observed), len(x)-1)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM big"); got != 55 {
		t.Errorf("big has %d rows, want 55", got)
	}
	if got := queryString(t, conn, "SELECT string_agg(txn::text, ',' ORDER BY txn) FROM big_log"); got != "100,200,300" {
		t.Errorf("big_log = %s", got)
	}
	for _, off := range cur.offsets {
		if off >= 1 && off < uint64(len(x)) {
			t.Errorf("cursor committed at offset %d, inside the chunk sequence 1..%d", off, len(x))
		}
	}
	if last, _ := cur.last(); last != uint64(len(payloads)-1) {
		t.Errorf("cursor at %d, want %d", last, len(payloads)-1)
	}
	s := a.Stats()
	if s.TxnsApplied != 3 || s.ChunkedTxns != 1 || s.RowsApplied != 4+51+3 {
		t.Errorf("stats = %+v", s)
	}
	st := readStatus(t, conn)
	if st.Checkpoint.CommitLSN != 300 || st.Checkpoint.TxnsApplied != 3 || st.Checkpoint.Offset != uint64(len(payloads)-1) {
		t.Errorf("checkpoint = %+v", st.Checkpoint)
	}

	// Redelivery of everything, the chunked transaction included, is
	// skipped.
	a2 := newApplier(t, conn, nil)
	mustDrain(t, a2, nil, 0, payloads)
	if got := queryInt(t, conn, "SELECT count(*) FROM big_log"); got != 3 {
		t.Errorf("after redelivery big_log has %d rows, want 3", got)
	}
	if s := a2.Stats(); s.TxnsApplied != 0 || s.TxnsSkipped != 3 {
		t.Errorf("redelivery stats = %+v, want 0 applied and 3 skipped", s)
	}
}

// hookSource is memSource calling before(i) ahead of handing out entry i.
type hookSource struct {
	memSource
	before func(i int) error
}

func (s *hookSource) Next(ctx context.Context) (uint64, []byte, error) {
	if s.before != nil && s.pos < len(s.payloads) {
		if err := s.before(s.pos); err != nil {
			return 0, nil, err
		}
	}
	return s.memSource.Next(ctx)
}

// TestChunkReadAhead: the reader fetches the entry after a chunk only
// once the chunk has been released, so one chunk is in memory at a time.
func TestChunkReadAhead(t *testing.T) {
	x := chunks(t, bigTxn(200, 100, 30), 10)
	a, err := New(nil, Config{Flow: "f", SourceID: testSource})
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan int, 10)
	src := &hookSource{memSource: memSource{payloads: x, block: true}, before: func(i int) error { calls <- i; return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rd := a.startReader(ctx, src)
	for i := range x {
		if got := <-calls; got != i {
			t.Fatalf("reader fetched entry %d, want %d", got, i)
		}
		it := rd.one(ctx)
		if it.err != nil {
			t.Fatal(it.err)
		}
		select {
		case got := <-calls:
			t.Fatalf("reader fetched entry %d while chunk %d was still held", got, i)
		case <-time.After(30 * time.Millisecond):
		}
		it.u.release()
	}
}

// TestChunkRepublished: the relay crashed after publishing part of a
// chunk sequence and published the transaction again, whole. The partial
// copy is discarded and the transaction applied once, including when the
// applier's target transaction already holds the partial copy's rows.
func TestChunkRepublished(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, bigDDL)
	x := chunks(t, bigTxn(200, 100, 40), 10) // 5 chunks
	payloads := cat(one(bigTxn(100, 1, 2).encode(t)), x[:3], x, x[:1], x, one(bigTxn(300, 1000, 2).encode(t)))
	cur := &recCursor{}
	a := newApplier(t, conn, nil)
	mustDrain(t, a, cur, 0, payloads)
	if got := queryString(t, conn, "SELECT string_agg(txn::text, ',' ORDER BY txn) FROM big_log"); got != "100,200,300" {
		t.Errorf("big_log = %s", got)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM big WHERE id >= 100 AND id < 1000"); got != 40 {
		t.Errorf("chunked transaction left %d rows, want 40", got)
	}
	// The second whole copy is a redelivery once the first committed.
	if s := a.Stats(); s.TxnsApplied != 3 || s.TxnsSkipped != 1 {
		t.Errorf("stats = %+v, want 3 applied, 1 skipped", s)
	}
}

// TestChunkSequenceBroken: a partial sequence followed by anything but a
// fresh chunk 0 of the same transaction stops the flow with ErrSequence
// naming the offsets; nothing of the transaction is applied.
func TestChunkSequenceBroken(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, bigDDL)
	x := chunks(t, bigTxn(200, 100, 40), 10)
	y := chunks(t, bigTxn(250, 500, 40), 10)
	skipped := append(append([][]byte{}, x[:2]...), x[3:]...)
	after := one(bigTxn(300, 1000, 2).encode(t))
	cases := []struct {
		name     string
		payloads [][]byte
		want     []string
	}{
		{"followed by a transaction", cat(x[:2], after), []string{"start at log offset 10", "chunk 1 of 5 at log offset 11", "log offset 12 holds the transaction at commit LSN 0/12C"}},
		{"followed by another chunked transaction", cat(x[:3], y), []string{"chunk 2 of 5 at log offset 12", "log offset 13 holds chunk 0 of 5 of the transaction at commit LSN 0/FA"}},
		{"a chunk missing", cat(skipped, after), []string{"chunk 1 of 5 at log offset 11", "log offset 12 holds chunk 3 of 5", "does not continue it"}},
		{"no chunk 0", cat(x[1:], after), []string{"log offset 10 holds chunk 1 of 5", "no chunk 0 precedes it"}},
		{"rows missing", cat(x[:1], [][]byte{chunkWithRows(t, x[1], 5)}, x[2:]), []string{"chunk 1 of 5 at log offset 11", "whose first row is number 20 but the chunks before it carry 15 rows"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t, conn, func(c *Config) { c.Flow = fmt.Sprintf("broken%d", i) })
			err := drain(t, a, nil, 10, tc.payloads)
			if !errors.Is(err, ErrSequence) {
				t.Fatalf("Run = %v, want ErrSequence", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
			if got := queryInt(t, conn, "SELECT count(*) FROM big"); got != 0 {
				t.Errorf("big has %d rows, want 0", got)
			}
			if cp := a.Checkpoint(); cp.CommitLSN != 0 || cp.HasOffset {
				t.Errorf("checkpoint moved: %+v", cp)
			}
		})
	}
}

// chunkWithRows re-seals a chunk with only its first n rows.
func chunkWithRows(tb testing.TB, b []byte, n int) []byte {
	tb.Helper()
	e, err := envelope.Decode(b)
	if err != nil {
		tb.Fatal(err)
	}
	e.Rows = e.Rows[:n]
	envelope.Seal(e)
	out, err := envelope.Encode(e)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestChunkQuarantine: a row the target refuses in chunk 2 rolls back the
// whole transaction; the quarantine row holds the failing chunk and the
// flow stops before the transaction. Once the target is fixed, a replay
// applies it and marks the quarantine row replayed.
func TestChunkQuarantine(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, bigDDL, "INSERT INTO big VALUES (125, 'conflict')")
	x := chunks(t, bigTxn(200, 100, 40), 10) // id 125 is row 26: chunk 2
	payloads := cat(one(bigTxn(100, 1, 2).encode(t)), x, one(bigTxn(300, 1000, 2).encode(t)))
	cur := &recCursor{}
	a := newApplier(t, conn, nil)
	err := drain(t, a, cur, 0, payloads)
	var qe *QuarantinedError
	if !errors.As(err, &qe) {
		t.Fatalf("Run = %v, want *QuarantinedError", err)
	}
	if qe.CommitLSN != 200 || qe.Unit != "transaction" || qe.Relation != "public.big" || qe.SQLState != "23505" ||
		!strings.Contains(qe.Error(), "chunk 2 of 5 (the transaction's chunks start at log offset 1)") {
		t.Errorf("quarantine error = %+v\n%v", qe, qe)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM big"); got != 3 {
		t.Errorf("big has %d rows, want the first transaction's 2 and the conflicting one", got)
	}
	var off int64
	var env []byte
	var unit string
	if err := conn.QueryRow(context.Background(), "SELECT log_offset, envelope, unit FROM trellara.quarantine").Scan(&off, &env, &unit); err != nil {
		t.Fatal(err)
	}
	if off != 3 || string(env) != string(x[2]) || unit != "transaction" {
		t.Errorf("quarantine row: offset %d, unit %s, envelope is chunk 2: %v", off, unit, string(env) == string(x[2]))
	}
	if last, _ := cur.last(); last != 0 {
		t.Errorf("cursor at %d, want 0 (before the chunked transaction)", last)
	}

	exec(t, conn, "DELETE FROM big WHERE id = 125")
	a2 := newApplier(t, conn, nil)
	mustDrain(t, a2, cur, 1, payloads[1:])
	if got := queryInt(t, conn, "SELECT count(*) FROM big"); got != 44 {
		t.Errorf("after replay big has %d rows, want 44", got)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM trellara.quarantine WHERE replayed_at IS NOT NULL"); n != 1 {
		t.Errorf("%d quarantine rows marked replayed, want 1", n)
	}
}

// TestPartitionedRefused: partitioned mode, and a chunk from a partition
// other than 0, are refused with ErrPartitioned.
func TestPartitionedRefused(t *testing.T) {
	if _, err := New(nil, Config{Flow: "f", SourceID: testSource, Mode: ModePartitioned}); !errors.Is(err, ErrPartitioned) {
		t.Errorf("New(partitioned) = %v, want ErrPartitioned", err)
	}
	if _, err := New(nil, Config{Flow: "f", SourceID: testSource, Mode: "sharded"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New(sharded) = %v, want ErrInvalidConfig", err)
	}
	a, err := New(nil, Config{Flow: "f", SourceID: testSource})
	if err != nil {
		t.Fatal(err)
	}
	e, err := envelope.Decode(chunks(t, bigTxn(200, 1, 4), 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	e.Boundary.Partition = 3
	envelope.Seal(e)
	b, err := envelope.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.decode(new(decoder), 7, b); !errors.Is(err, ErrPartitioned) || !strings.Contains(err.Error(), "log offset 7") {
		t.Errorf("decode(partition 3) = %v, want ErrPartitioned naming the offset", err)
	}
}

// offSource serves payloads at the given offsets, which a transport that
// replays older entries may send backwards.
type offSource struct {
	offsets  []uint64
	payloads [][]byte
	pos      int
}

func (s *offSource) Next(ctx context.Context) (uint64, []byte, error) {
	if s.pos == len(s.payloads) {
		return 0, nil, errDrained
	}
	s.pos++
	return s.offsets[s.pos-1], s.payloads[s.pos-1], nil
}

// TestCursorOnlyForward: a unit redelivered from an older offset is
// skipped and does not move the cursor back.
func TestCursorOnlyForward(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, bigDDL)
	a, b := bigTxn(100, 1, 1).encode(t), bigTxn(200, 10, 1).encode(t)
	x := chunks(t, bigTxn(300, 100, 20), 5)
	src := &offSource{offsets: []uint64{5, 6, 7, 8, 9, 10, 11, 2, 7}, payloads: [][]byte{a, b, x[0], x[1], x[2], x[3], x[4], a, x[0]}}
	cur := &recCursor{}
	// Synchronous commits, one unit a batch: the cursor follows the target
	// commits, though its writer (cursorWriter) may fold two waiting moves
	// into the later one, so the moves are a forward subsequence of 5, 6,
	// 11 ending at 11 — never the redelivered 2 or 7. (Mutation tried:
	// commitCursor without its forward-only check: [5 6 11 2], red.)
	ap := newApplier(t, conn, func(c *Config) { c.MaxBatchTxns, c.SynchronousCommit = 1, SyncCommitOn })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ap.Run(ctx, src, cur, nil); !errors.Is(err, errDrained) {
		t.Fatal(err)
	}
	want := []uint64{5, 6, 11}
	got := cur.offsets
	if len(got) == 0 || got[len(got)-1] != 11 {
		t.Errorf("cursor commits %v, want them to end at 11", got)
	}
	for i, j := 0, 0; i < len(got); i, j = i+1, j+1 {
		for j < len(want) && want[j] != got[i] {
			j++
		}
		if j == len(want) {
			t.Errorf("cursor commits %v, want a forward subsequence of %v (a move backwards, or to a redelivered offset)", got, want)
			break
		}
	}
	if s := ap.Stats(); s.TxnsApplied != 3 || s.TxnsSkipped != 1 {
		t.Errorf("stats = %+v, want 3 applied and the redelivered transaction skipped", s)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM big_log"); got != 3 {
		t.Errorf("big_log has %d rows, want 3", got)
	}
}

// weakTarget wraps a target and keeps a weak pointer to every envelope
// the applier hands to Apply, so a test can see which ones are still
// reachable.
type weakTarget struct {
	Target
	mu   sync.Mutex
	envs []weak.Pointer[pb.Envelope]
}

func (w *weakTarget) Begin(ctx context.Context) (TargetTx, error) {
	tx, err := w.Target.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &weakTx{TargetTx: tx, w: w}, nil
}

type weakTx struct {
	TargetTx
	w *weakTarget
}

func (x *weakTx) Apply(ctx context.Context, unit int, env *pb.Envelope) (int, int, error) {
	x.w.mu.Lock()
	x.w.envs = append(x.w.envs, weak.Make(env))
	x.w.mu.Unlock()
	return x.TargetTx.Apply(ctx, unit, env)
}

// TestChunkMemory: while a chunk sequence is applied, the chunks before
// the one just applied are unreachable (chunk 0 included, whose header
// the sequence keeps), so the memory of a chunked transaction does not
// grow with its number of chunks. Checked each time the reader fetches
// the next chunk, after a full garbage collection.
func TestChunkMemory(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, bigDDL)
	x := chunks(t, bigTxn(200, 100, 60), 10) // 61 rows → 7 chunks
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := Config{Flow: testFlow, SourceID: testSource, ConfigPath: "test.yml",
		Logger: slog.New(slog.NewTextHandler(testLogOut, nil))}.withDefaults()
	w := &weakTarget{Target: newPGTarget(conn, cfg)}
	a, err := NewWithTarget(w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	checks := 0
	src := &hookSource{memSource: memSource{payloads: x}, before: func(i int) error {
		if i < 2 {
			return nil
		}
		// Chunk i-1 was applied and released; it may still be the
		// applier's current unit. Every chunk before it must be gone.
		runtime.GC()
		w.mu.Lock()
		defer w.mu.Unlock()
		for j, p := range w.envs[:i-1] {
			if p.Value() != nil {
				held = append(held, fmt.Sprintf("chunk %d while fetching chunk %d", j, i))
			}
		}
		checks++
		return nil
	}}
	if err := a.Run(ctx, src, &recCursor{}, nil); !errors.Is(err, errDrained) {
		t.Fatal(err)
	}
	if checks != len(x)-2 {
		t.Fatalf("checked %d times, want %d", checks, len(x)-2)
	}
	if len(held) > 0 {
		t.Errorf("applied chunks still reachable: %s", strings.Join(held, "; "))
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM big"); got != 60 {
		t.Errorf("big has %d rows, want 60", got)
	}
}

// TestInsertRunsCopy: runs of inserts of one table inside a chunk are
// written with COPY: rows in source order around the statements between
// them (a DELETE and re-INSERT of one key, an UPDATE of a row the run
// just inserted), a row trigger firing once per row, NULLs and values
// that need COPY escaping intact; a duplicate key in the middle of a run
// refuses the whole transaction, and nothing of it is applied.
func TestInsertRunsCopy(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, "CREATE TABLE cp (id int PRIMARY KEY, v text)",
		"CREATE TABLE fired (n int)",
		`CREATE FUNCTION count_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO fired VALUES (1); RETURN NEW; END $$`,
		"CREATE TRIGGER count_row AFTER INSERT ON cp FOR EACH ROW EXECUTE FUNCTION count_row()")
	cp := relation("public", "cp", 'd', "id*", "v")
	odd := []string{"tab\there", "nl\nx", `back\slash`, `\.`, "", `\N`}
	txn := newTxn(500)
	for i := range 100 {
		v := []*pb.Value{tv(strconv.Itoa(i)), tv("v" + strconv.Itoa(i))}
		if i < len(odd) {
			v[1] = tv(odd[i])
		}
		if i == 50 {
			v[1] = null()
		}
		txn.insert(cp, v...)
		if i == 60 {
			// The re-insert of 7 opens the run of the next 40 inserts:
			// applied before the DELETE it would be a duplicate key.
			txn.update(cp, pb.OldTuple_OLD_TUPLE_NONE, nil, vals("60", "updated"))
			txn.delete(cp, pb.OldTuple_OLD_TUPLE_KEY, vals("7", ""))
			txn.insert(cp, vals("7", "again")...)
		}
	}
	mustDrain(t, newApplier(t, conn, nil), nil, 0, chunks(t, txn, 60)) // rows 0-59; 60, the statements, then a run of 40
	want := []string{}
	for i := range 100 {
		switch {
		case i == 7:
			want = append(want, "7=again")
		case i == 50:
			want = append(want, "50=<null>")
		case i == 60:
			want = append(want, "60=updated")
		case i < len(odd):
			want = append(want, strconv.Itoa(i)+"="+odd[i])
		default:
			want = append(want, fmt.Sprintf("%d=v%d", i, i))
		}
	}
	if got := queryString(t, conn, "SELECT string_agg(id || '=' || coalesce(v, '<null>'), '|' ORDER BY id) FROM cp"); got != strings.Join(want, "|") {
		t.Fatalf("cp:\n got  %q\n want %q", got, strings.Join(want, "|"))
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM fired"); got != 101 {
		t.Fatalf("the row trigger fired %d times, want 101 (100 inserts and the re-insert)", got)
	}

	dup := newTxn(600)
	for i := range 80 {
		id := 1000 + i
		if i == 40 {
			id = 3 // already there
		}
		dup.insert(cp, vals(strconv.Itoa(id), "d")...)
	}
	err := drain(t, newApplier(t, conn, nil), nil, 3, chunks(t, dup, 100))
	var qe *QuarantinedError
	if !errors.As(err, &qe) || qe.SQLState != "23505" {
		t.Fatalf("duplicate in a run: %v, want quarantined (23505)", err)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM cp WHERE id >= 1000"); got != 0 {
		t.Fatalf("%d rows of the refused transaction were applied", got)
	}
}
