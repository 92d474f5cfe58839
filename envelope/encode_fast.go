package envelope

import (
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// The hand encoder below writes the same bytes as
// proto.MarshalOptions{Deterministic: true} for every message of
// envelope.proto: fields in field-number order, proto3 zero scalars and
// empty strings and bytes omitted, a nil element of a repeated message
// field written as an empty message, enums and negative int32 as ten-byte
// varints. There are no maps, so determinism adds nothing to order.
//
// It exists because proto.Marshal was about half of the CPU of the capture
// path (the assembler's encode of every transaction). It gives up, and the
// caller falls back to proto.Marshal, on what it does not write itself:
// unknown fields (kept from a decode of a newer writer's bytes) and a string
// that is not valid UTF-8 (proto.Marshal refuses it, with its own error).
//
// encodedFields names every field the encoder writes. TestFastEncoderKnows
// EveryField walks the descriptor of envelope.proto and fails when a field
// exists that is not listed here, and TestFastEncoderEachFieldAlone sets each
// field on its own and compares bytes, so a field added to the .proto without
// this file turns the tests red rather than being silently dropped.
var encodedFields = map[protoreflect.FullName][]protowire.Number{
	"trellara.envelope.v1.Envelope":       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13},
	"trellara.envelope.v1.Relation":       {1, 2, 3, 4, 5, 6},
	"trellara.envelope.v1.RelationColumn": {1, 2, 3, 4},
	"trellara.envelope.v1.Value":          {1, 2},
	"trellara.envelope.v1.Row":            {1, 2, 3, 4, 5, 6, 7, 8, 9},
	"trellara.envelope.v1.DDLEvent":       {1, 2, 3, 4, 5, 6, 7, 8, 9},
	"trellara.envelope.v1.Boundary":       {1, 2, 3, 4, 5, 6},
}

// Key bytes: (field number << 3) | wire type. Every field number here is
// below 16, so every key is one byte.
const (
	wtVarint  = byte(protowire.VarintType)
	wtFixed64 = byte(protowire.Fixed64Type)
	wtBytes   = byte(protowire.BytesType)
)

func key(n int, wt byte) byte { return byte(n<<3) | wt }

// AppendRow appends the protobuf encoding of r to dst: the bytes of
// proto.MarshalOptions{}.MarshalAppend(dst, r), without its cost. The
// assembler's spill files use it.
func AppendRow(dst []byte, r *pb.Row) ([]byte, error) {
	if ok := rowEncodable(r); ok {
		return appendRowBody(dst, r), nil
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, r)
}

// SizeRow is the size of r's protobuf encoding: proto.Size(r), without its
// cost (the assembler sizes every row it buffers).
func SizeRow(r *pb.Row) int {
	if r == nil || !rowEncodable(r) {
		return proto.Size(r)
	}
	return sizeRowBody(r)
}

func sizeRowBody(r *pb.Row) int {
	n := sizeUint(r.Seq) + sizeUint(uint64(r.Op)) + sizeUint(uint64(r.RelationIndex)) +
		sizeUint(uint64(r.OldKind)) + sizeUint(uint64(r.TruncateFlags)) +
		sizeBytes(len(r.MessagePrefix)) + sizeBytes(len(r.MessageContent))
	for _, v := range r.NewTuple {
		s := sizeValue(v)
		n += 1 + sizeLen(s) + s
	}
	for _, v := range r.OldTuple {
		s := sizeValue(v)
		n += 1 + sizeLen(s) + s
	}
	return n
}

// scratch holds the buffers encodeExact encodes into, so that Encode
// makes one allocation of the exact size instead of growing a slice from
// nothing through every power of two (that growing cost as much as the
// encoding itself). A buffer grown past scratchBytesMax is not kept.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const scratchBytesMax = 1 << 20

// encodeExact is Encode: AppendEncode into a pooled buffer, then one copy
// of exactly the encoded length.
func encodeExact(e *pb.Envelope) ([]byte, error) {
	return pooledExact(func(dst []byte) ([]byte, error) { return AppendEncode(dst, e) })
}

// pooledExact runs appendTo on a pooled buffer and returns one copy of
// exactly what it appended.
func pooledExact(appendTo func(dst []byte) ([]byte, error)) ([]byte, error) {
	sp := scratch.Get().(*[]byte)
	out, err := appendTo((*sp)[:0])
	if err != nil {
		scratch.Put(sp)
		return nil, err
	}
	u := append([]byte(nil), out...)
	if cap(out) <= scratchBytesMax {
		*sp = out
	}
	scratch.Put(sp)
	return u, nil
}

// appendEnvelopeProto appends the deterministic protobuf encoding of e to
// dst, by hand when it can and through proto.Marshal otherwise. sealed[i],
// where set, is e.Relations[i] as Seal derived it (sealedRelationsOf).
func appendEnvelopeProto(dst []byte, e *pb.Envelope, sealed []*sealedRelation) ([]byte, error) {
	if envelopeEncodable(e, sealed) {
		return appendEnvelopeBody(dst, e, sealed, nil), nil
	}
	return marshalOpts.MarshalAppend(dst, e)
}

// envelopeEncodable reports whether the hand encoder writes exactly what
// proto.Marshal would: no unknown fields anywhere, every string valid UTF-8
// (which a relation that still matches its sealedRelation has).
func envelopeEncodable(e *pb.Envelope, sealed []*sealedRelation) bool {
	if e == nil || e.HasUnknownFields() || !utf8.ValidString(e.SourceId) {
		return false
	}
	for _, r := range e.Rows {
		if r != nil && !rowEncodable(r) {
			return false
		}
	}
	for _, d := range e.DdlEvents {
		if d != nil && (d.HasUnknownFields() || !utf8.ValidString(d.Kind) || !utf8.ValidString(d.Relation) ||
			!utf8.ValidString(d.Detail) || !utf8.ValidString(d.Column) ||
			!utf8.ValidString(d.ColumnType) || !utf8.ValidString(d.OldColumn)) {
			return false
		}
	}
	if b := e.Boundary; b != nil && (b.HasUnknownFields() || !utf8.ValidString(b.SnapshotRelation)) {
		return false
	}
	for i, r := range e.Relations {
		if r == nil || sealedAt(sealed, i) != nil {
			continue
		}
		if r.HasUnknownFields() || !utf8.ValidString(r.Schema) || !utf8.ValidString(r.Name) {
			return false
		}
		for _, c := range r.Columns {
			if c != nil && (c.HasUnknownFields() || !utf8.ValidString(c.Name)) {
				return false
			}
		}
	}
	return true
}

func rowEncodable(r *pb.Row) bool {
	if r == nil {
		return true
	}
	if r.HasUnknownFields() || !utf8.ValidString(r.MessagePrefix) {
		return false
	}
	for _, v := range r.NewTuple {
		if v != nil && v.HasUnknownFields() {
			return false
		}
	}
	for _, v := range r.OldTuple {
		if v != nil && v.HasUnknownFields() {
			return false
		}
	}
	return true
}

// Encoding, one function per message. Each appendXBody writes the fields
// of its message; the parent writes key and length first, from sizeX, or,
// for a row or relation (whose size would take a second walk over its
// values or columns), into two bytes reserved before the body and fixed up
// after it (fixLen2; measured faster than a size pass).

// rows, when set, are encoded rows (field 8 entries, InsertRows) written
// after e.Rows.
func appendEnvelopeBody(b []byte, e *pb.Envelope, sealed []*sealedRelation, rows []byte) []byte {
	b = appendUint(b, 1, uint64(e.ProtocolVersion))
	b = appendStringField(b, 2, e.SourceId)
	b = appendUint(b, 3, uint64(e.Xid))
	b = appendUint(b, 4, e.CommitLsn)
	b = appendUint(b, 5, e.EndLsn)
	b = appendUint(b, 6, uint64(e.CommitTimeUnixMicros))
	b = appendFixed(b, 7, e.SchemaFingerprint)
	for _, r := range e.Rows {
		b = append(b, key(8, wtBytes), 0, 0)
		start := len(b)
		b = appendRowBody(b, r)
		b = fixLen2(b, start)
	}
	b = append(b, rows...)
	for _, d := range e.DdlEvents {
		b = appendLen(append(b, key(9, wtBytes)), sizeDDL(d))
		b = appendDDLBody(b, d)
	}
	if bd := e.Boundary; bd != nil {
		b = appendLen(append(b, key(10, wtBytes)), sizeBoundary(bd))
		b = appendBoundaryBody(b, bd)
	}
	b = appendUint(b, 11, e.RowCount)
	for i, r := range e.Relations {
		if s := sealedAt(sealed, i); s != nil && r.Fingerprint == s.fingerprint {
			// Unchanged since Seal encoded it: its bytes are copied.
			b = appendLen(append(b, key(12, wtBytes)), len(s.body))
			b = append(b, s.body...)
			continue
		}
		b = append(b, key(12, wtBytes), 0, 0)
		start := len(b)
		b = appendRelationBody(b, r)
		b = fixLen2(b, start)
	}
	return appendFixed(b, 13, e.Checksum)
}

func appendRowBody(b []byte, r *pb.Row) []byte {
	if r == nil {
		return b
	}
	b = appendUint(b, 1, r.Seq)
	b = appendUint(b, 2, uint64(r.Op))
	b = appendUint(b, 3, uint64(r.RelationIndex))
	for _, v := range r.NewTuple {
		b = appendValue(b, 4, v)
	}
	b = appendUint(b, 5, uint64(r.OldKind))
	for _, v := range r.OldTuple {
		b = appendValue(b, 6, v)
	}
	b = appendUint(b, 7, uint64(r.TruncateFlags))
	b = appendStringField(b, 8, r.MessagePrefix)
	return appendBytesField(b, 9, r.MessageContent)
}

// sizeValue is the encoded size of v's fields.
func sizeValue(v *pb.Value) int {
	if v == nil {
		return 0
	}
	return sizeUint(uint64(v.Kind)) + sizeBytes(len(v.Data))
}

func appendValue(b []byte, num int, v *pb.Value) []byte {
	if v == nil {
		return append(b, key(num, wtBytes), 0)
	}
	return appendKindData(b, num, v.Kind, v.Data)
}

// appendKindData is appendValue of the value kind, data.
func appendKindData(b []byte, num int, k pb.ValueKind, data []byte) []byte {
	kind, n := uint64(k), len(data)
	if kind < 0x80 && n < 0x7c {
		// The common case, every length one byte: written directly.
		size := 0
		if kind != 0 {
			size = 2
		}
		if n != 0 {
			size += 2 + n
		}
		b = append(b, key(num, wtBytes), byte(size))
		if kind != 0 {
			b = append(b, key(1, wtVarint), byte(kind))
		}
		if n != 0 {
			b = append(append(b, key(2, wtBytes), byte(n)), data...)
		}
		return b
	}
	b = appendLen(append(b, key(num, wtBytes)), sizeUint(kind)+sizeBytes(n))
	b = appendUint(b, 1, kind)
	return appendBytesField(b, 2, data)
}

func sizeDDL(d *pb.DDLEvent) int {
	if d == nil {
		return 0
	}
	return sizeUint(d.Seq) + sizeBytes(len(d.Kind)) + sizeBytes(len(d.Relation)) +
		sizeFixed(d.OldFingerprint) + sizeFixed(d.NewFingerprint) + sizeBytes(len(d.Detail)) +
		sizeBytes(len(d.Column)) + sizeBytes(len(d.ColumnType)) + sizeBytes(len(d.OldColumn))
}

func appendDDLBody(b []byte, d *pb.DDLEvent) []byte {
	if d == nil {
		return b
	}
	b = appendUint(b, 1, d.Seq)
	b = appendStringField(b, 2, d.Kind)
	b = appendStringField(b, 3, d.Relation)
	b = appendFixed(b, 4, d.OldFingerprint)
	b = appendFixed(b, 5, d.NewFingerprint)
	b = appendStringField(b, 6, d.Detail)
	b = appendStringField(b, 7, d.Column)
	b = appendStringField(b, 8, d.ColumnType)
	return appendStringField(b, 9, d.OldColumn)
}

func sizeBoundary(bd *pb.Boundary) int {
	return sizeUint(uint64(bd.Kind)) + sizeUint(uint64(bd.ChunkIndex)) + sizeUint(uint64(bd.ChunkCount)) +
		sizeUint(bd.TotalRows) + sizeUint(uint64(bd.Partition)) + sizeBytes(len(bd.SnapshotRelation))
}

func appendBoundaryBody(b []byte, bd *pb.Boundary) []byte {
	b = appendUint(b, 1, uint64(bd.Kind))
	b = appendUint(b, 2, uint64(bd.ChunkIndex))
	b = appendUint(b, 3, uint64(bd.ChunkCount))
	b = appendUint(b, 4, bd.TotalRows)
	b = appendUint(b, 5, uint64(bd.Partition))
	return appendStringField(b, 6, bd.SnapshotRelation)
}

func appendRelationBody(b []byte, r *pb.Relation) []byte {
	if r == nil {
		return b
	}
	b = appendUint(b, 1, uint64(r.Oid))
	b = appendStringField(b, 2, r.Schema)
	b = appendStringField(b, 3, r.Name)
	b = appendUint(b, 4, uint64(r.ReplicaIdentity))
	for _, c := range r.Columns {
		b = appendLen(append(b, key(5, wtBytes)), sizeColumn(c))
		if c == nil {
			continue
		}
		b = appendStringField(b, 1, c.Name)
		b = appendUint(b, 2, uint64(c.TypeOid))
		if c.TypeModifier == -1 {
			// No modifier, the usual case: ten bytes of -1 as protobuf
			// writes a negative int32, without the varint loop.
			b = append(b, key(3, wtVarint), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)
		} else {
			b = appendUint(b, 3, uint64(int64(c.TypeModifier)))
		}
		if c.Key {
			b = append(b, key(4, wtVarint), 1)
		}
	}
	return appendFixed(b, 6, r.Fingerprint)
}

func sizeColumn(c *pb.RelationColumn) int {
	if c == nil {
		return 0
	}
	n := sizeBytes(len(c.Name)) + sizeUint(uint64(c.TypeOid)) + sizeUint(uint64(int64(c.TypeModifier)))
	if c.Key {
		n += 2
	}
	return n
}

// Scalars. A proto3 scalar, string or bytes field at its zero value is not
// written. Enums and int32 reach appendUint sign-extended to 64 bits, as
// protobuf requires (a negative one takes ten bytes).

func appendUint(b []byte, num int, v uint64) []byte {
	if v == 0 {
		return b
	}
	if v < 0x80 {
		return append(b, key(num, wtVarint), byte(v))
	}
	return protowire.AppendVarint(append(b, key(num, wtVarint)), v)
}

// fixLen2 writes the length of b[start:] into the two bytes reserved
// before start, moving the body when the length takes one byte or more
// than two.
func fixLen2(b []byte, start int) []byte {
	n := len(b) - start
	switch {
	case n < 0x80:
		b[start-2] = byte(n)
		copy(b[start-1:], b[start:])
		return b[:len(b)-1]
	case n < 0x4000:
		b[start-2] = byte(n) | 0x80
		b[start-1] = byte(n >> 7)
		return b
	}
	w := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, w-2)...)
	copy(b[start-2+w:], b[start:start+n])
	protowire.AppendVarint(b[:start-2], uint64(n))
	return b
}

// appendLen appends a length prefix; almost every one fits in a byte.
func appendLen(b []byte, n int) []byte {
	if n < 0x80 {
		return append(b, byte(n))
	}
	return protowire.AppendVarint(b, uint64(n))
}

// sizeLen is the size of appendLen's prefix.
func sizeLen(n int) int {
	if n < 0x80 {
		return 1
	}
	return protowire.SizeVarint(uint64(n))
}

func sizeUint(v uint64) int {
	if v == 0 {
		return 0
	}
	if v < 0x80 {
		return 2
	}
	return 1 + protowire.SizeVarint(v)
}

func appendFixed(b []byte, num int, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, key(num, wtFixed64))
	return protowire.AppendFixed64(b, v)
}

func sizeFixed(v uint64) int {
	if v == 0 {
		return 0
	}
	return 9
}

func appendStringField(b []byte, num int, s string) []byte {
	if len(s) == 0 {
		return b
	}
	b = appendLen(append(b, key(num, wtBytes)), len(s))
	return append(b, s...)
}

func appendBytesField(b []byte, num int, s []byte) []byte {
	if len(s) == 0 {
		return b
	}
	b = appendLen(append(b, key(num, wtBytes)), len(s))
	return append(b, s...)
}

func sizeBytes(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + sizeLen(n) + n
}
