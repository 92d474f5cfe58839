// Package capture is the core both capture paths share: the pgoutput relay
// (package relay, over the replication protocol) and the extension's
// sidecar (package sidecar, over the extension's socket). Each path only
// turns its source's messages into units through relay's Assembler; what
// happens to a unit after that is decided here, once:
//
//   - where a session resumes from the transport (ResumeFrom, AfterSnapshot)
//     and which replayed transactions it skips (Resume.Skips);
//   - when a resume must be refused as a gap (CheckResume);
//   - fence recognition (FencePrefix, in Batch.Add);
//   - batching, publishing, and only then acknowledging (Batch, Publisher);
//   - the durable record of positions acknowledged with no unit behind
//     them (AckStore, FileAcks).
//
// The acknowledgement rule: a position reaches the source only after every
// unit of every transaction ending at or before it is durable in the
// transport, or, where no unit ends there, after the position itself is
// durable in the AckStore.
package capture

import (
	"context"
	"fmt"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/transport"
)

// FencePrefix is envelope.FencePrefix: the logical-message prefix of a
// fence (docs/ENVELOPE.md, "Protocol messages").
const FencePrefix = envelope.FencePrefix

// Transport is where capture publishes (transport.Publisher). Publish
// returns only once the payload is durable: that is the licence to
// acknowledge the source.
type Transport = transport.Publisher

// Resume is where a capture session starts, derived from the transport.
//
// The LSN rule everything here follows: a transaction's commit LSN is where
// its commit record starts and its end LSN where that record ends, which is
// where the next record starts (back-to-back commits: one transaction's end
// LSN is the next one's commit LSN). A slot confirmed at position P has the
// server resend, after a restart, every transaction whose commit LSN is ≥ P
// (logical decoding skips a commit record only when it starts before P).
type Resume struct {
	// DurableEnd is the highest position the source may be acknowledged
	// at without losing a transaction the transport does not hold whole:
	// the end LSN of the newest complete transaction, or the commit LSN of
	// a trailing partial one (the server resends a transaction committing
	// at the confirmed position).
	DurableEnd uint64
	// SkipThrough: transactions with commit LSN ≤ SkipThrough are already
	// in the transport (or, with SkipEqual false, < SkipThrough).
	SkipThrough uint64
	SkipEqual   bool
	Empty       bool
}

// Skips reports whether the transaction committing at commitLSN is already
// in the transport: a replay after a reconnect or restart.
func (r Resume) Skips(commitLSN uint64) bool {
	return commitLSN < r.SkipThrough || (r.SkipEqual && commitLSN == r.SkipThrough)
}

// AfterSnapshot is where streaming resumes after a snapshot taken at the
// slot's consistent point cp. A transaction whose commit record starts
// exactly at cp is not in the snapshot (the exported snapshot sees only
// what committed before cp) and the server does send it: only commits
// strictly before cp are skipped.
func AfterSnapshot(cp uint64) Resume {
	return Resume{DurableEnd: cp, SkipThrough: cp, SkipEqual: false}
}

// ResumeFrom reads the transport's newest unit. A trailing incomplete chunk
// sequence (a crash between chunks) means that transaction is not durable:
// it will be published again, whole, and readers discard the partial copy.
// The slot may have been acknowledged through the transaction before it,
// whose end LSN can equal this one's commit LSN: the position this one
// commits at is still safe, since the server resends it from there.
func ResumeFrom(ctx context.Context, tr Transport) (Resume, error) {
	b, ok, err := tr.Last(ctx)
	if err != nil {
		return Resume{}, err
	}
	if !ok {
		return Resume{Empty: true}, nil
	}
	e, err := envelope.Decode(b)
	if err != nil {
		return Resume{}, fmt.Errorf("relay: newest transport entry: %w", err)
	}
	b0 := e.GetBoundary()
	switch {
	case b0.GetKind() == pb.UnitKind_UNIT_KIND_CHUNK && b0.ChunkIndex+1 < b0.ChunkCount:
		// Everything before this transaction is complete; it is not. A
		// slot confirmed at its commit LSN resends it; one confirmed past
		// it never will (CheckResume refuses that).
		return Resume{DurableEnd: e.CommitLsn, SkipThrough: e.CommitLsn, SkipEqual: false}, nil
	case b0.GetKind() == pb.UnitKind_UNIT_KIND_SNAPSHOT || b0.GetKind() == pb.UnitKind_UNIT_KIND_SNAPSHOT_END:
		// Snapshot units sit at the consistent point: nothing streamed yet.
		return AfterSnapshot(e.CommitLsn), nil
	default:
		return Resume{DurableEnd: e.EndLsn, SkipThrough: e.CommitLsn, SkipEqual: true}, nil
	}
}

// CheckResume refuses a resume that would skip committed transactions: the
// slot confirmed beyond both res.DurableEnd and the last position recorded
// in the AckStore (acked). recovery is named in the error. Both capture
// paths decide with it.
func CheckResume(slot string, res Resume, slotConfirmed, acked uint64, recovery string) error {
	if res.Empty {
		return nil
	}
	durable := max(res.DurableEnd, acked)
	if slotConfirmed > durable {
		return &GapError{Slot: slot, SlotConfirmedLSN: slotConfirmed, TransportDurable: durable, RecoveryCommand: recovery}
	}
	return nil
}

// GapError refuses a resume that would skip committed transactions: the
// slot's confirmed position is ahead of what the transport holds durably.
type GapError struct {
	Slot             string
	SlotConfirmedLSN uint64
	TransportDurable uint64
	RecoveryCommand  string
}

func (e *GapError) Error() string {
	return fmt.Sprintf("relay: slot %s is confirmed at %s but the transport holds transactions only through %s: "+
		"resuming would silently skip what lies between. Recover with: %s",
		e.Slot, envelope.FormatLSN(e.SlotConfirmedLSN), envelope.FormatLSN(e.TransportDurable), e.RecoveryCommand)
}
