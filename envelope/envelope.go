package envelope

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	"github.com/zeebo/xxh3"
	"google.golang.org/protobuf/proto"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// ProtocolVersion is the envelope protocol version of every unit that is
// not a DDL barrier. Part of the wire contract.
const ProtocolVersion = 1

// ProtocolVersionBarrier is the version of a unit that is a DDL barrier:
// it carries ddl_events with a column, which a reader must apply to the
// target before the unit's rows. A version 1 reader rejects it rather
// than apply rows of a shape its target does not have. Readers of this
// package accept both versions.
const ProtocolVersionBarrier = 2

// AddTableKind is the DDLEvent kind of a table that joins the flow: its
// detail is the table's definition, which the reader creates on its target
// before the unit's rows (docs/SCHEMA.md, "add_table").
const AddTableKind = "add_table"

// IsBarrier reports whether e carries a DDL event to apply (a version 2
// DDLEvent: with its column named, or an add_table).
func IsBarrier(e *pb.Envelope) bool {
	for _, d := range e.GetDdlEvents() {
		if d.GetColumn() != "" || d.GetKind() == AddTableKind {
			return true
		}
	}
	return false
}

// checksumTag is the key byte of field 13 with wire type 1 (fixed64):
// (13 << 3) | 1. Part of the wire contract; do not change.
const checksumTag = 0x69

// trailerLen is the tag byte plus the eight checksum bytes.
const trailerLen = 9

var marshalOpts = proto.MarshalOptions{Deterministic: true}

// Encode validates e, computes its checksum and returns its wire form. On
// success e.Checksum holds the checksum that was written.
func Encode(e *pb.Envelope) ([]byte, error) {
	return encodeExact(e)
}

// AppendEncode is Encode appending to dst, so hot paths can reuse buffers.
func AppendEncode(dst []byte, e *pb.Envelope) ([]byte, error) {
	var buf [8]*sealedRelation
	sealed := sealedRelationsOf(buf[:0], e.GetRelations())
	if err := validate(e, sealed); err != nil {
		return nil, err
	}
	e.Checksum = 0 // proto3 omits a zero scalar: the prefix holds fields 1–12 only
	start := len(dst)
	out, err := appendEnvelopeProto(dst, e, sealed)
	if err != nil {
		return nil, fmt.Errorf("envelope: encode (source %q, commit LSN %s): %w",
			e.GetSourceId(), FormatLSN(e.GetCommitLsn()), err)
	}
	out, e.Checksum = appendChecksum(out, start)
	return out, nil
}

// appendChecksum appends the trailer, checksumTag and the xxh3 of
// out[start:], and returns the result with the sum.
func appendChecksum(out []byte, start int) ([]byte, uint64) {
	sum := xxh3.Hash(out[start:])
	out = append(out, checksumTag)
	return binary.LittleEndian.AppendUint64(out, sum), sum
}

// Decode verifies the checksum of b, parses it and validates the result.
// Decode never panics, whatever b holds.
func Decode(b []byte) (*pb.Envelope, error) {
	e := new(pb.Envelope)
	if err := DecodeInto(b, e); err != nil {
		return nil, err
	}
	return e, nil
}

// DecodeInto is Decode into a caller-owned message (reset first).
func DecodeInto(b []byte, e *pb.Envelope) error {
	if len(b) < trailerLen || b[len(b)-trailerLen] != checksumTag {
		return fmt.Errorf("%w (%d bytes)", ErrTrailer, len(b))
	}
	prefix := b[:len(b)-trailerLen]
	want := binary.LittleEndian.Uint64(b[len(b)-8:])
	if got := xxh3.Hash(prefix); got != want {
		return fmt.Errorf("%w: stored %016x, computed %016x over %d bytes", ErrChecksum, want, got, len(prefix))
	}
	e.Reset()
	if err := proto.Unmarshal(prefix, e); err != nil {
		return fmt.Errorf("envelope: decode %d bytes: %w", len(b), err)
	}
	if e.Checksum != 0 {
		// A second field 13 inside the covered prefix: not something Encode
		// writes, so the bytes did not come from a conforming writer.
		return &InvalidError{SourceID: e.SourceId, CommitLSN: e.CommitLsn, Field: "checksum",
			Reason: "checksum field appears inside the checksummed prefix"}
	}
	e.Checksum = want
	return Validate(e)
}

// RelationFingerprint is the stable hash of the relation metadata pgoutput
// sends. The canonical byte layout (all integers little-endian) is:
//
//	u32 len(schema) | schema | u32 len(name) | name | u8 replica_identity |
//	u32 column count | per column: u32 len(name) | name | u32 type_oid |
//	u32 type_modifier (two's complement) | u8 key (0 or 1)
//
// hashed with xxh3_64, seed 0. The relation OID is deliberately excluded: a
// table restored by pg_dump keeps its shape and its fingerprint.
// Part of the wire contract; do not change.
func RelationFingerprint(r *pb.Relation) uint64 {
	var buf [256]byte
	b := buf[:0]
	b = appendString(b, r.GetSchema())
	b = appendString(b, r.GetName())
	b = append(b, byte(r.GetReplicaIdentity()))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.GetColumns())))
	for _, c := range r.GetColumns() {
		b = appendString(b, c.GetName())
		b = binary.LittleEndian.AppendUint32(b, c.GetTypeOid())
		b = binary.LittleEndian.AppendUint32(b, uint32(c.GetTypeModifier()))
		if c.GetKey() {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	return xxh3.Hash(b)
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// SchemaFingerprint is the envelope-level fingerprint: xxh3_64 over the
// 8-byte little-endian fingerprints of rels, in order; 0 when rels is empty.
func SchemaFingerprint(rels []*pb.Relation) uint64 {
	if len(rels) == 0 {
		return 0
	}
	var buf [64]byte
	b := buf[:0]
	for _, r := range rels {
		b = binary.LittleEndian.AppendUint64(b, r.GetFingerprint())
	}
	return xxh3.Hash(b)
}

// Seal fills in the derived fields of e — each relation's fingerprint, the
// schema fingerprint and the row count — so producers cannot get them wrong.
// It remembers what it derived from each relation (sealedRelation), which
// Encode then reuses rather than derive it again for every envelope.
func Seal(e *pb.Envelope) {
	for _, r := range e.Relations {
		if s := sealRelation(r); s != nil {
			r.Fingerprint = s.fingerprint
		} else {
			r.Fingerprint = RelationFingerprint(r)
		}
	}
	e.SchemaFingerprint = SchemaFingerprint(e.Relations)
	e.RowCount = uint64(len(e.Rows))
	if e.ProtocolVersion == 0 {
		e.ProtocolVersion = ProtocolVersion
	}
	if IsBarrier(e) {
		e.ProtocolVersion = ProtocolVersionBarrier
	}
}

// A sealedRelation is what Seal derived from one relation message's
// metadata: its fingerprint and its encoding (appendRelationBody, with that
// fingerprint). A producer seals the same relation message into every
// envelope of its transactions (the assembler keeps one per table until
// its shape changes), and deriving both again for each envelope was most
// of the encoder's CPU. The copy of the metadata it was derived from is
// compared, field by field, with the relation at every use: a relation
// changed in place (a column added, renamed, retyped) no longer matches
// and is derived afresh, never from the stale entry.
type sealedRelation struct {
	rel                  *pb.Relation // the message it was derived from
	oid, replicaIdentity uint32
	schema, name         string
	columns              []sealedColumn
	fingerprint          uint64
	body                 []byte
}

type sealedColumn struct {
	name    string
	typeOid uint32
	typeMod int32
	key     bool
}

// sealedRelations holds sealedRelations by their relation message's
// address, two to a set, without a lock (a read-write lock's atomics showed
// in profiles). An entry holds its message, so the address is never reused
// while it is there; a full set drops an entry, and a relation whose entry
// is gone is derived afresh. Producers seal a few relations each; only a
// stream of ever new relation messages would cycle the entries.
var sealedRelations [sealedSets * 2]atomic.Pointer[sealedRelation]

const sealedSets = 1 << 11

// sealedSet is the index of the first of r's two entries.
func sealedSet(r *pb.Relation) int {
	h := uint64(uintptr(unsafe.Pointer(r))>>4) * 0x9e3779b97f4a7c15
	return int(h>>(64-11)) * 2
}

// matches reports whether r still holds exactly the metadata s was derived
// from, with nothing (unknown fields) the hand encoder would not write.
func (s *sealedRelation) matches(r *pb.Relation) bool {
	if r.Oid != s.oid || r.ReplicaIdentity != s.replicaIdentity || r.Schema != s.schema || r.Name != s.name ||
		len(r.Columns) != len(s.columns) || r.HasUnknownFields() {
		return false
	}
	for i, c := range r.Columns {
		sc := &s.columns[i]
		if c == nil || c.Name != sc.name || c.TypeOid != sc.typeOid || c.TypeModifier != sc.typeMod || c.Key != sc.key ||
			c.HasUnknownFields() {
			return false
		}
	}
	return true
}

// sealedRelationOf is r's sealedRelation if r still matches it, else nil.
func sealedRelationOf(r *pb.Relation) *sealedRelation {
	if r == nil {
		return nil
	}
	i := sealedSet(r)
	for _, s := range [2]*sealedRelation{sealedRelations[i].Load(), sealedRelations[i+1].Load()} {
		if s != nil && s.rel == r && s.matches(r) {
			return s
		}
	}
	return nil
}

// sealRelation returns r's sealedRelation, deriving and remembering it
// when r has none or changed since. It returns nil for a relation the hand
// encoder does not write (nil, unknown fields, a string that is not valid
// UTF-8): that one is derived at every use.
func sealRelation(r *pb.Relation) *sealedRelation {
	if s := sealedRelationOf(r); s != nil {
		return s
	}
	if r == nil || r.HasUnknownFields() || !utf8.ValidString(r.Schema) || !utf8.ValidString(r.Name) {
		return nil
	}
	s := &sealedRelation{rel: r, oid: r.Oid, replicaIdentity: r.ReplicaIdentity, schema: r.Schema, name: r.Name,
		columns: make([]sealedColumn, len(r.Columns))}
	for i, c := range r.Columns {
		if c == nil || c.HasUnknownFields() || !utf8.ValidString(c.Name) {
			return nil
		}
		s.columns[i] = sealedColumn{name: c.Name, typeOid: c.TypeOid, typeMod: c.TypeModifier, key: c.Key}
	}
	s.fingerprint = RelationFingerprint(r)
	// Encoded from a copy carrying the derived fingerprint: r itself is
	// not changed here (Seal sets its fingerprint).
	c := &pb.Relation{Oid: r.Oid, Schema: r.Schema, Name: r.Name, ReplicaIdentity: r.ReplicaIdentity,
		Columns: r.Columns, Fingerprint: s.fingerprint}
	s.body = appendRelationBody(nil, c)
	// Into the first entry of its set when that is empty or r's own, else
	// over the second.
	i := sealedSet(r)
	if e := sealedRelations[i].Load(); e != nil && e.rel != r {
		i++
	}
	sealedRelations[i].Store(s)
	return s
}

// sealedRelationsOf looks up the sealedRelation of each of rels (nil where
// there is none or it no longer matches), appending to dst.
func sealedRelationsOf(dst []*sealedRelation, rels []*pb.Relation) []*sealedRelation {
	for _, r := range rels {
		dst = append(dst, sealedRelationOf(r))
	}
	return dst
}

// sealedAt is sealed[i], nil when sealed does not reach i.
func sealedAt(sealed []*sealedRelation, i int) *sealedRelation {
	if i < len(sealed) {
		return sealed[i]
	}
	return nil
}

// relationFingerprint is RelationFingerprint(r), taken from s when set.
func relationFingerprint(r *pb.Relation, s *sealedRelation) uint64 {
	if s != nil {
		return s.fingerprint
	}
	return RelationFingerprint(r)
}
