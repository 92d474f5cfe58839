package capture

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/schemachange"
)

type captured struct {
	units  []*pb.Envelope
	acks   []uint64
	finals int
}

func (c *captured) emit(e *pb.Envelope, end uint64, final bool) error {
	if e != nil {
		// Every unit must survive the wire: encode and decode it.
		b, err := envelope.Encode(e)
		if err != nil {
			return err
		}
		d, err := envelope.Decode(b)
		if err != nil {
			return err
		}
		c.units = append(c.units, d)
	}
	if final {
		c.acks = append(c.acks, end)
		c.finals++
	}
	return nil
}

type memPins map[string]uint64

func (m memPins) Pinned(r string) (uint64, bool) { v, ok := m[r]; return v, ok }
func (m memPins) Pin(r string, fp uint64) error  { m[r] = fp; return nil }

var ordersRel = &pgoutput.Relation{RelationID: 16400, Namespace: "public", Name: "orders", ReplicaIdentity: 'd',
	Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 20, TypeModifier: -1}, {Name: "note", TypeOID: 25, TypeModifier: -1}}}

func txt(s string) pgoutput.Column {
	return pgoutput.Column{Kind: pgoutput.ColumnText, Data: []byte(s)}
}

// feed runs messages through a Decoder-free path: the assembler consumes
// already-decoded messages, so round-trip each through the wire encoder and
// decoder first to keep the test honest about real framing.
func feed(t *testing.T, a *Assembler, msgs ...pgoutput.Message) error {
	t.Helper()
	var d pgoutput.Decoder
	for i, m := range msgs {
		b := pgoutput.Append(nil, m)
		dm, err := d.Decode(b, pgoutput.LSN(0x1000+i))
		if err != nil {
			t.Fatalf("message %d (%T) does not round-trip: %v", i, m, err)
		}
		if err := a.Handle(dm, pgoutput.LSN(0x1000+i)); err != nil {
			return err
		}
	}
	return nil
}

func TestAssembleSimpleTransaction(t *testing.T) {
	var c captured
	a := NewAssembler(AssemblerOptions{SourceID: "src"}, c.emit)
	err := feed(t, a,
		&pgoutput.Begin{FinalLSN: 0x2000, Xid: 700},
		ordersRel,
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("1"), {Kind: pgoutput.ColumnNull}}},
		&pgoutput.Update{RelationID: 16400, New: []pgoutput.Column{txt("1"), {Kind: pgoutput.ColumnUnchangedToast}}},
		&pgoutput.Delete{RelationID: 16400, OldKind: pgoutput.TupleKey, Old: []pgoutput.Column{txt("1"), {Kind: pgoutput.ColumnNull}}},
		&pgoutput.Commit{CommitLSN: 0x2000, EndLSN: 0x2030},
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.units) != 1 || c.finals != 1 || c.acks[0] != 0x2030 {
		t.Fatalf("units %d finals %d acks %v", len(c.units), c.finals, c.acks)
	}
	e := c.units[0]
	if e.CommitLsn != 0x2000 || e.EndLsn != 0x2030 || e.Xid != 700 || e.RowCount != 3 {
		t.Fatalf("envelope header: %v", e)
	}
	if k := e.Rows[1].NewTuple[1].Kind; k != pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
		t.Fatalf("unchanged TOAST became %v", k)
	}
	if k := e.Rows[0].NewTuple[1].Kind; k != pb.ValueKind_VALUE_KIND_NULL {
		t.Fatalf("NULL became %v", k)
	}
	if !a.Idle() {
		t.Fatal("assembler not idle after commit")
	}
}

func TestAssembleStreamWithSubtransactionAbort(t *testing.T) {
	var c captured
	a := NewAssembler(AssemblerOptions{SourceID: "src"}, c.emit)
	ins := func(xid pgoutput.XID, id string) pgoutput.Message {
		return &pgoutput.Insert{Xid: xid, RelationID: 16400, New: []pgoutput.Column{txt(id), txt("n")}}
	}
	rel := *ordersRel
	rel.Xid = 900
	err := feed(t, a,
		&pgoutput.StreamStart{Xid: 900, FirstSegment: true},
		&rel,
		ins(900, "1"), ins(901, "2"), ins(902, "3"),
		&pgoutput.StreamStop{},
		// an unrelated ordinary transaction commits between stream blocks
		&pgoutput.Begin{FinalLSN: 0x2500, Xid: 950}, ins(0, "50"), &pgoutput.Commit{CommitLSN: 0x2500, EndLSN: 0x2510},
		&pgoutput.StreamStart{Xid: 900},
		ins(900, "4"), ins(903, "5"),
		&pgoutput.StreamStop{},
		&pgoutput.StreamAbort{Xid: 900, SubXid: 901},
		&pgoutput.StreamAbort{Xid: 900, SubXid: 903},
		&pgoutput.StreamCommit{Xid: 900, CommitLSN: 0x3000, EndLSN: 0x3040},
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.units) != 2 {
		t.Fatalf("want 2 transactions, got %d", len(c.units))
	}
	var ids []string
	for _, r := range c.units[1].Rows {
		ids = append(ids, string(r.NewTuple[0].Data))
	}
	if got := strings.Join(ids, ","); got != "1,3,4" {
		t.Fatalf("streamed rows %s, want 1,3,4 (subtransactions 901 and 903 rolled back)", got)
	}
}

func TestAssembleStreamAbortedWhole(t *testing.T) {
	var c captured
	a := NewAssembler(AssemblerOptions{SourceID: "src"}, c.emit)
	rel := *ordersRel
	rel.Xid = 900
	err := feed(t, a,
		&pgoutput.StreamStart{Xid: 900, FirstSegment: true}, &rel,
		&pgoutput.Insert{Xid: 900, RelationID: 16400, New: []pgoutput.Column{txt("1"), txt("n")}},
		&pgoutput.StreamStop{},
		&pgoutput.StreamAbort{Xid: 900, SubXid: 900},
	)
	if err != nil || len(c.units) != 0 || !a.Idle() {
		t.Fatalf("err %v units %d idle %v", err, len(c.units), a.Idle())
	}
}

// A transaction far larger than the memory bound spills, then is emitted
// as CHUNK units with dense positions; memory stays bounded.
func TestAssembleLargeTransactionSpillsAndChunks(t *testing.T) {
	var c captured
	a := NewAssembler(AssemblerOptions{SourceID: "src", MemoryBytesMax: 64 << 10, ChunkBytesMax: 32 << 10, SpillDir: t.TempDir()}, c.emit)
	msgs := []pgoutput.Message{&pgoutput.Begin{FinalLSN: 0x9000, Xid: 1}, ordersRel}
	const n = 5000
	for i := 0; i < n; i++ {
		msgs = append(msgs, &pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt(fmt.Sprint(i)), txt(strings.Repeat("x", 100))}})
	}
	msgs = append(msgs, &pgoutput.Commit{CommitLSN: 0x9000, EndLSN: 0x9100})
	if err := feed(t, a, msgs...); err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	if st.Spilled != 1 || st.ChunkedTxns != 1 {
		t.Fatalf("stats %+v: want one spilled, chunked transaction", st)
	}
	if st.MemoryPeak > 64<<10+4096 {
		t.Fatalf("memory peak %d exceeds the bound", st.MemoryPeak)
	}
	if len(c.units) < 2 || c.finals != 1 {
		t.Fatalf("%d units, %d finals", len(c.units), c.finals)
	}
	var seq uint64
	for i, u := range c.units {
		b := u.Boundary
		if b.Kind != pb.UnitKind_UNIT_KIND_CHUNK || b.ChunkIndex != uint32(i) || b.ChunkCount != uint32(len(c.units)) || b.TotalRows != n {
			t.Fatalf("chunk %d boundary %v", i, b)
		}
		for _, r := range u.Rows {
			if r.Seq != seq || string(r.NewTuple[0].Data) != fmt.Sprint(seq) {
				t.Fatalf("row order broken at %d", seq)
			}
			seq++
		}
	}
	if seq != n {
		t.Fatalf("%d rows emitted, want %d", seq, n)
	}
}

func TestSchemaDriftStopsBeforeRows(t *testing.T) {
	var c captured
	pins := memPins{}
	a := NewAssembler(AssemblerOptions{SourceID: "src", Pins: pins, InspectCommand: "trellara status --view diagnostics"}, c.emit)
	if err := feed(t, a, &pgoutput.Begin{FinalLSN: 0x10, Xid: 1}, ordersRel,
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("1"), txt("a")}},
		&pgoutput.Commit{CommitLSN: 0x10, EndLSN: 0x20}); err != nil {
		t.Fatal(err)
	}
	changed := *ordersRel
	changed.Columns = append(append([]pgoutput.RelationColumn(nil), ordersRel.Columns...), pgoutput.RelationColumn{Name: "extra", TypeOID: 23, TypeModifier: -1})
	err := feed(t, a, &pgoutput.Begin{FinalLSN: 0x30, Xid: 2}, &changed,
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("2"), txt("b"), txt("3")}})
	if err != nil {
		t.Fatalf("the drift stops capture at the commit, which gives it its LSN; got %v before", err)
	}
	// pgoutput sends every message but a commit with WAL position 0: the
	// drift's LSN is the commit's.
	err = feed(t, a, &pgoutput.Commit{CommitLSN: 0x30, EndLSN: 0x40})
	var drift *SchemaDriftError
	if !errors.As(err, &drift) || drift.Relation != "public.orders" || drift.Pinned == drift.Live {
		t.Fatalf("want schema drift, got %v", err)
	}
	if drift.LSN != 0x30 || drift.Xid != 2 || !strings.Contains(err.Error(), "LSN 0/30") {
		t.Fatalf("drift at LSN %x xid %d, want the commit LSN 0/30 of xid 2: %v", drift.LSN, drift.Xid, err)
	}
	if !strings.Contains(err.Error(), "trellara status") || len(c.units) != 1 {
		t.Fatalf("error %q, units %d", err, len(c.units))
	}
}

func TestProtocolViolations(t *testing.T) {
	a := NewAssembler(AssemblerOptions{SourceID: "src"}, (&captured{}).emit)
	if err := feed(t, a, ordersRel, &pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("1"), txt("a")}}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("change outside a transaction: %v", err)
	}
	a = NewAssembler(AssemblerOptions{SourceID: "src"}, (&captured{}).emit)
	if err := feed(t, a, &pgoutput.Begin{FinalLSN: 1, Xid: 1}, &pgoutput.Insert{RelationID: 1, New: []pgoutput.Column{txt("1")}}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("change before Relation: %v", err)
	}
}

// A compatible change: the first transaction under the new shape carries
// the DDL barrier (version 2); the pin moves only once that unit is
// durable. Before that, a new session (a crash) meets the change again and
// carries the barrier again; after it, nothing more is carried.
func TestBarrierPinMovesAfterPublish(t *testing.T) {
	pins, err := OpenPins(t.TempDir() + "/pins.json")
	if err != nil {
		t.Fatal(err)
	}
	opts := AssemblerOptions{SourceID: "src", Pins: pins,
		Policy: func(string) schemachange.Policy {
			return schemachange.Policy{Mode: schemachange.ModeStrict, Configured: true}
		},
		Catalog: func(string) (map[string]schemachange.Facts, error) {
			return map[string]schemachange.Facts{"extra": {TypeName: "integer"}}, nil
		}}
	// The propagation contract's capture phases, each with whether the
	// pin had moved when it was told.
	var phases []string
	var old uint64
	opts.OnBarrier = func(b Barrier, phase string) error {
		fp, _ := pins.Pinned(b.Relation)
		phases = append(phases, fmt.Sprintf("%s %s %s moved=%v", b.ID, b.Events[0].Kind, phase, fp != old))
		return nil
	}
	var c captured
	a := NewAssembler(opts, c.emit)
	if err := feed(t, a, &pgoutput.Begin{FinalLSN: 0x10, Xid: 1}, ordersRel,
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("1"), txt("a")}},
		&pgoutput.Commit{CommitLSN: 0x10, EndLSN: 0x20}); err != nil {
		t.Fatal(err)
	}
	old, _ = pins.Pinned("public.orders")
	changed := *ordersRel
	changed.Columns = append(append([]pgoutput.RelationColumn(nil), ordersRel.Columns...), pgoutput.RelationColumn{Name: "extra", TypeOID: 23, TypeModifier: -1})
	txn := func(a *Assembler, lsn uint64, id string) {
		t.Helper()
		if err := feed(t, a, &pgoutput.Begin{FinalLSN: pgoutput.LSN(lsn), Xid: 2}, &changed,
			&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt(id), txt("b"), txt("3")}},
			&pgoutput.Commit{CommitLSN: pgoutput.LSN(lsn), EndLSN: pgoutput.LSN(lsn + 0x10)}); err != nil {
			t.Fatal(err)
		}
	}
	barrier := func(what string, want bool) {
		t.Helper()
		u := c.units[len(c.units)-1]
		if got := envelope.IsBarrier(u); got != want {
			t.Fatalf("%s: barrier %v, want %v (%v)", what, got, want, u.DdlEvents)
		}
		if want && (u.ProtocolVersion != envelope.ProtocolVersionBarrier || u.DdlEvents[0].Kind != "add_nullable_column" ||
			u.DdlEvents[0].Column != "extra" || u.DdlEvents[0].ColumnType != "integer") {
			t.Fatalf("%s: version %d, events %v", what, u.ProtocolVersion, u.DdlEvents)
		}
	}
	txn(a, 0x30, "2")
	barrier("first transaction under the new shape", true)
	txn(a, 0x50, "3")
	barrier("second transaction, same session", false)
	if err := a.MovePins(0x30); err != nil { // durable up to before the barrier's end
		t.Fatal(err)
	}
	if fp, _ := pins.Pinned("public.orders"); fp != old || len(phases) != 0 {
		t.Fatalf("the pin moved (or a phase was told: %v) before the barrier was durable", phases)
	}
	// A crash before the barrier is durable: a new session emits it again.
	a = NewAssembler(opts, c.emit)
	txn(a, 0x30, "2")
	barrier("after a crash before the pin moved", true)
	if err := a.MovePins(0x40); err != nil {
		t.Fatal(err)
	}
	if fp, _ := pins.Pinned("public.orders"); fp == old {
		t.Fatal("the pin did not move once the barrier was durable")
	}
	if got := strings.Join(phases, "; "); got != "public.orders@0/30 add_nullable_column published moved=false; public.orders@0/30 add_nullable_column pin_moved moved=true" {
		t.Fatalf("barrier phases: %s", got)
	}
	if sh, ok := pins.PinnedShape("public.orders"); !ok || len(sh.Columns) != 3 {
		t.Fatalf("pinned shape %+v", sh)
	}
	a = NewAssembler(opts, c.emit)
	txn(a, 0x70, "4")
	barrier("after the pin moved", false)
}

// The memory bound counts what decoded rows really hold: rowHeapBytes is
// within a third of the heap the rows take (measured), where their encoded
// size is several times smaller.
func TestRowHeapBytesMatchesTheHeap(t *testing.T) {
	const n = 20000
	rel := RelationFromPgoutput(&pgoutput.Relation{RelationID: 1, Namespace: "public", Name: "t", Columns: make([]pgoutput.RelationColumn, 4)})
	// Built as the assembler builds them, from its slab.
	var sl slab
	mk := func(i int) *pb.Row {
		var cols []pgoutput.Column
		for _, s := range []string{fmt.Sprint(i), "status-new", fmt.Sprint(i * 7), "2026-12-01 10:00:00+00"} {
			cols = append(cols, txt(s))
		}
		vals, err := sl.values(cols, rel, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		r := sl.row()
		r.Op, r.NewTuple = pb.Op_OP_INSERT, vals
		return r
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rows := make([]*pb.Row, n)
	var estimate, encoded int64
	for i := range rows {
		rows[i] = mk(i)
		estimate += rowHeapBytes(rows[i])
		encoded += int64(proto.Size(rows[i]))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc) - int64(8*n) // minus the slice of pointers
	runtime.KeepAlive(rows)
	if ratio := float64(estimate) / float64(heap); ratio < 0.67 || ratio > 1.5 {
		t.Errorf("rowHeapBytes estimates %d bytes for rows holding %d (ratio %.2f); encoded size %d", estimate, heap, ratio, encoded)
	}
	t.Logf("%d rows: heap %d bytes, estimate %d, encoded %d", n, heap, estimate, encoded)
}
