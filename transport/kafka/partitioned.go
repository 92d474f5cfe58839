package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/config"
)

// Partitioned mode (docs/KAFKA.md, "Partitioned mode").
//
// The topic has Partitions+1 partitions. Partition 0 is the manifest
// partition: one manifest record per unit, in commit order, and nothing
// else. Partitions 1..N are data partitions: a unit's rows go to partition
// 1 + hash(schema, table, primary key) mod N, as one chunk record per data
// partition the unit touches. The producer writes a batch's chunks first
// and, once the cluster has acknowledged all of them, the manifests, which
// name each chunk by partition and offset. The reader follows the manifest
// partition: it holds a unit until every chunk its manifest names has
// arrived, and hands the applier the whole envelope, so the target applies
// it in one transaction and the applier's checkpoint offset is the
// manifest's offset.

// HeaderRecord says what a partitioned-mode record is: RecordManifest or
// RecordChunk. Strict-mode records carry no such header.
const HeaderRecord = "trellara-record"

// Values of HeaderRecord.
const (
	RecordManifest = "manifest"
	RecordChunk    = "chunk"
)

// ManifestPartition is the partition that carries the manifests in
// partitioned mode, and the only partition in strict mode.
const ManifestPartition int32 = 0

var (
	manifestMagic = []byte("TRLM\x01")
	chunkMagic    = []byte("TRLC\x01")
)

// partitioned reports whether the flow runs in partitioned mode.
func (c Config) partitioned() bool { return c.Kafka.Mode == config.ModePartitioned }

// topicPartitions is how many partitions the flow's topic must have.
func (c Config) topicPartitions() int {
	if c.partitioned() {
		return c.Kafka.Partitions + 1
	}
	return 1
}

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

// manifest is the decoded value of a manifest record.
type manifest struct {
	skeleton *pb.Envelope // the unit without its rows
	checksum uint64       // the whole unit's checksum
	chunks   []ChunkRef   // in partition order
	// from[p-1] is the lowest offset of data partition p at which a chunk
	// of this unit or of any later one can be: where a reader that starts
	// at this manifest begins reading partition p.
	from []int64
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

// splitUnit decodes payload and divides its rows over the n data
// partitions. It refuses an envelope whose re-encoding is not the payload
// (the reader rebuilds the unit by encoding it again, and the checksum
// must come out the same).
func splitUnit(payload []byte, n int) (e *pb.Envelope, rows map[int32][]*pb.Row, err error) {
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

// encodeChunk is a chunk record's value: the magic, the row count, then
// each row as a length-prefixed protobuf Row (envelope.proto).
func encodeChunk(rows []*pb.Row) ([]byte, error) {
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

func decodeChunk(v []byte) ([]*pb.Row, error) {
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

// encodeManifest is a manifest record's value: the magic, the unit
// without its rows (a protobuf Envelope, its checksum field unset), the
// unit's checksum, the chunks (partition, offset, rows) and the from
// offsets of every data partition.
func encodeManifest(m *manifest) ([]byte, error) {
	sk, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.skeleton)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), manifestMagic...)
	out = binary.AppendUvarint(out, uint64(len(sk)))
	out = append(out, sk...)
	out = binary.LittleEndian.AppendUint64(out, m.checksum)
	out = binary.AppendUvarint(out, uint64(len(m.chunks)))
	for _, c := range m.chunks {
		out = binary.AppendUvarint(out, uint64(c.Partition))
		out = binary.AppendUvarint(out, uint64(c.Offset))
		out = binary.AppendUvarint(out, uint64(c.Rows))
	}
	out = binary.AppendUvarint(out, uint64(len(m.from)))
	for _, f := range m.from {
		out = binary.AppendUvarint(out, uint64(f))
	}
	return out, nil
}

func decodeManifest(v []byte) (*manifest, error) {
	if len(v) < len(manifestMagic) || string(v[:len(manifestMagic)]) != string(manifestMagic) {
		return nil, fmt.Errorf("%w: not a manifest", errCorrupt)
	}
	br := &byteReader{v[len(manifestMagic):]}
	sk, err := br.bytes()
	if err != nil {
		return nil, err
	}
	m := &manifest{skeleton: new(pb.Envelope)}
	if err := proto.Unmarshal(sk, m.skeleton); err != nil {
		return nil, fmt.Errorf("%w: unit: %v", errCorrupt, err)
	}
	if len(br.b) < 8 {
		return nil, errCorrupt
	}
	m.checksum = binary.LittleEndian.Uint64(br.b)
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
		m.chunks = append(m.chunks, ChunkRef{Partition: int32(f[0]), Offset: int64(f[1]), Rows: int(f[2])})
	}
	if n, err = br.uvarint(); err != nil || n > uint64(len(v)) {
		return nil, errCorrupt
	}
	for range n {
		f, err := br.uvarint()
		if err != nil {
			return nil, err
		}
		m.from = append(m.from, int64(f))
	}
	return m, nil
}

// assemble rebuilds the unit from its manifest and the rows of its
// chunks, and checks that it is the unit the relay published: the same
// checksum, so the same bytes.
func assemble(m *manifest, chunks [][]*pb.Row) ([]byte, error) {
	e := proto.Clone(m.skeleton).(*pb.Envelope)
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
	if e.GetChecksum() != m.checksum {
		return nil, fmt.Errorf("rebuilt unit has checksum %016x, the manifest says %016x", e.GetChecksum(), m.checksum)
	}
	return out, nil
}

// header returns a record header's value.
func header(hs []kgo.RecordHeader, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func checksumHeader(sum uint64) []byte { return []byte(fmt.Sprintf("%016x", sum)) }

func parseChecksumHeader(s string) (uint64, bool) {
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil && len(s) == 16
}
