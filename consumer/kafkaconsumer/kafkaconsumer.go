// Package kafkaconsumer reads a Trellara flow's verified change stream
// from its Kafka topic, strict or partitioned, for sinks Trellara does not
// ship. It is package consumer's contract over Kafka:
//
//   - Next hands out whole units (consumer.Unit) in commit order. In
//     partitioned mode the manifest barrier is inside: a unit is handed out
//     only once every chunk its manifest names has arrived, rebuilt and
//     checked against the whole unit's checksum. The reading and the
//     reassembly are transport/kafka's own Reader (the applier's), not a
//     copy.
//   - Every unit is decoded and validated (envelope.Decode: structure and
//     the XXH3 checksum); an invalid one is consumer.ErrCorrupt (with a
//     *consumer.DecodeError inside) and the consumer stops at it.
//   - The group position moves only on Commit (or Run's nil return): after
//     a crash the consumer resumes at the first unit not committed.
//     Delivery is at least once; Unit.Offset (the unit's offset on the
//     topic, the manifest's in partitioned mode) with the envelope's commit
//     LSN is the idempotency key.
//   - A position the topic no longer holds is consumer.ErrPastRetention; a
//     gap in offsets or a chunk the topic no longer holds (compaction,
//     deleted records) is consumer.ErrGap; a record that is not what the
//     stream needs is consumer.ErrCorrupt. Each is a *consumer.StreamError
//     naming the topic, partition and offset. Nothing is skipped.
//
// It is a package of its own, not part of consumer, so that franz-go stays
// out of programs that read only the local log (the trellara binary among
// them). It needs no trellara.yml:
//
//	c, err := kafkaconsumer.Open(ctx, kafkaconsumer.Options{
//		Brokers: []string{"kafka-1:9092"}, Topic: "trellara.sales", Group: "search-index",
//		Mode: kafka.ModePartitioned, Partitions: 6,
//	})
package kafkaconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/transport/kafka"
)

// Options configure a Kafka consumer.
type Options struct {
	Brokers []string
	Topic   string
	// Group is the consumer group that holds the position; each consumer
	// needs its own (never the applier's, trellara.<flow>).
	Group string
	// Mode and Partitions must be the flow's transport.kafka.mode and
	// partitions (the reader refuses a manifest written for another
	// partition count).
	Mode       kafka.Mode
	Partitions int
	TLS        *kafka.TLS
	SASL       *kafka.SASL
	// Logger receives the reader's warnings (a unit held at the manifest
	// barrier); nil means slog.Default().
	Logger *slog.Logger
}

// Consumer reads one topic for one group; it is a consumer.Stream. It is
// not safe for concurrent use.
type Consumer struct {
	r *kafka.Reader
	o Options
	// next is the offset (the manifest's, in partitioned mode) of the
	// unit Next hands out next, and lastLSN the commit LSN of the last
	// one handed out: the position errors name.
	next    uint64
	lastLSN uint64
}

var _ consumer.Stream = (*Consumer)(nil)

// Open positions a consumer at its group's committed offset, or at offset
// 0 when the group has committed none (if retention has removed it, Next
// fails naming the offset rather than skip units).
func Open(ctx context.Context, o Options) (*Consumer, error) {
	if len(o.Brokers) == 0 || o.Topic == "" || o.Group == "" {
		return nil, errors.New("kafkaconsumer: Options need Brokers, Topic and Group")
	}
	mode := o.Mode
	if mode == "" {
		mode = kafka.ModeStrict
	}
	r, err := kafka.NewReader(ctx, kafka.Config{Flow: o.Topic, Logger: o.Logger, Kafka: &kafka.Options{
		Brokers: o.Brokers, Topic: o.Topic, ConsumerGroup: o.Group, Mode: mode, Partitions: o.Partitions,
		TLS: o.TLS, SASL: o.SASL}})
	if err != nil {
		return nil, err
	}
	at, err := r.Committed(ctx)
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("kafkaconsumer: topic %q group %q: read the committed offset: %w", o.Topic, o.Group, err)
	}
	return &Consumer{r: r, o: o, next: uint64(max(at, 0))}, nil
}

// ErrPastRetention is consumer.ErrPastRetention, kept under this name
// for callers of the first release of this package.
var ErrPastRetention = consumer.ErrPastRetention

// Next returns the next whole unit, waiting for one until ctx is done.
// Nothing is skipped; three errors stop the stream, each a
// *consumer.StreamError naming the topic, partition and offset and the
// recovery:
//   - consumer.ErrPastRetention: the group's position is older than the
//     topic holds (OFFSET_OUT_OF_RANGE);
//   - consumer.ErrGap: records the stream needs are missing (an offset
//     skipped on the manifest or strict partition, a chunk no longer in
//     its data partition);
//   - consumer.ErrCorrupt: a record is not the manifest or chunk it
//     should be, a rebuilt unit fails its checksum, or a unit fails
//     decoding (*consumer.DecodeError).
func (c *Consumer) Next(ctx context.Context) (consumer.Unit, error) {
	off, b, err := c.r.Next(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return consumer.Unit{}, err
		}
		var re *kafka.RecordError
		switch {
		case errors.Is(err, kerr.OffsetOutOfRange):
			return consumer.Unit{}, c.streamError(consumer.ErrPastRetention, kafka.ManifestPartition, c.next, consumer.RecoveryRebuild, err)
		case errors.As(err, &re) && re.Kind == kafka.ErrRecordsMissing:
			return consumer.Unit{}, c.streamError(consumer.ErrGap, re.Partition, uint64(re.Offset), consumer.RecoveryRebuild, err)
		case errors.As(err, &re) && re.Kind == kafka.ErrInvalidRecord:
			return consumer.Unit{}, c.streamError(consumer.ErrCorrupt, re.Partition, uint64(re.Offset), consumer.RecoveryCorruptKafka, err)
		}
		return consumer.Unit{}, err
	}
	e, err := envelope.Decode(b)
	if err != nil {
		return consumer.Unit{}, c.streamError(consumer.ErrCorrupt, kafka.ManifestPartition, off, consumer.RecoveryCorruptKafka,
			&consumer.DecodeError{Offset: off, Err: err})
	}
	c.next, c.lastLSN = off+1, e.CommitLsn
	return consumer.Unit{Offset: off, Envelope: e, Bytes: len(b)}, nil
}

// streamError is a gap, past-retention or corruption error at a position
// of the topic.
func (c *Consumer) streamError(kind error, partition int32, offset uint64, recovery string, err error) error {
	return &consumer.StreamError{Kind: kind, Consumer: c.o.Group, Recovery: recovery, Err: err,
		Position: consumer.Position{Topic: c.o.Topic, Partition: partition, Offset: offset, LSN: c.lastLSN}}
}

// Commit records that u and every unit before it are done: the group's
// committed offset moves past u, synchronously. u must be the last unit
// Next returned or one before it.
func (c *Consumer) Commit(u consumer.Unit) error { return c.r.Commit(u.Offset) }

// Run hands every unit to h in commit order and commits each one h
// returns nil for, until ctx is done or h fails; an error from h is
// returned with the position still before the unit.
func (c *Consumer) Run(ctx context.Context, h consumer.Handler) error {
	return consumer.RunStream(ctx, c, h)
}

// Offset is the offset (the manifest's, in partitioned mode) of the unit
// Next hands out next.
func (c *Consumer) Offset() uint64 { return c.next }

// EndOffset lists the topic's end offset now (partition 0's high
// watermark): every unit below it is durable in the cluster, whole, so
// Next hands out each one from Offset up to it without waiting for the
// relay. A consumer that must read "everything durable now" (the lake
// committer, after its epoch probes) reads while Offset < EndOffset.
func (c *Consumer) EndOffset(ctx context.Context) (uint64, error) {
	end, err := c.r.End(ctx)
	if err != nil {
		return 0, fmt.Errorf("kafkaconsumer: topic %q: %w", c.o.Topic, err)
	}
	return end, nil
}

// Close releases the consumer's clients. Nothing is committed.
func (c *Consumer) Close() error { return c.r.Close() }
