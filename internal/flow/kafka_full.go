//go:build full

package flow

import (
	"context"
	"fmt"
	"sync"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/transport/kafka"
)

// The full edition runs transport.kafka flows (transport/kafka).
func init() { RegisterBroker(newKafkaBroker) }

// kafkaBroker is a flow's Kafka transport (strict or partitioned mode,
// transport.kafka.mode): the relay
// publishes through kafka.Producer, the applier reads through
// kafka.Reader. The topic is checked (and created) once per process,
// before the first of them uses it.
type kafkaBroker struct {
	f   *Flow
	cfg kafka.Config

	mu      sync.Mutex
	checked bool
}

func newKafkaBroker(f *Flow) (Broker, error) {
	return &kafkaBroker{f: f, cfg: kafka.Config{Flow: f.Cfg.Flow, SourceID: f.Cfg.Source.ID, Kafka: kafkaOptions(f.Cfg.Transport.Kafka), ConfigPath: f.ConfigPath, Logger: f.Logger}}, nil
}

// checkTopic runs kafka.CheckTopic once: it creates the topic if needed,
// refuses one that breaks a guarantee and logs each warning.
func (b *kafkaBroker) checkTopic(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.checked {
		return nil
	}
	warn, err := kafka.CheckTopic(ctx, b.cfg)
	if err != nil {
		return err
	}
	for _, w := range warn {
		b.f.Logger.Warn("kafka topic: "+w.Message, "flow", b.f.Cfg.Flow, "topic", b.cfg.Kafka.Topic, "setting", w.Key, "fix", w.Fix)
	}
	b.checked = true
	return nil
}

func (b *kafkaBroker) Publisher(ctx context.Context) (capture.Transport, func(), error) {
	if err := b.checkTopic(ctx); err != nil {
		return nil, nil, err
	}
	p, err := kafka.NewProducer(b.cfg)
	if err != nil {
		return nil, nil, err
	}
	return p, p.Close, nil
}

// Reader reads for sink s. Each sink commits its own consumer group (the
// default sink transport.kafka.consumer_group, another sink that group
// with "." and its name), so each group's lag is that sink's.
func (b *kafkaBroker) Reader(ctx context.Context, s config.Sink) (BrokerReader, error) {
	if err := b.checkTopic(ctx); err != nil {
		return nil, err
	}
	c := b.cfg
	k := *c.Kafka
	k.ConsumerGroup = b.group(s)
	c.Kafka = &k
	return kafka.NewReader(ctx, c)
}

// group is sink s's consumer group.
func (b *kafkaBroker) group(s config.Sink) string {
	if s.Name == config.DefaultSinkName {
		return b.cfg.Kafka.ConsumerGroup
	}
	return b.cfg.Kafka.ConsumerGroup + "." + s.Name
}

// Status reads the topic and every sink's group from the cluster.
func (b *kafkaBroker) Status(ctx context.Context, sinks []config.Sink) (*BrokerStatus, error) {
	groups := make([]string, len(sinks))
	for i, s := range sinks {
		groups[i] = b.group(s)
	}
	ts, err := kafka.Inspect(ctx, b.cfg, groups)
	if err != nil {
		return nil, err
	}
	st := &BrokerStatus{Topic: ts.Topic, Mode: ts.Mode, Partitions: []BrokerPartition{}, Groups: []BrokerGroup{}}
	if ts.HasNewest {
		st.ProduceAckedCommitLSN = lsn.Format(ts.NewestCommitLSN)
	}
	for _, p := range ts.Partitions {
		st.Partitions = append(st.Partitions, BrokerPartition{Partition: p.Partition, Role: p.Role, StartOffset: p.StartOffset, HighWatermark: p.HighWatermark})
	}
	for i, g := range ts.Groups {
		bg := BrokerGroup{Sink: sinks[i].Name, Group: g.Group, Partitions: []BrokerGroupPosition{}}
		for _, p := range g.Partitions {
			bg.Partitions = append(bg.Partitions, BrokerGroupPosition{Partition: p.Partition, Committed: p.Committed, Lag: p.Lag})
		}
		st.Groups = append(st.Groups, bg)
	}
	return st, nil
}

func (b *kafkaBroker) Remove(ctx context.Context) error { return kafka.Remove(ctx, b.cfg) }

func (b *kafkaBroker) Describe() string {
	k := b.f.Cfg.Transport.Kafka
	if k.Mode == config.ModePartitioned {
		return fmt.Sprintf("kafka topic %s (partitioned mode: manifests on partition 0, rows on partitions 1-%d) on %d broker(s), profile %s", k.Topic, k.Partitions, len(k.Brokers), k.Profile)
	}
	return fmt.Sprintf("kafka topic %s (partition %d, strict mode) on %d broker(s), profile %s", k.Topic, kafka.Partition, len(k.Brokers), k.Profile)
}
