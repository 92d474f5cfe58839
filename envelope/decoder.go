package envelope

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
	"unsafe"

	"github.com/zeebo/xxh3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// Decoder decodes envelopes for a consumer that decodes many in a row (the
// applier's reader). It verifies, parses and validates exactly as Decode
// does and returns an equal message, with far fewer allocations:
//
//   - the parser is written for this schema (protowire, no reflection):
//     the rows, values and pointer slices of many envelopes are carved
//     from shared slabs that are never reused (see slab);
//   - the bytes fields (Value.data, Row.message_content) alias b instead of
//     being copied, so b must not be modified while the envelope is in use;
//   - relations are interned by their wire bytes: consecutive envelopes
//     that carry the same relation share one *pb.Relation, which the
//     caller must treat as read-only.
//
// Anything the hand parser does not expect — an unknown field, a field
// with another wire type, a repeated boundary (protobuf merges those),
// invalid UTF-8 — is parsed by proto.Unmarshal instead, so the result and
// the errors are those of Decode whatever b holds. A Decoder is not safe
// for concurrent use.
type Decoder struct {
	rels map[string]*pb.Relation
	// fps holds the fingerprint computed from each interned relation's
	// metadata, once: validation compares it with the relation's stored
	// fingerprint for every envelope, as Validate does, without hashing
	// the same metadata again (a relation is interned by its bytes, the
	// stored fingerprint included, so its verdict cannot change).
	fps    map[*pb.Relation]*sealedRelation
	sealed []*sealedRelation
	slab   slab
	source string // the last source id decoded
}

// slab hands out the messages of many consecutive envelopes from shared
// allocations of about slabBytes each (the rows, values and pointer
// slices of one envelope no longer cost an allocation each). Nothing is
// ever handed out twice: a slab is dropped when exhausted and a new one
// allocated, so an envelope stays valid however many follow it, and the
// collector frees a slab once no envelope carved from it is referenced.
// A slab is kept alive by its last live envelope, so the memory a
// retained envelope pins is bounded by slabBytes per kind.
type slab struct {
	bounds  []pb.Boundary
	rows    []pb.Row
	rowPtrs []*pb.Row
	relPtrs []*pb.Relation
	vals    []pb.Value
	valPtrs []*pb.Value
}

// slabBytes is the size of one slab allocation.
const slabBytes = 64 << 10

// carve returns n zero elements from *s with capacity n, refilling *s
// with a new slab when it has fewer left. A request larger than a
// quarter of a slab gets its own allocation.
func carve[T any](s *[]T, n int) []T {
	if n > len(*s) {
		var zero T
		per := max(slabBytes/int(unsafe.Sizeof(zero)), 1)
		if n > per/4 {
			return make([]T, n)
		}
		*s = make([]T, per)
	}
	t := (*s)[:n:n]
	*s = (*s)[n:]
	return t
}

// relsMax bounds the interned relations; the cache is cleared when full.
const relsMax = 4096

// Decode verifies the checksum of b, parses it and validates the result.
func (d *Decoder) Decode(b []byte) (*pb.Envelope, error) {
	if len(b) < trailerLen || b[len(b)-trailerLen] != checksumTag {
		return nil, fmt.Errorf("%w (%d bytes)", ErrTrailer, len(b))
	}
	prefix := b[:len(b)-trailerLen]
	want := binary.LittleEndian.Uint64(b[len(b)-8:])
	if got := xxh3.Hash(prefix); got != want {
		return nil, fmt.Errorf("%w: stored %016x, computed %016x over %d bytes", ErrChecksum, want, got, len(prefix))
	}
	// The envelope itself is its own allocation: whoever holds one can
	// tell when it is gone (apply's TestChunkMemory does), and the slabs
	// below pin at most slabBytes each whatever envelopes are retained.
	e := new(pb.Envelope)
	if !d.parse(prefix, e) {
		e.Reset()
		if err := proto.Unmarshal(prefix, e); err != nil {
			return nil, fmt.Errorf("envelope: decode %d bytes: %w", len(b), err)
		}
	}
	if e.Checksum != 0 {
		return nil, &InvalidError{SourceID: e.SourceId, CommitLSN: e.CommitLsn, Field: "checksum",
			Reason: "checksum field appears inside the checksummed prefix"}
	}
	e.Checksum = want
	if err := validate(e, d.computed(e.Relations)); err != nil {
		return nil, err
	}
	return e, nil
}

// computed returns, for each of rels that the decoder interned, its
// fingerprint as computed when it was interned (nil for the others,
// which validate hashes).
func (d *Decoder) computed(rels []*pb.Relation) []*sealedRelation {
	d.sealed = d.sealed[:0]
	for _, r := range rels {
		d.sealed = append(d.sealed, d.fps[r])
	}
	return d.sealed
}

// field reads one field's key and, for the wire types this schema uses,
// its value: v for varint and fixed64, p for bytes. n is the bytes
// consumed, or 0 when b is malformed or the wire type is another.
func field(b []byte) (num protowire.Number, typ protowire.Type, v uint64, p []byte, n int) {
	// Fast path: a one-byte key (field numbers 1 to 15) followed by a
	// one-byte varint or length, which covers nearly every field.
	if len(b) >= 2 && b[0] < 0x80 && b[1] < 0x80 && b[0] >= 8 {
		num, typ = protowire.Number(b[0]>>3), protowire.Type(b[0]&7)
		switch typ {
		case protowire.VarintType:
			return num, typ, uint64(b[1]), nil, 2
		case protowire.BytesType:
			if l := int(b[1]); l <= len(b)-2 {
				return num, typ, 0, b[2 : 2+l], 2 + l
			}
			return 0, 0, 0, nil, 0
		}
	}
	num, typ, kn := protowire.ConsumeTag(b)
	if kn < 0 {
		return 0, 0, 0, nil, 0
	}
	b = b[kn:]
	var m int
	switch typ {
	case protowire.VarintType:
		v, m = protowire.ConsumeVarint(b)
	case protowire.Fixed64Type:
		v, m = protowire.ConsumeFixed64(b)
	case protowire.BytesType:
		p, m = protowire.ConsumeBytes(b)
	default:
		return 0, 0, 0, nil, 0
	}
	if m < 0 {
		return 0, 0, 0, nil, 0
	}
	return num, typ, v, p, kn + m
}

// str is a string field's value; false when it is not valid UTF-8 (which
// proto.Unmarshal refuses for proto3 strings).
func str(p []byte) (string, bool) {
	if !utf8.Valid(p) {
		return "", false
	}
	return string(p), true
}

// bytesField is a proto3 bytes field: nil when empty, as proto.Unmarshal
// leaves it.
func bytesField(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return p[:len(p):len(p)]
}

// parse fills e from the fields of b; false when b holds anything the
// hand parser leaves to proto.Unmarshal.
func (d *Decoder) parse(b []byte, e *pb.Envelope) bool {
	// First pass over the envelope's own fields: count the rows and
	// relations so each list is carved at its exact length.
	var nrows, nrels int
	for rest := b; len(rest) > 0; {
		num, _, _, _, n := field(rest)
		if n == 0 {
			return false
		}
		switch num {
		case 8:
			nrows++
		case 12:
			nrels++
		}
		rest = rest[n:]
	}
	var rows []pb.Row
	if nrows > 0 {
		rows = carve(&d.slab.rows, nrows)
		e.Rows = carve(&d.slab.rowPtrs, nrows)[:0]
	}
	if nrels > 0 {
		e.Relations = carve(&d.slab.relPtrs, nrels)[:0]
	}
	seenBoundary := false
	for len(b) > 0 {
		num, typ, v, p, n := field(b)
		b = b[n:]
		ok := true
		switch num {
		case 1:
			ok = typ == protowire.VarintType
			e.ProtocolVersion = uint32(v)
		case 2:
			ok = typ == protowire.BytesType
			e.SourceId, ok = d.sourceID(ok, p)
		case 3:
			ok = typ == protowire.VarintType
			e.Xid = uint32(v)
		case 4:
			ok = typ == protowire.VarintType
			e.CommitLsn = v
		case 5:
			ok = typ == protowire.VarintType
			e.EndLsn = v
		case 6:
			ok = typ == protowire.VarintType
			e.CommitTimeUnixMicros = int64(v)
		case 7:
			ok = typ == protowire.Fixed64Type
			e.SchemaFingerprint = v
		case 8:
			if typ != protowire.BytesType {
				return false
			}
			r := &rows[len(e.Rows)]
			e.Rows = append(e.Rows, r)
			ok = d.parseRow(p, r)
		case 9:
			if typ != protowire.BytesType {
				return false
			}
			de := new(pb.DDLEvent)
			ok = parseDDL(p, de)
			e.DdlEvents = append(e.DdlEvents, de)
		case 10:
			if typ != protowire.BytesType || seenBoundary {
				return false // a second boundary merges into the first
			}
			seenBoundary = true
			e.Boundary = &carve(&d.slab.bounds, 1)[0]
			ok = parseBoundary(p, e.Boundary)
		case 11:
			ok = typ == protowire.VarintType
			e.RowCount = v
		case 12:
			if typ != protowire.BytesType {
				return false
			}
			r, rok := d.relation(p)
			ok = rok
			e.Relations = append(e.Relations, r)
		case 13:
			ok = typ == protowire.Fixed64Type
			e.Checksum = v
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// sourceID is strOK for the source id, which every envelope of a stream
// repeats: the previous one is returned instead of a new copy when equal.
func (d *Decoder) sourceID(ok bool, p []byte) (string, bool) {
	if ok && string(p) == d.source {
		return d.source, true
	}
	s, ok := strOK(ok, p)
	if ok {
		d.source = s
	}
	return s, ok
}

func strOK(ok bool, p []byte) (string, bool) {
	if !ok {
		return "", false
	}
	return str(p)
}

// countValues counts the new and old tuple values of the row in b.
func countValues(b []byte) (nnew, nold int, ok bool) {
	for len(b) > 0 {
		num, _, _, _, n := field(b)
		if n == 0 {
			return 0, 0, false
		}
		switch num {
		case 4:
			nnew++
		case 6:
			nold++
		}
		b = b[n:]
	}
	return nnew, nold, true
}

func (d *Decoder) parseRow(b []byte, r *pb.Row) bool {
	nnew, nold, ok := countValues(b)
	if !ok {
		return false
	}
	vals := carve(&d.slab.vals, nnew+nold)
	if nnew > 0 {
		r.NewTuple = carve(&d.slab.valPtrs, nnew)[:0]
	}
	if nold > 0 {
		r.OldTuple = carve(&d.slab.valPtrs, nold)[:0]
	}
	for len(b) > 0 {
		num, typ, v, p, n := field(b)
		b = b[n:]
		ok := true
		switch num {
		case 1:
			ok = typ == protowire.VarintType
			r.Seq = v
		case 2:
			ok = typ == protowire.VarintType
			r.Op = pb.Op(int32(v))
		case 3:
			ok = typ == protowire.VarintType
			r.RelationIndex = uint32(v)
		case 4, 6:
			if typ != protowire.BytesType {
				return false
			}
			val := &vals[0]
			vals = vals[1:]
			ok = parseValue(p, val)
			if num == 4 {
				r.NewTuple = append(r.NewTuple, val)
			} else {
				r.OldTuple = append(r.OldTuple, val)
			}
		case 5:
			ok = typ == protowire.VarintType
			r.OldKind = pb.OldTuple(int32(v))
		case 7:
			ok = typ == protowire.VarintType
			r.TruncateFlags = uint32(v)
		case 8:
			ok = typ == protowire.BytesType
			r.MessagePrefix, ok = strOK(ok, p)
		case 9:
			ok = typ == protowire.BytesType
			r.MessageContent = bytesField(p)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

func parseValue(b []byte, val *pb.Value) bool {
	for len(b) > 0 {
		num, typ, v, p, n := field(b)
		if n == 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			val.Kind = pb.ValueKind(int32(v))
		case num == 2 && typ == protowire.BytesType:
			val.Data = bytesField(p)
		default:
			return false
		}
	}
	return true
}

func parseBoundary(b []byte, bd *pb.Boundary) bool {
	for len(b) > 0 {
		num, typ, v, p, n := field(b)
		if n == 0 {
			return false
		}
		b = b[n:]
		ok := typ == protowire.VarintType
		switch num {
		case 1:
			bd.Kind = pb.UnitKind(int32(v))
		case 2:
			bd.ChunkIndex = uint32(v)
		case 3:
			bd.ChunkCount = uint32(v)
		case 4:
			bd.TotalRows = v
		case 5:
			bd.Partition = uint32(v)
		case 6:
			bd.SnapshotRelation, ok = strOK(typ == protowire.BytesType, p)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

func parseDDL(b []byte, d *pb.DDLEvent) bool {
	for len(b) > 0 {
		num, typ, v, p, n := field(b)
		if n == 0 {
			return false
		}
		b = b[n:]
		isBytes := typ == protowire.BytesType
		ok := true
		switch num {
		case 1:
			ok = typ == protowire.VarintType
			d.Seq = v
		case 2:
			d.Kind, ok = strOK(isBytes, p)
		case 3:
			d.Relation, ok = strOK(isBytes, p)
		case 4:
			ok = typ == protowire.Fixed64Type
			d.OldFingerprint = v
		case 5:
			ok = typ == protowire.Fixed64Type
			d.NewFingerprint = v
		case 6:
			d.Detail, ok = strOK(isBytes, p)
		case 7:
			d.Column, ok = strOK(isBytes, p)
		case 8:
			d.ColumnType, ok = strOK(isBytes, p)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// relation returns the relation encoded in b, interned.
func (d *Decoder) relation(b []byte) (*pb.Relation, bool) {
	if r, ok := d.rels[string(b)]; ok {
		return r, true
	}
	r := new(pb.Relation)
	if !parseRelation(b, r) {
		return nil, false
	}
	if d.rels == nil || len(d.rels) >= relsMax {
		d.rels = map[string]*pb.Relation{}
		d.fps = map[*pb.Relation]*sealedRelation{}
	}
	d.rels[string(b)] = r
	d.fps[r] = &sealedRelation{rel: r, fingerprint: RelationFingerprint(r)}
	return r, true
}

func parseRelation(b []byte, r *pb.Relation) bool {
	for len(b) > 0 {
		num, typ, v, p, n := field(b)
		if n == 0 {
			return false
		}
		b = b[n:]
		isBytes := typ == protowire.BytesType
		ok := true
		switch num {
		case 1:
			ok = typ == protowire.VarintType
			r.Oid = uint32(v)
		case 2:
			r.Schema, ok = strOK(isBytes, p)
		case 3:
			r.Name, ok = strOK(isBytes, p)
		case 4:
			ok = typ == protowire.VarintType
			r.ReplicaIdentity = uint32(v)
		case 5:
			if !isBytes {
				return false
			}
			c := new(pb.RelationColumn)
			ok = parseColumn(p, c)
			r.Columns = append(r.Columns, c)
		case 6:
			ok = typ == protowire.Fixed64Type
			r.Fingerprint = v
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

func parseColumn(b []byte, c *pb.RelationColumn) bool {
	for len(b) > 0 {
		num, typ, v, p, n := field(b)
		if n == 0 {
			return false
		}
		b = b[n:]
		ok := typ == protowire.VarintType
		switch num {
		case 1:
			c.Name, ok = strOK(typ == protowire.BytesType, p)
		case 2:
			c.TypeOid = uint32(v)
		case 3:
			c.TypeModifier = int32(v)
		case 4:
			c.Key = protowire.DecodeBool(v)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}
