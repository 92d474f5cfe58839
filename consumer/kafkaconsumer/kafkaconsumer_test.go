package kafkaconsumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/consumer/kafkaconsumer"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/transport/kafka"
	"github.com/trellara/trellara/transport/kafka/manifest"
)

const (
	topic      = "trellara.sales"
	partitions = 4
	units      = 6
)

// txn is source transaction i: rows in two tables (orders and items),
// whose keys spread over the data partitions.
func txn(t *testing.T, i int) []byte {
	t.Helper()
	col := func(n string, key bool) *pb.RelationColumn {
		return &pb.RelationColumn{Name: n, TypeOid: 25, TypeModifier: -1, Key: key}
	}
	orders := &pb.Relation{Oid: 16384, Schema: "public", Name: "orders", ReplicaIdentity: 'd', Columns: []*pb.RelationColumn{col("id", true), col("v", false)}}
	items := &pb.Relation{Oid: 16390, Schema: "public", Name: "items", ReplicaIdentity: 'd', Columns: []*pb.RelationColumn{col("id", true), col("order_id", false)}}
	lsn := uint64(0x1000000 + i*0x100)
	e := &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: "store_001", Xid: uint32(1000 + i),
		CommitLsn: lsn, EndLsn: lsn + 40, CommitTimeUnixMicros: 1_700_000_000_000_000 + int64(i),
		Boundary:  &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION},
		Relations: []*pb.Relation{orders, items},
	}
	text := func(s string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(s)} }
	for j := range 12 {
		e.Rows = append(e.Rows, &pb.Row{Seq: uint64(j), Op: pb.Op_OP_INSERT, RelationIndex: uint32(j % 2), // orders, items
			NewTuple: []*pb.Value{text(fmt.Sprintf("%d-%d", i, j)), text(fmt.Sprint(i))}})
	}
	envelope.Seal(e)
	b, err := envelope.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// write puts units on the topic as a partitioned flow carries them, but
// with every manifest first and the chunks after, partition by partition,
// holding back the chunks of partition late: a reader sees manifests whose
// chunks are not there yet, and chunks of later units before those of
// earlier ones. It returns a function that writes the held-back chunks.
func write(t *testing.T, ctx context.Context, cl *kgo.Client, payloads [][]byte, late func(first []kafka.ChunkRef) int32) func() {
	t.Helper()
	ends := make([]int64, partitions+1)
	var mans []*kgo.Record
	chunks := map[int32][]*kgo.Record{}
	var first []kafka.ChunkRef
	hdr := func(e *pb.Envelope, kind string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: kafka.HeaderCommitLSN, Value: []byte(envelope.FormatLSN(e.GetCommitLsn()))},
			{Key: kafka.HeaderChecksum, Value: []byte(fmt.Sprintf("%016x", e.GetChecksum()))},
			{Key: kafka.HeaderRecord, Value: []byte(kind)}}
	}
	for _, payload := range payloads {
		e, rows, err := manifest.Split(payload, partitions)
		if err != nil {
			t.Fatal(err)
		}
		m := &manifest.Manifest{Checksum: e.GetChecksum(), From: append([]int64(nil), ends[1:]...)}
		for p := int32(1); p <= partitions; p++ {
			if len(rows[p]) == 0 {
				continue
			}
			v, err := manifest.EncodeChunk(rows[p])
			if err != nil {
				t.Fatal(err)
			}
			m.Chunks = append(m.Chunks, kafka.ChunkRef{Partition: p, Offset: ends[p], Rows: len(rows[p])})
			chunks[p] = append(chunks[p], &kgo.Record{Topic: topic, Partition: p, Value: v, Headers: hdr(e, kafka.RecordChunk)})
			ends[p]++
		}
		if len(m.Chunks) < 2 {
			t.Fatalf("unit at %s touches %d data partition(s); the test needs cross-partition units", envelope.FormatLSN(e.GetCommitLsn()), len(m.Chunks))
		}
		if first == nil {
			first = m.Chunks
		}
		m.Skeleton = proto.Clone(e).(*pb.Envelope)
		m.Skeleton.Rows, m.Skeleton.Checksum = nil, 0
		mv, err := manifest.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		mans = append(mans, &kgo.Record{Topic: topic, Partition: kafka.ManifestPartition, Value: mv, Headers: hdr(e, kafka.RecordManifest)})
	}
	produce := func(recs []*kgo.Record) {
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(mans)
	held := late(first)
	for p := int32(partitions); p >= 1; p-- { // the last partition first
		if p != held {
			produce(chunks[p])
		}
	}
	return func() { produce(chunks[held]) }
}

// TestPartitionedWholeInCommitOrder: against three brokers, a partitioned
// topic of two-table transactions whose chunks arrive after their
// manifests and out of partition order. The consumer hands out nothing
// while the first unit's last chunk is missing, then every unit whole
// (byte for byte the unit the source committed) in commit order; the
// group position moves only on Commit, so a reopened consumer resumes at
// the first unit not committed, with no gap.
func TestPartitionedWholeInCommitOrder(t *testing.T) {
	c, ctx, cl := partitionedTopic(t, 2*time.Minute)
	var payloads [][]byte
	for i := range units {
		payloads = append(payloads, txn(t, i))
	}
	rest := write(t, ctx, cl, payloads, func(first []kafka.ChunkRef) int32 { return first[len(first)-1].Partition })

	opts := kafkaconsumer.Options{Brokers: c.ListenAddrs(), Topic: topic, Group: "search-index", Mode: kafka.ModePartitioned, Partitions: partitions}
	kc, err := kafkaconsumer.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The first unit's last chunk is not on the topic: nothing is handed out.
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	u, err := kc.Next(short)
	stop()
	if err == nil {
		t.Fatalf("handed out the unit at offset %d (commit LSN %s) before its last chunk arrived", u.Offset, envelope.FormatLSN(u.Envelope.GetCommitLsn()))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next while a chunk is missing = %v, want it waiting (deadline exceeded)", err)
	}
	rest()

	got := func(kc *kafkaconsumer.Consumer, i int) consumer.Unit {
		t.Helper()
		u, err := kc.Next(ctx)
		if err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
		want, _ := envelope.Decode(payloads[i])
		b, _ := envelope.Encode(proto.Clone(u.Envelope).(*pb.Envelope))
		if u.Envelope.GetCommitLsn() != want.GetCommitLsn() || !bytes.Equal(b, payloads[i]) || u.Bytes != len(payloads[i]) {
			t.Fatalf("unit %d: commit LSN %s (%d rows, %d bytes), want the whole unit at %s (%d rows, %d bytes)", i,
				envelope.FormatLSN(u.Envelope.GetCommitLsn()), len(u.Envelope.Rows), u.Bytes,
				envelope.FormatLSN(want.GetCommitLsn()), len(want.Rows), len(payloads[i]))
		}
		return u
	}
	// The consumer hands out each unit in commit order; it commits the
	// third, reads the fourth and stops without committing it.
	for i := range 4 {
		u := got(kc, i)
		if i == 2 {
			if err := kc.Commit(u); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := kc.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened, it resumes at the fourth: the one read but not committed.
	kc, err = kafkaconsumer.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	for i := 3; i < units; i++ {
		got(kc, i)
	}
}

// TestStrictInOrder: a strict-mode topic written by the relay's producer
// is read back unit by unit, in commit order, each one verified.
func TestStrictInOrder(t *testing.T) {
	c, ctx, p := strictTopic(t)
	var payloads [][]byte
	for i := range units {
		payloads = append(payloads, txn(t, i))
	}
	if err := p.PublishBatch(ctx, payloads); err != nil {
		t.Fatal(err)
	}
	kc, err := kafkaconsumer.Open(ctx, kafkaconsumer.Options{Brokers: c.ListenAddrs(), Topic: topic, Group: "search-index"})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	for i := range units {
		u, err := kc.Next(ctx)
		if err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
		b, _ := envelope.Encode(proto.Clone(u.Envelope).(*pb.Envelope))
		if u.Offset != uint64(i) || !bytes.Equal(b, payloads[i]) {
			t.Fatalf("unit %d: offset %d, commit LSN %s: not the unit published", i, u.Offset, envelope.FormatLSN(u.Envelope.GetCommitLsn()))
		}
	}
}

// TestPastRetention: units removed from the topic before the consumer
// committed them are ErrPastRetention, never skipped.
func TestPastRetention(t *testing.T) {
	c, ctx, p := strictTopic(t)
	if err := p.PublishBatch(ctx, [][]byte{txn(t, 0), txn(t, 1), txn(t, 2)}); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 2})
	if resp, err := kadm.NewClient(cl).DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	kc, err := kafkaconsumer.Open(ctx, kafkaconsumer.Options{Brokers: c.ListenAddrs(), Topic: topic, Group: "late"})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	short, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	u, err := kc.Next(short)
	if !errors.Is(err, kafkaconsumer.ErrPastRetention) {
		t.Fatalf("Next at offset 0 after records below 2 were deleted = offset %d, %v; want ErrPastRetention", u.Offset, err)
	}
	if se := checkStreamError(t, err, consumer.ErrPastRetention); se.Position.Offset != 0 {
		t.Errorf("position %s, want offset 0 (the group's position)", se.Position)
	}
}

// checkStreamError requires err to be a *consumer.StreamError of kind and
// no other, naming the topic, partition and offset and a recovery.
func checkStreamError(t *testing.T, err, kind error) *consumer.StreamError {
	t.Helper()
	var se *consumer.StreamError
	if !errors.Is(err, kind) || !errors.As(err, &se) {
		t.Fatalf("error %v, want a *consumer.StreamError matching %v", err, kind)
	}
	for _, k := range []error{consumer.ErrGap, consumer.ErrPastRetention, consumer.ErrCorrupt} {
		if k != kind && errors.Is(err, k) {
			t.Errorf("error matches %v as well as %v", k, kind)
		}
	}
	if se.Position.Topic != topic || !strings.Contains(err.Error(), se.Position.String()) || !strings.Contains(err.Error(), "recovery: ") {
		t.Errorf("message %q does not name the topic position and the recovery", err)
	}
	return se
}

// rawClient is a plain client of the cluster, for records the relay would
// never write.
func rawClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestStrictDamagedRecordIsErrCorrupt: a record whose envelope fails its
// checksum stops the consumer with ErrCorrupt at its offset, after the
// units before it, and the next Next does not skip it.
func TestStrictDamagedRecordIsErrCorrupt(t *testing.T) {
	c, ctx, p := strictTopic(t)
	if err := p.PublishBatch(ctx, [][]byte{txn(t, 0), txn(t, 1)}); err != nil {
		t.Fatal(err)
	}
	bad := txn(t, 2)
	bad[len(bad)/2] ^= 0x10
	if err := rawClient(t, c).ProduceSync(ctx, &kgo.Record{Partition: 0, Value: bad}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	kc, err := kafkaconsumer.Open(ctx, kafkaconsumer.Options{Brokers: c.ListenAddrs(), Topic: topic, Group: "sink"})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	for i := range 2 {
		if u, err := kc.Next(ctx); err != nil || u.Offset != uint64(i) {
			t.Fatalf("unit %d: offset %d, %v", i, u.Offset, err)
		}
	}
	_, err = kc.Next(ctx)
	se := checkStreamError(t, err, consumer.ErrCorrupt)
	var de *consumer.DecodeError
	if se.Position.Offset != 2 || se.Position.LSN == 0 || !errors.As(err, &de) {
		t.Fatalf("position %s (%v), want offset 2 after the second unit's LSN, with a *DecodeError", se.Position, err)
	}
}

// TestStrictSkippedOffsetIsErrGap: an offset the consumer needs is not on
// the topic (here a transaction's commit marker occupies it, as a
// compacted topic's hole would) — ErrGap at that offset, never a skip.
func TestStrictSkippedOffsetIsErrGap(t *testing.T) {
	c, ctx, p := strictTopic(t)
	if err := p.PublishBatch(ctx, [][]byte{txn(t, 0), txn(t, 1)}); err != nil {
		t.Fatal(err)
	}
	tx := rawClient(t, c, kgo.TransactionalID("not-the-relay"))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: txn(t, 2)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := p.PublishBatch(ctx, [][]byte{txn(t, 3)}); err != nil {
		t.Fatal(err)
	}
	kc, err := kafkaconsumer.Open(ctx, kafkaconsumer.Options{Brokers: c.ListenAddrs(), Topic: topic, Group: "sink"})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	var got []uint64
	for {
		u, err := kc.Next(ctx)
		if err != nil {
			se := checkStreamError(t, err, consumer.ErrGap)
			if se.Position.Offset != 3 || !slices.Equal(got, []uint64{0, 1, 2}) {
				t.Fatalf("units %v then a gap at %s, want units 0..2 then offset 3 (the commit marker's)", got, se.Position)
			}
			return
		}
		got = append(got, u.Offset)
		if len(got) > 4 {
			t.Fatalf("units %v: the hole at offset 3 was skipped", got)
		}
	}
}

// partitionedTopic is a partitioned-mode topic on three in-process
// brokers and a client that writes to the partition a record names.
func partitionedTopic(t *testing.T, timeout time.Duration) (*kfake.Cluster, context.Context, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	k := kafka.DefaultOptions()
	k.Brokers, k.Topic, k.ConsumerGroup, k.Mode, k.Partitions = c.ListenAddrs(), topic, "trellara.sales", kafka.ModePartitioned, partitions
	if _, err := kafka.CheckTopic(ctx, kafka.Config{Flow: "sales", Kafka: k}); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, ctx, cl
}

// strictTopic is a strict-mode topic on three in-process brokers and the
// relay's producer for it.
func strictTopic(t *testing.T) (*kfake.Cluster, context.Context, *kafka.Producer) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	k := kafka.DefaultOptions()
	k.Brokers, k.Topic, k.ConsumerGroup = c.ListenAddrs(), topic, "trellara.sales"
	cfg := kafka.Config{Flow: "sales", SourceID: "store_001", Kafka: k}
	if _, err := kafka.CheckTopic(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	p, err := kafka.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return c, ctx, p
}

// TestEndOffsetIsWhatIsDurable: EndOffset is the offset after the newest
// unit the cluster holds, and Offset the next unit's: a reader that reads
// while Offset < EndOffset reads everything durable without waiting (the
// lake committer's "read what is durable now").
func TestEndOffsetIsWhatIsDurable(t *testing.T) {
	c, ctx, p := strictTopic(t)
	if err := p.PublishBatch(ctx, [][]byte{txn(t, 0), txn(t, 1), txn(t, 2)}); err != nil {
		t.Fatal(err)
	}
	kc, err := kafkaconsumer.Open(ctx, kafkaconsumer.Options{Brokers: c.ListenAddrs(), Topic: topic, Group: "durable"})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	end, err := kc.EndOffset(ctx)
	if err != nil || end != 3 || kc.Offset() != 0 {
		t.Fatalf("EndOffset = %d, %v; Offset = %d; want 3 and 0", end, err, kc.Offset())
	}
	for kc.Offset() < end {
		short, stop := context.WithTimeout(ctx, 10*time.Second)
		u, err := kc.Next(short)
		stop()
		if err != nil {
			t.Fatalf("Next below the end offset (at %d of %d): %v", kc.Offset(), end, err)
		}
		if u.Offset+1 != kc.Offset() {
			t.Fatalf("unit at offset %d, Offset then %d", u.Offset, kc.Offset())
		}
	}
	if err := p.PublishBatch(ctx, [][]byte{txn(t, 3)}); err != nil {
		t.Fatal(err)
	}
	if end, err := kc.EndOffset(ctx); err != nil || end != 4 {
		t.Fatalf("EndOffset after one more unit = %d, %v; want 4", end, err)
	}
}
