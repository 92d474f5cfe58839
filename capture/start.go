package capture

// Start is what a capture start knows about the slot, the transport and
// the flow's durable state.
type Start struct {
	SlotExists bool
	// OwnsSlot: the flow creates its slot and publication (and takes the
	// initial snapshot); otherwise they are the operator's.
	OwnsSlot bool
	// SnapshotDone: the flow's snapshot marker exists (written durably
	// once the initial snapshot is whole in the transport).
	SnapshotDone bool
	// Log is where the transport says a session resumes.
	Log Resume
	// SlotConfirmed is the slot's confirmed flush position; Acked is the
	// AckStore's record.
	SlotConfirmed uint64
	Acked         uint64
	// FromSlot: the source has no history before the slot, so streaming
	// from it into an empty transport is a complete start without a
	// snapshot. The simulator's workloads without a snapshot are such a
	// source; a flow never assumes it.
	FromSlot bool
}

// StartAction is what a capture start does.
type StartAction int

const (
	// StartResume streams from the slot, skipping what Log holds.
	StartResume StartAction = iota
	// StartSnapshot creates the publication and the slot, takes the
	// initial snapshot at the slot's consistent point, writes the snapshot
	// marker, then streams from AfterSnapshot.
	StartSnapshot
	// StartNoSlot refuses: the slot is missing and the flow does not own
	// it.
	StartNoSlot
	// StartSlotGone is a gap: the slot is missing while the transport
	// holds data, so what was committed since is lost to the flow.
	StartSlotGone
	// StartIncompleteSnapshot refuses: the flow's slot exists but its
	// snapshot never completed; an exported snapshot cannot be resumed.
	StartIncompleteSnapshot
	// StartGap is a gap: the slot is confirmed past both what the
	// transport holds and the AckStore's record (CheckResume).
	StartGap
	// StartEmptyLog is a gap: the slot exists but the transport is empty,
	// so its starting state was never captured.
	StartEmptyLog
)

var startActionNames = [...]string{"resume", "snapshot", "no-slot", "slot-gone", "incomplete-snapshot", "gap", "empty-log"}

func (a StartAction) String() string {
	if int(a) < len(startActionNames) {
		return startActionNames[a]
	}
	return "StartAction(?)"
}

// DecideStart holds the start rules of the pgoutput capture path, in the
// order they apply. The flow (internal/flow) and the simulator
// (internal/sim) both start by it.
func DecideStart(s Start) StartAction {
	switch {
	case !s.SlotExists && !s.OwnsSlot:
		return StartNoSlot
	case !s.SlotExists && !s.Log.Empty:
		return StartSlotGone
	case !s.SlotExists:
		return StartSnapshot
	case s.OwnsSlot && !s.SnapshotDone:
		return StartIncompleteSnapshot
	case CheckResume("", s.Log, s.SlotConfirmed, s.Acked, "") != nil:
		return StartGap
	case s.Log.Empty && !s.FromSlot:
		return StartEmptyLog
	}
	return StartResume
}
