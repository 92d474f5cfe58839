package sim

import (
	"fmt"
	"slices"

	"github.com/zeebo/xxh3"

	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/schemachange"
	"github.com/trellara/trellara/segmentlog"
)

// The catalogue: every simulation (harness configuration) and every
// scenario (fault points and seed within one). Scenario ids are stable:
// reports, CI and users refer to them. docs/CORRECTNESS.md explains how to
// add one.

const (
	kib = 1 << 10
	mib = 1 << 20
)

// base is the ordinary workload: small multi-table transactions, TOAST
// updates, deletes, logical messages.
func base(txns int) Workload { return Workload{Txns: txns, MessageEvery: 5, EmptyEvery: 11} }

// defaults fills the bounds a simulation leaves zero.
func (s *Simulation) defaults() *Simulation {
	c := *s
	if c.MemoryBytesMax == 0 {
		c.MemoryBytesMax = 64 * kib
	}
	if c.ChunkBytesMax == 0 {
		c.ChunkBytesMax = 64 * kib
	}
	if c.SegmentBytesMax == 0 {
		c.SegmentBytesMax = 16 * kib
	}
	if c.FrameBytesMax == 0 {
		c.FrameBytesMax = 4 * kib
	}
	if c.MaxBatchTxns == 0 {
		c.MaxBatchTxns = 8
	}
	if c.MaxBatchRows == 0 {
		c.MaxBatchRows = 2000
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = mib
	}
	if c.Burst == 0 {
		c.Burst = 6
	}
	return &c
}

var simulations = []*Simulation{
	// Relay crash points.
	{Name: "relay-batched", Title: "small multi-table transactions, group-commit publishing", Workload: base(48)},
	{Name: "relay-streamed", Title: "streamed transactions interleaved with others, rolled-back subtransactions, aborted streams",
		Workload: Workload{Txns: 48, StreamEvery: 5, AbortEvery: 7, MessageEvery: 6}},
	{Name: "relay-spill", Title: "large transactions past the memory bound (spill to disk), one envelope each",
		Workload: Workload{Txns: 36, BigEvery: 6, BigRows: 60}, MemoryBytesMax: 4 * kib, ChunkBytesMax: 256 * kib},
	{Name: "relay-chunked", Title: "large transactions past the chunk bound (CHUNK sequences)",
		Workload: Workload{Txns: 36, BigEvery: 5, BigRows: 50}, ChunkBytesMax: 1 * kib},
	{Name: "relay-snapshot", Title: "initial snapshot at the consistent point, then the stream",
		Workload: Workload{Txns: 40, Snapshot: true, MessageEvery: 4}},
	{Name: "relay-keepalive", Title: "many empty transactions: acknowledgement by keepalive when idle",
		Workload: Workload{Txns: 48, EmptyEvery: 2}},
	{Name: "relay-toast-truncate", Title: "unchanged-TOAST updates, truncates, logical messages",
		Workload: Workload{Txns: 48, TruncateEvery: 4, MessageEvery: 2}},
	{Name: "relay-mixed", Title: "everything at once: streams, spills, chunks, truncates, aborts",
		Workload:       Workload{Txns: 48, BigEvery: 7, BigRows: 50, StreamEvery: 6, AbortEvery: 9, TruncateEvery: 10, MessageEvery: 3, EmptyEvery: 13},
		MemoryBytesMax: 3 * kib, ChunkBytesMax: 2 * kib},

	// Applier crash points.
	{Name: "apply-batched", Title: "batched apply (16 transactions per target transaction)", Workload: base(60), MaxBatchTxns: 16, Burst: 12},
	{Name: "apply-single", Title: "one source transaction per target transaction", Workload: base(40), MaxBatchTxns: 1},
	{Name: "apply-chunked", Title: "chunk sequences applied as one target transaction",
		Workload: Workload{Txns: 32, BigEvery: 4, BigRows: 40}, ChunkBytesMax: 1 * kib},
	{Name: "apply-quarantine", Title: "strict mode stops on a refused transaction; operator repairs, replay",
		Workload: Workload{Txns: 40, Incompatible: []int{12, 27}, MessageEvery: 5}, MaxBatchTxns: 1},
	{Name: "apply-snapshot", Title: "snapshot batches and their progress rows",
		Workload: Workload{Txns: 30, Snapshot: true}, MaxBatchTxns: 4},
	{Name: "apply-large-batches", Title: "large batches bounded by rows, failure isolation",
		Workload: base(60), MaxBatchTxns: 64, MaxBatchRows: 40, Burst: 16},

	// Storage faults.
	{Name: "storage-torn", Title: "power loss with torn, out-of-order page writes", Workload: base(48)},
	{Name: "storage-power-loss", Title: "power loss: unsynced data and directory entries lost", Workload: base(48)},
	{Name: "storage-fsync", Title: "fsync reports EIO: the log instance is poisoned and reopened", Workload: base(48)},
	{Name: "storage-full-disk", Title: "the disk fills up, then space is freed", Workload: base(48), SegmentBytesMax: 8 * kib},
	{Name: "storage-corruption", Title: "damage at rest in sealed segments and indexes (applier lagging)",
		Workload: base(48), SegmentBytesMax: 4 * kib, LagApplier: 100},
	{Name: "storage-large-frames", Title: "entries split into frame chunks and a manifest",
		Workload: Workload{Txns: 36, BigEvery: 5, BigRows: 30}, FrameBytesMax: 512},

	// Transport faults.
	{Name: "transport-restart", Title: "replication and consumer connections drop mid-stream",
		Workload: Workload{Txns: 48, StreamEvery: 8, BigEvery: 9, BigRows: 40, MessageEvery: 4}, ChunkBytesMax: 2 * kib},
	{Name: "transport-ambiguous", Title: "publishes that are durable but report failure",
		Workload: Workload{Txns: 40, BigEvery: 6, BigRows: 40}, ChunkBytesMax: 1 * kib},
	{Name: "transport-storm", Title: "the consumer replays old entries again and again", Workload: base(48)},
	{Name: "transport-storm-chunked", Title: "replay storms over chunk sequences",
		Workload: Workload{Txns: 32, BigEvery: 3, BigRows: 40}, ChunkBytesMax: 1 * kib},
	{Name: "transport-chunk-order", Title: "chunk sequences delivered out of order or cut short",
		Workload: Workload{Txns: 32, BigEvery: 4, BigRows: 50}, ChunkBytesMax: 1 * kib},
	{Name: "transport-partial-batch", Title: "a publish of many units is only partly durable", Workload: base(48), Burst: 12},

	// Kafka partitioned mode: the log is the manifest partition, rows go to
	// four data partitions.
	{Name: "kafka-partitioned", Title: "Kafka partitioned mode: chunks on four data partitions, a manifest per unit",
		Workload: base(48), Partitions: 4},
	{Name: "kafka-partitioned-batched", Title: "Kafka partitioned mode with large publish batches and large transactions",
		Workload: Workload{Txns: 40, BigEvery: 6, BigRows: 30, MessageEvery: 4}, Partitions: 4, Burst: 12, ChunkBytesMax: 2 * kib},

	// Schema and semantic faults.
	{Name: "schema-drift", Title: "a pinned relation changes shape mid-stream", Workload: Workload{Txns: 40, DriftAt: 30, MessageEvery: 4}},
	{Name: "schema-barrier", Title: "a configured table gains a nullable column mid-stream: a DDL barrier",
		Workload: Workload{Txns: 40, DriftAt: 20, DriftCompatible: true, MessageEvery: 4}},
	{Name: "schema-drift-streamed", Title: "the changed shape first appears inside a stream block",
		Workload: Workload{Txns: 40, DriftAt: 24, DriftInStream: true, StreamEvery: 6}},
	{Name: "schema-incompatible", Title: "rows the target refuses (CHECK, value too long)",
		Workload: Workload{Txns: 40, Incompatible: []int{9, 20, 33}}, MaxBatchTxns: 1},
	{Name: "schema-incompatible-batched", Title: "a refused transaction inside a batch is isolated",
		Workload: Workload{Txns: 48, Incompatible: []int{10, 22}}, MaxBatchTxns: 16, Burst: 12},
	{Name: "schema-incompatible-chunked", Title: "a refused row in the final chunk of a chunk sequence",
		Workload: Workload{Txns: 30, Incompatible: []int{8, 20}, IncompatibleBig: true, BigEvery: 6, BigRows: 30}, ChunkBytesMax: 1 * kib},
	{Name: "schema-retention", Title: "a lagging consumer past retention (expire on)",
		Workload: base(60), SegmentBytesMax: 2 * kib, Retention: segmentlog.Retention{MaxBytes: 6 * kib, Expire: true}, LagApplier: 100},
	// Fleet fan-in (a model over internal/lake's decision code).
	{Name: "fanin-fleet", Title: "three sources fanned into one changelog, epochs every 12 steps",
		FanIn: &FanIn{Sources: 3, Txns: 30, CloseEvery: 12}},
	{Name: "schema-retention-hold", Title: "a lagging consumer holds its segments (expire off)",
		Workload: base(60), SegmentBytesMax: 2 * kib, Retention: segmentlog.Retention{MaxBytes: 6 * kib}, LagApplier: 70},
}

func f(point string, nth int, action string) Fault {
	return Fault{Point: point, Nth: nth, Action: action}
}

const (
	reproduceRun = "trellara chaos run --scenario %s"
	recAuto      = "automatic: restart the process (`trellara run --config trellara.yml`); the relay resumes from the log's durable end and the applier from its cursor, redeliveries are skipped by the target checkpoint"
	recRepair    = "automatic: `trellara run --config trellara.yml` reopens the log, which cuts the unacknowledged torn tail (copied aside as .torn-N) and resumes"
	recQuar      = "fix the target for the refused rows (`trellara status --config trellara.yml --view quarantine`), then `trellara repair-plan --config trellara.yml` and run again: the quarantined transaction is replayed and marked replayed"
	recDrift     = "inspect with `trellara status --config trellara.yml --view diagnostics`, plan the change with `trellara schema ddl-plan --config trellara.yml`, re-pin, then run again"
)

// Recoveries that start the flow over: the one that works until a reseed of
// one consumer is implemented (shell.Resnapshot).
var (
	recReseed   = "the consumer cannot continue without a gap: " + shell.Resnapshot(simConfig) + ", then `trellara verify --config trellara.yml`"
	recRestore  = "restore the log directory from a replica or backup, or " + shell.Resnapshot(simConfig)
	recSequence = "automatic: the applier stops with ErrSequence naming the log offsets and restarts from its cursor; if the transport keeps reordering, " + shell.Resnapshot(simConfig)
)

// Fan-in recoveries.
var (
	recFanIn       = "automatic: `trellara-full fleet run --config fleet.yml` restarts the committer, which re-reads from its cursors and skips what the changelog's marks hold; a source back online is included again at the next epoch"
	recFanInReseed = "the source needs a reseed (a new slot and a re-snapshot of its flow: " + shell.Resnapshot(simConfig) + "); until then every epoch reads complete_with_gaps naming it"
)

type catEntry struct {
	id, family, sim, title, inv, rec string
	faults                           []Fault
	expect                           Expect
}

var entries = []catEntry{
	// relay crash points
	{"relay.crash.before-publish", FamilyRelay, "relay-batched", "relay crash before publish: nothing lost", InvNoLoss, recAuto,
		[]Fault{f("relay.before-flush", 6, actCrash)}, Expect{}},
	{"relay.crash.after-publish-before-ack", FamilyRelay, "relay-batched", "relay crash after publish, before acknowledging: duplicates only, absorbed", InvExactlyOnce, recAuto,
		[]Fault{f("relay.after-flush", 6, actCrash)}, Expect{}},
	{"relay.crash.mid-stream-block", FamilyRelay, "relay-streamed", "relay crash inside a streamed transaction: resent whole, rolled-back subtransaction never applied", InvNoLoss, recAuto,
		[]Fault{f("relay.mid-stream", 2, actCrash)}, Expect{Exercise: []string{"aborted-subxact"}}},
	{"relay.crash.after-stream-commit-before-ack", FamilyRelay, "relay-streamed", "relay crash after publishing a streamed transaction, before acknowledging", InvExactlyOnce, recAuto,
		[]Fault{f("relay.after-flush-stream", 1, actCrash)}, Expect{Exercise: []string{"aborted-subxact"}}},
	{"relay.crash.mid-spill", FamilyRelay, "relay-spill", "relay crash while a large transaction is spilled to disk", InvNoLoss, recAuto,
		[]Fault{f("relay.mid-big-txn", 1, actCrash)}, Expect{Exercise: []string{"spill"}}},
	{"relay.crash.after-spill-publish-before-ack", FamilyRelay, "relay-spill", "relay crash after publishing a spilled transaction, before acknowledging", InvExactlyOnce, recAuto,
		[]Fault{f("relay.after-flush-big", 1, actCrash)}, Expect{Exercise: []string{"spill"}}},
	{"relay.crash.mid-chunk-publish", FamilyRelay, "relay-chunked", "relay dies with part of a chunk sequence durable: republished whole, partial copy discarded", InvAtomic, recAuto,
		[]Fault{f("relay.publish-chunks", 1, actPartial)}, Expect{Exercise: []string{"chunks"}}},
	{"relay.crash.after-chunks-before-ack", FamilyRelay, "relay-chunked", "relay crash after publishing a chunk sequence, before acknowledging", InvExactlyOnce, recAuto,
		[]Fault{f("relay.after-flush-big", 2, actCrash)}, Expect{Exercise: []string{"chunks"}}},
	{"relay.crash.snapshot-handoff", FamilyRelay, "relay-snapshot", "relay crash between the durable snapshot and the first streamed transaction", InvNoLoss, recAuto,
		[]Fault{f("relay.snapshot-published", 1, actCrash)}, Expect{}},
	{"relay.crash.first-ack-after-snapshot", FamilyRelay, "relay-snapshot", "relay crash after the first stream publish following the snapshot", InvExactlyOnce, recAuto,
		[]Fault{f("relay.after-flush", 1, actCrash)}, Expect{}},
	{"relay.crash.after-keepalive-advance", FamilyRelay, "relay-keepalive", "relay crash after an idle keepalive advanced the acknowledgeable position", InvAckDurable, recAuto,
		[]Fault{f("relay.after-keepalive", 3, actCrash)}, Expect{}},
	{"relay.crash.repeated-restarts", FamilyRelay, "relay-keepalive", "relay crashes before publish six times in a row", InvNoLoss, recAuto,
		[]Fault{{Point: "relay.before-flush", Nth: 2, Times: 6, Action: actCrash}}, Expect{}},
	{"relay.crash.before-publish.toast-truncate", FamilyRelay, "relay-toast-truncate", "relay crash before publishing TOAST updates and truncates: TOAST values never nulled", InvNoLoss, recAuto,
		[]Fault{f("relay.before-flush", 4, actCrash)}, Expect{}},
	{"relay.crash.mid-transaction", FamilyRelay, "relay-toast-truncate", "relay dies halfway through receiving a transaction", InvAtomic, recAuto,
		[]Fault{f("relay.message", 30, actCutStream)}, Expect{}},
	{"relay.crash.mixed.before-publish", FamilyRelay, "relay-mixed", "relay crash before publish under streams, spills and chunks", InvNoLoss, recAuto,
		[]Fault{f("relay.before-flush", 9, actCrash)}, Expect{Exercise: []string{"spill", "chunks", "aborted-subxact"}}},
	{"relay.crash.mixed.after-publish", FamilyRelay, "relay-mixed", "relay crash after publish under streams, spills and chunks", InvExactlyOnce, recAuto,
		[]Fault{f("relay.after-flush", 9, actCrash)}, Expect{Exercise: []string{"spill", "chunks", "aborted-subxact"}}},

	// applier crash points
	{"applier.crash.mid-transaction", FamilyApplier, "apply-batched", "applier crash mid-transaction: no double-apply", InvExactlyOnce, recAuto,
		[]Fault{f("target.apply", 10, actCrash)}, Expect{Detect: []string{"transient"}}},
	{"applier.crash.after-commit-before-cursor", FamilyApplier, "apply-batched", "applier crash after the target commit, before the cursor moves: redelivery skipped", InvExactlyOnce, recAuto,
		[]Fault{f("applier.before-cursor", 4, actCrash)}, Expect{}},
	{"applier.crash.commit-reply-lost", FamilyApplier, "apply-batched", "target commits but the reply is lost", InvExactlyOnce, recAuto,
		[]Fault{f("target.commit", 5, actCrashAfter)}, Expect{Detect: []string{"transient"}}},
	{"applier.crash.before-commit", FamilyApplier, "apply-single", "connection lost at COMMIT: nothing committed, nothing skipped", InvNoLoss, recAuto,
		[]Fault{f("target.commit", 7, actCrash)}, Expect{Detect: []string{"transient"}}},
	{"applier.crash.at-begin", FamilyApplier, "apply-single", "connection lost at BEGIN", InvNoLoss, recAuto,
		[]Fault{f("target.begin", 9, actCrash)}, Expect{Detect: []string{"transient"}}},
	{"applier.crash.mid-chunk-sequence", FamilyApplier, "apply-chunked", "applier crash between chunks of one transaction: nothing of it visible", InvAtomic, recAuto,
		[]Fault{f("target.apply-chunk", 2, actCrash)}, Expect{Detect: []string{"transient"}, Exercise: []string{"chunks"}}},
	{"applier.crash.after-chunk-commit-before-cursor", FamilyApplier, "apply-chunked", "applier crash after a chunk sequence committed, before the cursor", InvExactlyOnce, recAuto,
		[]Fault{f("applier.before-cursor-chunked", 1, actCrash)}, Expect{}},
	{"applier.crash.chunk-commit-reply-lost", FamilyApplier, "apply-chunked", "the final chunk's commit succeeds but its reply is lost", InvExactlyOnce, recAuto,
		[]Fault{f("target.commit-chunked", 2, actCrashAfter)}, Expect{Detect: []string{"transient"}}},
	{"applier.crash.during-quarantine", FamilyApplier, "apply-quarantine", "applier crash while recording a quarantine row", InvQuarantine, recQuar,
		[]Fault{f("target.quarantine", 1, actCrash)}, Expect{Detect: []string{"quarantine", "transient"}}},
	{"applier.crash.restart-after-quarantine", FamilyApplier, "apply-quarantine", "applier dies while restarting after a quarantine", InvQuarantine, recQuar,
		[]Fault{f("applier.start", 2, actCrash)}, Expect{Detect: []string{"quarantine"}}},
	{"applier.crash.mid-snapshot-batch", FamilyApplier, "apply-snapshot", "applier crash inside a snapshot batch: the table is not reported ready early", InvAtomic, recAuto,
		[]Fault{f("target.apply", 3, actCrash)}, Expect{Detect: []string{"transient"}}},
	{"applier.crash.after-snapshot-before-cursor", FamilyApplier, "apply-snapshot", "applier crash after a snapshot batch committed, before the cursor", InvExactlyOnce, recAuto,
		[]Fault{f("applier.before-cursor", 5, actCrash)}, Expect{}},
	{"applier.crash.mid-large-batch", FamilyApplier, "apply-large-batches", "applier crash inside a large batch", InvAtomic, recAuto,
		[]Fault{f("target.apply", 20, actCrash)}, Expect{Detect: []string{"transient"}}},
	{"applier.crash.large-batch-reply-lost", FamilyApplier, "apply-large-batches", "a large batch commits but the reply is lost", InvExactlyOnce, recAuto,
		[]Fault{f("target.commit", 3, actCrashAfter)}, Expect{Detect: []string{"transient"}}},

	// storage faults
	{"storage.torn-tail.mid-append", FamilyStorage, "storage-torn", "power loss during an append, torn tail", InvAckDurable, recRepair,
		[]Fault{f("fs.sync.segment", 8, actTornLoss)}, Expect{}},
	{"storage.torn-tail.late", FamilyStorage, "storage-torn", "power loss late in the run, torn tail", InvAckDurable, recRepair,
		[]Fault{f("fs.sync.segment", 20, actTornLoss)}, Expect{}},
	{"storage.power-loss.mid-append", FamilyStorage, "storage-power-loss", "power loss before an fsync: unsynced entries lost, never acknowledged", InvAckDurable, recRepair,
		[]Fault{f("fs.sync.segment", 6, actPowerLoss)}, Expect{}},
	{"storage.power-loss.cursor-write", FamilyStorage, "storage-power-loss", "power loss while the applier's cursor is written", InvExactlyOnce, recRepair,
		[]Fault{f("fs.sync.cursor", 4, actPowerLoss)}, Expect{}},
	{"storage.fsync-failure.segment", FamilyStorage, "storage-fsync", "fsync of a segment fails: the log refuses to continue until reopened", InvAckDurable, recRepair,
		[]Fault{f("fs.sync.segment", 7, actFsyncFail)}, Expect{Detect: []string{"fatal"}}},
	{"storage.fsync-failure.cursor", FamilyStorage, "storage-fsync", "fsync of the applier's cursor fails", InvExactlyOnce, recRepair,
		[]Fault{f("fs.sync.cursor", 3, actFsyncFail)}, Expect{Detect: []string{"fatal"}}},
	{"storage.full-disk.append", FamilyStorage, "storage-full-disk", "the disk fills during an append, then space is freed", InvAckDurable, "free disk space; the relay retries automatically",
		[]Fault{{Point: "relay.before-flush", Nth: 5, Action: actENOSPC, Arg: 100}}, Expect{Detect: []string{"enospc"}}},
	{"storage.full-disk.segment-roll", FamilyStorage, "storage-full-disk", "no space at all: segment creation and cursor writes fail", InvAckDurable, "free disk space; the relay retries automatically",
		[]Fault{{Point: "relay.before-flush", Nth: 9, Action: actENOSPC, Arg: 0}}, Expect{Detect: []string{"enospc"}}},
	{"storage.corrupt.older-segment", FamilyStorage, "storage-corruption", "a sealed segment is damaged at rest: the applier stops with a typed corruption error, nothing past it applied", InvAtomic, recRestore,
		[]Fault{f("relay.done", 1, actCorrupt)}, Expect{Stop: "corruption"}},
	{"storage.corrupt.newest-below-durable", FamilyStorage, "storage-corruption", "the newest segment's last acknowledged byte is damaged at rest: reopening refuses with a typed corruption error and changes nothing, never cuts it as a torn tail", InvNoLoss, recRestore,
		[]Fault{f("relay.done", 1, actCorruptAcked)}, Expect{Stop: "corruption", Detect: []string{"corruption"}}},
	{"storage.torn-tail.at-durable-end", FamilyStorage, "storage-corruption", "garbage from the first byte past the durable end: a torn tail, cut on reopen, nothing acknowledged lost", InvNoLoss, recRepair,
		[]Fault{f("relay.done", 1, actCorruptAtEnd)}, Expect{Detect: []string{"repair"}}},
	{"storage.torn-tail.past-durable-end", FamilyStorage, "storage-corruption", "an unacknowledged write after the durable end: a torn tail, cut on reopen", InvNoLoss, recRepair,
		[]Fault{f("relay.done", 1, actTornPast)}, Expect{Detect: []string{"repair"}}},
	{"storage.corrupt.index", FamilyStorage, "storage-corruption", "a sealed segment's index is damaged: rebuilt on open", InvNoLoss, recRepair,
		[]Fault{f("relay.done", 1, actCorruptIdx)}, Expect{}},
	{"storage.torn-tail.multi-frame-entry", FamilyStorage, "storage-large-frames", "torn write of an entry split into frame chunks and a manifest", InvAckDurable, recRepair,
		[]Fault{f("fs.sync.segment", 5, actTornLoss)}, Expect{}},
	{"storage.power-loss.multi-frame-entry", FamilyStorage, "storage-large-frames", "power loss before a multi-frame entry's fsync", InvAckDurable, recRepair,
		[]Fault{f("fs.sync.segment", 9, actPowerLoss)}, Expect{}},

	// transport faults
	{"transport.restart.replication-mid-stream", FamilyTransport, "transport-restart", "the replication connection drops mid-stream", InvNoLoss, recAuto,
		[]Fault{f("relay.message", 40, actCutStream)}, Expect{}},
	{"transport.restart.consumer-mid-stream", FamilyTransport, "transport-restart", "the applier's log reader reconnects at its cursor mid-stream", InvExactlyOnce, recAuto,
		[]Fault{{Point: "applier.step", Nth: 5, Times: 3, Action: actRestartFeed}}, Expect{}},
	{"transport.ambiguous-ack.publish", FamilyTransport, "transport-ambiguous", "a publish is durable but reports failure: the relay republishes, the applier skips", InvExactlyOnce, recAuto,
		[]Fault{f("relay.publish", 4, actAmbiguous)}, Expect{Detect: []string{"ambiguous-ack"}}},
	{"transport.ambiguous-ack.chunks", FamilyTransport, "transport-ambiguous", "a chunk sequence publish is durable but reports failure: the whole sequence appears twice", InvExactlyOnce, recAuto,
		[]Fault{f("relay.publish-chunks", 1, actAmbiguous)}, Expect{Detect: []string{"ambiguous-ack"}}},
	{"transport.duplicate-replay-storm", FamilyTransport, "transport-storm", "the consumer replays the last 20 entries ten times over", InvExactlyOnce, recAuto,
		[]Fault{{Point: "applier.step", Nth: 6, Times: 10, Action: actStorm, Arg: 20}}, Expect{}},
	{"transport.duplicate-replay-storm.chunked", FamilyTransport, "transport-storm-chunked", "replay storm across chunk sequences", InvExactlyOnce, recAuto,
		[]Fault{{Point: "applier.step", Nth: 4, Times: 10, Action: actStorm, Arg: 12}}, Expect{}},
	{"transport.out-of-order-chunk", FamilyTransport, "transport-chunk-order", "chunks 1 and 2 arrive swapped: refused with ErrSequence, never misapplied", InvAtomic, recSequence,
		[]Fault{f("applier.chunks", 1, actSwapChunks)}, Expect{Detect: []string{"sequence"}}},
	{"transport.manifest-before-chunks", FamilyTransport, "transport-chunk-order", "the final chunk arrives before the rest: held, not exposed", InvAtomic, recSequence,
		[]Fault{f("applier.chunks", 2, actFinalFirst)}, Expect{Detect: []string{"sequence"}}},
	{"transport.chunk-barrier-incomplete", FamilyTransport, "transport-chunk-order", "a chunk sequence is cut short in the log: held, not exposed, until republished", InvAtomic, recAuto,
		[]Fault{f("relay.publish-chunks", 2, actPartial)}, Expect{Exercise: []string{"chunks"}}},
	{"transport.partial-batch.prefix-durable", FamilyTransport, "transport-partial-batch", "only a prefix of a multi-unit publish is durable", InvAckDurable, recAuto,
		[]Fault{f("relay.publish", 3, actPartial)}, Expect{}},
	{"transport.partial-batch.repeated", FamilyTransport, "transport-partial-batch", "three partial publishes in a row", InvNoLoss, recAuto,
		[]Fault{{Point: "relay.publish", Nth: 2, Times: 3, Action: actPartial}}, Expect{}},

	// Kafka partitioned mode
	{"kafka.broker-restart-mid-stream", FamilyKafka, "kafka-partitioned", "broker restart mid-stream: a produce fails after its chunks are durable, every connection drops; republished, orphaned chunks never read", InvNoLoss, recAuto,
		[]Fault{{Point: "relay.publish", Nth: 4, Times: 2, Action: actBrokerRestart}}, Expect{Detect: []string{"broker-restart"}}},
	{"kafka.ambiguous-ack", FamilyKafka, "kafka-partitioned", "ambiguous acknowledgement: chunks and manifests durable, the produce reports failure; the applier skips the copy", InvExactlyOnce, recAuto,
		[]Fault{f("relay.publish", 5, actAmbiguous)}, Expect{Detect: []string{"ambiguous-ack"}}},
	{"kafka.duplicate-replay-storm", FamilyKafka, "kafka-partitioned", "duplicate replay storm: the consumer group replays the last 20 manifests and their chunks ten times over", InvExactlyOnce, recAuto,
		[]Fault{{Point: "applier.step", Nth: 6, Times: 10, Action: actStorm, Arg: 20}}, Expect{}},
	{"kafka.manifest-before-chunks", FamilyKafka, "kafka-partitioned-batched", "manifest before chunks: a batch's manifests are readable before its chunks; held at the barrier, never exposed", InvAtomic, recAuto,
		[]Fault{{Point: "relay.publish", Nth: 3, Action: actManifestFirst, Arg: 60}}, Expect{Detect: []string{"barrier-held"}}},
	{"kafka.partition-barrier-incomplete", FamilyKafka, "kafka-partitioned", "partition barrier incomplete: one data partition withholds a chunk of a cross-partition unit; none of it applied until it arrives", InvAtomic, recAuto,
		[]Fault{{Point: "relay.publish", Nth: 4, Action: actChunkWithheld, Arg: 300}}, Expect{Detect: []string{"barrier-held"}}},
	{"kafka.relay-crash-between-chunks-and-manifests", FamilyKafka, "kafka-partitioned-batched", "relay dies after its chunks, with part of its manifests durable: the slot never passes a unit without its manifest", InvAckDurable, recAuto,
		[]Fault{f("relay.publish", 3, actPartial)}, Expect{}},

	// schema and semantic faults
	{"schema.pinned-drift", FamilySchema, "schema-drift", "pinned schema drift: capture stopped before any row under the new shape", InvSchemaPinned, recDrift,
		nil, Expect{Stop: "schema-drift"}},
	{"schema.pinned-drift.after-relay-restart", FamilySchema, "schema-drift", "the drift is still caught after relay restarts (pins are durable)", InvSchemaPinned, recDrift,
		[]Fault{f("relay.before-flush", 8, actCrash)}, Expect{Stop: "schema-drift"}},
	{"schema.pinned-drift.in-stream-block", FamilySchema, "schema-drift-streamed", "the new shape first appears inside a stream block", InvSchemaPinned, recDrift,
		nil, Expect{Stop: "schema-drift"}},
	{"schema.pinned-drift.in-stream-block.after-crash", FamilySchema, "schema-drift-streamed", "relay crash inside a stream before the drifting block", InvSchemaPinned, recDrift,
		[]Fault{f("relay.mid-stream", 1, actCrash)}, Expect{Stop: "schema-drift"}},
	{"schema.barrier.add-nullable-column", FamilySchema, "schema-barrier", "a compatible change flows: the target DDL commits with the first rows of the new shape", InvSchemaPinned, recAuto,
		nil, Expect{Exercise: []string{"ddl-barrier"}}},
	{"schema.barrier.relay-crash-before-barrier", FamilySchema, "schema-barrier", "relay crash before the barrier is durable: the change is seen again, the barrier emitted again", InvSchemaPinned, recAuto,
		[]Fault{f("relay.before-flush-barrier", 1, actCrash)}, Expect{Exercise: []string{"ddl-barrier"}}},
	{"schema.barrier.relay-crash-after-publish", FamilySchema, "schema-barrier", "relay crash after publishing the barrier, before acknowledging: resent and skipped, the pin already moved", InvExactlyOnce, recAuto,
		[]Fault{f("relay.after-flush-barrier", 1, actCrash)}, Expect{Exercise: []string{"ddl-barrier"}}},
	{"schema.barrier.applier-crash-between-ddl-and-data", FamilySchema, "schema-barrier", "applier crash after the target DDL, before the rows: both roll back, and apply again together", InvAtomic, recAuto,
		[]Fault{f("target.after-ddl", 1, actCrash)}, Expect{Exercise: []string{"ddl-barrier"}, Detect: []string{"transient"}}},
	{"schema.barrier.applier-crash-after-commit", FamilySchema, "schema-barrier", "the barrier's target transaction commits, the reply is lost: redelivered, skipped with its DDL", InvExactlyOnce, recAuto,
		[]Fault{f("target.commit-barrier", 1, actCrashAfter)}, Expect{Exercise: []string{"ddl-barrier"}, Detect: []string{"transient"}}},
	{"schema.incompatible-row.quarantine", FamilySchema, "schema-incompatible", "incompatible rows are quarantined, the flow stops before them, replay after repair", InvQuarantine, recQuar,
		nil, Expect{Detect: []string{"quarantine"}}},
	{"schema.incompatible-row.crash-during-quarantine", FamilySchema, "schema-incompatible", "crash while the second incompatible transaction is quarantined", InvQuarantine, recQuar,
		[]Fault{f("target.quarantine", 2, actCrash)}, Expect{Detect: []string{"quarantine", "transient"}}},
	{"schema.incompatible-row.in-batch", FamilySchema, "schema-incompatible-batched", "a refused transaction in a batch: the rest of the batch commits, it alone is quarantined", InvQuarantine, recQuar,
		nil, Expect{Detect: []string{"quarantine"}}},
	{"schema.incompatible-row.in-chunk", FamilySchema, "schema-incompatible-chunked", "a refused row in the final chunk: the whole sequence rolls back and is quarantined", InvQuarantine, recQuar,
		nil, Expect{Detect: []string{"quarantine"}, Exercise: []string{"chunks"}}},
	{"schema.reseed-past-retention", FamilySchema, "schema-retention", "a consumer past retention stops with a typed error naming the reseed command, no silent gap", InvNoLoss, recReseed,
		nil, Expect{Stop: "past-retention"}},
	{"schema.retention-holds-lagging-consumer", FamilySchema, "schema-retention-hold", "without expiry, retention keeps what a lagging consumer needs", InvNoLoss, recAuto,
		nil, Expect{}},

	// fleet fan-in
	{"fanin.source-offline-at-epoch-close", FamilyFanIn, "fanin-fleet", "a source is offline when an epoch closes: complete_with_gaps naming it, complete again after it catches up", InvEpochHonest, recFanIn,
		[]Fault{{Point: "fanin.epoch-close", Nth: 2, Action: actOffline, Arg: 40}}, Expect{}},
	{"fanin.reconnect-duplicates", FamilyFanIn, "fanin-fleet", "a relay reconnects and republishes transactions already in its log: skipped by source and commit LSN", InvExactlyOnce, recFanIn,
		[]Fault{{Point: "fanin.step", Nth: 80, Action: actOffline, Arg: 15}, {Point: "fanin.relay-reconnect", Nth: 1, Action: actDuplicate, Arg: 4}}, Expect{}},
	{"fanin.crash-between-data-and-epoch", FamilyFanIn, "fanin-fleet", "the committer crashes after the data commits, before the epoch record and the cursors: no epoch ahead of the data, no duplicate after the restart", InvEpochHonest, recFanIn,
		[]Fault{f("fanin.before-epoch-record", 2, actCrash)}, Expect{}},
	{"fanin.crash-after-table-commit", FamilyFanIn, "fanin-fleet", "the committer crashes after a table commit, before the cursors: the re-read units are skipped by the table's marks", InvExactlyOnce, recFanIn,
		[]Fault{f("fanin.after-table-commit", 5, actCrash)}, Expect{}},
	{"fanin.source-past-retention", FamilyFanIn, "fanin-fleet", "a source's log expires past the committer's cursor: every later epoch shows it past retention (reseed), never complete", InvEpochHonest, recFanInReseed,
		[]Fault{{Point: "fanin.step", Nth: 40, Action: actExpire}}, Expect{Stop: "past-retention"}},
}

// Catalogue returns every scenario, in catalogue order, and the simulations
// by name.
func Catalogue() ([]*Scenario, map[string]*Simulation) {
	sims := map[string]*Simulation{}
	for _, s := range simulations {
		sims[s.Name] = s.defaults()
	}
	var out []*Scenario
	for _, e := range entries {
		out = append(out, &Scenario{ID: e.id, Family: e.family, Title: e.title, Simulation: e.sim,
			Seed: xxh3.HashString(e.id) % 1_000_000, Invariant: e.inv, Reproduce: fmt.Sprintf(reproduceRun, e.id),
			Recovery: e.rec, Faults: e.faults, Expect: e.expect})
	}
	return out, sims
}

// SimulationNames lists the simulations in catalogue order.
func SimulationNames() []string {
	var out []string
	for _, s := range simulations {
		out = append(out, s.Name)
	}
	return out
}

// Select filters scenarios by id and family (empty matches all).
func Select(all []*Scenario, id, family string) []*Scenario {
	var out []*Scenario
	for _, s := range all {
		if (id == "" || s.ID == id) && (family == "" || s.Family == family) {
			out = append(out, s)
		}
	}
	return out
}

// The schema change kinds: one simulation per kind of schemachange other
// than add_nullable_column (schema-barrier), and rename_column both
// without and with its schema.renames entry, each with the crash points of
// a DDL barrier. A change that auto-applies (a compatible kind, a mapped
// rename) flows through its barrier; a blocked one stops capture until a
// reseed takes it over, and the crash points then fall on the reseed's
// barrier.
var changeKinds = []struct {
	kind  schemachange.Kind
	name  string // simulation and scenario id part
	title string
	// renames are the flow's schema.renames entries for accounts.
	renames []schemachange.ColumnRename
}{
	{schemachange.WidenType, "widen-type", "balance integer → bigint, rows after it past integer", nil},
	{schemachange.IncreaseVarchar, "increase-varchar", "note varchar(40) → varchar(200), rows after it past 40 characters", nil},
	{schemachange.DropColumn, "drop-column", "DROP COLUMN note", nil},
	{schemachange.SetNotNull, "set-not-null", "note SET NOT NULL, with balance integer → bigint", nil},
	{schemachange.PrimaryKeyChange, "primary-key-change", "the key becomes (id, note)", nil},
	{schemachange.NarrowOrIncompatibleType, "narrow-type", "balance bigint → integer", nil},
	{schemachange.AddColumnDefaultNotNull, "add-column-default", "ADD COLUMN tier text NOT NULL DEFAULT 'basic'", nil},
	{schemachange.RenameColumn, "rename-column", "RENAME COLUMN note TO memo, no mapping", nil},
	{schemachange.RenameColumn, "rename-column-mapped", "RENAME COLUMN note TO memo, mapped by schema.renames",
		[]schemachange.ColumnRename{{From: "note", To: "memo"}}},
}

// recReseedTakeover is the recovery of a blocked change (docs/SCHEMA.md).
var recReseedTakeover = "the change is blocked: `" + shell.Trellara("schema ddl-plan", simConfig) + "` shows it; `" +
	shell.Trellara("reseed", simConfig, "--table", "public.accounts") +
	"` takes it over (the other tables keep flowing), replaces the table at its handoff and verifies it; a crash on the way recovers automatically"

func init() {
	for _, k := range changeKinds {
		sim := "schema-" + k.name
		w := Workload{Txns: 40, DriftAt: 20, Change: k.kind, Renames: k.renames, MessageEvery: 4}
		simulations = append(simulations, &Simulation{Name: sim, Title: string(k.kind) + " of a configured table mid-stream: " + k.title, Workload: w})
		compatible := w.plan().AutoApplies()
		rec, exp, barrier := recAuto, Expect{Exercise: []string{"ddl-barrier"}}, "the DDL barrier"
		if !compatible {
			rec, barrier = recReseedTakeover, "the reseed's barrier"
			exp.Detect = []string{"reseed", "reseed-handoff"}
		}
		with := func(detect ...string) Expect {
			e := exp
			e.Detect = append(slices.Clone(exp.Detect), detect...)
			return e
		}
		id, label := "schema."+k.name+".", string(k.kind)
		if len(k.renames) > 0 {
			label += " (mapped)"
		}
		entries = append(entries,
			catEntry{id + "relay-crash-before-barrier", FamilySchema, sim, label + ": relay crash before " + barrier + " is durable", InvSchemaPinned, rec,
				[]Fault{f("relay.before-flush-barrier", 1, actCrash)}, with()},
			catEntry{id + "relay-crash-after-pin-move", FamilySchema, sim, label + ": relay crash after " + barrier + " is published and the pin moved, before the acknowledgement", InvExactlyOnce, rec,
				[]Fault{f("relay.after-flush-barrier", 1, actCrash)}, with()},
			catEntry{id + "applier-crash-between-ddl-and-data", FamilySchema, sim, label + ": applier crash inside the target transaction of " + barrier + ", before its rows", InvAtomic, rec,
				[]Fault{f("target.after-ddl", 1, actCrash)}, with("transient")},
			catEntry{id + "reply-lost-after-commit", FamilySchema, sim, label + ": the target transaction of " + barrier + " commits, the reply is lost", InvExactlyOnce, rec,
				[]Fault{f("target.commit-barrier", 1, actCrashAfter)}, with("transient")},
		)
		if len(k.renames) > 0 {
			// The rename's target DDL must be idempotent: a barrier whose
			// pin did not move comes again after the target renamed.
			entries = append(entries, catEntry{id + "barrier-again-after-rename", FamilySchema, sim,
				label + ": the DDL barrier is durable but its publish reports failure, so its pin stays: the next transaction carries the barrier again, and the rename, run again on the renamed target, changes nothing",
				InvExactlyOnce, rec, []Fault{f("relay.publish-barrier", 1, actAmbiguous)}, with("ambiguous-ack", "rename-again")})
		}
	}
}
