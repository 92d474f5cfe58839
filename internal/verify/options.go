package verify

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/opts"
)

// HeldTable is why a table is held, and the command that recovers it.
type HeldTable struct {
	Reason, Recovery string
}

// Options selects what Verify compares and how long it waits for the target.
// The zero value of every numeric field means "the default" named beside it.
type Options struct {
	// Tables are the source tables to compare, "schema.name" with
	// PostgreSQL quoting rules (config.ParseTableName). Required.
	Tables []string

	// TargetTable maps a source table to the table holding its copy on the
	// target. Nil means the same schema and name.
	TargetTable func(config.TableName) config.TableName

	// Buckets is how many key-hash buckets each table is split into. 0 picks
	// a power of two from the source's row estimate, about
	// bucketRowsTarget rows per bucket, between bucketsAuto and bucketsMax.
	// More buckets make drill-down cheaper and the per-bucket report finer.
	Buckets int

	// SampleKeysMax bounds the example keys named per diverged table.
	// 0 means defaultSampleKeysMax.
	SampleKeysMax int

	// DrillRowsMax bounds the (key, hash) pairs one drill-down fetch reads
	// from each side; larger mismatching buckets are split by a second-level
	// hash first. 0 means defaultDrillRowsMax.
	DrillRowsMax int

	// SourceLSN reads the source's current WAL position. It is called right
	// after Verify's source snapshot is taken, so every transaction the
	// snapshot sees committed before the position it returns. Nil reads
	// pg_current_wal_insert_lsn() inside that snapshot's transaction.
	SourceLSN func(ctx context.Context) (uint64, error)

	// SourceSnapshot, when set, is asked first in each round for a source
	// snapshot exported elsewhere and the source LSN it is exact at (every
	// transaction whose commit record precedes it visible, none after: a
	// slot's consistent point); the round adopts it instead of taking one
	// and uses that LSN as its watermark, and done is called once it has
	// (the exporting session may then end). An empty name means none this
	// round: the round takes its own snapshot and calls SourceLSN.
	SourceSnapshot func(ctx context.Context) (name string, lsn uint64, done func(), err error)

	// TargetCheckpoint reads how far the applier has applied: the source
	// end LSN up to which every source transaction is committed on the
	// target, and when it last applied one. Verify calls it before taking
	// each target snapshot, and never while it holds a transaction on the
	// target, so the hook may use the same connection. Nil means there is
	// no flow to wait for: no watermark is reported, differing buckets are
	// not re-checked, and the verdict is never BEHIND.
	TargetCheckpoint func(ctx context.Context) (Position, error)

	// TargetSnapshotTaken, when set, is called in each round as soon as
	// the target snapshot is taken (its transaction has read), before
	// anything is compared: a flow that held its applier at the round's
	// fence (apply.HoldToken) lets it go on here.
	TargetSnapshotTaken func(ctx context.Context)

	// WaitCaughtUp bounds the total time spent waiting for the target
	// checkpoint to pass a source LSN, over all rounds; a target still
	// short of it is BEHIND. 0 means defaultWaitCaughtUp; NoWait reads the
	// checkpoint once per round and does not wait.
	WaitCaughtUp time.Duration

	// RechecksMax bounds the re-check rounds for differing buckets. 0 means
	// defaultRechecksMax. Rounds stop early when nothing differs any more or
	// when a round sees exactly what the previous one saw.
	RechecksMax int

	// ParallelWorkers, when positive, sets max_parallel_workers_per_gather
	// for Verify's queries and makes parallel plans cheap enough for the
	// planner to pick them even for the bucket aggregate. 0 leaves the
	// server's own settings in charge, as for any query (by default
	// PostgreSQL may use 2 workers for a large table's totals). -1 turns
	// parallel query off, for a source that must not lend Verify more
	// than one core.
	ParallelWorkers int

	// Connections is how many connections per side hash a table at once,
	// each over its own range of the table's pages, all inside the one
	// snapshot of that side (the first connection exports it, the others
	// adopt it), so the verdict still comes from one pair of snapshots.
	// 0 means min(4, CPUs of this machine); 1 hashes on the connection
	// passed to Verify only. The extra connections are opened with the
	// passed connection's configuration (a DB that is not a *pgx.Conn, or a
	// server older than PostgreSQL 14, which has no TID range scans, hashes
	// on one). They add to ParallelWorkers' server-side workers, and hold
	// a connection slot each on both servers while Verify runs.
	Connections int

	// Held are the tables held at a blocked schema change
	// (schema.on_blocked: hold_table), by source table name: they are not
	// compared, and each is reported HELD with its reason and recovery.
	Held map[string]HeldTable

	// ConfigPath is the configuration file named in recovery commands.
	// Empty means defaultConfigPath.
	ConfigPath string

	// SQLRowHash hashes rows in SQL on both sides, even on a side where
	// the trellara extension (0.2 or later, preloaded) provides
	// trellara_verify_buckets, which computes the same row hash and
	// buckets in C, 2.5–3 times faster per core. The numbers are identical
	// either way; this exists to compare the two paths and to rule the
	// extension out.
	SQLRowHash bool

	// textHashing forces HashingText on servers that could do
	// HashingTyped, so tests cover the path older servers take.
	textHashing bool

	// rangePagesMin is the smallest range of pages parallel hashing gives
	// one query; 0 means defaultRangePagesMin. Tests set 1 so their small
	// tables are split too.
	rangePagesMin int
}

// NoWait, as Options.WaitCaughtUp, compares without waiting for the
// target: for a target nothing is applying to, where waiting cannot help.
const NoWait time.Duration = -1

const (
	bucketsAuto      = 64
	bucketsMax       = 65536
	bucketRowsTarget = 8192

	defaultSampleKeysMax = 10
	sampleKeysMax        = 1000
	defaultDrillRowsMax  = 100_000
	drillRowsMax         = 10_000_000
	defaultWaitCaughtUp  = 30 * time.Second
	defaultRechecksMax   = 3
	rechecksMax          = 100
	parallelWorkersMax   = 64
	connectionsDefault   = 4
	connectionsMax       = 64
	// defaultRangePagesMin (8 MiB of 8 KiB pages) keeps small tables to
	// one query: splitting them costs more round trips than it saves.
	defaultRangePagesMin = 1024
	defaultConfigPath    = "trellara.yml"
)

// Position is the applier's checkpoint as the TargetCheckpoint hook reads
// it.
type Position struct {
	// EndLSN: every source transaction that ended at or before it is
	// committed on the target.
	EndLSN uint64
	// AppliedAt is when the target last applied a transaction (the
	// target's clock); zero when unknown. It only dates the lag of a target
	// that is BEHIND.
	AppliedAt time.Time
}

// tableSpec is one source table and the target table holding its copy.
type tableSpec struct {
	src, dst config.TableName
}

// withDefaults validates o and fills in defaults. Each range check says what is
// allowed, so the message is the fix.
func (o Options) withDefaults() (Options, []tableSpec, error) {
	rng := func(field string, v, lo, hi int) opts.Rule {
		return opts.Rule{Field: field, Bad: v < lo || v > hi, Reason: fmt.Sprintf("is %d, allowed %d..%d", v, lo, hi)}
	}
	if err := opts.Check("verify",
		rng("Buckets", o.Buckets, 0, bucketsMax),
		rng("SampleKeysMax", o.SampleKeysMax, 0, sampleKeysMax),
		rng("DrillRowsMax", o.DrillRowsMax, 0, drillRowsMax),
		rng("RechecksMax", o.RechecksMax, 0, rechecksMax),
		rng("ParallelWorkers", o.ParallelWorkers, -1, parallelWorkersMax),
		rng("Connections", o.Connections, 0, connectionsMax),
		opts.Rule{Field: "WaitCaughtUp", Bad: o.WaitCaughtUp < 0 && o.WaitCaughtUp != NoWait,
			Reason: fmt.Sprintf("is negative (%s); NoWait is the one negative value allowed", o.WaitCaughtUp)},
		opts.Rule{Field: "Tables", Bad: len(o.Tables) == 0, Reason: "is empty: no tables to compare; name at least one schema.table"},
	); err != nil {
		return o, nil, err
	}
	if o.SampleKeysMax == 0 {
		o.SampleKeysMax = defaultSampleKeysMax
	}
	if o.DrillRowsMax == 0 {
		o.DrillRowsMax = defaultDrillRowsMax
	}
	if o.WaitCaughtUp == 0 {
		o.WaitCaughtUp = defaultWaitCaughtUp
	}
	if o.RechecksMax == 0 {
		o.RechecksMax = defaultRechecksMax
	}
	if o.Connections == 0 {
		o.Connections = min(connectionsDefault, runtime.NumCPU())
	}
	if o.rangePagesMin == 0 {
		o.rangePagesMin = defaultRangePagesMin
	}
	if o.ConfigPath == "" {
		o.ConfigPath = defaultConfigPath
	}
	specs := make([]tableSpec, 0, len(o.Tables))
	seen := map[config.TableName]bool{}
	for _, s := range o.Tables {
		tn, err := config.ParseTableName(s)
		if err != nil {
			return o, nil, &OptionsError{Package: "verify", Field: "Tables", Reason: fmt.Sprintf("table %q %v", s, err)}
		}
		if seen[tn] {
			return o, nil, &OptionsError{Package: "verify", Field: "Tables", Reason: fmt.Sprintf("names table %s twice", tn)}
		}
		seen[tn] = true
		dst := tn
		if o.TargetTable != nil {
			dst = o.TargetTable(tn)
		}
		specs = append(specs, tableSpec{src: tn, dst: dst})
	}
	return o, specs, nil
}

// autoBuckets picks a bucket count from a row estimate: a power of two near
// bucketRowsTarget rows per bucket, so a mismatching bucket is small enough
// to fetch whole during drill-down. A negative estimate (never analyzed)
// gets the floor.
func autoBuckets(reltuples float64) int64 {
	b := int64(bucketsAuto)
	for b < bucketsMax && float64(b)*bucketRowsTarget < reltuples {
		b *= 2
	}
	return b
}
