package manifest

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/envelope/envelopetest"
)

// TestSplitAssemble: a unit split over the data partitions, its chunks and
// manifest encoded and decoded, is rebuilt byte for byte whatever order
// the chunks come in; a missing chunk or a changed row is refused.
func TestSplitAssemble(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		payload, err := envelope.Encode(envelopetest.Random(rng, "store_001", 0x1000+uint64(i)*0x100))
		if err != nil {
			t.Fatal(err)
		}
		e, rows, err := Split(payload, 4)
		if err != nil {
			t.Fatal(err)
		}
		m := &Manifest{Skeleton: proto.Clone(e).(*pb.Envelope), Checksum: e.GetChecksum(), From: []int64{0, 0, 0, 0}}
		m.Skeleton.Rows, m.Skeleton.Checksum = nil, 0
		var chunks [][]*pb.Row
		for p := int32(4); p >= 1; p-- { // the reverse of partition order
			if len(rows[p]) == 0 {
				continue
			}
			v, err := EncodeChunk(rows[p])
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeChunk(v)
			if err != nil {
				t.Fatal(err)
			}
			chunks = append(chunks, got)
			m.Chunks = append(m.Chunks, ChunkRef{Partition: p, Offset: int64(i), Rows: len(got)})
		}
		mv, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := Decode(mv)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Assemble(m2, chunks)
		if err != nil || !bytes.Equal(b, payload) {
			t.Fatalf("unit %d: rebuilt equal %v, %v", i, bytes.Equal(b, payload), err)
		}
		if len(chunks) > 1 {
			if _, err := Assemble(m2, chunks[1:]); err == nil {
				t.Fatalf("unit %d rebuilt without one of its chunks", i)
			}
		}
		if len(chunks) > 0 && len(chunks[0]) > 0 {
			chunks[0][0].Op = chunks[0][0].Op%5 + 1 // another operation
			if _, err := Assemble(m2, chunks); err == nil {
				t.Fatalf("unit %d rebuilt with a changed row", i)
			}
		}
	}
}

// TestPartitionOfKey: a key's rows share a partition whatever else they
// carry; keys spread.
func TestPartitionOfKey(t *testing.T) {
	rel := &pb.Relation{Schema: "public", Name: "sales", Columns: []*pb.RelationColumn{{Name: "id", Key: true}, {Name: "v"}}}
	row := func(op pb.Op, id, v string) *pb.Row {
		t := []*pb.Value{{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(id)}, {Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(v)}}
		if op == pb.Op_OP_DELETE {
			return &pb.Row{Op: op, OldKind: pb.OldTuple_OLD_TUPLE_KEY, OldTuple: t}
		}
		return &pb.Row{Op: op, NewTuple: t}
	}
	used := map[int32]bool{}
	for i := range 64 {
		id := string(rune('a'+i%26)) + string(rune('0'+i/26))
		p := PartitionOf(rel, row(pb.Op_OP_INSERT, id, "x"), 8)
		if p < 1 || p > 8 {
			t.Fatalf("partition %d outside 1..8", p)
		}
		if q := PartitionOf(rel, row(pb.Op_OP_UPDATE, id, "y"), 8); q != p {
			t.Fatalf("update of %s went to %d, its insert to %d", id, q, p)
		}
		if q := PartitionOf(rel, row(pb.Op_OP_DELETE, id, ""), 8); q != p {
			t.Fatalf("delete of %s went to %d, its insert to %d", id, q, p)
		}
		used[p] = true
	}
	if len(used) < 6 {
		t.Fatalf("64 keys used %d of 8 partitions", len(used))
	}
}
