package envelope_test

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/envelope/envelopetest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func seed(t testing.TB) uint64 {
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("TRELLARA_SEED"); v != "" {
		var err error
		if s, err = parseUint(v); err != nil {
			t.Fatalf("TRELLARA_SEED: %v", err)
		}
	}
	t.Logf("seed %d (rerun with TRELLARA_SEED=%d)", s, s)
	return s
}

func parseUint(s string) (uint64, error) {
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not a decimal number: " + s)
		}
		v = v*10 + uint64(c-'0')
	}
	return v, nil
}

func TestRoundTripRandom(t *testing.T) {
	s := seed(t)
	rng := rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	lsn := uint64(0x16B3748)
	for i := 0; i < 10000; i++ {
		lsn += 1 + uint64(rng.IntN(4096))
		want := envelopetest.Random(rng, "store_001", lsn)
		b, err := envelope.Encode(want)
		if err != nil {
			t.Fatalf("txn %d: encode: %v", i, err)
		}
		got, err := envelope.Decode(b)
		if err != nil {
			t.Fatalf("txn %d: decode: %v", i, err)
		}
		if !proto.Equal(want, got) {
			t.Fatalf("txn %d: round trip changed the envelope\nwant %v\ngot  %v", i, want, got)
		}
		// Encoding is deterministic: the same envelope, the same bytes.
		b2, err := envelope.Encode(got)
		if err != nil || string(b) != string(b2) {
			t.Fatalf("txn %d: re-encode differs (err %v)", i, err)
		}
	}
}

func TestEveryBitFlipRejected(t *testing.T) {
	s := seed(t)
	rng := rand.New(rand.NewPCG(s, 1))
	n := 60
	if testing.Short() {
		n = 20
	}
	for i := 0; i < n; i++ {
		b, err := envelope.Encode(envelopetest.Random(rng, "store_001", 0x1000+uint64(i)))
		if err != nil {
			t.Fatal(err)
		}
		for bit := 0; bit < len(b)*8; bit++ {
			c := append([]byte(nil), b...)
			c[bit/8] ^= 1 << (bit % 8)
			if _, err := envelope.Decode(c); err == nil {
				t.Fatalf("envelope %d: flipping bit %d (byte %d of %d) was not detected", i, bit, bit/8, len(b))
			}
		}
	}
}

func TestTruncationRejected(t *testing.T) {
	b, err := envelope.Encode(golden())
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(b); n++ {
		if _, err := envelope.Decode(b[:n]); err == nil {
			t.Fatalf("truncated to %d of %d bytes: accepted", n, len(b))
		}
	}
}

// golden is a fixed envelope exercising every field and value kind.
func golden() *pb.Envelope {
	e := &pb.Envelope{
		ProtocolVersion:      1,
		SourceId:             "store_001",
		Xid:                  7431,
		CommitLsn:            0x16B3748,
		EndLsn:               0x16B3778,
		CommitTimeUnixMicros: 1_764_547_200_000_000,
		Boundary:             &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION, TotalRows: 4},
		Relations: []*pb.Relation{{
			Oid: 16385, Schema: "public", Name: "orders", ReplicaIdentity: 'd',
			Columns: []*pb.RelationColumn{
				{Name: "id", TypeOid: 20, TypeModifier: -1, Key: true},
				{Name: "note", TypeOid: 25, TypeModifier: -1},
				{Name: "total", TypeOid: 1700, TypeModifier: 655366},
			},
		}},
		Rows: []*pb.Row{
			{Seq: 0, Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{text("1"), {Kind: pb.ValueKind_VALUE_KIND_NULL}, text("10.50")}},
			{Seq: 1, Op: pb.Op_OP_UPDATE, NewTuple: []*pb.Value{text("1"), {Kind: pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST}, text("11.00")}},
			{Seq: 2, Op: pb.Op_OP_DELETE, OldKind: pb.OldTuple_OLD_TUPLE_KEY,
				OldTuple: []*pb.Value{text("2"), {Kind: pb.ValueKind_VALUE_KIND_NULL}, {Kind: pb.ValueKind_VALUE_KIND_NULL}}},
			{Seq: 3, Op: pb.Op_OP_MESSAGE, MessagePrefix: "app", MessageContent: []byte("hello")},
		},
		DdlEvents: []*pb.DDLEvent{{Seq: 0, Kind: "add_nullable_column", Relation: "public.orders", OldFingerprint: 1, NewFingerprint: 2}},
	}
	envelope.Seal(e)
	return e
}

func text(s string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(s)} }

// TestGoldenBytes pins the wire format: a change to the IDL, the checksum
// framing or the fingerprint layout changes these bytes and fails here.
func TestGoldenBytes(t *testing.T) {
	b, err := envelope.Encode(golden())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden.hex")
	if *update {
		if err := os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got := hex.EncodeToString(b); got != strings.TrimSpace(string(want)) {
		t.Fatalf("wire format changed:\n got %s\nwant %s", got, want)
	}
	// The relation fingerprint is part of the contract too (docs/ENVELOPE.md).
	if got, want := envelope.RelationFingerprint(golden().Relations[0]), uint64(0x38e32b2cecf3f5e6); got != want {
		t.Fatalf("relation fingerprint layout changed: got %#x, want %#x", got, want)
	}
}

func TestValidateRejects(t *testing.T) {
	cases := []struct {
		name  string
		field string
		mut   func(e *pb.Envelope)
	}{
		{"future version", "protocol_version", func(e *pb.Envelope) { e.ProtocolVersion = 2 }},
		{"no source", "source_id", func(e *pb.Envelope) { e.SourceId = "" }},
		{"no boundary", "boundary.kind", func(e *pb.Envelope) { e.Boundary = nil }},
		{"zero commit lsn", "commit_lsn", func(e *pb.Envelope) { e.CommitLsn = 0 }},
		{"end before commit", "end_lsn", func(e *pb.Envelope) { e.EndLsn = e.CommitLsn - 1 }},
		{"row count lies", "row_count", func(e *pb.Envelope) { e.RowCount = 9 }},
		{"gap in rows", "rows.seq", func(e *pb.Envelope) { e.Rows[2].Seq = 5 }},
		{"bad relation index", "rows.relation_index", func(e *pb.Envelope) { e.Rows[0].RelationIndex = 3 }},
		{"short tuple", "rows.new_tuple", func(e *pb.Envelope) { e.Rows[0].NewTuple = e.Rows[0].NewTuple[:2] }},
		{"toast in insert", "rows.new_tuple", func(e *pb.Envelope) {
			e.Rows[0].NewTuple[1] = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST}
		}},
		{"null with data", "rows.new_tuple", func(e *pb.Envelope) { e.Rows[0].NewTuple[1].Data = []byte("x") }},
		{"unset value kind", "rows.new_tuple", func(e *pb.Envelope) { e.Rows[0].NewTuple[0].Kind = 0 }},
		{"delete without key", "rows.old_kind", func(e *pb.Envelope) { e.Rows[2].OldKind = pb.OldTuple_OLD_TUPLE_NONE }},
		{"stale fingerprint", "relations", func(e *pb.Envelope) { e.Relations[0].Columns[1].TypeOid = 1043 }},
		{"schema fingerprint", "schema_fingerprint", func(e *pb.Envelope) { e.SchemaFingerprint++ }},
		{"chunk out of range", "boundary", func(e *pb.Envelope) {
			e.Boundary = &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_CHUNK, ChunkIndex: 2, ChunkCount: 2, TotalRows: 4}
		}},
		{"transaction chunked", "boundary", func(e *pb.Envelope) { e.Boundary.ChunkCount = 3 }},
		{"snapshot without relation", "boundary.snapshot_relation", func(e *pb.Envelope) {
			e.Boundary = &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_SNAPSHOT}
		}},
		{"ddl out of sequence", "ddl_events", func(e *pb.Envelope) { e.DdlEvents[0].Seq = 1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := golden()
			c.mut(e)
			_, err := envelope.Encode(e)
			var inv *envelope.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("Encode accepted it (err %v)", err)
			}
			if inv.Field != c.field {
				t.Fatalf("error names field %q, want %q: %v", inv.Field, c.field, err)
			}
			if !strings.Contains(err.Error(), "commit LSN") || (c.field != "source_id" && !strings.Contains(err.Error(), "store_001")) {
				t.Fatalf("error does not identify the envelope: %v", err)
			}
		})
	}
}

func TestChunkBoundary(t *testing.T) {
	e := golden()
	e.Boundary = &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_CHUNK, ChunkIndex: 1, ChunkCount: 2, TotalRows: 10, Partition: 3}
	e.Rows = []*pb.Row{e.Rows[0], e.Rows[1]}
	e.Rows[0].Seq, e.Rows[1].Seq = 4, 7
	envelope.Seal(e)
	b, err := envelope.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envelope.Decode(b); err != nil {
		t.Fatal(err)
	}
	e.Rows[1].Seq = 4
	if _, err := envelope.Encode(e); err == nil {
		t.Fatal("duplicate chunk row position accepted")
	}
}

func TestChecksumErrorsAreTyped(t *testing.T) {
	b, _ := envelope.Encode(golden())
	c := append([]byte(nil), b...)
	c[3] ^= 0x10
	if _, err := envelope.Decode(c); !errors.Is(err, envelope.ErrChecksum) {
		t.Fatalf("want ErrChecksum, got %v", err)
	}
	if _, err := envelope.Decode([]byte("junk")); !errors.Is(err, envelope.ErrTrailer) {
		t.Fatalf("want ErrTrailer, got %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := envelope.Encode(golden())
	f.Add(b)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 8; i++ {
		b, _ := envelope.Encode(envelopetest.Random(rng, "s", 100+uint64(i)))
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x69, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := envelope.Decode(data)
		if err != nil {
			return
		}
		checkReencodes(t, e, data)
	})
}

// FuzzDecodeResealed: a mutation of FuzzDecode's input almost never keeps
// the checksum right, so almost none reaches the protobuf parser or
// Validate. Here the input is the checksummed prefix (fields 1..12) and
// the trailer is computed after mutating: every mutation reaches them.
func FuzzDecodeResealed(f *testing.F) {
	unsealed := func(b []byte) []byte { return b[:len(b)-9] } // the trailer cut off
	b, _ := envelope.Encode(golden())
	f.Add(unsealed(b))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 8; i++ {
		b, _ := envelope.Encode(envelopetest.Random(rng, "s", 100+uint64(i)))
		f.Add(unsealed(b))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, prefix []byte) {
		data := append(append([]byte(nil), prefix...), 0x69)
		data = binary.LittleEndian.AppendUint64(data, xxh3.Hash(prefix))
		e, err := envelope.Decode(data)
		if errors.Is(err, envelope.ErrChecksum) || errors.Is(err, envelope.ErrTrailer) {
			t.Fatalf("a correctly sealed envelope was refused as %v", err)
		}
		if err != nil {
			return
		}
		checkReencodes(t, e, data)
	})
}

// checkReencodes: whatever decodes must be valid and re-encode to the same
// bytes, or, since protobuf admits non-canonical encodings of the same
// message, to bytes that decode to an equal message.
func checkReencodes(t *testing.T, e *pb.Envelope, data []byte) {
	t.Helper()
	out, err := envelope.Encode(e)
	if err != nil {
		t.Fatalf("decoded envelope does not re-encode: %v", err)
	}
	if string(out) != string(data) {
		e2, err := envelope.Decode(out)
		if err != nil || !proto.Equal(e, e2) {
			t.Fatalf("re-encoding changed the envelope: %v", err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	e := envelopetest.Random(rng, "store_001", 0x1000)
	buf, _ := envelope.Encode(e)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var dst []byte
	for b.Loop() {
		var err error
		if dst, err = envelope.AppendEncode(dst[:0], e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf, _ := envelope.Encode(envelopetest.Random(rng, "store_001", 0x1000))
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var e pb.Envelope
	for b.Loop() {
		if err := envelope.DecodeInto(buf, &e); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSnapshotUnits(t *testing.T) {
	e := golden()
	e.Rows = e.Rows[:1]
	e.DdlEvents = nil
	e.Boundary = &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_SNAPSHOT, ChunkIndex: 7, SnapshotRelation: "public.orders"}
	envelope.Seal(e)
	if _, err := envelope.Encode(e); err != nil {
		t.Fatalf("snapshot batch 7 refused: %v", err)
	}
	end := golden()
	end.Rows, end.DdlEvents = nil, nil
	end.Boundary = &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_SNAPSHOT_END, ChunkIndex: 8, SnapshotRelation: "public.orders"}
	envelope.Seal(end)
	if _, err := envelope.Encode(end); err != nil {
		t.Fatalf("snapshot end refused: %v", err)
	}
	e.Rows = golden().Rows[:2] // an UPDATE inside a snapshot
	envelope.Seal(e)
	if _, err := envelope.Encode(e); err == nil {
		t.Fatal("a snapshot unit holding an update was accepted")
	}
}

// A DDL barrier is version 2, and only a barrier is: Seal stamps it,
// Validate refuses a barrier under version 1, a version 2 unit without one,
// a barrier event without its column type, and a rename that does not name
// two columns; Decode reads both versions and the renamed column's old name.
func TestBarrierVersion(t *testing.T) {
	plain := golden()
	envelope.Seal(plain)
	if plain.ProtocolVersion != envelope.ProtocolVersion {
		t.Fatalf("a unit without a barrier is version %d", plain.ProtocolVersion)
	}
	b := golden()
	b.ProtocolVersion = 0
	b.DdlEvents = []*pb.DDLEvent{{Seq: 0, Kind: "add_nullable_column", Relation: "public.orders", Column: "note", ColumnType: "text"}}
	envelope.Seal(b)
	if b.ProtocolVersion != envelope.ProtocolVersionBarrier {
		t.Fatalf("a barrier is version %d", b.ProtocolVersion)
	}
	wire, err := envelope.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := envelope.Decode(wire); err != nil || got.DdlEvents[0].ColumnType != "text" {
		t.Fatalf("decode a barrier: %v", err)
	}
	rename := proto.Clone(b).(*pb.Envelope)
	rename.DdlEvents[0].Kind, rename.DdlEvents[0].OldColumn, rename.DdlEvents[0].Column = "rename_column", "note", "remark"
	if wire, err := envelope.Encode(rename); err != nil {
		t.Fatal(err)
	} else if got, err := envelope.Decode(wire); err != nil || got.DdlEvents[0].OldColumn != "note" {
		t.Fatalf("decode a rename barrier: %v", err)
	}
	for name, mut := range map[string]func(*pb.Envelope){
		"barrier as version 1":   func(e *pb.Envelope) { e.ProtocolVersion = envelope.ProtocolVersion },
		"no column type":         func(e *pb.Envelope) { e.DdlEvents[0].ColumnType = "" },
		"version 2 without one":  func(e *pb.Envelope) { e.DdlEvents[0].Column = "" },
		"an unknown version (3)": func(e *pb.Envelope) { e.ProtocolVersion = 3 },
		"renamed to itself":      func(e *pb.Envelope) { e.DdlEvents[0].OldColumn = e.DdlEvents[0].Column },
		"renamed to no column": func(e *pb.Envelope) {
			e.ProtocolVersion = envelope.ProtocolVersion
			e.DdlEvents[0].OldColumn, e.DdlEvents[0].Column = "note", ""
		},
	} {
		e := proto.Clone(b).(*pb.Envelope)
		mut(e)
		if err := envelope.Validate(e); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
