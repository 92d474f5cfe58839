package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/transport/kafka/manifest"
)

// Producer is the relay's side of the Kafka transport (capture.Transport).
// In strict mode each envelope is one record on the flow's topic,
// partition 0, its bytes unchanged; in partitioned mode it is chunks on the
// data partitions and a manifest on partition 0 (publishPartitioned). The producer is idempotent with acks=all (unless a
// development configuration lowers them): a send whose outcome is
// ambiguous (a timeout, a broker restart, a lost acknowledgement) is
// retried under the same producer id and sequence, so the broker writes it
// once. What a restarted relay sends again is skipped by capture.Resume,
// which reads the newest record (Last), and by the applier's redelivery
// rule.
type Producer struct {
	cfg Config
	cl  *kgo.Client
	adm *kadm.Client

	// next[p-1] is, in partitioned mode, a lower bound of the offset of
	// the next chunk written to data partition p: the partition's end
	// offset when the producer started, then past the chunks it wrote.
	next []int64
}

// NewProducer connects a producer for the flow's topic. Call CheckTopic
// first: it creates or verifies the topic.
func NewProducer(c Config) (*Producer, error) {
	opts, err := clientOpts(c)
	if err != nil {
		return nil, err
	}
	k := c.Kafka
	opts = append(opts,
		kgo.DefaultProduceTopic(c.topic()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(MaxRecordBytes),
		kgo.ProducerLinger(0),
	)
	switch {
	case k.Acks == AcksAll && k.Idempotent:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case k.Acks == AcksAll:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite())
	case k.Acks == AcksLeader:
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: flow %q: producer for topic %q: %w", c.Flow, c.topic(), err)
	}
	return &Producer{cfg: c, cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close flushes nothing (every Publish waited) and disconnects.
func (p *Producer) Close() { p.cl.Close() }

// record builds the record for one envelope: the payload unchanged, the
// headers read from it.
func (p *Producer) record(payload []byte) (*kgo.Record, error) {
	e, err := envelope.Decode(payload)
	if err != nil {
		return nil, fmt.Errorf("kafka: flow %q: refusing to publish a payload that is not a valid envelope: %w", p.cfg.Flow, err)
	}
	return &kgo.Record{
		Topic:     p.cfg.topic(),
		Partition: Partition,
		Value:     payload,
		Headers:   p.headers(e, ""),
	}, nil
}

// Publish sends one envelope and returns its offset once the cluster has
// acknowledged it.
func (p *Producer) Publish(ctx context.Context, payload []byte) (uint64, error) {
	if p.cfg.partitioned() {
		offs, err := p.publishPartitioned(ctx, [][]byte{payload})
		if err != nil {
			return 0, err
		}
		return uint64(offs[0]), nil
	}
	r, err := p.record(payload)
	if err != nil {
		return 0, err
	}
	res := p.cl.ProduceSync(ctx, r)
	if err := res.FirstErr(); err != nil {
		return 0, p.produceErr(err, Partition)
	}
	return uint64(res[0].Record.Offset), nil
}

// PublishBatch sends the envelopes in order and returns only when the
// cluster has acknowledged every one of them, so the caller (the relay)
// acknowledges the source only after the whole batch is durable. Any
// record that failed fails the batch: the relay stops without
// acknowledging, and on restart resends from the source what the topic
// does not hold.
func (p *Producer) PublishBatch(ctx context.Context, payloads [][]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	if p.cfg.partitioned() {
		_, err := p.publishPartitioned(ctx, payloads)
		return err
	}
	recs := make([]*kgo.Record, len(payloads))
	for i, b := range payloads {
		r, err := p.record(b)
		if err != nil {
			return err
		}
		recs[i] = r
	}
	res := p.cl.ProduceSync(ctx, recs...)
	for _, r := range res {
		if r.Err != nil {
			return p.produceErr(r.Err, Partition)
		}
	}
	return nil
}

func (p *Producer) produceErr(err error, partition int32) error {
	fix := "check that the brokers are reachable and the topic accepts writes (min.insync.replicas in-sync replicas up), then run the relay again; nothing was acknowledged to the source"
	if errors.Is(err, kerr.MessageTooLarge) {
		fix = fmt.Sprintf("an envelope over %d bytes cannot be published: the relay splits large transactions into CHUNK envelopes of at most 4 MiB of rows, so one row (or its relation description) exceeds the bound; capture this table with transport.local", MaxRecordBytes)
	}
	return fmt.Errorf("kafka: flow %q: produce to topic %q partition %d: %w; fix: %s", p.cfg.Flow, p.cfg.topic(), partition, err, fix)
}

// Last returns the newest record's value (capture.Resume reads it to skip
// what the topic already holds).
func (p *Producer) Last(ctx context.Context) ([]byte, bool, error) {
	start, end, err := offsets(ctx, p.adm, p.cfg)
	if err != nil {
		return nil, false, err
	}
	if end <= start {
		return nil, false, nil
	}
	if p.cfg.partitioned() {
		b, err := lastPartitioned(ctx, p.cfg, end-1)
		if err != nil {
			return nil, false, fmt.Errorf("kafka: flow %q: rebuild the newest unit of topic %q (manifest offset %d): %w", p.cfg.Flow, p.cfg.topic(), end-1, err)
		}
		return b, true, nil
	}
	r, err := readAt(ctx, p.cfg, end-1)
	if err != nil {
		return nil, false, fmt.Errorf("kafka: flow %q: read the newest record of topic %q (offset %d): %w", p.cfg.Flow, p.cfg.topic(), end-1, err)
	}
	return r.Value, true, nil
}

// offsets returns the partition's log start offset and high watermark.
func offsets(ctx context.Context, adm *kadm.Client, c Config) (start, end int64, err error) {
	s, err := adm.ListStartOffsets(ctx, c.topic())
	if err == nil {
		err = s.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kafka: flow %q: list the start offset of topic %q: %w", c.Flow, c.topic(), err)
	}
	e, err := adm.ListEndOffsets(ctx, c.topic())
	if err == nil {
		err = e.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kafka: flow %q: list the end offset of topic %q: %w", c.Flow, c.topic(), err)
	}
	so, ok1 := s.Lookup(c.topic(), Partition)
	eo, ok2 := e.Lookup(c.topic(), Partition)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("kafka: flow %q: topic %q has no partition %d; fix: run the relay once to create the topic, or create it with one partition", c.Flow, c.topic(), Partition)
	}
	return so.Offset, eo.Offset, nil
}

// readAt reads the one record at offset with a short-lived client.
func readAt(ctx context.Context, c Config, offset int64) (*kgo.Record, error) {
	opts, err := clientOpts(c)
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.topic(): {Partition: kgo.NewOffset().At(offset)}}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxPartitionBytes(MaxRecordBytes),
		kgo.FetchMaxBytes(2*MaxRecordBytes),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := fetchErr(fs); err != nil {
			return nil, err
		}
		var found *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if found == nil && r.Offset == offset {
				found = r
			}
		})
		if found != nil {
			return found, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// fetchErr returns the first error of a poll, naming its partition.
func fetchErr(fs kgo.Fetches) error {
	errs := fs.Errors()
	switch {
	case len(errs) == 0:
		return nil
	case errs[0].Topic == "":
		return errs[0].Err
	}
	return fmt.Errorf("fetch topic %q partition %d: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
}

// publishPartitioned writes each envelope as chunk records on the data
// partitions its rows hash to, waits until the cluster has acknowledged
// every chunk, then writes the envelopes' manifests to partition 0 and
// waits for those. It returns the manifests' offsets. A manifest is never
// written before its chunks are durable; chunks whose manifest was never
// written (the relay stopped in between) are named by no manifest and
// never read.
func (p *Producer) publishPartitioned(ctx context.Context, payloads [][]byte) ([]int64, error) {
	n := p.cfg.Kafka.Partitions
	if p.next == nil {
		ends, err := p.adm.ListEndOffsets(ctx, p.cfg.topic())
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("kafka: flow %q: list the end offsets of topic %q: %w", p.cfg.Flow, p.cfg.topic(), err)
		}
		next := make([]int64, n)
		for i := range next {
			o, ok := ends.Lookup(p.cfg.topic(), int32(i+1))
			if !ok {
				return nil, fmt.Errorf("kafka: flow %q: topic %q has no partition %d, transport.kafka.partitions is %d; fix: point transport.kafka.topic at a new name (the flow creates it with %d partitions)",
					p.cfg.Flow, p.cfg.topic(), i+1, n, n+1)
			}
			next[i] = o.Offset
		}
		p.next = next
	}
	type unit struct {
		e      *pb.Envelope
		chunks []ChunkRef
		first  int // index of its first chunk record
	}
	units := make([]unit, len(payloads))
	var recs []*kgo.Record
	for i, b := range payloads {
		e, rows, err := manifest.Split(b, n)
		if err != nil {
			return nil, fmt.Errorf("kafka: flow %q: %w", p.cfg.Flow, err)
		}
		units[i] = unit{e: e, first: len(recs)}
		for part := int32(1); part <= int32(n); part++ {
			if len(rows[part]) == 0 {
				continue
			}
			v, err := manifest.EncodeChunk(rows[part])
			if err != nil {
				return nil, fmt.Errorf("kafka: flow %q: encode the chunk of commit LSN %s for partition %d: %w", p.cfg.Flow, envelope.FormatLSN(e.GetCommitLsn()), part, err)
			}
			recs = append(recs, &kgo.Record{Topic: p.cfg.topic(), Partition: part, Value: v, Headers: p.headers(e, RecordChunk)})
			units[i].chunks = append(units[i].chunks, ChunkRef{Partition: part, Rows: len(rows[part])})
		}
	}
	if len(recs) > 0 {
		res := p.cl.ProduceSync(ctx, recs...)
		for _, r := range res {
			if r.Err != nil {
				return nil, p.produceErr(r.Err, r.Record.Partition)
			}
		}
		for i := range units {
			for j := range units[i].chunks {
				units[i].chunks[j].Offset = recs[units[i].first+j].Offset
			}
		}
	}
	// from of unit k: per data partition, the least offset among the
	// chunks of units k.. of this batch and whatever is written after it.
	after := slices.Clone(p.next)
	for _, r := range recs {
		after[r.Partition-1] = max(after[r.Partition-1], r.Offset+1)
	}
	froms := make([][]int64, len(units))
	low := slices.Clone(after)
	for k := len(units) - 1; k >= 0; k-- {
		for _, c := range units[k].chunks {
			low[c.Partition-1] = min(low[c.Partition-1], c.Offset)
		}
		froms[k] = slices.Clone(low)
	}
	mrecs := make([]*kgo.Record, len(units))
	for k, u := range units {
		sk := proto.Clone(u.e).(*pb.Envelope)
		sk.Rows, sk.Checksum = nil, 0
		v, err := manifest.Encode(&manifest.Manifest{Skeleton: sk, Checksum: u.e.GetChecksum(), Chunks: u.chunks, From: froms[k]})
		if err != nil {
			return nil, fmt.Errorf("kafka: flow %q: encode the manifest of commit LSN %s: %w", p.cfg.Flow, envelope.FormatLSN(u.e.GetCommitLsn()), err)
		}
		mrecs[k] = &kgo.Record{Topic: p.cfg.topic(), Partition: ManifestPartition, Value: v, Headers: p.headers(u.e, RecordManifest)}
	}
	res := p.cl.ProduceSync(ctx, mrecs...)
	for _, r := range res {
		if r.Err != nil {
			return nil, p.produceErr(r.Err, ManifestPartition)
		}
	}
	p.next = after
	offs := make([]int64, len(mrecs))
	for i, r := range mrecs {
		offs[i] = r.Offset
	}
	return offs, nil
}

// headers are a record's headers for unit e.
func (p *Producer) headers(e *pb.Envelope, kind string) []kgo.RecordHeader {
	hs := []kgo.RecordHeader{
		{Key: HeaderFlow, Value: []byte(p.cfg.Flow)},
		{Key: HeaderSource, Value: []byte(p.cfg.SourceID)},
		{Key: HeaderCommitLSN, Value: []byte(envelope.FormatLSN(e.GetCommitLsn()))},
		{Key: HeaderChecksum, Value: checksumHeader(e.GetChecksum())},
	}
	if kind != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderRecord, Value: []byte(kind)})
	}
	return hs
}
