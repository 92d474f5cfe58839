package apply

import (
	"fmt"
	"log/slog"

	"github.com/trellara/trellara/internal/opts"
)

// Config shapes one applier. The zero values of the optional fields take the
// defaults below; Validate names the allowed range of each.
type Config struct {
	// Flow names the flow (config `flow`); part of the checkpoint key.
	Flow string
	// SourceID is the source database's id (config `source.id`). Units from
	// any other source are refused.
	SourceID string
	// Mode is the target mode (config `target.mode`): "strict" (default)
	// applies source transactions one after another in commit order, a
	// large one from its consecutive CHUNK units. "partitioned" is refused
	// with ErrPartitioned: it needs a manifest-barrier coordinator this
	// applier does not have.
	Mode string
	// Schema is the Trellara-owned schema on the target holding the
	// checkpoint, snapshot progress and quarantine tables. Default "trellara".
	Schema string
	// MaxBatchTxns bounds how many whole source transactions share one
	// target transaction. Default 1024: more whole transactions per target transaction fold into fewer set-based statements (compact.go).
	MaxBatchTxns int
	// MaxBatchRows bounds the rows of one target transaction. A single
	// source transaction larger than this is still applied whole, alone.
	// Default 20000.
	MaxBatchRows int
	// MaxBatchBytes bounds the envelope bytes of one target transaction
	// (and, with MaxBatchTxns, the read-ahead buffer). Default 32 MiB.
	MaxBatchBytes int
	// Mapping maps a source relation to its target table. Nil keeps the
	// source schema and name.
	Mapping func(schema, name string) (string, string)
	// ConfigPath is the config file named in the commands error messages
	// suggest. Default "trellara.yml".
	ConfigPath string
	// Logger receives lifecycle records (start, resume point, snapshot
	// completion). Errors are returned, not logged. Default slog.Default().
	Logger *slog.Logger
	// Applied, when set, is called after each target commit that applied
	// source transactions, with their source commit times in unix
	// microseconds (redeliveries skipped are not in it). It runs on the
	// applying goroutine, so it must be quick: latency metrics.
	Applied func(commitTimesUnixMicros []int64)
	// SynchronousCommit is how the PostgreSQL target commits the
	// applier's transactions (config `target.synchronous_commit`): "off"
	// (default) commits them asynchronously and moves the transport
	// cursor only over those the target has flushed (durable.go); "on"
	// waits for the flush at every COMMIT, as a session whose own
	// setting is stronger (replica acknowledgement) keeps doing.
	SynchronousCommit string
}

// SynchronousCommit values (Config.SynchronousCommit).
const (
	SyncCommitOn  = "on"
	SyncCommitOff = "off"
)

// Target modes (Config.Mode).
const (
	ModeStrict      = "strict"
	ModePartitioned = "partitioned"
)

// Limits. Each bounds memory or the size of one target transaction.
const (
	defaultSchema        = "trellara"
	defaultMaxBatchTxns  = 1024
	defaultMaxBatchRows  = 20000
	defaultMaxBatchBytes = 32 << 20
	maxBatchTxnsMax      = 10000
	maxBatchRowsMax      = 1_000_000
	maxBatchBytesMax     = 1 << 30
	// identBytesMax is PostgreSQL's NAMEDATALEN-1; longer names are
	// truncated by the server, which would silently address another object.
	identBytesMax = 63
	// nameBytesMax bounds flow and source ids stored in every checkpoint
	// row and printed in every message.
	nameBytesMax = 256
)

// withDefaults returns c with the optional fields filled in.
func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = defaultSchema
	}
	if c.MaxBatchTxns == 0 {
		c.MaxBatchTxns = defaultMaxBatchTxns
	}
	if c.MaxBatchRows == 0 {
		c.MaxBatchRows = defaultMaxBatchRows
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = defaultMaxBatchBytes
	}
	if c.Mode == "" {
		c.Mode = ModeStrict
	}
	if c.SynchronousCommit == "" {
		c.SynchronousCommit = SyncCommitOff
	}
	if c.ConfigPath == "" {
		c.ConfigPath = "trellara.yml"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// OptionsError names the field Validate refused and what is allowed; it
// wraps ErrInvalidConfig.
type OptionsError = opts.Error

// Validate checks c after defaults are applied: an *OptionsError naming the
// first field outside its range, or ErrPartitioned.
func (c Config) Validate() error {
	c = c.withDefaults()
	rng := func(field string, ok bool, want string, got any) opts.Rule {
		return opts.Rule{Field: field, Bad: !ok, Reason: fmt.Sprintf("must be %s (got %v)", want, got)}
	}
	if err := opts.Check("apply",
		opts.Rule{Field: "SynchronousCommit", Bad: c.SynchronousCommit != SyncCommitOn && c.SynchronousCommit != SyncCommitOff,
			Reason: fmt.Sprintf("must be %q or %q (got %q)", SyncCommitOn, SyncCommitOff, c.SynchronousCommit)},
		opts.Rule{Field: "Mode", Bad: c.Mode != ModeStrict && c.Mode != ModePartitioned,
			Reason: fmt.Sprintf("must be %q or %q (got %q)", ModeStrict, ModePartitioned, c.Mode)},
		rng("Flow", c.Flow != "" && len(c.Flow) <= nameBytesMax, fmt.Sprintf("1..%d bytes", nameBytesMax), len(c.Flow)),
		rng("SourceID", c.SourceID != "" && len(c.SourceID) <= nameBytesMax, fmt.Sprintf("1..%d bytes", nameBytesMax), len(c.SourceID)),
		rng("Schema", len(c.Schema) <= identBytesMax, fmt.Sprintf("1..%d bytes", identBytesMax), len(c.Schema)),
		rng("MaxBatchTxns", c.MaxBatchTxns >= 1 && c.MaxBatchTxns <= maxBatchTxnsMax, fmt.Sprintf("1..%d", maxBatchTxnsMax), c.MaxBatchTxns),
		rng("MaxBatchRows", c.MaxBatchRows >= 1 && c.MaxBatchRows <= maxBatchRowsMax, fmt.Sprintf("1..%d", maxBatchRowsMax), c.MaxBatchRows),
		rng("MaxBatchBytes", c.MaxBatchBytes >= 1<<10 && c.MaxBatchBytes <= maxBatchBytesMax, fmt.Sprintf("%d..%d", 1<<10, maxBatchBytesMax), c.MaxBatchBytes),
	); err != nil {
		return err
	}
	if c.Mode == ModePartitioned {
		return fmt.Errorf("%w (flow %q)", ErrPartitioned, c.Flow)
	}
	return nil
}
