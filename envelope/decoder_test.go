package envelope_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/envelope/envelopetest"
)

// sameDecode fails t unless the Decoder and Decode agree on data: both
// refuse it with the same message, or both return equal envelopes.
func sameDecode(t *testing.T, d *envelope.Decoder, data []byte) *pb.Envelope {
	t.Helper()
	want, werr := envelope.Decode(data)
	got, gerr := d.Decode(append([]byte(nil), data...))
	switch {
	case werr != nil || gerr != nil:
		if werr == nil || gerr == nil || werr.Error() != gerr.Error() {
			t.Fatalf("Decode: %v, Decoder.Decode: %v", werr, gerr)
		}
		return nil
	case !proto.Equal(want, got):
		t.Fatalf("Decoder.Decode differs from Decode:\n got %v\nwant %v", got, want)
	}
	return got
}

// seal appends the checksum trailer to an envelope's fields.
func seal(prefix []byte) []byte {
	data := append(append([]byte(nil), prefix...), 0x69)
	return binary.LittleEndian.AppendUint64(data, xxh3.Hash(prefix))
}

// TestDecoderMatchesDecode: every envelope Encode writes — random ones,
// the golden one, a barrier, snapshot and chunk units — is parsed by the
// hand parser (not its fallback) into a message equal to Decode's.
func TestDecoderMatchesDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 3))
	var d envelope.Decoder
	var envs []*pb.Envelope
	for i := range 300 {
		envs = append(envs, envelopetest.Random(rng, "store_001", 0x1000+uint64(i)))
	}
	g := golden()
	barrier := golden()
	barrier.DdlEvents = []*pb.DDLEvent{{Seq: 0, Kind: "add_nullable_column", Relation: "public.orders", Column: "note", ColumnType: "text"}}
	envelope.Seal(barrier)
	chunk := golden()
	chunk.Boundary = &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_CHUNK, ChunkIndex: 1, ChunkCount: 3, TotalRows: 12, Partition: 0}
	envs = append(envs, g, barrier, chunk, tpcbEnvelope())
	for i, e := range envs {
		b, err := envelope.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if !d.ParsedByHand(b) {
			t.Fatalf("envelope %d: the hand parser left a canonical encoding to proto.Unmarshal", i)
		}
		if sameDecode(t, &d, b) == nil {
			t.Fatalf("envelope %d: refused", i)
		}
	}
}

// TestDecoderFallsBack: encodings the hand parser does not expect are
// still decoded exactly as Decode does them (or refused with its error).
func TestDecoderFallsBack(t *testing.T) {
	b, err := envelope.Encode(golden())
	if err != nil {
		t.Fatal(err)
	}
	prefix := b[:len(b)-9]
	boundary, _ := proto.Marshal(&pb.Boundary{ChunkIndex: 5})
	cases := map[string][]byte{
		// An unknown field: kept by proto.Unmarshal as unknown bytes.
		"unknown field": protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), prefix...), 99, protowire.VarintType), 1),
		// A second boundary merges into the first.
		"second boundary": protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), prefix...), 10, protowire.BytesType), boundary),
		// A string that is not UTF-8.
		"invalid utf-8": protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), prefix...), 2, protowire.BytesType), []byte{0xff, 0xfe}),
		// A message field sent as a varint.
		"wrong wire type": protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), prefix...), 8, protowire.VarintType), 1),
		"truncated":       prefix[:len(prefix)-3],
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			var d envelope.Decoder
			data := seal(p)
			if d.ParsedByHand(data) {
				t.Fatalf("the hand parser accepted an encoding it must leave to proto.Unmarshal")
			}
			sameDecode(t, &d, data)
		})
	}
	var d envelope.Decoder
	if _, err := d.Decode([]byte("junk")); !errors.Is(err, envelope.ErrTrailer) {
		t.Fatalf("want ErrTrailer, got %v", err)
	}
	bad := append([]byte(nil), b...)
	bad[3] ^= 0x10
	if _, err := d.Decode(bad); !errors.Is(err, envelope.ErrChecksum) {
		t.Fatalf("want ErrChecksum, got %v", err)
	}
}

// TestDecoderInternsRelations: consecutive envelopes with the same
// relation share one decoded relation; a changed relation is its own.
func TestDecoderInternsRelations(t *testing.T) {
	var d envelope.Decoder
	a, _ := envelope.Encode(golden())
	e2 := golden()
	e2.CommitLsn, e2.EndLsn = e2.CommitLsn+100, e2.EndLsn+100
	b, _ := envelope.Encode(e2)
	e3 := golden()
	e3.Relations[0].Columns[1].Name = "memo"
	envelope.Seal(e3)
	c, _ := envelope.Encode(e3)
	x, y, z := sameDecode(t, &d, a), sameDecode(t, &d, b), sameDecode(t, &d, c)
	if x.Relations[0] != y.Relations[0] {
		t.Fatal("the same relation was decoded twice")
	}
	if z.Relations[0] == x.Relations[0] || z.Relations[0].Columns[1].Name != "memo" {
		t.Fatal("a changed relation was served from the cache")
	}
}

// FuzzDecoderMatchesDecode: whatever the fields (resealed, so every
// mutation reaches the parsers), the Decoder and Decode agree.
func FuzzDecoderMatchesDecode(f *testing.F) {
	b, _ := envelope.Encode(golden())
	f.Add(b[:len(b)-9])
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 8; i++ {
		b, _ := envelope.Encode(envelopetest.Random(rng, "s", 100+uint64(i)))
		f.Add(b[:len(b)-9])
	}
	f.Fuzz(func(t *testing.T, prefix []byte) {
		var d envelope.Decoder
		sameDecode(t, &d, seal(prefix))
	})
}

func BenchmarkDecoder(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf, _ := envelope.Encode(envelopetest.Random(rng, "store_001", 0x1000))
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var d envelope.Decoder
	for b.Loop() {
		if _, err := d.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// tpcbEnvelope is one pgbench TPC-B transaction as the relay emits it:
// three updates (accounts, tellers, branches) and one history insert,
// four relations.
func tpcbEnvelope() *pb.Envelope {
	col := func(name string, oid uint32, key bool) *pb.RelationColumn {
		return &pb.RelationColumn{Name: name, TypeOid: oid, TypeModifier: -1, Key: key}
	}
	acct := func(name string) *pb.Relation {
		return &pb.Relation{Oid: 16400, Schema: "public", Name: name, ReplicaIdentity: 'd',
			Columns: []*pb.RelationColumn{col("id", 23, true), col("balance", 20, false), col("filler", 25, false)}}
	}
	hist := &pb.Relation{Oid: 16410, Schema: "public", Name: "history", ReplicaIdentity: 'd',
		Columns: []*pb.RelationColumn{col("id", 20, true), col("aid", 23, false), col("tid", 23, false), col("bid", 23, false),
			col("delta", 23, false), col("mtime", 1184, false), col("filler", 25, false)}}
	upd := func(rel uint32, id string) *pb.Row {
		return &pb.Row{Op: pb.Op_OP_UPDATE, RelationIndex: rel,
			NewTuple: []*pb.Value{text(id), text("-4711"), text("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")}}
	}
	e := &pb.Envelope{ProtocolVersion: 1, SourceId: "bench", Xid: 1234, CommitLsn: 0x1000000, EndLsn: 0x1000100,
		CommitTimeUnixMicros: 1_764_547_200_000_000, Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION},
		Relations: []*pb.Relation{acct("accounts"), acct("tellers"), acct("branches"), hist},
		Rows: []*pb.Row{upd(0, "123456"), upd(1, "42"), upd(2, "7"),
			{Op: pb.Op_OP_INSERT, RelationIndex: 3, NewTuple: []*pb.Value{text("99999"), text("123456"), text("42"), text("7"),
				text("-4711"), text("2026-12-01 10:00:00.123456+00"), {Kind: pb.ValueKind_VALUE_KIND_NULL}}}}}
	for i, r := range e.Rows {
		r.Seq = uint64(i)
	}
	envelope.Seal(e)
	return e
}

// BenchmarkDecodeTPCB and BenchmarkDecoderTPCB decode one TPC-B
// transaction's envelope, with Decode and with a Decoder.
func BenchmarkDecodeTPCB(b *testing.B) {
	buf, _ := envelope.Encode(tpcbEnvelope())
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecoderTPCB(b *testing.B) {
	buf, _ := envelope.Encode(tpcbEnvelope())
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var d envelope.Decoder
	for b.Loop() {
		if _, err := d.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecoderRefusesAWrongFingerprintEveryTime: the Decoder hashes an
// interned relation's metadata once, and still refuses a relation whose
// stored fingerprint does not match it, on every envelope that carries
// it, while the correct relation keeps decoding.
func TestDecoderRefusesAWrongFingerprintEveryTime(t *testing.T) {
	var d envelope.Decoder
	good, err := envelope.Encode(golden())
	if err != nil {
		t.Fatal(err)
	}
	bad := golden()
	bad.Relations[0].Fingerprint ^= 1
	prefix, err := proto.MarshalOptions{Deterministic: true}.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	badData := seal(prefix)
	for i := range 3 {
		if sameDecode(t, &d, good) == nil {
			t.Fatalf("round %d: the correct envelope was refused", i)
		}
		_, err := d.Decode(append([]byte(nil), badData...))
		var inv *envelope.InvalidError
		if !errors.As(err, &inv) || inv.Field != "relations" {
			t.Fatalf("round %d: a relation with a wrong fingerprint decoded: %v", i, err)
		}
		sameDecode(t, &d, badData)
	}
}

// TestDecoderEnvelopesSurviveLaterDecodes: the Decoder carves the
// messages of many envelopes from shared slabs; an envelope decoded
// earlier must be unchanged however many envelopes are decoded after it
// (a slab is never handed out twice).
func TestDecoderEnvelopesSurviveLaterDecodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 5))
	var d envelope.Decoder
	encode := func(e *pb.Envelope) []byte {
		b, err := envelope.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var kept, want []*pb.Envelope
	for i := range 20 {
		e := tpcbEnvelope()
		if i%2 == 1 {
			e = envelopetest.Random(rng, "store_001", 0x1000+uint64(i))
		}
		got, err := d.Decode(encode(e))
		if err != nil {
			t.Fatal(err)
		}
		kept, want = append(kept, got), append(want, proto.Clone(got).(*pb.Envelope))
	}
	tpcb := encode(tpcbEnvelope())
	for i := range 5000 {
		b := append([]byte(nil), tpcb...)
		if i%10 == 0 {
			b = encode(envelopetest.Random(rng, "store_001", 0x2000+uint64(i)))
		}
		if _, err := d.Decode(b); err != nil {
			t.Fatal(err)
		}
	}
	for i := range kept {
		if !proto.Equal(kept[i], want[i]) {
			t.Fatalf("envelope %d changed after later decodes:\n got %v\nwant %v", i, kept[i], want[i])
		}
	}
}
