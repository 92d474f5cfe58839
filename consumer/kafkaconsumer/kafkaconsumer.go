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
//     the XXH3 checksum); an invalid one is a *consumer.DecodeError and the
//     consumer stops at it.
//   - The group position moves only on Commit (or Run's nil return): after
//     a crash the consumer resumes at the first unit not committed.
//     Delivery is at least once; Unit.Offset (the unit's offset on the
//     topic, the manifest's in partitioned mode) with the envelope's commit
//     LSN is the idempotency key.
//   - A position the topic no longer holds is ErrPastRetention; a gap in
//     offsets or a chunk the topic no longer holds (compaction, deleted
//     records) is an error naming it. Nothing is skipped.
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
	return &Consumer{r: r}, nil
}

// ErrPastRetention is the error (errors.Is) of a Next whose position the
// topic no longer holds: retention removed units this consumer had not
// committed. Nothing is skipped: the sink is missing those units and must
// be rebuilt from a fresh copy of its data.
var ErrPastRetention = errors.New("kafkaconsumer: the position is past the topic's retention")

// Next returns the next whole unit, waiting for one until ctx is done. A
// unit that fails decoding is a *consumer.DecodeError; a position the topic
// no longer holds is ErrPastRetention.
func (c *Consumer) Next(ctx context.Context) (consumer.Unit, error) {
	off, b, err := c.r.Next(ctx)
	if errors.Is(err, kerr.OffsetOutOfRange) {
		return consumer.Unit{}, fmt.Errorf("%w: %w", ErrPastRetention, err)
	}
	if err != nil {
		return consumer.Unit{}, err
	}
	e, err := envelope.Decode(b)
	if err != nil {
		return consumer.Unit{}, &consumer.DecodeError{Offset: off, Err: err}
	}
	return consumer.Unit{Offset: off, Envelope: e, Bytes: len(b)}, nil
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

// Close releases the consumer's clients. Nothing is committed.
func (c *Consumer) Close() error { return c.r.Close() }
