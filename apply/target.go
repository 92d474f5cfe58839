package apply

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// Target is the database the applier writes to, seen from the applier's
// decision logic. The Applier decides what to apply, what is a redelivery,
// how units are batched and sequenced, when the checkpoint and the cursor
// move and what is quarantined; a Target only carries those decisions out
// with transactional semantics. New uses the PostgreSQL target
// (pgtarget.go); NewWithTarget takes any other, which is how the
// deterministic simulator (internal/sim) runs this same code against a
// simulated database.
//
// Error contract: a method returns a *Refusal when the target refused a
// unit's data (constraint, type, missing table or column, an UPDATE or
// DELETE matching no row); any other error is about the target itself and
// is classified by the applier (classify: connection loss and server
// restarts are transient, privileges fatal).
type Target interface {
	// Start prepares the target for the flow (state tables, the flow's
	// lock) and returns what it has recorded about the flow.
	Start(ctx context.Context) (State, error)
	// Stop releases what Start took. It must work after a failed call.
	Stop(ctx context.Context)
	// Begin opens a target transaction.
	Begin(ctx context.Context) (TargetTx, error)
	// Quarantine records a refused unit, outside any open transaction,
	// replacing the unit's open quarantine row if it has one, and returns
	// the row's id.
	Quarantine(ctx context.Context, q QuarantineRecord) (int64, error)
	// CountSkipped adds n to the checkpoint's skipped count, atomically
	// and durably on its own.
	CountSkipped(ctx context.Context, n int64) error
}

// TargetTx is one open target transaction. Nothing it does is visible to
// another session before Commit returns nil; after Rollback or a failed
// call nothing of it ever is.
type TargetTx interface {
	// Apply writes the row changes of env (a TRANSACTION or CHUNK unit),
	// which is unit number unit of this transaction. It returns the number
	// of data rows (inserts, updates, deletes) and of logical decoding
	// messages, which carry no table data. A target may defer sending
	// (pipelining): a *Refusal found later is returned by a later call and
	// names the unit it belongs to.
	Apply(ctx context.Context, unit int, env *pb.Envelope) (rows, messages int, err error)
	// Copy writes the rows of a SNAPSHOT unit (all inserts).
	Copy(ctx context.Context, unit int, env *pb.Envelope) error
	// SetProgress records a relation's snapshot progress.
	SetProgress(ctx context.Context, p SnapshotProgress) error
	// SetCheckpoint updates the flow's checkpoint row.
	SetCheckpoint(ctx context.Context, u CheckpointUpdate) error
	// MarkReplayed closes quarantine row id: its unit is being applied.
	MarkReplayed(ctx context.Context, id int64) error
	// Flush sends anything deferred and reports its outcome.
	Flush(ctx context.Context) error
	// Commit makes the transaction durable and visible. It returns the
	// target's commit-time clock for the checkpoint's applied_at (zero if
	// unknown). A deferred constraint failing here is a *Refusal with
	// Unit -1.
	Commit(ctx context.Context) (appliedAt time.Time, err error)
	// Rollback discards the transaction; a no-op after Commit.
	Rollback(ctx context.Context)
}

// State is what a target has recorded about a flow.
type State struct {
	Checkpoint Checkpoint
	// Snapshots by relation ("schema.name").
	Snapshots map[string]SnapshotProgress
	// OpenQuarantine maps the unit key of every open quarantine row to its
	// id.
	OpenQuarantine map[string]int64
}

// CheckpointUpdate is the change to the checkpoint row that commits with
// the units of a target transaction.
type CheckpointUpdate struct {
	// MovesPosition: CommitLSN, EndLSN (if MovesLSN) and Offset replace the
	// stored ones. False when every unit of the transaction was a
	// redelivery: only TxnsSkipped is added.
	MovesPosition bool
	// MovesLSN is false for snapshot units, which do not move the stream
	// position.
	MovesLSN          bool
	CommitLSN, EndLSN uint64
	Offset            uint64
	// Added to the lifetime totals.
	TxnsApplied, TxnsSkipped, RowsApplied int64
}

// QuarantineRecord is a refused unit as stored in the quarantine table.
type QuarantineRecord struct {
	Flow, SourceID string
	// Key identifies the unit across redeliveries ("transaction/<lsn>",
	// "snapshot/<relation>/<batch>", "snapshot_end/<relation>").
	Key string
	// Unit is "transaction", "snapshot" or "snapshot_end".
	Unit              string
	CommitLSN, EndLSN uint64
	CommitTime        *time.Time
	Offset            uint64
	Relation          string
	Error             string
	SQLState          string
	// Envelope is the refused unit's encoded envelope (for a chunk
	// sequence, the failing chunk's).
	Envelope []byte
}

// Refusal is the target refusing a unit's data. The applier quarantines
// the unit; retrying cannot help.
type Refusal struct {
	// Unit is the unit's number in the transaction (the unit argument of
	// Apply or Copy), or -1 when the refusal cannot be attributed (a
	// deferred constraint failing at COMMIT).
	Unit int
	// Relation is the source relation (config.TableName form) whose change failed,
	// when known.
	Relation string
	// SQLState is the target's error code; empty when the target found the
	// problem itself.
	SQLState string
	Err      error
}

func (r *Refusal) Error() string {
	var b strings.Builder
	b.WriteString("apply: the target refused unit ")
	fmt.Fprintf(&b, "%d", r.Unit)
	if r.Relation != "" {
		b.WriteString(" on " + r.Relation)
	}
	fmt.Fprintf(&b, ": %v", r.Err)
	return b.String()
}

func (r *Refusal) Unwrap() error { return r.Err }

// PollSource is a Source for a driver that owns the schedule (Step): it
// never blocks.
type PollSource interface {
	// Poll returns the next entry if one is available now; ok is false
	// when there is none yet.
	Poll(ctx context.Context) (offset uint64, payload []byte, ok bool, err error)
	// Seek makes the next Poll return the entry at offset. Step seeks
	// back when a chunk sequence is not yet complete in the log: the
	// partial sequence is rolled back and read again later.
	Seek(offset uint64) error
}

// finalError is an error a target wants returned to Run's caller as it
// is, not classified (ErrBusy, a vanished checkpoint row).
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

// asFailure turns an error from a target call into a failure (the data was
// refused) or the error Run returns.
func (a *Applier) asFailure(ctx context.Context, commitLSN uint64, err error) (*failure, error) {
	var r *Refusal
	if errors.As(err, &r) && ctx.Err() == nil {
		return &failure{unit: r.Unit, relation: r.Relation, err: r.Err, sqlstate: r.SQLState}, nil
	}
	return nil, a.targetErr(ctx, commitLSN, err)
}
