//go:build full

package lake

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/consumer/kafkaconsumer"
	"github.com/trellara/trellara/internal/flow"
)

// sourceStream is one source's verified change stream as the committer
// reads it: the local segment log (consumer.Consumer) or the flow's Kafka
// topic (kafkaconsumer.Consumer, strict or partitioned, the manifest
// barrier inside). Both hand out whole units in commit order; the
// committer adds only "read what is durable now".
type sourceStream interface {
	Next(ctx context.Context) (consumer.Unit, error)
	// Commit moves the stream's own position (the log cursor, the
	// consumer group's offset) past u. The committer calls it only after
	// the Iceberg commits that hold u's rows and marks: it is a hint for
	// where a restart starts reading, never the position of record.
	Commit(u consumer.Unit) error
	Close() error
	// Offset is the offset of the unit Next hands out next.
	Offset() uint64
	// Durable is the end of what is durable now: Next hands out every
	// unit below it without waiting for the relay.
	Durable(ctx context.Context) (uint64, error)
	// Where names the stream in logs and errors (a log directory, a topic).
	Where() string
}

// localStream is a transport.local source: its log, read-only, with the
// committer's cursor.
type localStream struct {
	*consumer.Consumer
	dir string
}

func (s localStream) Durable(context.Context) (uint64, error) { return s.NextOffset(), nil }
func (s localStream) Where() string                           { return "log " + s.dir }

// kafkaStream is a transport.kafka source: its topic, read through
// kafkaconsumer in the committer's consumer group (Fleet.KafkaGroup).
type kafkaStream struct {
	*kafkaconsumer.Consumer
	topic string
}

// Durable lists partition 0's end offset. After an epoch probe saw the
// slot confirmed at W, every transaction before W is below it: the relay
// acknowledges the slot only after Kafka has acknowledged the records.
func (s kafkaStream) Durable(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaOpTimeout)
	defer cancel()
	return s.EndOffset(ctx)
}
func (s kafkaStream) Where() string { return "topic " + s.topic }

// kafkaOpTimeout bounds one Kafka request of the committer (open, list
// the end offset); drainWait bounds one source's drain to its durable
// end, so a broker that stops answering makes its source lag, not the
// commit loop stall.
const (
	kafkaOpTimeout = 10 * time.Second
	drainWait      = 10 * time.Second
)

// openStream opens source s's stream for the committer.
func openStream(ctx context.Context, s FleetSource, f *Fleet, log *slog.Logger) (sourceStream, error) {
	k := s.Kafka()
	if k == nil {
		dir := s.LogDir()
		c, err := consumer.Open(dir, f.CommitterCursor(), consumer.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		return localStream{Consumer: c, dir: dir}, nil
	}
	o := flow.KafkaOptions(k)
	ctx, cancel := context.WithTimeout(ctx, kafkaOpTimeout)
	defer cancel()
	c, err := kafkaconsumer.Open(ctx, kafkaconsumer.Options{Brokers: o.Brokers, Topic: o.Topic, Group: f.KafkaGroup(),
		Mode: o.Mode, Partitions: o.Partitions, TLS: o.TLS, SASL: o.SASL, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("topic %q (brokers %v, group %q): %w", o.Topic, o.Brokers, f.KafkaGroup(), err)
	}
	return kafkaStream{Consumer: c, topic: o.Topic}, nil
}
