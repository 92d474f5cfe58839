package relay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/transport"
)

// ordersRel is the relation the session tests stream: orders(id bigint
// key, note text).
var ordersRel = &pgoutput.Relation{RelationID: 16400, Namespace: "public", Name: "orders", ReplicaIdentity: 'd',
	Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 20, TypeModifier: -1}, {Name: "note", TypeOID: 25, TypeModifier: -1}}}

func txt(s string) pgoutput.Column {
	return pgoutput.Column{Kind: pgoutput.ColumnText, Data: []byte(s)}
}

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
	s, err := NewSession(nil, tr, AfterSnapshot(cp), Options{SourceID: "src", Slot: "s"})
	if err != nil {
		t.Fatal(err)
	}
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

// A crash in the middle of publishing a large transaction B leaves its
// first chunks in the transport after the whole transaction A before it.
// When the commits were back to back, A's commit record ends exactly where
// B's begins (A's end LSN = B's commit LSN), and the slot, acknowledged
// through A, is confirmed at exactly that position. The server resends
// every transaction whose commit LSN is at or past the confirmed position,
// so B comes again: that is no gap. A slot confirmed past B's commit LSN
// is one (B would never come again), and is refused.
func TestResumeAfterPartialChunksBackToBack(t *testing.T) {
	const (
		cA = 0x2000000
		eA = 0x2000030 // A's end LSN
		cB = eA        // B's commit record starts where A's ends
		eB = 0x2000060
	)
	ctx := context.Background()
	full := &transport.Memory{}
	opts := Options{SourceID: "src", Slot: "s", Assembler: capture.AssemblerOptions{ChunkBytesMax: 4 << 10}}
	s, err := NewSession(nil, full, Resume{Empty: true}, opts)
	if err != nil {
		t.Fatal(err)
	}
	a := []pgoutput.Message{
		&pgoutput.Begin{FinalLSN: cA, Xid: 700},
		ordersRel,
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("1"), txt("small")}},
		&pgoutput.Commit{CommitLSN: cA, EndLSN: eA},
	}
	b := []pgoutput.Message{&pgoutput.Begin{FinalLSN: cB, Xid: 701}}
	for i := 0; i < 200; i++ {
		b = append(b, &pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt(fmt.Sprint(100 + i)), txt(strings.Repeat("x", 100))}})
	}
	b = append(b, &pgoutput.Commit{CommitLSN: cB, EndLSN: eB})
	feedSession := func(s *Session, msgs []pgoutput.Message) {
		t.Helper()
		for _, m := range msgs {
			if err := s.HandleCopyData(ctx, xlogData(cA, m)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	feedSession(s, append(append([]pgoutput.Message{}, a...), b...))
	s.Close()
	units := full.Units()
	if len(units) < 3 {
		t.Fatalf("%d units: want A and B in several chunks", len(units))
	}
	// The crash: A and B's first chunk are durable, the rest is not.
	crashed := &transport.Memory{}
	if err := crashed.PublishBatch(ctx, units[:2]); err != nil {
		t.Fatal(err)
	}
	res, err := ResumeFrom(ctx, crashed)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		confirmed uint64
		gap       bool
	}{
		{cA, false},
		{eA, false}, // acknowledged through A: B is resent
		{cB + 1, true},
		{eB, true}, // B acknowledged but not durable: lost
	} {
		err := CheckResume("s", res, tc.confirmed, 0, "trellara run --config trellara.yml --cleanup")
		var gap *GapError
		if got := errors.As(err, &gap); got != tc.gap {
			t.Errorf("slot confirmed at %s with B (commit %s) partly durable: gap %v (%v), want gap %v",
				envelope.FormatLSN(tc.confirmed), envelope.FormatLSN(cB), got, err, tc.gap)
		}
	}
	// The session resumed there acknowledges nothing past B's commit before
	// B is durable, and publishes B whole when the server resends it.
	s2, err := NewSession(nil, crashed, res, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if ack := s2.Stats().DurableEnd; ack > cB {
		t.Fatalf("resumed session acknowledges %s before B (commit %s) is durable", envelope.FormatLSN(ack), envelope.FormatLSN(cB))
	}
	feedSession(s2, append([]pgoutput.Message{ordersRel}, b...))
	got := crashed.Units()
	if want := 2 + len(units) - 1; len(got) != want {
		t.Fatalf("%d units after the resend, want %d (A, B's partial chunk, B whole)", len(got), want)
	}
	for i, u := range got[2:] {
		if !bytes.Equal(u, units[1+i]) {
			t.Fatalf("resent unit %d differs from B's chunk %d", 2+i, i)
		}
	}
	if ack := s2.Stats().DurableEnd; ack != eB {
		t.Fatalf("acknowledged %s after B is durable, want %s", envelope.FormatLSN(ack), envelope.FormatLSN(eB))
	}
}

// NewSession refuses options that cannot work, naming the field, before
// anything connects.
func TestNewSessionRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		o     Options
		field string
	}{
		{Options{Slot: "s"}, "SourceID"},
		{Options{SourceID: "src"}, "Slot"},
		{Options{SourceID: "src", Slot: "s", ProtocolVersion: 9}, "ProtocolVersion"},
		{Options{SourceID: "src", Slot: "s", ProtocolVersion: 1, Streaming: true}, "Streaming"},
	} {
		_, err := NewSession(nil, &transport.Memory{}, Resume{}, tc.o)
		var oe *OptionsError
		if !errors.As(err, &oe) || oe.Field != tc.field || oe.Package != "relay" {
			t.Errorf("%+v: got %v, want an OptionsError for %s", tc.o, err, tc.field)
		}
	}
	s, err := NewSession(nil, &transport.Memory{}, Resume{}, Options{SourceID: "src", Slot: "s"})
	if err != nil || s.cfg.ProtocolVersion != 2 || s.cfg.StatusInterval != time.Second {
		t.Fatalf("defaults: %v %+v", err, s.cfg)
	}
}
