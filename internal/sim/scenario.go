package sim

import (
	"github.com/trellara/trellara/internal/mutation"
	"github.com/trellara/trellara/segmentlog"
)

// Simulation is one harness configuration: a workload and the bounds the
// relay, the log and the applier run with. Scenarios are fault points and
// seeds within a simulation.
type Simulation struct {
	Name     string
	Title    string
	Workload Workload
	// Relay bounds (capture.AssemblerOptions).
	MemoryBytesMax, ChunkBytesMax int64
	// Log bounds (segmentlog.Options).
	SegmentBytesMax int64
	FrameBytesMax   int
	Retention       segmentlog.Retention
	// Applier batching (apply.Config).
	MaxBatchTxns, MaxBatchRows, MaxBatchBytes int
	// Burst is the most messages the source sends before a pause (when
	// the relay flushes, as its Run loop does when the server goes quiet).
	Burst int
	// LagApplier holds the applier back until the relay has sent this
	// share (percent) of the stream.
	LagApplier int
	// Partitions > 0 runs the Kafka transport's partitioned mode: the log
	// plays the manifest partition (partition 0, whose offsets are the
	// applier's), the units' rows go to this many in-memory data
	// partitions as chunks (transport/kafka/manifest), and the applier's
	// feed holds each unit at the manifest barrier until its chunks are
	// readable.
	Partitions int
	// FanIn, when set, makes this a fleet fan-in simulation (fanin.go):
	// sources, logs and the lake committer instead of one flow.
	FanIn *FanIn
}

// Fault is one injected failure: Action happens the Nth time (1-based) the
// harness reaches Point, and the Times-1 following times too.
type Fault struct {
	Point  string `json:"point"`
	Nth    int    `json:"nth"`
	Times  int    `json:"times,omitempty"`
	Action string `json:"action"`
	// Arg parameterises the action (bytes of free space, entries to replay).
	Arg int `json:"arg,omitempty"`
}

// Fault actions.
const (
	actCrash      = "crash"           // the component at the point dies
	actCrashAfter = "crash-after"     // target commit: committed, reply lost
	actPowerLoss  = "power-loss"      // the machine: unsynced data lost
	actTornLoss   = "torn-power-loss" // the machine: unsynced data partly kept, with holes
	actFsyncFail  = "fsync-fail"      // fsync reports EIO
	actENOSPC     = "enospc"          // the disk fills up (Arg bytes left) for a while
	actCorrupt    = "corrupt-segment" // a sealed segment the applier has not read is damaged
	actCorruptIdx = "corrupt-index"   // a sealed segment's index file is damaged
	// The newest segment damaged at rest relative to the durable end
	// DURABLE names, then the process restarts (segmentlog's torn-tail rule).
	actCorruptAcked = "corrupt-below-durable" // the last acknowledged byte flipped: Open refuses, changes nothing
	actCorruptAtEnd = "corrupt-at-durable"    // the first byte past the durable end damaged: a torn tail, cut
	actTornPast     = "torn-past-durable"     // garbage appended past the durable end: a torn tail, cut
	actAmbiguous    = "ambiguous-ack"         // the publish is durable but reports failure
	actPartial      = "partial-batch"         // the relay dies after part of a publish is durable
	actStorm        = "replay-storm"          // the applier's feed goes back Arg entries
	actSwapChunks   = "swap-chunks"           // chunks 1 and 2 of the next sequence swap places
	actFinalFirst   = "final-chunk-first"
	actCutStream    = "cut-stream"   // the replication connection drops
	actRestartFeed  = "restart-feed" // the applier's log reader reconnects at its cursor
	// Kafka partitioned mode.
	actBrokerRestart = "broker-restart" // the produce fails after the chunks are durable; every connection drops
	actManifestFirst = "manifest-first" // a batch's manifests are readable Arg steps before its chunks
	actChunkWithheld = "chunk-withheld" // one chunk of a cross-partition unit is unreadable for Arg steps
)

// Expect is what a scenario must end in besides the invariants.
type Expect struct {
	// Stop names the typed error that must stop a component for good:
	// "schema-drift" (capture), "past-retention" or "corruption"
	// (apply). Empty: the flow must converge.
	Stop string `json:"stop,omitempty"`
	// Detect lists outcomes that must have been observed on the way:
	// "sequence" (apply.ErrSequence), "quarantine", "repair" (a torn tail
	// cut off by Open), "fatal" (segmentlog.FatalError), "enospc",
	// "transient", "reseed" (a reseed took over a blocked schema change),
	// "reseed-handoff" (its handoff replaced the table).
	Detect []string `json:"detect,omitempty"`
	// Exercise lists what the run must have made the relay do: "spill"
	// (a transaction past the memory bound), "chunks" (a CHUNK sequence),
	// "aborted-subxact" (a rolled-back subtransaction in a stream), and the
	// target: "ddl-barrier" (a commit that ran a DDL barrier's DDL).
	Exercise []string `json:"exercise,omitempty"`
}

// Scenario is one catalogue entry.
type Scenario struct {
	ID         string `json:"id"`
	Family     string `json:"family"`
	Title      string `json:"title"`
	Simulation string `json:"simulation"`
	Seed       uint64 `json:"seed"`
	Invariant  string `json:"invariant"`
	// Reproduce is the command that reruns the scenario.
	Reproduce string  `json:"reproduce"`
	Recovery  string  `json:"recovery"`
	Faults    []Fault `json:"faults"`
	Expect    Expect  `json:"expect"`
}

// Families.
const (
	FamilyRelay     = "relay-crash"
	FamilyApplier   = "applier-crash"
	FamilyStorage   = "storage"
	FamilyTransport = "transport"
	FamilySchema    = "schema"
	FamilyKafka     = "kafka"
)

// Families lists them in report order.
var Families = []string{FamilyRelay, FamilyApplier, FamilyStorage, FamilyTransport, FamilyKafka, FamilySchema, FamilyFanIn}

// Invariants checked after every scenario (the half-applied one after
// every target commit, the slot one after every acknowledgement).
const (
	InvNoLoss        = "no-loss"
	InvExactlyOnce   = "exactly-once"
	InvAtomic        = "atomic-visibility"
	InvAckDurable    = "ack-after-durable"
	InvQuarantine    = "quarantine-exact"
	InvSchemaPinned  = "schema-pinned"
	InvLiveness      = "liveness"
	InvExpectedError = "expected-outcome"
)

// InvariantText describes each invariant for reports.
var InvariantText = map[string]string{
	InvNoLoss:       "every committed source transaction reaches the target",
	InvExactlyOnce:  "no source transaction is applied twice",
	InvAtomic:       "no reader of the target ever sees part of a source transaction (checked after every target commit)",
	InvAckDurable:   "the slot's confirmed LSN never passes a transaction that is not durable in the log (checked at every acknowledgement)",
	InvQuarantine:   "the quarantined transactions are exactly the incompatible ones",
	InvSchemaPinned: "no row is assembled under a relation shape that differs from the pinned one, nothing past a blocked change reaches the target before a reseed took it over, and no row reaches the target under a shape its table does not have",
	InvEpochHonest:  "a lake epoch is complete only when every source is included, and never claims a source through a position whose rows the changelog does not hold yet",
}

// Mutations deliberately remove protections, for the mutation tests that
// prove the matrix notices.
type Mutations struct {
	// Apply is the applier's removed protections; the simulated target
	// carries them to the applier (mutation.Carrier).
	Apply mutation.Set
	// AckBeforeDurable: the transport reports a publish as durable before
	// writing it, so the relay acknowledges first.
	AckBeforeDurable bool
	// IgnoreDrift: the relay's pin store never reports a pin, so a changed
	// relation is re-pinned instead of stopping capture.
	IgnoreDrift bool
	// StorageLies: fsync reports success without making data durable.
	StorageLies bool
	// IgnoreRenames: the flow reads no schema.renames, so a mapped
	// rename is classified as an unmapped one and stops capture.
	IgnoreRenames bool
	// DDLApart: the simulated target commits a DDL barrier's target DDL
	// at once, in a transaction of its own, before the unit's rows (as an
	// applier that ran the DDL apart from them would).
	DDLApart bool
}

// Options tune a run.
type Options struct {
	Mutations Mutations
	// Trace keeps the event trace in the Result.
	Trace bool
	// Override replaces bounds from a flow configuration (chaos --config).
	Override *Override
	// StepsMax bounds a run (0: a default proportional to the workload).
	StepsMax int
}

// Override holds flow settings applied to every simulation.
type Override struct {
	MemoryBytesMax  int64
	ChunkBytesMax   int64
	SegmentBytesMax int64
	MaxBatchTxns    int
	MaxBatchRows    int
	MaxBatchBytes   int
}

// Result is the outcome of one run.
type Result struct {
	Scenario   *Scenario
	Pass       bool
	Violations []Violation
	// Fired is false when a fault point was never reached: the scenario
	// did not exercise what it names (possible under --config bounds).
	Fired    bool
	Outcome  string
	Steps    int
	Detected map[string]int
	Stats    RunStats
	Trace    []byte
}

// Violation is a broken invariant.
type Violation struct {
	Invariant string `json:"invariant"`
	Detail    string `json:"detail"`
}

// RunStats count what a run did.
type RunStats struct {
	Txns int `json:"txns"`
	// Delivered: source transactions with data the flow must deliver.
	Delivered       int `json:"delivered"`
	LogEntries      int `json:"log_entries"`
	TargetCommits   int `json:"target_commits"`
	RelayRestarts   int `json:"relay_restarts"`
	ApplierRestarts int `json:"applier_restarts"`
	// Crashes counts log reopens after a power loss or a failed fsync.
	Crashes     int `json:"crashes"`
	Quarantined int `json:"quarantined"`
	// From the relay's assembler (sessions that flushed or ended).
	Spilled         int `json:"spilled"`
	Chunked         int `json:"chunked"`
	AbortedSubxacts int `json:"aborted_subxacts"`
	// Barriers counts target commits that ran a DDL barrier's DDL.
	Barriers int `json:"barriers"`
	// Acks counts the slot acknowledgements the checker verified.
	Acks int `json:"acks"`
}

// exercised is how often a run did what Expect.Exercise names.
func (st RunStats) exercised(e string) int {
	return map[string]int{"spill": st.Spilled, "chunks": st.Chunked, "aborted-subxact": st.AbortedSubxacts, "ddl-barrier": st.Barriers}[e]
}
