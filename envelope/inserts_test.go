package envelope_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

func insertsEnvelope(rel *pb.Relation, rows []*pb.Row) *pb.Envelope {
	return &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: "src", CommitLsn: 0x1000, EndLsn: 0x1000,
		CommitTimeUnixMicros: 1_700_000_000_000_000, Relations: []*pb.Relation{rel}, Rows: rows,
		Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_SNAPSHOT, ChunkIndex: 3, SnapshotRelation: "public.t"}}
}

// TestInsertRowsEncodeAsEncode: a snapshot batch built with InsertRows is
// byte for byte what Encode writes for the same rows as pb.Row — values
// of every length class (empty, one-byte lengths, two-byte, a row past
// 16 KiB), NULLs, and a row refused by End for its value count, which
// leaves no trace — and decodes back to them.
func TestInsertRowsEncodeAsEncode(t *testing.T) {
	rel := &pb.Relation{Oid: 1, Schema: "public", Name: "t", ReplicaIdentity: 'd', Columns: []*pb.RelationColumn{
		{Name: "id", TypeOid: 23, Key: true}, {Name: "a", TypeOid: 25}, {Name: "b", TypeOid: 25}}}
	rng := rand.New(rand.NewPCG(1, 2))
	w := envelope.NewInsertRows(3)
	var want []*pb.Row
	for i := range 300 {
		if i == 7 {
			w.Begin()
			w.Text([]byte("only one"))
			if err := w.End(); err == nil || !strings.Contains(err.Error(), "has 1 values for 3 columns") {
				t.Fatalf("End of a short row: %v", err)
			}
		}
		w.Begin()
		row := &pb.Row{Seq: uint64(len(want)), Op: pb.Op_OP_INSERT}
		for c := range 3 {
			if c > 0 && rng.IntN(5) == 0 {
				w.Null()
				row.NewTuple = append(row.NewTuple, &pb.Value{Kind: pb.ValueKind_VALUE_KIND_NULL})
				continue
			}
			n := []int{0, 1, 0x7b, 0x7c, 0x80, 300, 0x3fff, 20000}[rng.IntN(8)]
			if c == 0 {
				n = rng.IntN(8)
			}
			data := bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, n)
			w.Text(data)
			row.NewTuple = append(row.NewTuple, &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: data})
		}
		if err := w.End(); err != nil {
			t.Fatal(err)
		}
		want = append(want, row)
	}
	if w.Rows() != len(want) {
		t.Fatalf("Rows() = %d, want %d", w.Rows(), len(want))
	}
	ref := insertsEnvelope(rel, want)
	envelope.Seal(ref)
	wantBytes, err := envelope.Encode(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := envelope.EncodeInserts(insertsEnvelope(rel, nil), w)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wantBytes) {
		t.Fatalf("EncodeInserts wrote %d bytes that differ from Encode's %d", len(got), len(wantBytes))
	}
	dec, err := envelope.Decode(got)
	if err != nil || len(dec.Rows) != len(want) || dec.RowCount != uint64(len(want)) {
		t.Fatalf("decode: %v (%d rows)", err, len(dec.GetRows()))
	}
	// Reset keeps nothing of the rows: an empty batch encodes as Encode's.
	w.Reset()
	empty := insertsEnvelope(rel, nil)
	envelope.Seal(empty)
	wantEmpty, _ := envelope.Encode(empty)
	if got, err := envelope.EncodeInserts(insertsEnvelope(rel, nil), w); err != nil || !bytes.Equal(got, wantEmpty) {
		t.Fatalf("after Reset: %v, bytes equal %v", err, bytes.Equal(got, wantEmpty))
	}
}

// TestEncodeInsertsRefuses: only a SNAPSHOT unit with one relation of the
// rows' width, no rows of its own and no open row is built this way.
func TestEncodeInsertsRefuses(t *testing.T) {
	rel := &pb.Relation{Oid: 1, Schema: "public", Name: "t", Columns: []*pb.RelationColumn{{Name: "id", TypeOid: 23}}}
	for name, tc := range map[string]struct {
		mod  func(e *pb.Envelope, w *envelope.InsertRows)
		want string
	}{
		"transaction": {func(e *pb.Envelope, _ *envelope.InsertRows) { e.Boundary.Kind = pb.UnitKind_UNIT_KIND_TRANSACTION }, "only SNAPSHOT batches"},
		"two columns": {func(e *pb.Envelope, _ *envelope.InsertRows) {
			e.Relations[0].Columns = append(e.Relations[0].Columns, &pb.RelationColumn{Name: "v"})
		}, "want one relation of 1 columns"},
		"own rows":     {func(e *pb.Envelope, _ *envelope.InsertRows) { e.Rows = []*pb.Row{{Op: pb.Op_OP_INSERT}} }, "no rows of the envelope's own"},
		"open row":     {func(_ *pb.Envelope, w *envelope.InsertRows) { w.Begin() }, "no open row"},
		"no source id": {func(e *pb.Envelope, _ *envelope.InsertRows) { e.SourceId = "" }, "source_id"},
	} {
		e, w := insertsEnvelope(&pb.Relation{Oid: rel.Oid, Schema: rel.Schema, Name: rel.Name, Columns: append([]*pb.RelationColumn(nil), rel.Columns...)}, nil), envelope.NewInsertRows(1)
		tc.mod(e, w)
		if _, err := envelope.EncodeInserts(e, w); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
	}
}
