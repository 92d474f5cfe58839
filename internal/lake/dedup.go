package lake

import (
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// Dedup holds, per changelog table and source, the highest commit LSN the
// changelog has (committed, or accepted into the batch being written). A
// transaction group is written to a table only when its commit LSN is above
// that: a source's log is in commit order, so a group at or below it was
// written before (a reconnect that published a transaction again, a restart
// that re-reads units the cursor had not passed).
//
// The committed part lives in each table's properties (PropThrough + source
// id), written in the same Iceberg commit as the rows, so a crash can
// never separate the two.
type Dedup struct {
	m map[string]map[string]uint64
}

// NewDedup returns an empty Dedup.
func NewDedup() *Dedup { return &Dedup{m: map[string]map[string]uint64{}} }

// Seen is the highest commit LSN of source in table.
func (d *Dedup) Seen(table, source string) uint64 { return d.m[table][source] }

// Observe raises the mark of source in table to lsn (a committed value
// read back from the table's properties).
func (d *Dedup) Observe(table, source string, lsn uint64) {
	if d.m[table] == nil {
		d.m[table] = map[string]uint64{}
	}
	if lsn > d.m[table][source] {
		d.m[table][source] = lsn
	}
}

// Accept reports whether a group of source at commit LSN lsn is new for
// table, and if so records it.
func (d *Dedup) Accept(table, source string, lsn uint64) bool {
	if lsn <= d.Seen(table, source) {
		return false
	}
	d.Observe(table, source, lsn)
	return true
}

// Clone copies d (the committer keeps the committed marks apart from a
// batch's until the batch commits).
func (d *Dedup) Clone() *Dedup {
	c := NewDedup()
	for t, m := range d.m {
		for s, v := range m {
			c.Observe(t, s, v)
		}
	}
	return c
}

// PropThrough prefixes the table property that records, per source id,
// the highest commit LSN written to the table.
const PropThrough = "trellara.through."

// EndsGroup reports whether unit e completes a group the committer writes
// as one: a whole transaction, the last chunk of a chunked one, or the end
// of a table's snapshot. A group is never split across Iceberg commits,
// which is what lets dedup work by commit LSN alone.
func EndsGroup(e *pb.Envelope) bool {
	b := e.GetBoundary()
	switch b.GetKind() {
	case pb.UnitKind_UNIT_KIND_CHUNK:
		return b.ChunkIndex+1 >= b.ChunkCount
	case pb.UnitKind_UNIT_KIND_SNAPSHOT:
		return false
	default:
		return true
	}
}
