package lake

import (
	"context"
	"errors"
	"sort"

	"github.com/trellara/trellara/consumer"
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

// PlanNext reads every source's log from the committer's cursor to the
// durable end, without moving the cursor.
func PlanNext(f *Fleet) ([]PlanSource, error) {
	var out []PlanSource
	for _, s := range f.Sources {
		p := PlanSource{SourceID: s.ID}
		if s.Kafka() != nil {
			p.Note = "a Kafka source (topic " + s.Kafka().Topic + "): lake plan reads local logs only"
			out = append(out, p)
			continue
		}
		c, err := consumer.Open(s.Flow.Transport.Local.LogDir(), f.CommitterCursor(), consumer.Options{NoCommit: true})
		if err != nil {
			p.Note = "log not readable: " + err.Error()
			out = append(out, p)
			continue
		}
		p.FromOffset, p.ToOffset = c.Offset(), c.NextOffset()
		rows := map[string]int{}
		for c.Offset() < p.ToOffset {
			u, err := c.Next(context.Background())
			if err != nil {
				var de *consumer.DecodeError
				if errors.As(err, &de) {
					p.Note = "stops at an invalid entry (the committer quarantines the source): " + err.Error()
					break
				}
				_ = c.Close()
				return nil, err
			}
			p.Units++
			if EndsGroup(u.Envelope) {
				p.Transactions++
			}
			tcs, err := Changes(u.Envelope)
			if err != nil {
				p.Note = "stops at a unit it cannot write (the committer quarantines the source): " + err.Error()
				break
			}
			for _, tc := range tcs {
				rows[tc.Table.String()] += len(tc.Changes)
			}
		}
		_ = c.Close()
		for t, n := range rows {
			p.Tables = append(p.Tables, PlanTable{Table: t, Rows: n})
		}
		sort.Slice(p.Tables, func(i, j int) bool { return p.Tables[i].Table < p.Tables[j].Table })
		out = append(out, p)
	}
	return out, nil
}
