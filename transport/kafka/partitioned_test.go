package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/transport/kafka/manifest"
)

const testPartitions = 3

func partitionedSetup(t *testing.T, c *kfake.Cluster) (Config, *Producer) {
	t.Helper()
	cfg := testConfig(c)
	cfg.Kafka.Mode, cfg.Kafka.Partitions = ModePartitioned, testPartitions
	if _, err := CheckTopic(testCtx(t), cfg); err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return cfg, p
}

// partitionEnds returns every partition's end offset.
func partitionEnds(t *testing.T, p *Producer) []int64 {
	t.Helper()
	for try := 0; ; try++ {
		e, err := p.adm.ListEndOffsets(testCtx(t), p.cfg.topic())
		if err == nil {
			err = e.Error()
		}
		if errors.Is(err, kerr.NotLeaderForPartition) && try < 50 {
			// after a leader move, until the client's metadata catches up
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int64, p.cfg.topicPartitions())
		for i := range out {
			o, _ := e.Lookup(p.cfg.topic(), int32(i))
			out[i] = o.Offset
		}
		return out
	}
}

// TestPartitionedRoundTrip: each unit becomes chunks on the data
// partitions and a manifest on partition 0; the reader hands back each
// envelope byte for byte, in publish order, at its manifest's offset.
// Ambiguous acknowledgements, broker errors and a leader move on any
// partition leave every record once.
func TestPartitionedRoundTrip(t *testing.T) {
	c := cluster(t)
	cfg, p := partitionedSetup(t, c)
	ctx := testCtx(t)
	want := envelopes(t, 0x1000, 40)

	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.topic(), Err: kerr.RequestTimedOut, Count: 2})
	if err := p.PublishBatch(ctx, want[:20]); err != nil {
		t.Fatal(err)
	}
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.topic(), Err: kerr.NotLeaderForPartition, Count: 3})
	if err := p.PublishBatch(ctx, want[20:30]); err != nil {
		t.Fatal(err)
	}
	for part := int32(0); part <= testPartitions; part++ {
		if err := c.MoveTopicPartition(cfg.topic(), part, (c.LeaderFor(cfg.topic(), part)+1)%3); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.PublishBatch(ctx, want[30:39]); err != nil {
		t.Fatal(err)
	}
	off, err := p.Publish(ctx, want[39])
	if err != nil || off != 39 {
		t.Fatalf("Publish = %d, %v; want manifest offset 39", off, err)
	}
	ends := partitionEnds(t, p)
	if ends[0] != 40 {
		t.Fatalf("manifest partition holds %d records, want 40 (one per unit)", ends[0])
	}
	var rows, used int
	for _, e := range ends[1:] {
		if e > 0 {
			used++
		}
	}
	for _, b := range want {
		e, _ := envelope.Decode(b)
		rows += len(e.GetRows())
	}
	if used < 2 {
		t.Fatalf("rows of %d units went to %d data partition(s) (ends %v), want them spread", len(want), used, ends)
	}
	last, ok, err := p.Last(ctx)
	if err != nil || !ok || !bytes.Equal(last, want[39]) {
		t.Fatalf("Last = %v, %v; want the 40th envelope rebuilt", ok, err)
	}
	offs, got := readAll(t, cfg, 40)
	for i := range want {
		if offs[i] != uint64(i) || !bytes.Equal(got[i], want[i]) {
			t.Fatalf("unit %d: offset %d, bytes equal %v", i, offs[i], bytes.Equal(got[i], want[i]))
		}
	}
	// A reader rewound into the middle of a batch (a target checkpoint at
	// unit 24) starts each data partition where manifest 25 says.
	r, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Rewind(25); err != nil {
		t.Fatal(err)
	}
	for i := 25; i < 28; i++ {
		if o, b, err := r.Next(ctx); err != nil || o != uint64(i) || !bytes.Equal(b, want[i]) {
			t.Fatalf("after Rewind(25): offset %d (want %d), equal %v, %v", o, i, bytes.Equal(b, want[i]), err)
		}
	}
	// A strict-mode flow refuses the topic, and so does another count.
	strict := testConfig(c)
	if _, err := CheckTopic(ctx, strict); err == nil || !strings.Contains(err.Error(), "strict mode") {
		t.Fatalf("strict CheckTopic on a %d-partition topic: %v", testPartitions+1, err)
	}
	other := testConfig(c)
	other.Kafka.Mode, other.Kafka.Partitions = ModePartitioned, 5
	if _, err := CheckTopic(ctx, other); err == nil || !strings.Contains(err.Error(), "needs 6") {
		t.Fatalf("CheckTopic with partitions 5 on a 4-partition topic: %v", err)
	}
}

// unitTxn is source transaction i: n rows INSERT INTO public.sales
// VALUES ('i-j', 'b<i>'), whose keys spread over the data partitions.
func unitTxn(t *testing.T, i, n int) []byte {
	t.Helper()
	rel := &pb.Relation{Oid: 16384, Schema: "public", Name: "sales", ReplicaIdentity: 'd', Columns: []*pb.RelationColumn{
		{Name: "id", TypeOid: 25, TypeModifier: -1, Key: true},
		{Name: "v", TypeOid: 25, TypeModifier: -1},
	}}
	lsn := txnLSN(i)
	e := &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: "store_001", Xid: uint32(1000 + i),
		CommitLsn: lsn, EndLsn: lsn + 40, CommitTimeUnixMicros: 1_700_000_000_000_000 + int64(i),
		Boundary:  &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION},
		Relations: []*pb.Relation{rel},
	}
	for j := range n {
		e.Rows = append(e.Rows, &pb.Row{Seq: uint64(j), Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{
			{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(fmt.Sprintf("%d-%d", i, j))},
			{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(fmt.Sprintf("b%d", i))},
		}})
	}
	envelope.Seal(e)
	b, err := envelope.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Orders of splitWrite.
const (
	chunksFirst   = "chunks first"   // as the relay writes
	manifestFirst = "manifest first" // naming the offsets its chunks will get
	chunksOnly    = "chunks only"    // a relay stopped before the manifest
)

// splitWrite writes unit payload as the relay would, but in the given
// order, and only the chunks for which keep returns true. Nothing else may write the topic between its chunks' offsets
// being read and the chunks being written.
func splitWrite(t *testing.T, ctx context.Context, p *Producer, payload []byte, order string, keep func(part int32) bool) []ChunkRef {
	t.Helper()
	e, rows, err := manifest.Split(payload, testPartitions)
	if err != nil {
		t.Fatal(err)
	}
	ends := partitionEnds(t, p)
	m := &manifest.Manifest{Checksum: e.GetChecksum(), From: ends[1:]}
	var chunks []*kgo.Record
	for part := int32(1); part <= testPartitions; part++ {
		if len(rows[part]) == 0 {
			continue
		}
		v, err := manifest.EncodeChunk(rows[part])
		if err != nil {
			t.Fatal(err)
		}
		m.Chunks = append(m.Chunks, ChunkRef{Partition: part, Offset: ends[part], Rows: len(rows[part])})
		if keep(part) {
			chunks = append(chunks, &kgo.Record{Topic: p.cfg.topic(), Partition: part, Value: v, Headers: p.headers(e, RecordChunk)})
		}
	}
	if len(m.Chunks) < 2 {
		t.Fatalf("unit at %s touches %d data partition(s); the test needs a cross-partition unit", envelope.FormatLSN(e.GetCommitLsn()), len(m.Chunks))
	}
	m.Skeleton = proto.Clone(e).(*pb.Envelope)
	m.Skeleton.Rows, m.Skeleton.Checksum = nil, 0
	mv, err := manifest.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	man := &kgo.Record{Topic: p.cfg.topic(), Partition: ManifestPartition, Value: mv, Headers: p.headers(e, RecordManifest)}
	writes := map[string][][]*kgo.Record{chunksFirst: {chunks, {man}}, manifestFirst: {{man}, chunks}, chunksOnly: {chunks}}[order]
	for _, recs := range writes {
		if len(recs) == 0 {
			continue
		}
		if err := p.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p.next = nil // the producer reads the ends again
	return m.Chunks
}

// TestManifestBeforeChunks: a manifest whose chunks are not in the topic
// yet holds its unit: Next hands out nothing and reports which chunks it
// waits for; once they are written it hands out the whole unit.
func TestManifestBeforeChunks(t *testing.T) {
	c := cluster(t)
	cfg, p := partitionedSetup(t, c)
	ctx := testCtx(t)
	u0, u1 := unitTxn(t, 0, 8), unitTxn(t, 1, 8)
	if err := p.PublishBatch(ctx, [][]byte{u0}); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, b, err := r.Next(ctx); err != nil || !bytes.Equal(b, u0) {
		t.Fatalf("first unit: %v", err)
	}

	// The manifest of u1 alone: every chunk missing.
	e1, _ := envelope.Decode(u1)
	refs := splitWrite(t, ctx, p, u1, manifestFirst, func(int32) bool { return false })
	var logged syncBuffer
	r.cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	defer func(d time.Duration) { HoldWarnAfter = d }(HoldWarnAfter)
	HoldWarnAfter = 0
	_, _, err = r.Next(untilLogged(ctx, &logged, "held at the manifest barrier"))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "held at the manifest barrier") {
		t.Fatalf("Next with the manifest and no chunks = %v, want held", err)
	}
	h, ok := r.Held()
	if !ok || h.CommitLSN != e1.GetCommitLsn() || h.ManifestOffset != 1 || len(h.Missing) != len(refs) {
		t.Fatalf("Held = %+v, %v; want commit LSN %s at manifest offset 1 missing %v", h, ok, envelope.FormatLSN(e1.GetCommitLsn()), refs)
	}

	// The chunks arrive: the whole unit is handed out.
	e, rows, err := manifest.Split(u1, testPartitions)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, ref := range refs {
		v, _ := manifest.EncodeChunk(rows[ref.Partition])
		recs = append(recs, &kgo.Record{Topic: cfg.topic(), Partition: ref.Partition, Value: v, Headers: p.headers(e, RecordChunk)})
	}
	if err := p.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	o, b, err := r.Next(ctx)
	if err != nil || o != 1 || !bytes.Equal(b, u1) {
		t.Fatalf("after the chunks: offset %d, equal %v, %v", o, bytes.Equal(b, u1), err)
	}
	if _, ok := r.Held(); ok {
		t.Fatal("still reported held after the unit was handed out")
	}
}

// TestProduceRequestTimeout: a broker that writes a produce request only
// after the client's request timeout (the client gives up on the
// connection and sends again under the same producer id and sequence)
// leaves every record once, on the manifest and the data partitions.
func TestProduceRequestTimeout(t *testing.T) {
	c := cluster(t)
	cfg := testConfig(c)
	cfg.Kafka.Mode, cfg.Kafka.Partitions = ModePartitioned, testPartitions
	cfg.extra = append(cfg.extra, kgo.ProduceRequestTimeout(time.Second), kgo.RequestTimeoutOverhead(500*time.Millisecond))
	ctx := testCtx(t)
	if _, err := CheckTopic(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The first produce request is held past the client's timeout, then
	// written; the client's resend waits until it is.
	var held atomic.Int32
	written := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		switch held.Add(1) {
		case 1:
			c.SleepControl(func() { time.Sleep(2500 * time.Millisecond) }) // past the 1.5 s the client waits
			close(written)
		default:
			c.SleepControl(func() { <-written })
			c.DropControl()
		}
		return nil, nil, false // the cluster writes it (the first: answering a closed connection)
	})
	want := envelopes(t, 0x1000, 10)
	if err := p.PublishBatch(ctx, want); err != nil {
		t.Fatal(err)
	}
	if held.Load() < 2 {
		t.Fatalf("%d produce request(s) seen; the client never resent after its timeout", held.Load())
	}
	ends := partitionEnds(t, p)
	var chunks int64
	for _, e := range ends[1:] {
		chunks += e
	}
	_, got := readAll(t, cfg, 10)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("unit %d differs", i)
		}
	}
	if ends[0] != 10 {
		t.Fatalf("manifest partition holds %d records, want 10: a timed-out produce was written twice", ends[0])
	}
	var wantChunks int64
	for _, b := range want {
		_, rows, _ := manifest.Split(b, testPartitions)
		wantChunks += int64(len(rows))
	}
	if chunks != wantChunks {
		t.Fatalf("data partitions hold %d chunks, want %d: a timed-out produce was written twice", chunks, wantChunks)
	}
}
