//go:build full

package lake

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/consumer/kafkaconsumer"
	"github.com/trellara/trellara/internal/flow"
)

// PlanTable is one table's share of a source's next commit.
type PlanTable struct {
	Table string `json:"table"`
	Rows  int    `json:"rows"`
}

// PlanSource is what the committer's next commit will take from one
// source: the units between its cursor and the log's durable end that
// dedup has not seen (by the committed marks the caller passes, if any).
type PlanSource struct {
	SourceID     string      `json:"source_id"`
	FromOffset   uint64      `json:"from_offset"`
	ToOffset     uint64      `json:"to_offset"`
	Units        int         `json:"units"`
	Transactions int         `json:"transactions"`
	Tables       []PlanTable `json:"tables"`
	Note         string      `json:"note,omitempty"`
}

// PlanNext reads every source's stream from the committer's position to
// the durable end, without moving the position: a local log from the
// committer's cursor, a Kafka topic from the committer's group offset to
// the end it lists now.
func PlanNext(ctx context.Context, f *Fleet) ([]PlanSource, error) {
	var out []PlanSource
	for _, s := range f.Sources {
		p := PlanSource{SourceID: s.ID}
		rows := map[string]int{}
		if s.Kafka() != nil {
			planKafka(ctx, f, s, &p, rows)
		} else if err := planLocal(f, s, &p, rows); err != nil {
			return nil, err
		}
		for t, n := range rows {
			p.Tables = append(p.Tables, PlanTable{Table: t, Rows: n})
		}
		sort.Slice(p.Tables, func(i, j int) bool { return p.Tables[i].Table < p.Tables[j].Table })
		out = append(out, p)
	}
	return out, nil
}

// planLocal counts a local log's units from the committer's cursor.
func planLocal(f *Fleet, s FleetSource, p *PlanSource, rows map[string]int) error {
	c, err := consumer.Open(s.Flow.Transport.Local.LogDir(), f.CommitterCursor(), consumer.Options{NoCommit: true})
	if err != nil {
		p.Note = "log not readable: " + err.Error()
		return nil
	}
	defer c.Close()
	p.FromOffset, p.ToOffset = c.Offset(), c.NextOffset()
	for c.Offset() < p.ToOffset {
		u, err := c.Next(context.Background())
		if err != nil {
			var de *consumer.DecodeError
			if errors.As(err, &de) {
				p.Note = "stops at an invalid entry (the committer quarantines the source): " + err.Error()
				return nil
			}
			return err
		}
		if !p.count(u, rows) {
			return nil
		}
	}
	return nil
}

// planKafka counts a Kafka source's units from the committer's group
// offset (partition 0: the strict log, or the manifests) to the end listed
// now, reading through kafkaconsumer without committing. A topic that
// cannot be read, or a stream error (a gap, past retention, corruption),
// is the source's note: the plan goes on to the next source.
func planKafka(ctx context.Context, f *Fleet, s FleetSource, p *PlanSource, rows map[string]int) {
	o := flow.KafkaOptions(s.Kafka())
	octx, cancel := context.WithTimeout(ctx, kafkaOpTimeout)
	defer cancel()
	c, err := kafkaconsumer.Open(octx, kafkaconsumer.Options{Brokers: o.Brokers, Topic: o.Topic, Group: f.KafkaGroup(),
		Mode: o.Mode, Partitions: o.Partitions, TLS: o.TLS, SASL: o.SASL})
	if err != nil {
		p.Note = fmt.Sprintf("topic %s not readable: %v", o.Topic, err)
		return
	}
	defer c.Close()
	end, err := c.EndOffset(octx)
	if err != nil {
		p.Note = fmt.Sprintf("topic %s: list its end: %v", o.Topic, err)
		return
	}
	p.FromOffset, p.ToOffset = c.Offset(), end
	rctx, rcancel := context.WithTimeout(ctx, drainWait)
	defer rcancel()
	for c.Offset() < end {
		u, err := c.Next(rctx)
		if err != nil {
			p.Note = fmt.Sprintf("topic %s at offset %d: %v", o.Topic, c.Offset(), err)
			return
		}
		if !p.count(u, rows) {
			return
		}
	}
}

// count adds unit u to the plan; false when the committer would stop at
// it (a unit it cannot write), with the note saying so.
func (p *PlanSource) count(u consumer.Unit, rows map[string]int) bool {
	p.Units++
	if EndsGroup(u.Envelope) {
		p.Transactions++
	}
	tcs, err := Changes(u.Envelope)
	if err != nil {
		p.Note = "stops at a unit it cannot write (the committer quarantines the source): " + err.Error()
		return false
	}
	for _, tc := range tcs {
		rows[tc.Table.String()] += len(tc.Changes)
	}
	return true
}
