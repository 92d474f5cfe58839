package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/internal/config"
)

// Producer is the relay's side of the Kafka transport (capture.Transport).
// Each envelope is one record on the flow's topic, partition 0, its bytes
// unchanged. The producer is idempotent with acks=all (unless a
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
	case k.Acks == config.AcksAll && k.Idempotent:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case k.Acks == config.AcksAll:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite())
	case k.Acks == config.AcksLeader:
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
		Headers: []kgo.RecordHeader{
			{Key: HeaderFlow, Value: []byte(p.cfg.Flow)},
			{Key: HeaderSource, Value: []byte(p.cfg.SourceID)},
			{Key: HeaderCommitLSN, Value: []byte(envelope.FormatLSN(e.GetCommitLsn()))},
			{Key: HeaderChecksum, Value: []byte(fmt.Sprintf("%016x", e.GetChecksum()))},
		},
	}, nil
}

// Publish sends one envelope and returns its offset once the cluster has
// acknowledged it.
func (p *Producer) Publish(ctx context.Context, payload []byte) (uint64, error) {
	r, err := p.record(payload)
	if err != nil {
		return 0, err
	}
	res := p.cl.ProduceSync(ctx, r)
	if err := res.FirstErr(); err != nil {
		return 0, p.produceErr(err)
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
			return p.produceErr(r.Err)
		}
	}
	return nil
}

func (p *Producer) produceErr(err error) error {
	fix := "check that the brokers are reachable and the topic accepts writes (min.insync.replicas in-sync replicas up), then run the relay again; nothing was acknowledged to the source"
	if errors.Is(err, kerr.MessageTooLarge) {
		fix = fmt.Sprintf("an envelope over %d bytes cannot be published: the relay splits large transactions into CHUNK envelopes of at most 4 MiB of rows, so one row (or its relation description) exceeds the bound; capture this table with transport.local", MaxRecordBytes)
	}
	return fmt.Errorf("kafka: flow %q: produce to topic %q partition %d: %w; fix: %s", p.cfg.Flow, p.cfg.topic(), Partition, err, fix)
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
