package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Remove deletes the flow's topic and consumer group (run --cleanup: the
// next run snapshots into an empty topic). Either being absent already is
// not an error.
func Remove(ctx context.Context, c Config) error {
	adm, closeAdm, err := adminClient(c)
	if err != nil {
		return err
	}
	defer closeAdm()
	tr, err := adm.DeleteTopic(ctx, c.topic())
	if err == nil {
		err = tr.Err
	}
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("kafka: flow %q: delete topic %q: %w; fix: grant the flow's principal Delete on the topic, or delete it with kafka-topics.sh --delete --topic %s",
			c.Flow, c.topic(), err, c.topic())
	}
	gr, err := adm.DeleteGroup(ctx, c.Kafka.ConsumerGroup)
	if err == nil {
		err = gr.Err
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("kafka: flow %q: delete consumer group %q: %w; fix: delete it with kafka-consumer-groups.sh --delete --group %s",
			c.Flow, c.Kafka.ConsumerGroup, err, c.Kafka.ConsumerGroup)
	}
	return nil
}

// adminClient opens an admin client for c's brokers; closeAdm closes it.
func adminClient(c Config) (adm *kadm.Client, closeAdm func(), err error) {
	opts, err := clientOpts(c)
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: flow %q: admin client: %w", c.Flow, err)
	}
	return kadm.NewClient(cl), cl.Close, nil
}
