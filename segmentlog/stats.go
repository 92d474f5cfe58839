package segmentlog

import (
	"slices"
	"strings"
)

// Stats are the numbers an operator watches (later exported as metrics).
type Stats struct {
	RetainedBytes int64 // bytes in all segment files, headers included
	Segments      int
	FirstOffset   uint64 // oldest retained offset
	NextOffset    uint64 // offset the next append gets
	Cursors       []CursorStats
}

// CursorStats describe one registered cursor.
type CursorStats struct {
	Name   string
	Offset uint64 // committed: the next offset the consumer reads
	// LagOffsets is NextOffset - Offset: entries not yet processed.
	LagOffsets uint64
	// LagBytes is how many retained segment bytes lie at or after Offset.
	LagBytes int64
	// PastRetention says retention expired the cursor; its consumer must
	// be reseeded.
	PastRetention bool
}

// Stats returns a consistent snapshot. It does no I/O.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := Stats{Segments: len(l.segs), FirstOffset: l.segs[0].base, NextOffset: l.next}
	// after[i] is the number of bytes in segments i+1 and later.
	after := make([]int64, len(l.segs))
	for i := len(l.segs) - 1; i >= 0; i-- {
		if i+1 < len(l.segs) {
			after[i] = after[i+1] + l.segs[i+1].size
		}
		st.RetainedBytes += l.segs[i].size
	}
	for name, c := range l.cursors {
		cs := CursorStats{Name: name, Offset: c.offset, PastRetention: c.pastRetention, LagBytes: st.RetainedBytes}
		if c.offset <= l.next {
			cs.LagOffsets = l.next - c.offset
		}
		if !c.pastRetention && c.offset >= st.FirstOffset {
			i, found := slices.BinarySearchFunc(l.segs, c.segBase, func(s *segment, base uint64) int {
				switch {
				case s.base < base:
					return -1
				case s.base > base:
					return 1
				}
				return 0
			})
			if found {
				cs.LagBytes = after[i] + l.segs[i].size - c.pos
			}
		}
		st.Cursors = append(st.Cursors, cs)
	}
	slices.SortFunc(st.Cursors, func(a, b CursorStats) int { return strings.Compare(a.Name, b.Name) })
	return st
}
