package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/trellara/trellara/lsn"
)

// TopicState is the flow's topic as the cluster reports it (status).
type TopicState struct {
	Topic      string
	Mode       string
	Partitions []PartitionState
	// NewestCommitLSN is the commit LSN of the newest record of partition
	// 0 (the newest unit in strict mode, the newest manifest in
	// partitioned mode): how far the cluster has acknowledged the relay's
	// writes. HasNewest is false for an empty topic.
	NewestCommitLSN uint64
	HasNewest       bool
	Groups          []GroupState
}

// PartitionState is one partition's offsets. Role is "log" (strict mode),
// "manifest" (partition 0 in partitioned mode) or "data".
type PartitionState struct {
	Partition     int32
	Role          string
	StartOffset   int64
	HighWatermark int64
}

// GroupState is one consumer group's committed offsets and lag per
// partition; Committed is -1 where the group has committed nothing.
type GroupState struct {
	Group      string
	Partitions []GroupPartition
}

// GroupPartition is a group's position on one partition.
type GroupPartition struct {
	Partition int32
	Committed int64
	Lag       int64
}

// Inspect reads the topic's partitions, its newest record's commit LSN and
// each group's committed offsets.
func Inspect(ctx context.Context, c Config, groups []string) (*TopicState, error) {
	adm, closeAdm, err := adminClient(c)
	if err != nil {
		return nil, err
	}
	defer closeAdm()
	topic := c.topic()
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: flow %q: list the start offsets of topic %q: %w", c.Flow, topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: flow %q: list the end offsets of topic %q: %w", c.Flow, topic, err)
	}
	st := &TopicState{Topic: topic, Mode: string(c.Kafka.Mode)}
	for p := int32(0); p < int32(c.topicPartitions()); p++ {
		s, ok1 := starts.Lookup(topic, p)
		e, ok2 := ends.Lookup(topic, p)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("kafka: flow %q: topic %q has no partition %d; fix: run the relay once to create the topic", c.Flow, topic, p)
		}
		role := "log"
		if c.partitioned() {
			role = "data"
			if p == ManifestPartition {
				role = "manifest"
			}
		}
		st.Partitions = append(st.Partitions, PartitionState{Partition: p, Role: role, StartOffset: s.Offset, HighWatermark: e.Offset})
	}
	if p0 := st.Partitions[0]; p0.HighWatermark > p0.StartOffset {
		r, err := readAt(ctx, c, p0.HighWatermark-1)
		if err != nil {
			return nil, fmt.Errorf("kafka: flow %q: read the newest record of topic %q: %w", c.Flow, topic, err)
		}
		v, err := lsn.Parse(header(r.Headers, HeaderCommitLSN))
		if err != nil {
			return nil, fmt.Errorf("kafka: flow %q: topic %q offset %d: header %s: %w", c.Flow, topic, p0.HighWatermark-1, HeaderCommitLSN, err)
		}
		st.NewestCommitLSN, st.HasNewest = uint64(v), true
	}
	for _, g := range groups {
		gs := GroupState{Group: g}
		got, err := adm.FetchOffsets(ctx, g)
		if err == nil {
			err = got.Error()
		}
		if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return nil, fmt.Errorf("kafka: flow %q: fetch the offsets of consumer group %q: %w", c.Flow, g, err)
		}
		for _, ps := range st.Partitions {
			gp := GroupPartition{Partition: ps.Partition, Committed: -1, Lag: ps.HighWatermark - ps.StartOffset}
			if o, ok := got.Lookup(topic, ps.Partition); ok && err == nil {
				gp.Committed, gp.Lag = o.At, max(0, ps.HighWatermark-o.At)
			}
			gs.Partitions = append(gs.Partitions, gp)
		}
		st.Groups = append(st.Groups, gs)
	}
	return st, nil
}
