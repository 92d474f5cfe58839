//go:build full

package lake

import (
	"context"
	"time"

	"github.com/trellara/trellara/internal/flow"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport/kafka"
)

// StreamPosition is where a source's stream stands against the lake
// committer, read without the committer: from the local log and its
// cursor (Fleet.CommitterCursor), or from the Kafka topic's metadata and the committer's consumer
// group (Fleet.KafkaGroup). It is what fleet report and scorecard show;
// the position of record stays the marks in the Iceberg commits.
type StreamPosition struct {
	// Where names the stream: "log DIR" or "topic NAME".
	Where string `json:"stream"`
	// DurableEnd is the log's next offset, or partition 0's high
	// watermark (the strict log, or the manifests in partitioned mode).
	DurableEnd uint64 `json:"durable_end"`
	// Cursor is the committer's position: the log cursor, or the group's
	// committed offset on partition 0; the start of the stream when
	// Registered is false (the committer has committed nothing yet).
	Cursor     uint64 `json:"cursor"`
	Registered bool   `json:"cursor_registered"`
	// UnitsBehind is DurableEnd - Cursor: transactions (partition 0's
	// records) published and not yet committed to the lake.
	UnitsBehind uint64 `json:"units_behind"`
	// NewestCommitLSN is the commit LSN of the topic's newest record, for a
	// Kafka source (how far the cluster has the relay's writes).
	NewestCommitLSN uint64 `json:"newest_commit_lsn,omitempty"`
	Err             string `json:"error,omitempty"`
}

// inspectTimeout bounds reading one topic's metadata for a report.
const inspectTimeout = 10 * time.Second

// ReadPosition reads source s's stream position. A stream that cannot be
// read is reported in Err, not returned as an error: a report goes on
// to the next source.
func ReadPosition(ctx context.Context, f *Fleet, s FleetSource) StreamPosition {
	if k := s.Kafka(); k != nil {
		p := StreamPosition{Where: "topic " + k.Topic}
		ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
		defer cancel()
		group := f.KafkaGroup()
		ts, err := kafka.Inspect(ctx, kafka.Config{Flow: s.Flow.Flow, SourceID: s.ID, Kafka: flow.KafkaOptions(k)}, []string{group})
		if err != nil {
			p.Err = err.Error()
			return p
		}
		p0 := ts.Partitions[0]
		p.DurableEnd, p.Cursor = uint64(p0.HighWatermark), uint64(p0.StartOffset)
		if ts.HasNewest {
			p.NewestCommitLSN = ts.NewestCommitLSN
		}
		for _, g := range ts.Groups {
			if g.Group == group && len(g.Partitions) > 0 && g.Partitions[0].Committed >= 0 {
				p.Cursor, p.Registered = uint64(g.Partitions[0].Committed), true
			}
		}
		if p.DurableEnd > p.Cursor {
			p.UnitsBehind = p.DurableEnd - p.Cursor
		}
		return p
	}
	dir := s.LogDir()
	p := StreamPosition{Where: "log " + dir}
	l, err := segmentlog.OpenReadOnly(dir, segmentlog.Options{})
	if err != nil {
		p.Err = err.Error()
		return p
	}
	defer l.Close()
	p.DurableEnd, p.Cursor = l.NextOffset(), l.FirstOffset()
	if off, ok, err := l.CursorOffset(f.CommitterCursor()); err == nil && ok {
		p.Cursor, p.Registered = off, true
	}
	if p.DurableEnd > p.Cursor {
		p.UnitsBehind = p.DurableEnd - p.Cursor
	}
	return p
}
