package envelope_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// TestSealedRelationNeverStale: Encode copies the encoding Seal derived
// from a relation message while that message is unchanged. A relation
// changed in place — a column added, renamed, retyped, keyed, its OID, name
// or replica identity changed — must be encoded from what it holds now:
// sealed again, it encodes exactly as proto.Marshal does; not sealed again,
// its stale fingerprint is refused, never hidden by the old one.
func TestSealedRelationNeverStale(t *testing.T) {
	changes := []struct {
		name   string
		change func(r *pb.Relation)
	}{
		{"column added", func(r *pb.Relation) {
			r.Columns = append(r.Columns, &pb.RelationColumn{Name: "added", TypeOid: 25, TypeModifier: -1})
		}},
		{"column dropped", func(r *pb.Relation) { r.Columns = r.Columns[:len(r.Columns)-1] }},
		{"column dropped, another added", func(r *pb.Relation) {
			r.Columns[len(r.Columns)-1] = &pb.RelationColumn{Name: "added", TypeOid: 25, TypeModifier: -1}
		}},
		{"column renamed", func(r *pb.Relation) { r.Columns[1].Name = "renamed" }},
		{"column replaced", func(r *pb.Relation) {
			r.Columns[1] = &pb.RelationColumn{Name: "other", TypeOid: 20, TypeModifier: -1}
		}},
		{"column retyped", func(r *pb.Relation) { r.Columns[1].TypeOid = 1043 }},
		{"column modifier", func(r *pb.Relation) { r.Columns[1].TypeModifier = 68 }},
		{"column keyed", func(r *pb.Relation) { r.Columns[1].Key = true }},
		{"oid", func(r *pb.Relation) { r.Oid++ }},
		{"schema", func(r *pb.Relation) { r.Schema = "other" }},
		{"name", func(r *pb.Relation) { r.Name = "renamed" }},
		{"replica identity", func(r *pb.Relation) { r.ReplicaIdentity = 'f' }},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			e := goldenTxn()
			rel := e.Relations[0]
			envelope.Seal(e)
			if _, err := envelope.Encode(e); err != nil {
				t.Fatal(err)
			}
			if n := envelope.SealedRelations(e.Relations); n != len(e.Relations) {
				t.Fatalf("%d of %d relations sealed: the encoder would not use what Seal derived", n, len(e.Relations))
			}
			sealedFP := rel.Fingerprint
			c.change(rel)
			// The row follows the relation's columns.
			row := e.Rows[0]
			for len(row.NewTuple) < len(rel.Columns) {
				row.NewTuple = append(row.NewTuple, &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte("new")})
			}
			row.NewTuple = row.NewTuple[:len(rel.Columns)]

			// Not sealed again: the old fingerprint no longer matches the
			// relation (the OID is not part of it).
			if c.name != "oid" {
				if _, err := envelope.Encode(e); err == nil {
					t.Fatal("a relation changed after Seal encoded under its old fingerprint")
				}
			}
			envelope.Seal(e)
			if c.name != "oid" && rel.Fingerprint == sealedFP {
				t.Fatal("Seal kept the fingerprint of the relation before its change")
			}
			got, err := envelope.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			// Encode left the checksum in e: proto.Marshal writes it as the
			// same trailer.
			want, err := deterministic.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoded from the relation before its change\nproto %x\ngot   %x", want, got)
			}
			d, err := envelope.Decode(got)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(d.Relations[0], rel) {
				t.Fatalf("decoded relation %v, want %v", d.Relations[0], rel)
			}
		})
	}
}

// goldenTxn is a transaction with two relations, one row each.
func goldenTxn() *pb.Envelope {
	rel := func(oid uint32, name string) *pb.Relation {
		return &pb.Relation{Oid: oid, Schema: "public", Name: name, ReplicaIdentity: 'd', Columns: []*pb.RelationColumn{
			{Name: "id", TypeOid: 23, TypeModifier: -1, Key: true}, {Name: "note", TypeOid: 25, TypeModifier: -1},
			{Name: "filler", TypeOid: 1042, TypeModifier: 88}}}
	}
	v := func(s string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(s)} }
	return &pb.Envelope{SourceId: "src", Xid: 7, CommitLsn: 0x1000, EndLsn: 0x1010,
		Boundary:  &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION},
		Relations: []*pb.Relation{rel(16400, "orders"), rel(16401, "lines")},
		Rows: []*pb.Row{{Seq: 0, Op: pb.Op_OP_INSERT, RelationIndex: 0, NewTuple: []*pb.Value{v("1"), v("a"), v("x")}},
			{Seq: 1, Op: pb.Op_OP_INSERT, RelationIndex: 1, NewTuple: []*pb.Value{v("2"), v("b"), v("y")}}}}
}

// TestSealedRelationOwnFingerprint: a sealed relation whose fingerprint
// field was changed since (metadata unchanged) is written with the
// fingerprint it holds, as proto.Marshal writes it, not the sealed one.
func TestSealedRelationOwnFingerprint(t *testing.T) {
	e := goldenTxn()
	envelope.Seal(e)
	e.Relations[1].Fingerprint ^= 1
	sameAsProto(t, "relation with a changed fingerprint field", e)
}

// TestSealedRelationsConcurrent: producers on several goroutines seal and
// encode their own envelopes at once (run with -race), each encoding as
// proto.Marshal does.
func TestSealedRelationsConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				e := goldenTxn()
				e.Relations[1].Columns[2].Name = fmt.Sprintf("c%d_%d", g, i)
				envelope.Seal(e)
				got, err := envelope.Encode(e)
				if err != nil {
					errs <- err
					return
				}
				if want, _ := deterministic.Marshal(e); !bytes.Equal(got, want) {
					errs <- fmt.Errorf("goroutine %d envelope %d: encoding differs from proto.Marshal", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestSealedRelationsMoreThanKept: more relations are sealed than entries
// are kept; those whose entries were dropped encode afresh, and every
// envelope, sealed first or last, encodes as proto.Marshal does.
func TestSealedRelationsMoreThanKept(t *testing.T) {
	envs := make([]*pb.Envelope, 10000)
	for i := range envs {
		e := goldenTxn()
		e.Relations[0].Name = fmt.Sprintf("t%d", i)
		envelope.Seal(e)
		envs[i] = e
	}
	for i, e := range envs {
		got, err := envelope.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := deterministic.Marshal(e); !bytes.Equal(got, want) {
			t.Fatalf("envelope %d encodes unlike proto.Marshal", i)
		}
	}
}
