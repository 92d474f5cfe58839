package envelope_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/zeebo/xxh3"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/envelope/envelopetest"
)

var deterministic = proto.MarshalOptions{Deterministic: true}

// sameAsProto fails t unless the envelope encoder writes exactly what
// deterministic proto.Marshal writes for e (or both refuse it), and the
// hand encoder, where it applies, writes the same bytes; likewise for
// every row through AppendRow.
func sameAsProto(t *testing.T, what string, e *pb.Envelope) {
	t.Helper()
	want, wantErr := deterministic.Marshal(e)
	prefix := []byte("prefix")
	got, gotErr := envelope.AppendEnvelopeWire(slices.Clone(prefix), e)
	if (wantErr != nil) != (gotErr != nil) {
		t.Fatalf("%s: proto.Marshal error %v, encoder error %v", what, wantErr, gotErr)
	}
	if wantErr == nil && (!bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want)) {
		t.Fatalf("%s: encoder and proto.Marshal differ\nproto %x\nhand  %x\nmessage %v", what, want, got[len(prefix):], e)
	}
	if envelope.EnvelopeEncodable(e) {
		if wantErr != nil {
			t.Fatalf("%s: the hand encoder takes an envelope proto.Marshal refuses: %v", what, wantErr)
		}
		if hand := envelope.AppendEnvelopeHand(nil, e); !bytes.Equal(hand, want) {
			t.Fatalf("%s: hand encoder and proto.Marshal differ\nproto %x\nhand  %x\nmessage %v", what, want, hand, e)
		}
		if hand := envelope.AppendEnvelopeHandUnsealed(nil, e); !bytes.Equal(hand, want) {
			t.Fatalf("%s: hand encoder without sealed relations and proto.Marshal differ\nproto %x\nhand  %x\nmessage %v", what, want, hand, e)
		}
	}
	for i, r := range e.GetRows() {
		want, wantErr := proto.MarshalOptions{}.Marshal(r)
		got, gotErr := envelope.AppendRow(slices.Clone(prefix), r)
		if (wantErr != nil) != (gotErr != nil) {
			t.Fatalf("%s row %d: proto.Marshal error %v, AppendRow error %v", what, i, wantErr, gotErr)
		}
		if wantErr == nil && (!bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want)) {
			t.Fatalf("%s row %d: AppendRow and proto.Marshal differ\nproto %x\nhand  %x", what, i, want, got[len(prefix):])
		}
		if size, want := envelope.SizeRow(r), proto.Size(r); size != want {
			t.Fatalf("%s row %d: SizeRow says %d bytes, proto.Size %d", what, i, size, want)
		}
	}
}

// TestFastEncoderMatchesProto: random envelopes of every shape — the valid
// ones the capture path writes and wild ones that set every field of every
// message to edge values (absent, empty, zero, negative, maximal, undefined
// enum numbers, nil list elements, invalid UTF-8, unknown fields) — encode
// to the bytes deterministic proto.Marshal writes.
func TestFastEncoderMatchesProto(t *testing.T) {
	s := seed(t)
	rng := rand.New(rand.NewPCG(s, s^0x5851f42d4c957f2d))
	n := 3000
	if testing.Short() {
		n = 500
	}
	for i := 0; i < n; i++ {
		sameAsProto(t, "valid envelope", envelopetest.Random(rng, "store_001", 0x1000+uint64(i)))
		e := &pb.Envelope{}
		fillRandom(rng, e.ProtoReflect(), 0)
		sprinkleNils(rng, e)
		sameAsProto(t, "wild envelope", e)
	}
	sameAsProto(t, "empty envelope", &pb.Envelope{})
	sameAsProto(t, "golden envelope", golden())
}

// fillRandom sets each field of m, through reflection so that a field
// added to the .proto is filled without a change here, to a value drawn
// from the edges of its type or leaves it unset.
func fillRandom(rng *rand.Rand, m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if rng.IntN(3) == 0 {
			continue // absent
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for k := rng.IntN(4); k > 0; k-- {
				if fd.Message() != nil {
					el := l.NewElement()
					if depth < 3 {
						fillRandom(rng, el.Message(), depth+1)
					}
					l.Append(el)
				} else {
					l.Append(randomScalar(rng, fd))
				}
			}
		case fd.IsMap():
			panic("envelope.proto has no maps; fillRandom needs a case for " + string(fd.FullName()))
		case fd.Message() != nil:
			if depth < 3 {
				fillRandom(rng, m.Mutable(fd).Message(), depth+1)
			}
		default:
			m.Set(fd, randomScalar(rng, fd))
		}
	}
	if rng.IntN(40) == 0 {
		// A field from a newer writer: the hand encoder must fall back.
		m.SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), rng.Uint64()))
	}
}

func randomScalar(rng *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	u64 := []uint64{0, 1, 127, 128, 16383, 16384, math.MaxUint32, math.MaxUint64, rng.Uint64()}
	pick := u64[rng.IntN(len(u64))]
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber([]int32{0, 1, 2, 3, 4, 5, 99, -1, math.MinInt32}[rng.IntN(9)]))
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32([]int32{0, -1, 1, 655366, math.MinInt32, math.MaxInt32, int32(rng.Uint32())}[rng.IntN(7)])
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64([]int64{0, -1, math.MinInt64, math.MaxInt64, int64(rng.Uint64())}[rng.IntN(5)])
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(pick))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(pick)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(randomText(rng)))
	case protoreflect.BytesKind:
		switch rng.IntN(4) {
		case 0:
			return protoreflect.ValueOfBytes(nil)
		case 1:
			return protoreflect.ValueOfBytes([]byte{})
		}
		return protoreflect.ValueOfBytes(randomText(rng))
	}
	panic("envelope.proto has a field of kind " + fd.Kind().String() + " that randomScalar does not fill: " + string(fd.FullName()))
}

func randomText(rng *rand.Rand) []byte {
	switch rng.IntN(8) {
	case 0:
		return nil
	case 1:
		return []byte("schéma.ñame")
	case 2:
		return []byte{0xff, 'a'} // invalid UTF-8: proto.Marshal refuses it in a string field
	case 3:
		return bytes.Repeat([]byte("x"), 128+rng.IntN(300)) // a two-byte length
	}
	b := make([]byte, rng.IntN(20))
	for i := range b {
		b[i] = 'a' + byte(rng.IntN(26))
	}
	return b
}

// sprinkleNils puts nil elements into repeated message fields, which
// reflection cannot: proto.Marshal writes each as an empty message.
func sprinkleNils(rng *rand.Rand, e *pb.Envelope) {
	if rng.IntN(10) != 0 {
		return
	}
	e.Rows = append(e.Rows, nil)
	e.DdlEvents = append(e.DdlEvents, nil)
	e.Relations = append(e.Relations, nil, &pb.Relation{Columns: []*pb.RelationColumn{nil}})
	e.Rows = append(e.Rows, &pb.Row{NewTuple: []*pb.Value{nil}, OldTuple: []*pb.Value{nil, {}}})
}

// TestFastEncoderKnowsEveryField is the guard for the next field: the
// encoder lists the fields it writes, and every message and field of
// envelope.proto must be on that list.
func TestFastEncoderKnowsEveryField(t *testing.T) {
	listed := envelope.EncodedFields()
	msgs := pb.File_envelope_envelope_proto.Messages()
	if msgs.Len() != len(listed) {
		t.Errorf("envelope.proto has %d messages, the hand encoder lists %d", msgs.Len(), len(listed))
	}
	for i := 0; i < msgs.Len(); i++ {
		md := msgs.Get(i)
		if md.Messages().Len() != 0 || md.Oneofs().Len() != 0 {
			t.Errorf("%s has nested messages or oneofs: teach encode_fast.go and this test about them", md.FullName())
		}
		var have []protowire.Number
		for j := 0; j < md.Fields().Len(); j++ {
			have = append(have, md.Fields().Get(j).Number())
		}
		slices.Sort(have)
		if want := listed[md.FullName()]; !slices.Equal(have, want) {
			t.Errorf("%s: envelope.proto has fields %v, encode_fast.go writes %v: "+
				"write the new field in encode_fast.go (in field-number order) and list it in encodedFields",
				md.FullName(), have, want)
		}
	}
}

// TestFastEncoderEachFieldAlone sets every field of every message, one at
// a time, inside an otherwise minimal envelope, and compares the bytes:
// a field the encoder skips, or writes out of field-number order, fails
// here by name.
func TestFastEncoderEachFieldAlone(t *testing.T) {
	base := func() *pb.Envelope {
		return &pb.Envelope{
			Rows:      []*pb.Row{{NewTuple: []*pb.Value{{}}, OldTuple: []*pb.Value{{}}}},
			DdlEvents: []*pb.DDLEvent{{}},
			Boundary:  &pb.Boundary{},
			Relations: []*pb.Relation{{Columns: []*pb.RelationColumn{{}}}},
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	msgs := pb.File_envelope_envelope_proto.Messages()
	for i := 0; i < msgs.Len(); i++ {
		md := msgs.Get(i)
		for j := 0; j < md.Fields().Len(); j++ {
			fd := md.Fields().Get(j)
			e := base()
			m := findMessage(e.ProtoReflect(), md.FullName())
			if m == nil {
				t.Fatalf("no %s inside the base envelope: add one to base()", md.FullName())
			}
			switch {
			case fd.IsList() && fd.Message() != nil:
				m.Mutable(fd).List().Append(m.Mutable(fd).List().NewElement())
			case fd.Message() != nil:
				m.Mutable(fd)
			default:
				v := nonZero(rng, fd)
				if fd.IsList() {
					m.Mutable(fd).List().Append(v)
				} else {
					m.Set(fd, v)
				}
			}
			sameAsProto(t, string(fd.FullName())+" alone", e)
			// With every other field set too, the order is tested as well.
			e2 := &pb.Envelope{}
			fillAll(rng, e2.ProtoReflect(), 0)
			sameAsProto(t, "every field", e2)
		}
	}
}

func findMessage(m protoreflect.Message, name protoreflect.FullName) protoreflect.Message {
	if m.Descriptor().FullName() == name {
		return m
	}
	var found protoreflect.Message
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		if fd.IsList() {
			for k := 0; k < v.List().Len() && found == nil; k++ {
				found = findMessage(v.List().Get(k).Message(), name)
			}
		} else {
			found = findMessage(v.Message(), name)
		}
		return found == nil
	})
	return found
}

// fillAll sets every field of m to a non-zero value.
func fillAll(rng *rand.Rand, m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case fd.Message() != nil && depth >= 3:
		case fd.IsList() && fd.Message() != nil:
			for k := 0; k < 2; k++ {
				el := m.Mutable(fd).List().NewElement()
				fillAll(rng, el.Message(), depth+1)
				m.Mutable(fd).List().Append(el)
			}
		case fd.Message() != nil:
			fillAll(rng, m.Mutable(fd).Message(), depth+1)
		case fd.IsList():
			m.Mutable(fd).List().Append(nonZero(rng, fd))
		default:
			m.Set(fd, nonZero(rng, fd))
		}
	}
}

func nonZero(rng *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	for {
		v := randomScalar(rng, fd)
		switch x := v.Interface().(type) {
		case string:
			if x != "" && utf8.ValidString(x) {
				return v
			}
		case []byte:
			if len(x) != 0 {
				return v
			}
		default:
			if v.IsValid() && !v.Equal(fd.Default()) {
				return v
			}
		}
	}
}

// FuzzEncodeMatchesProto: whatever protobuf parses as an Envelope, the
// encoder writes back exactly as deterministic proto.Marshal does.
func FuzzEncodeMatchesProto(f *testing.F) {
	b, _ := envelope.Encode(golden())
	f.Add(b)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 8; i++ {
		b, _ := envelope.Encode(envelopetest.Random(rng, "s", 100+uint64(i)))
		f.Add(b[:len(b)-9])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var e pb.Envelope
		if proto.Unmarshal(data, &e) != nil {
			return
		}
		sameAsProto(t, "fuzzed envelope", &e)
	})
}

// BenchmarkEncodeProto is BenchmarkEncode through proto.Marshal, the
// encoder before the hand-written one, for the comparison.
func BenchmarkEncodeProto(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	e := envelopetest.Random(rng, "store_001", 0x1000)
	buf, _ := envelope.Encode(e)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var dst []byte
	for b.Loop() {
		if err := envelope.Validate(e); err != nil {
			b.Fatal(err)
		}
		var err error
		if dst, err = deterministic.MarshalAppend(dst[:0], e); err != nil {
			b.Fatal(err)
		}
		dst = binary.LittleEndian.AppendUint64(append(dst, 0x69), xxh3.Hash(dst))
	}
}

// TestFastEncoderLengthBoundaries sweeps rows and values across the sizes
// where a length prefix grows from one byte to two and from two to three,
// the cases the encoder's reserved-length rows and one-byte fast paths
// must get right.
func TestFastEncoderLengthBoundaries(t *testing.T) {
	var sizes []int
	for _, edge := range []int{0x7c, 0x80, 0x4000, 0x200000} {
		for n := edge - 6; n <= edge+6; n++ {
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		data := bytes.Repeat([]byte{'v'}, n)
		e := &pb.Envelope{Rows: []*pb.Row{
			{Seq: 1, MessageContent: data},
			{Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: data}}},
			{Op: pb.Op_OP_UPDATE, OldTuple: []*pb.Value{{Kind: 300, Data: data}}},
		}, Relations: []*pb.Relation{{Name: string(data)}, {Columns: []*pb.RelationColumn{{Name: string(data), TypeModifier: -1}}}}}
		sameAsProto(t, "row of "+strconv.Itoa(n)+" bytes", e)
	}
}

// BenchmarkEncodeTPCB is one TPC-B transaction the way capture publishes
// it (Encode, a fresh buffer each time), through the hand encoder and,
// for the comparison, through proto.Marshal.
func BenchmarkEncodeTPCB(b *testing.B) {
	e := tpcbEnvelope()
	buf, _ := envelope.Encode(e)
	b.Run("hand", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := envelope.Encode(e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			if err := envelope.Validate(e); err != nil {
				b.Fatal(err)
			}
			dst, err := deterministic.Marshal(e)
			if err != nil {
				b.Fatal(err)
			}
			_ = binary.LittleEndian.AppendUint64(append(dst, 0x69), xxh3.Hash(dst))
		}
	})
}

// TestEncodeReturnsItsOwnBytes: Encode encodes into a pooled buffer and
// returns a copy; a result must not change when later envelopes are
// encoded, from this goroutine or others.
func TestEncodeReturnsItsOwnBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var envs []*pb.Envelope
	var kept [][]byte
	for i := 0; i < 50; i++ {
		e := envelopetest.Random(rng, "store_001", 0x1000+uint64(i))
		b, err := envelope.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		envs, kept = append(envs, e), append(kept, b)
	}
	for i, e := range envs {
		want, err := envelope.AppendEncode(nil, e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(kept[i], want) {
			t.Fatalf("envelope %d: the bytes Encode returned changed after later encodes", i)
		}
	}
}
