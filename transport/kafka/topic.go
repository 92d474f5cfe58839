package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// MinRetention is the retention below which CheckTopic warns: the local
// log's default retention. An applier stopped longer than the topic's
// retention finds its checkpoint's next offset deleted and refuses to go
// on (apply.CheckpointBehindError).
const MinRetention = 7 * 24 * time.Hour

// TopicProblem is one way the live topic falls short of the flow's
// configuration. Key is the topic (or broker) setting.
type TopicProblem struct {
	Key     string
	Message string
	Fix     string
}

func (p TopicProblem) String() string { return p.Key + ": " + p.Message + "; fix: " + p.Fix }

// TopicError refuses a topic whose live configuration breaks a guarantee
// the flow relies on; it lists every problem found.
type TopicError struct {
	Flow     string
	Topic    string
	Problems []TopicProblem
}

func (e *TopicError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kafka: flow %q: topic %q refused:", e.Flow, e.Topic)
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// CheckTopic checks the flow's topic as the cluster holds it, creating it
// first when it does not exist (one partition, or partitions+1 in
// partitioned mode, the configured replication
// factor and min.insync.replicas, cleanup.policy=delete,
// max.message.bytes=MaxRecordBytes). It refuses (*TopicError) a topic
// with other than one partition (strict mode), fewer replicas than
// replication_factor, min.insync.replicas below the configured value or
// above the replica count, cleanup.policy with compact, or
// max.message.bytes below MaxRecordBytes, and warns about retention
// shorter than MinRetention.
func CheckTopic(ctx context.Context, c Config) (warnings []TopicProblem, err error) {
	adm, closeAdm, err := adminClient(c)
	if err != nil {
		return nil, err
	}
	defer closeAdm()
	topic := c.topic()

	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: flow %q: describe topic %q on brokers %s: %w; fix: check transport.kafka.brokers, tls and sasl",
			c.Flow, topic, strings.Join(c.Kafka.Brokers, ","), err)
	}
	td, ok := tds[topic]
	var partitions, rf int
	switch {
	case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		// The client's metadata cache would still say "unknown" for a
		// while: take the counts from the creation's answer.
		if partitions, rf, err = createTopic(ctx, adm, c); err != nil {
			return nil, err
		}
	case td.Err != nil:
		return nil, fmt.Errorf("kafka: flow %q: describe topic %q: %w; fix: grant the flow's principal Describe on the topic", c.Flow, topic, td.Err)
	default:
		partitions, rf = len(td.Partitions), replicas(td)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: flow %q: describe the configuration of topic %q: %w; fix: grant the flow's principal DescribeConfigs on the topic", c.Flow, topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: flow %q: describe the configuration of topic %q: %w", c.Flow, topic, err)
	}
	vals := map[string]string{}
	for _, cf := range rc.Configs {
		if cf.Value != nil {
			vals[cf.Key] = *cf.Value
		}
	}
	refuse, warn := judgeTopic(c, partitions, rf, vals)
	if len(refuse) > 0 {
		return warn, &TopicError{Flow: c.Flow, Topic: topic, Problems: refuse}
	}
	return warn, nil
}

func replicas(td kadm.TopicDetail) int {
	n := -1
	for _, p := range td.Partitions {
		if n < 0 || len(p.Replicas) < n {
			n = len(p.Replicas)
		}
	}
	return n
}

// createTopic creates the flow's topic and returns its partition count and
// replication factor as the cluster reports them.
func createTopic(ctx context.Context, adm *kadm.Client, c Config) (partitions, rf int, err error) {
	k := c.Kafka
	str := func(s string) *string { return &s }
	configs := map[string]*string{
		"min.insync.replicas": str(strconv.Itoa(k.MinInsyncReplicas)),
		"cleanup.policy":      str("delete"),
		"max.message.bytes":   str(strconv.Itoa(MaxRecordBytes)),
	}
	n := c.topicPartitions()
	resp, err := adm.CreateTopic(ctx, int32(n), int16(k.ReplicationFactor), configs, c.topic())
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kafka: flow %q: create topic %q (%d partition(s), replication factor %d): %w; fix: create it yourself: "+
			"kafka-topics.sh --create --topic %s --partitions %d --replication-factor %d --config min.insync.replicas=%d "+
			"--config cleanup.policy=delete --config max.message.bytes=%d",
			c.Flow, c.topic(), n, k.ReplicationFactor, err, c.topic(), n, k.ReplicationFactor, k.MinInsyncReplicas, MaxRecordBytes)
	}
	return int(resp.NumPartitions), int(resp.ReplicationFactor), nil
}

// judgeTopic applies the rules of CheckTopic to what the cluster reported.
func judgeTopic(c Config, partitions, rf int, vals map[string]string) (refuse, warn []TopicProblem) {
	k := c.Kafka
	topic := c.topic()
	if want := c.topicPartitions(); partitions != want && !c.partitioned() {
		refuse = append(refuse, TopicProblem{Key: "partitions",
			Message: fmt.Sprintf("topic has %d partitions; strict mode writes one partition per flow, so commit order is the partition's order", partitions),
			Fix:     fmt.Sprintf("point transport.kafka.topic at a new name (the flow creates it with one partition), or recreate %s with --partitions 1", topic)})
	} else if partitions != want {
		refuse = append(refuse, TopicProblem{Key: "partitions",
			Message: fmt.Sprintf("topic has %d partitions; partitioned mode with transport.kafka.partitions %d needs %d (partition 0 for the manifests, 1..%d for the rows)", partitions, k.Partitions, want, k.Partitions),
			Fix:     fmt.Sprintf("point transport.kafka.topic at a new name (the flow creates it with %d partitions), or set transport.kafka.partitions to %d", want, partitions-1)})
	}
	if rf < k.ReplicationFactor {
		refuse = append(refuse, TopicProblem{Key: "replication.factor",
			Message: fmt.Sprintf("topic has %d replicas, transport.kafka.replication_factor is %d", rf, k.ReplicationFactor),
			Fix:     fmt.Sprintf("reassign %s's partition to %d replicas (kafka-reassign-partitions.sh), or lower replication_factor outside production", topic, k.ReplicationFactor)})
	}
	if v, ok := vals["min.insync.replicas"]; ok {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			refuse = append(refuse, TopicProblem{Key: "min.insync.replicas", Message: fmt.Sprintf("unreadable value %q", v),
				Fix: fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config min.insync.replicas=%d", topic, k.MinInsyncReplicas)})
		case n < k.MinInsyncReplicas:
			refuse = append(refuse, TopicProblem{Key: "min.insync.replicas",
				Message: fmt.Sprintf("topic has min.insync.replicas=%d, transport.kafka.min_insync_replicas is %d: an acknowledged write could live on fewer replicas", n, k.MinInsyncReplicas),
				Fix:     fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config min.insync.replicas=%d", topic, k.MinInsyncReplicas)})
		case rf > 0 && n > rf:
			refuse = append(refuse, TopicProblem{Key: "min.insync.replicas",
				Message: fmt.Sprintf("topic has min.insync.replicas=%d above its %d replicas: no acks=all write can succeed", n, rf),
				Fix:     fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config min.insync.replicas=%d", topic, k.MinInsyncReplicas)})
		}
	}
	if v := vals["cleanup.policy"]; strings.Contains(v, "compact") {
		refuse = append(refuse, TopicProblem{Key: "cleanup.policy",
			Message: fmt.Sprintf("topic has cleanup.policy=%s: compaction deletes records by key, and every envelope is needed", v),
			Fix:     fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config cleanup.policy=delete", topic)})
	}
	if v, ok := vals["max.message.bytes"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n < MaxRecordBytes {
			refuse = append(refuse, TopicProblem{Key: "max.message.bytes",
				Message: fmt.Sprintf("topic allows records of %d bytes; the relay writes envelopes up to %d bytes (4 MiB CHUNK units plus metadata)", n, MaxRecordBytes),
				Fix:     fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config max.message.bytes=%d", topic, MaxRecordBytes)})
		}
	}
	if v, ok := vals["retention.ms"]; ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms >= 0 && time.Duration(ms)*time.Millisecond < MinRetention {
			warn = append(warn, TopicProblem{Key: "retention.ms",
				Message: fmt.Sprintf("topic keeps records %s; an applier stopped longer than that cannot resume and its tables must be copied again", time.Duration(ms)*time.Millisecond),
				Fix:     fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config retention.ms=%d", topic, MinRetention.Milliseconds())})
		}
	}
	if v, ok := vals["retention.bytes"]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n < 1<<30 {
			warn = append(warn, TopicProblem{Key: "retention.bytes",
				Message: fmt.Sprintf("topic keeps at most %d bytes; an applier further behind than that cannot resume", n),
				Fix:     fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --delete-config retention.bytes", topic)})
		}
	}
	return refuse, warn
}
