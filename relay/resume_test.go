package relay

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/trellara/trellara/internal/transport"
	"github.com/trellara/trellara/relay/pgoutput"
)

// xlogData frames a pgoutput message as the server's XLogData CopyData.
func xlogData(walStart uint64, m pgoutput.Message) []byte {
	b := []byte{'w'}
	b = binary.BigEndian.AppendUint64(b, walStart)
	b = binary.BigEndian.AppendUint64(b, walStart)
	b = binary.BigEndian.AppendUint64(b, 0)
	return pgoutput.Append(b, m)
}

// A transaction whose commit record starts exactly at the slot's consistent
// point is not in the exported snapshot, and the server sends it: resuming
// after a snapshot must publish it. (Found by make demo: the first
// transaction after the snapshot was skipped when its commit LSN equalled
// the consistent point.)
func TestResumeAfterSnapshotKeepsCommitAtConsistentPoint(t *testing.T) {
	const cp = 0x18721A0
	tr := &transport.Memory{}
	s := NewSession(nil, tr, AfterSnapshot(cp), Config{SourceID: "src", Slot: "s"})
	defer s.Close()
	ctx := context.Background()
	for _, m := range []pgoutput.Message{
		&pgoutput.Begin{FinalLSN: cp, Xid: 3563},
		ordersRel,
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("4831"), txt("x")}},
		&pgoutput.Commit{CommitLSN: cp, EndLSN: cp + 0x30},
	} {
		if err := s.HandleCopyData(ctx, xlogData(cp, m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(tr.Units()); n != 1 {
		t.Fatalf("%d units published; the transaction committing at the consistent point was skipped", n)
	}
	// Resuming from the log afterwards skips it as a redelivery.
	res, err := ResumeFrom(ctx, tr)
	if err != nil || res.SkipThrough != cp || !res.SkipEqual {
		t.Fatalf("resume after it: %+v, %v", res, err)
	}
}
