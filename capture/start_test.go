package capture_test

import (
	"fmt"
	"testing"

	"github.com/trellara/trellara/capture"
)

// Every combination of what a start knows, checked against the rules
// stated one by one (not restated as the same switch).
func TestDecideStartWholeTable(t *testing.T) {
	type slotPos int
	const (
		withinLog  slotPos = iota // confirmed at or before the log's durable end
		withinAcks                // past the log, covered by the AckStore
		pastBoth                  // past both: a gap
	)
	n := 0
	for bits := range 1 << 5 {
		for _, pos := range []slotPos{withinLog, withinAcks, pastBoth} {
			exists, owns, done, empty, fromSlot := bits&1 != 0, bits&2 != 0, bits&4 != 0, bits&8 != 0, bits&16 != 0
			s := capture.Start{SlotExists: exists, OwnsSlot: owns, SnapshotDone: done, FromSlot: fromSlot,
				Log: capture.Resume{DurableEnd: 1000, SkipThrough: 900, SkipEqual: true, Empty: empty}, Acked: 500}
			if empty {
				s.Log = capture.Resume{Empty: true}
			}
			switch pos {
			case withinLog:
				s.SlotConfirmed = 1000
			case withinAcks:
				s.Acked, s.SlotConfirmed = 2000, 1500
			case pastBoth:
				s.SlotConfirmed = 3000
			}
			gap := !empty && pos == pastBoth
			got := capture.DecideStart(s)
			n++
			name := fmt.Sprintf("%+v", s)
			must := func(cond bool, rule string) {
				t.Helper()
				if !cond {
					t.Errorf("%s: %s broken by %s", name, got, rule)
				}
			}
			// A missing slot: refuse unless owned; with data in the log the
			// slot's loss is a gap; otherwise the flow creates and snapshots.
			must(exists || got != capture.StartResume, "never resume without a slot")
			must(exists || owns || got == capture.StartNoSlot, "a missing slot the flow does not own is refused")
			must(exists || !owns || empty || got == capture.StartSlotGone, "a missing slot with data in the log is a gap")
			must(got != capture.StartSnapshot || (!exists && owns && empty), "snapshot only into an empty log, for an owned new slot")
			must(exists || !owns || !empty || got == capture.StartSnapshot, "an owned new slot with an empty log snapshots")
			// An existing slot: an owned one needs its snapshot marker; then
			// the gap rule; then an empty log is refused unless the source
			// starts at the slot.
			must(!exists || got != capture.StartSnapshot, "never a second snapshot over an existing slot")
			must(!(exists && owns && !done) || got == capture.StartIncompleteSnapshot, "an owned slot without the snapshot marker is refused")
			must(!(exists && (!owns || done) && gap) || got == capture.StartGap, "a slot past the log and the acks is a gap")
			must(got != capture.StartGap || gap, "a slot the log or the acks cover is no gap")
			must(!(exists && (!owns || done) && empty && !fromSlot) || got == capture.StartEmptyLog, "an existing slot with an empty log is refused")
			must(got != capture.StartResume || (!gap && (!empty || fromSlot) && (!owns || done)), "resume only when nothing forbids it")
			must(!(exists && (!owns || done) && !gap && (!empty || fromSlot)) || got == capture.StartResume, "resume when nothing forbids it")
		}
	}
	if n != 96 {
		t.Fatalf("checked %d cases, want 96", n)
	}
}

func TestStartActionString(t *testing.T) {
	if s := capture.StartIncompleteSnapshot.String(); s != "incomplete-snapshot" {
		t.Fatal(s)
	}
}
