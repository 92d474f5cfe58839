// Package manifest is the record format of the Kafka transport's
// partitioned mode (docs/KAFKA.md, "Partitioned mode"): how a unit's rows
// are divided over the data partitions (PartitionOf, Split), the chunk and
// manifest record values (EncodeChunk, Encode and their decoders), and how
// the reader rebuilds the unit once every chunk has arrived (Assemble). It
// links no Kafka client, so the deterministic simulation (internal/sim)
// runs the same code as the transport.
package manifest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

var (
	manifestMagic = []byte("TRLM\x01")
	chunkMagic    = []byte("TRLC\x01")
)

// ChunkRef names one chunk of a unit: the data partition and offset of its
// record, and how many rows it holds.
type ChunkRef struct {
	Partition int32
	Offset    int64
	Rows      int
}

func (r ChunkRef) String() string {
	return fmt.Sprintf("partition %d offset %d", r.Partition, r.Offset)
}

// Manifest is the decoded value of a manifest record.
type Manifest struct {
	Skeleton *pb.Envelope // the unit without its rows
	Checksum uint64       // the whole unit's checksum
	Chunks   []ChunkRef   // in partition order
	// from[p-1] is the lowest offset of data partition p at which a chunk
	// of this unit or of any later one can be: where a reader that starts
	// at this manifest begins reading partition p.
	From []int64
}

// PartitionOf returns the data partition (1..n) of a row of relation rel:
// a hash of the relation's schema and name and the row's key columns (the
// new tuple's for INSERT and UPDATE, the old tuple's for DELETE). A row
// without key values (a table with no key, TRUNCATE, a logical message)
// hashes on the relation (the message prefix) alone, so all such rows of
// one table share a partition.
func PartitionOf(rel *pb.Relation, row *pb.Row, n int) int32 {
	h := fnv.New64a()
	if row.GetOp() == pb.Op_OP_MESSAGE {
		h.Write([]byte("message\x00" + row.GetMessagePrefix()))
		return 1 + int32(h.Sum64()%uint64(n))
	}
	h.Write([]byte(rel.GetSchema()))
	h.Write([]byte{0})
	h.Write([]byte(rel.GetName()))
	h.Write([]byte{0})
	tuple := row.GetNewTuple()
	if row.GetOp() == pb.Op_OP_DELETE {
		tuple = row.GetOldTuple()
	}
	if row.GetOp() != pb.Op_OP_TRUNCATE {
		for i, c := range rel.GetColumns() {
			if !c.GetKey() || i >= len(tuple) {
				continue
			}
			v := tuple[i]
			var n [binary.MaxVarintLen64]byte
			h.Write([]byte{byte(v.GetKind())})
			h.Write(n[:binary.PutUvarint(n[:], uint64(len(v.GetData())))])
			h.Write(v.GetData())
		}
	}
	return 1 + int32(h.Sum64()%uint64(n))
}

// Split decodes payload and divides its rows over the n data
// partitions. It refuses an envelope whose re-encoding is not the payload
// (the reader rebuilds the unit by encoding it again, and the checksum
// must come out the same).
func Split(payload []byte, n int) (e *pb.Envelope, rows map[int32][]*pb.Row, err error) {
	e, err = envelope.Decode(payload)
	if err != nil {
		return nil, nil, fmt.Errorf("refusing to publish a payload that is not a valid envelope: %w", err)
	}
	sum := e.GetChecksum()
	if again, err := envelope.Encode(proto.Clone(e).(*pb.Envelope)); err != nil || string(again) != string(payload) {
		return nil, nil, fmt.Errorf("envelope (commit LSN %s, checksum %016x) is not in canonical encoding, so it cannot be split over partitions and rebuilt; "+
			"fix: publish envelopes made by envelope.Encode", envelope.FormatLSN(e.GetCommitLsn()), sum)
	}
	rows = map[int32][]*pb.Row{}
	for _, r := range e.GetRows() {
		var rel *pb.Relation
		if i := int(r.GetRelationIndex()); i < len(e.GetRelations()) {
			rel = e.GetRelations()[i]
		}
		p := PartitionOf(rel, r, n)
		rows[p] = append(rows[p], r)
	}
	return e, rows, nil
}

// EncodeChunk is a chunk record's value: the magic, the row count, then
// each row as a length-prefixed protobuf Row (envelope.proto).
func EncodeChunk(rows []*pb.Row) ([]byte, error) {
	out := append([]byte(nil), chunkMagic...)
	out = binary.AppendUvarint(out, uint64(len(rows)))
	for _, r := range rows {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out, nil
}

var errCorrupt = errors.New("malformed record value")

type byteReader struct{ b []byte }

func (r *byteReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, errCorrupt
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *byteReader) bytes() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil || n > uint64(len(r.b)) {
		return nil, errCorrupt
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b, nil
}

func DecodeChunk(v []byte) ([]*pb.Row, error) {
	if len(v) < len(chunkMagic) || string(v[:len(chunkMagic)]) != string(chunkMagic) {
		return nil, fmt.Errorf("%w: not a chunk", errCorrupt)
	}
	br := &byteReader{v[len(chunkMagic):]}
	n, err := br.uvarint()
	if err != nil || n > uint64(len(v)) {
		return nil, errCorrupt
	}
	rows := make([]*pb.Row, 0, n)
	for range n {
		b, err := br.bytes()
		if err != nil {
			return nil, err
		}
		r := new(pb.Row)
		if err := proto.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("%w: row: %v", errCorrupt, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// Encode is a manifest record's value: the magic, the unit
// without its rows (a protobuf Envelope, its checksum field unset), the
// unit's checksum, the chunks (partition, offset, rows) and the from
// offsets of every data partition.
func Encode(m *Manifest) ([]byte, error) {
	sk, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.Skeleton)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), manifestMagic...)
	out = binary.AppendUvarint(out, uint64(len(sk)))
	out = append(out, sk...)
	out = binary.LittleEndian.AppendUint64(out, m.Checksum)
	out = binary.AppendUvarint(out, uint64(len(m.Chunks)))
	for _, c := range m.Chunks {
		out = binary.AppendUvarint(out, uint64(c.Partition))
		out = binary.AppendUvarint(out, uint64(c.Offset))
		out = binary.AppendUvarint(out, uint64(c.Rows))
	}
	out = binary.AppendUvarint(out, uint64(len(m.From)))
	for _, f := range m.From {
		out = binary.AppendUvarint(out, uint64(f))
	}
	return out, nil
}

func Decode(v []byte) (*Manifest, error) {
	if len(v) < len(manifestMagic) || string(v[:len(manifestMagic)]) != string(manifestMagic) {
		return nil, fmt.Errorf("%w: not a manifest", errCorrupt)
	}
	br := &byteReader{v[len(manifestMagic):]}
	sk, err := br.bytes()
	if err != nil {
		return nil, err
	}
	m := &Manifest{Skeleton: new(pb.Envelope)}
	if err := proto.Unmarshal(sk, m.Skeleton); err != nil {
		return nil, fmt.Errorf("%w: unit: %v", errCorrupt, err)
	}
	if len(br.b) < 8 {
		return nil, errCorrupt
	}
	m.Checksum = binary.LittleEndian.Uint64(br.b)
	br.b = br.b[8:]
	n, err := br.uvarint()
	if err != nil || n > uint64(len(v)) {
		return nil, errCorrupt
	}
	for range n {
		var f [3]uint64
		for i := range f {
			if f[i], err = br.uvarint(); err != nil {
				return nil, err
			}
		}
		m.Chunks = append(m.Chunks, ChunkRef{Partition: int32(f[0]), Offset: int64(f[1]), Rows: int(f[2])})
	}
	if n, err = br.uvarint(); err != nil || n > uint64(len(v)) {
		return nil, errCorrupt
	}
	for range n {
		f, err := br.uvarint()
		if err != nil {
			return nil, err
		}
		m.From = append(m.From, int64(f))
	}
	return m, nil
}

// Assemble rebuilds the unit from its manifest and the rows of its
// chunks, and checks that it is the unit the relay published: the same
// checksum, so the same bytes.
func Assemble(m *Manifest, chunks [][]*pb.Row) ([]byte, error) {
	e := proto.Clone(m.Skeleton).(*pb.Envelope)
	for _, rows := range chunks {
		e.Rows = append(e.Rows, rows...)
	}
	slices.SortStableFunc(e.Rows, func(a, b *pb.Row) int {
		switch {
		case a.GetSeq() < b.GetSeq():
			return -1
		case a.GetSeq() > b.GetSeq():
			return 1
		}
		return 0
	})
	out, err := envelope.Encode(e)
	if err != nil {
		return nil, err
	}
	if e.GetChecksum() != m.Checksum {
		return nil, fmt.Errorf("rebuilt unit has checksum %016x, the manifest says %016x", e.GetChecksum(), m.Checksum)
	}
	return out, nil
}
