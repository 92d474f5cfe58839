// Package apply is the Postgres applier: it reads envelopes from the
// transport in commit order and applies each source transaction to a
// PostgreSQL target atomically, exactly once, with its checkpoint.
//
// # Guarantees
//
//  1. One source transaction is never split: its rows and the checkpoint
//     row commit in the same target transaction. Several whole source
//     transactions may share one target transaction (Config.MaxBatchTxns,
//     MaxBatchRows, MaxBatchBytes); a reader of the target sees either all
//     of a source transaction or none of it.
//  2. Exactly once: a transaction whose commit LSN is at or below the
//     checkpoint, or a snapshot batch below snapshot_progress.next_batch,
//     is a redelivery and is skipped (counted in txns_skipped).
//  3. The transport cursor moves only after the target commit that holds
//     the unit, and only forward. A crash in between costs a redelivery,
//     never a gap. On start the target's checkpoint, not the cursor,
//     decides where applying resumes: a cursor ahead of it (the target
//     lost commits: restored from a backup, failed over to an asynchronous
//     standby) is rewound to the offset after the checkpoint's unit, or,
//     when the transport no longer holds that offset, Run refuses with
//     *CheckpointBehindError naming the recovery (Rewinder).
//  4. Unchanged TOAST values are left out of the UPDATE's SET list: the
//     stored value stays, it never becomes NULL.
//  5. Nothing is dropped silently: a unit the target refuses (constraint,
//     type, missing table or column, an UPDATE or DELETE that matches no
//     row) is rolled back, stored in the quarantine table with the error,
//     SQLSTATE and envelope bytes, and Run returns *QuarantinedError. In
//     strict mode the flow stops there; the checkpoint stays before it.
//     Connection loss, shutdowns, serialization failures and deadlocks are
//     not the data's fault: Run returns *TransientError and quarantines
//     nothing (classify in errors.go holds the whole policy).
//
// The checkpoint is written in one place, commit (commit.go), which every
// path that commits a target transaction goes through: a batch of
// transactions, a chunk sequence, a snapshot unit. In the target
// transaction that holds the data it writes snapshot progress, the
// checkpoint row and the closing of replayed quarantine rows; it flushes
// and commits; then it moves the in-memory checkpoint and the counters,
// and last the cursor. Besides the row's creation at the first start,
// the one other write to it is the skipped count of a redelivered
// snapshot unit or chunk sequence: a statement of its own that moves no
// position (skipUnit).
//
// # Units
//
//	TRANSACTION   one source transaction; batched with its neighbours
//	SNAPSHOT      batch N (Boundary.chunk_index) of a relation's initial copy,
//	              taken at the slot's consistent point (commit_lsn); COPY.
//	              Consecutive batches already read share one target
//	              transaction, within MaxBatchRows and MaxBatchBytes
//	SNAPSHOT_END  the relation's copy is complete after N batches; its
//	              visibility boundary is commit_lsn
//	CHUNK         part k of n of one large source transaction (strict mode:
//	              consecutive in the log); the whole sequence is applied as
//	              one target transaction, one chunk in memory at a time
//	              (chunk.go). Chunks of another partition, and Config.Mode
//	              "partitioned", are refused with ErrPartitioned.
//
// The relay writes every snapshot unit of a flow before the first stream
// transaction, and every stream transaction commits after the consistent
// point. Snapshot units do not move the checkpoint's commit LSN.
//
// # How rows become SQL
//
// Values arrive in PostgreSQL text output form and are sent as text-format
// parameters of prepared statements; the server infers each parameter's
// type from the target column, so every type — arrays, json, numeric, bytea
// (hex), timestamptz, enums, domains — is parsed by its own input function.
//
//	INSERT   INSERT INTO t (all columns) OVERRIDING SYSTEM VALUE VALUES (...)
//	UPDATE   UPDATE t SET <sent, changed columns> WHERE <key> = <old key,
//	         or the new tuple's key when the key did not change>
//	DELETE   DELETE FROM t WHERE <key> = <old key>
//	FULL     REPLICA IDENTITY FULL: the target's primary key from the old
//	         tuple if the target has one; otherwise every old column with
//	         IS NOT DISTINCT FROM, first match only (tableoid, ctid)
//	TRUNCATE consecutive truncates with the same options in one statement
//	MESSAGE  ignored (counted)
//
// An UPDATE or DELETE must match exactly one row; anything else means the
// target diverged and the unit is quarantined. Each distinct statement shape
// is prepared once (so a missing table or column is tied to its relation);
// the statements of a target transaction are pipelined with pgx.Batch in
// round trips of at most pipelineStmtsMax, the first headed by the
// transaction's BEGIN (lazyTx); COMMIT follows once their results are
// checked. Snapshot batches use COPY in text
// format (copy.go documents the escaping). A DDL barrier unit (envelope
// version 2, docs/SCHEMA.md) starts a target transaction of its own: every
// unit before it commits first, then its target DDL runs (pgTx.applyBarrier,
// schemachange.Statement), then its rows, in that one transaction. Any other
// shape difference (a target that lacks a column) is refused (42703) and the
// unit is quarantined.
//
// # Target state (schema "trellara" by default)
//
//	meta               key/value; apply_schema_version = 1
//	checkpoints        (flow, source_id) PK; commit_lsn, end_lsn pg_lsn;
//	                   log_offset bigint; applied_at timestamptz;
//	                   txns_applied, txns_skipped, rows_applied bigint
//	snapshot_progress  (flow, source_id, relation) PK; next_batch bigint;
//	                   done bool; boundary_lsn pg_lsn; rows bigint
//	quarantine         id bigserial; flow, source_id, unit_key, unit;
//	                   commit_lsn, end_lsn; commit_time; log_offset;
//	                   relation; error; sqlstate; envelope bytea; attempts;
//	                   quarantined_at; replayed_at (set when a later run
//	                   applies the unit). One open row per unit.
//
// EnsureSchema creates them (schema.go holds the DDL). A session advisory
// lock keyed by schema, flow and source keeps a second applier out. The
// applier's session commits durably (synchronous_commit off is raised to
// local); with Config.SynchronousCommit off (the default) each applying
// transaction commits asynchronously, and the cursor moves only over
// those the target reports flushed (durable.go). Under Run the cursor's
// own commit (a file and directory fsync for the local log) runs on a
// goroutine of its own, which lags the applier and never leads it
// (cursorWriter).
//
// # Batching and the Source
//
// Source.Next blocks. Run moves units through a reader goroutine into a
// queue of at most MaxBatchTxns units; each batch is the first unit plus
// whatever the queue already holds, so Run never waits to fill a batch and
// batches grow by themselves when the target is the bottleneck.
//
// # Decisions and the Target
//
// The Applier holds the decisions — redelivery, batching, chunk
// sequencing, failure isolation, quarantine, and the order of target
// commit then cursor — and a Target carries them out (target.go): New
// uses the PostgreSQL target (pgtarget.go: prepared statements,
// pipelining, COPY), NewWithTarget any other. The deterministic simulator
// (internal/sim) runs this same code against a simulated transactional
// database through NewWithTarget, driving it with Open, Step and Close
// instead of Run: Step applies one batch from a PollSource that never
// blocks. The simulator's mutation tests remove protections through a
// target that implements internal/mutation's Carrier; no exported API
// switches a protection off.
//
// # Target tables
//
// pgcatalog.ReadTables reads definitions from the source catalog; CreateTables
// creates them on the target; ValidateTables names every difference that
// would make apply fail or diverge, each with the SQL that fixes it.
package apply
