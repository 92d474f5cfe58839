package config

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SchemaVersion is the only configuration schema this package reads.
const SchemaVersion = 2

// Environment is the deployment tier. Production is a gate, not a label: see
// Validate.
type Environment string

// Environments.
const (
	Development Environment = "development"
	Staging     Environment = "staging"
	Production  Environment = "production"
)

// Capture selects how changes leave the source database.
type Capture string

// Capture paths.
const (
	// CapturePgoutput is the default path: a logical slot read with pgoutput
	// by the relay; nothing is installed in the source.
	CapturePgoutput Capture = "pgoutput"
	// CaptureExtension reads frames from the trellara extension's Unix
	// socket (self-managed servers with shared_preload_libraries).
	CaptureExtension Capture = "extension"
)

// Mode is the target apply mode.
type Mode string

// Target modes.
const (
	ModeStrict      Mode = "strict"
	ModePartitioned Mode = "partitioned"
)

// UnknownTablePolicy decides what happens to a table that appears in the
// stream but not in the configuration.
type UnknownTablePolicy string

// Unknown-table policies.
const (
	PolicyBlock           UnknownTablePolicy = "block"
	PolicyAllowCompatible UnknownTablePolicy = "allow_compatible"
)

// KafkaProfile names the set of broker guarantees a Kafka transport is held
// to. Only ProfileProduction enforces the production contract.
type KafkaProfile string

// Kafka profiles.
const (
	ProfileDevelopment KafkaProfile = "development"
	ProfileProduction  KafkaProfile = "production"
)

// Acks is the producer acknowledgement level.
type Acks string

// Acknowledgement levels.
const (
	AcksAll    Acks = "all"    // every in-sync replica
	AcksLeader Acks = "leader" // the partition leader only
	AcksNone   Acks = "none"   // fire and forget
)

// SASLMechanism names a Kafka SASL mechanism.
type SASLMechanism string

// SASL mechanisms.
const (
	SASLPlain       SASLMechanism = "PLAIN"
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// Defaults. Each is documented in docs/CONFIG.md.
const (
	DefaultEnvironment       = Development
	DefaultProtocolVersion   = 2
	DefaultMemoryBytesMax    = 64 * MiB
	DefaultFsync             = "always"
	DefaultSegmentBytesMax   = 128 * MiB
	DefaultRetentionMaxBytes = 50 * GiB
	DefaultRetentionMaxAge   = 7 * 24 * time.Hour
	// DefaultStalledConsumerAfter is how long a consumer of the local log
	// may stay still while the log's end moves before status names it
	// stalled: the product page's two minutes (a stall at 21:04 is named
	// at 21:06).
	DefaultStalledConsumerAfter = 2 * time.Minute
	DefaultReplicationFactor    = 3
	MaxKafkaPartitions          = 1024 // transport.kafka.partitions
	DefaultMinInsyncReplicas    = 2
	DefaultTargetSchema         = "trellara"
	// Health and metrics listen on the loopback interface unless
	// configured otherwise: /metrics and /healthz describe the flow (LSNs,
	// table counts, errors) and need no audience beyond the host's own
	// scraper. Set run.listen to ":9401" (all interfaces) to expose them.
	DefaultRelayListen   = "127.0.0.1:9401"
	DefaultApplierListen = "127.0.0.1:9402"
)

// Config is a parsed configuration (schema v2). Field comments give the YAML
// key; docs/CONFIG.md documents each.
type Config struct {
	Version     int         // version
	Environment Environment // environment
	Flow        string      // flow
	Source      Source      // source
	Transport   Transport   // transport
	Target      *Target     // target: the single-target form; nil with sinks or for a capture-only flow
	// Sinks are the flow's appliers, in file order: the named sinks of a
	// sinks section, or the single target as the sink named "default".
	// Empty for a capture-only flow. See SinkList.
	Sinks  []Sink // sinks
	Schema SchemaPolicy
	Run    Run
	Chaos  Chaos // chaos: commands `trellara chaos live` may run; refused in production

	// meta is behind a pointer so printing a Config shows an address, not a
	// map of line numbers.
	meta *meta
}

type meta struct {
	file  string          // path the configuration was loaded from
	lines map[string]int  // key path → line
	bad   map[string]bool // key paths that failed to decode; Validate stays quiet about them
}

// Source is the database changes are captured from.
type Source struct {
	ID          string      // id: stable name of this source (checkpoints, metrics)
	DatabaseURL SecretRef   // database_url
	Capture     Capture     // capture
	Socket      string      // socket: extension socket path (capture: extension)
	Publication string      // publication; default trellara_<flow>
	Slot        string      // slot; default trellara_<flow>
	Tables      []TableName // tables
	// Schemas are captured whole (schemas): every table in them at
	// snapshot time, and under schema.unknown_table_policy:
	// allow_compatible every table created in them later. Names as
	// PostgreSQL stores them (unquoted input folds to lower case).
	Schemas         []string
	OwnsSlot        bool     // owns_slot: Trellara creates (and may drop) publication and slot
	ProtocolVersion int      // protocol_version: pgoutput proto_version
	Streaming       bool     // streaming: pgoutput streaming of in-progress transactions
	MemoryBytesMax  ByteSize // memory_bytes_max: per-transaction memory before spilling to disk
	// VerifyCAReason (verify_ca_reason) is why the connection may use
	// sslmode=verify-ca (the CA is checked, the host name is not) in
	// production; without it production needs verify-full (tls.go).
	VerifyCAReason string
}

// Transport is where envelopes are made durable. Exactly one of Local or
// Kafka is set.
type Transport struct {
	Local *Local // transport.local
	Kafka *Kafka // transport.kafka
}

// Local is the durable local segment log.
type Local struct {
	Dir                 string    // dir; relative paths are taken from the config file's directory
	Fsync               string    // fsync: only "always"
	SegmentBytesMax     ByteSize  // segment_bytes_max
	Retention           Retention // retention
	ExpirePastRetention bool      // expire_past_retention: drop segments a lagging cursor still needs
	// StalledConsumerAfter (stalled_consumer_after): a consumer whose
	// cursor has not moved for this long while the log's end moved is
	// stalled (status problem consumer_stalled).
	StalledConsumerAfter time.Duration
}

// LogDir is the segment log's directory inside Dir: where the relay
// writes and every consumer (applier, consumer package, stream tail) reads.
func (l *Local) LogDir() string { return filepath.Join(l.Dir, "log") }

// Retention bounds the local log. Zero on one axis means no limit on that
// axis; at least one must be set.
type Retention struct {
	MaxBytes ByteSize      // max_bytes
	MaxAge   time.Duration // max_age
}

// Kafka is the broker transport.
type Kafka struct {
	Brokers       []string // brokers: host:port
	Topic         string   // topic; default trellara.<flow>
	ConsumerGroup string   // consumer_group; default trellara.<flow>
	// StateDir (state_dir) holds what a Kafka flow keeps on the machine
	// running it (pinned schemas, acknowledged positions, snapshot.done,
	// partitions, the last verify): everything transport.local.dir holds
	// but the log. Default trellara-data/<flow>; relative paths are taken
	// from the config file's directory.
	StateDir string
	// Mode (mode) is strict (one partition, commit order is the
	// partition's order) or partitioned: Partitions data partitions chosen
	// by a hash of table and primary key, plus partition 0 for the
	// manifests that give commit order (docs/KAFKA.md).
	Mode              Mode
	Partitions        int          // partitions: data partitions in partitioned mode
	Profile           KafkaProfile // profile
	TLS               *TLS         // tls; nil means plaintext
	SASL              *SASL        // sasl; nil means no SASL
	ReplicationFactor int          // replication_factor (topic creation and checks)
	MinInsyncReplicas int          // min_insync_replicas
	Acks              Acks         // acks
	Idempotent        bool         // idempotent producer
	// AutoCommit lets the consumer commit group offsets on its own timer
	// (auto_commit). Off, the group offset is committed only after the
	// target commit; the target checkpoint is the position either way.
	AutoCommit bool
}

// TLS configures broker TLS. Present (even empty) means TLS is on, verified
// against the system roots unless CAFile is set. CertFile+KeyFile is mTLS.
type TLS struct {
	CAFile   string // ca_file
	CertFile string // cert_file
	KeyFile  string // key_file
}

// SASL configures broker authentication.
type SASL struct {
	Mechanism SASLMechanism // mechanism
	Username  string        // username
	Password  SecretRef     // password
}

// Target is the Postgres database changes are applied to.
type Target struct {
	DatabaseURL    SecretRef // database_url
	Mode           Mode      // mode
	Schema         string    // schema: Trellara-owned schema (checkpoints, quarantine)
	CreateTables   bool      // create_tables: create missing target tables from source definitions
	VerifyCAReason string    // verify_ca_reason: as Source.VerifyCAReason
	// SynchronousCommit (synchronous_commit: on | off) is how the applier's
	// target transactions commit; off commits asynchronously and moves the
	// log cursor only over what the target has flushed.
	SynchronousCommit string
}

// Target.SynchronousCommit values.
const (
	SynchronousCommitOn  = "on"
	SynchronousCommitOff = "off"
)

// DefaultSinkName names the sink a single `target:` section makes. Its
// cursor is ApplierCursorName, so a flow written with `target:` keeps its
// log position when rewritten as `sinks: {default: ...}`.
const DefaultSinkName = "default"

// ApplierCursorName is the segment-log cursor of the default sink.
const ApplierCursorName = "applier"

// Sink is one Postgres target the flow applies to, with its own applier,
// log cursor, checkpoint (on its target), quarantine and verify.
type Sink struct {
	Name   string  // the key under sinks, or "default" for a target section
	Target *Target // target: database, mode and the Trellara schema on it
	// Listen is the applier's health and metrics address (sinks.NAME.listen);
	// by default the port of run.listen.applier plus the sink's index in
	// the file.
	Listen string
}

// Cursor is the sink's segment-log consumer name: "applier" for the
// default sink, "applier.NAME" otherwise.
func (s Sink) Cursor() string {
	if s.Name == DefaultSinkName {
		return ApplierCursorName
	}
	return ApplierCursorName + "." + s.Name
}

// Sink returns the sink named name.
func (c *Config) Sink(name string) (Sink, bool) {
	for _, s := range c.Sinks {
		if s.Name == name {
			return s, true
		}
	}
	return Sink{}, false
}

// SinkNames lists the sinks in file order.
func (c *Config) SinkNames() []string {
	names := make([]string, len(c.Sinks))
	for i, s := range c.Sinks {
		names[i] = s.Name
	}
	return names
}

// SchemaPolicy governs schema changes seen in the stream.
type SchemaPolicy struct {
	UnknownTablePolicy UnknownTablePolicy // unknown_table_policy
	OnBlocked          OnBlocked          // on_blocked
	Renames            []ColumnRename     // renames: column renames that flow through a DDL barrier
}

// ColumnRename is one schema.renames entry: a column of a configured table
// renamed at the source. A rename_column change of exactly that table,
// old name and new name flows to the target through a DDL barrier
// (docs/SCHEMA.md); without the entry capture stops at it.
type ColumnRename struct {
	Table TableName // table: one of source.tables
	From  string    // from: the column's name before the rename, as the catalog holds it
	To    string    // to: its name after
}

// OnBlocked decides what a blocked schema change stops (docs/SCHEMA.md).
type OnBlocked string

// On-blocked policies.
const (
	// HoldFlow: capture stops at the change; no table advances past it.
	HoldFlow OnBlocked = "hold_flow"
	// HoldTable: capture goes on; only the changed table is held (its
	// rows are no longer published) until a reseed copies it again.
	HoldTable OnBlocked = "hold_table"
)

// Run holds process settings.
type Run struct {
	Evaluate bool   // evaluate: a bounded evaluation flow whose resources may be dropped
	Listen   Listen // listen
	// ListenPublic (listen_public) opts in to health and metrics endpoints
	// on a non-loopback address in production; ListenPublicReason
	// (listen_public_reason) says why that is safe. The endpoints have no
	// authentication (docs/SECURITY.md).
	ListenPublic       bool
	ListenPublicReason string
}

// Chaos names the commands `trellara chaos live` runs to restart the
// source and the target. Nothing is guessed: a fault kind whose command is
// absent is reported "not configured". Each command runs with /bin/sh -c
// and must return once the server accepts connections again.
type Chaos struct {
	SourceRestart string // source_restart
	TargetRestart string // target_restart
}

// Listen holds the health and metrics listen addresses.
type Listen struct {
	Relay   string // relay
	Applier string // applier
}

// Default returns a configuration holding every default. Flow, source and
// transport still need values before it validates.
func Default() *Config {
	return &Config{
		Version:     SchemaVersion,
		Environment: DefaultEnvironment,
		Source: Source{
			Capture:         CapturePgoutput,
			ProtocolVersion: DefaultProtocolVersion,
			Streaming:       true,
			MemoryBytesMax:  DefaultMemoryBytesMax,
		},
		Schema: SchemaPolicy{UnknownTablePolicy: PolicyBlock, OnBlocked: HoldFlow},
		Run:    Run{Listen: Listen{Relay: DefaultRelayListen, Applier: DefaultApplierListen}},
	}
}

// DefaultLocal returns a local transport with every default but Dir.
func DefaultLocal() *Local {
	return &Local{
		Fsync:           DefaultFsync,
		SegmentBytesMax: DefaultSegmentBytesMax,
		Retention:       Retention{MaxBytes: DefaultRetentionMaxBytes, MaxAge: DefaultRetentionMaxAge},

		StalledConsumerAfter: DefaultStalledConsumerAfter,
	}
}

// DefaultKafka returns a Kafka transport with every default but Brokers.
// The defaults are the safe ones (RF 3, min ISR 2, acks all, idempotent);
// a single-broker development setup lowers them explicitly.
func DefaultKafka() *Kafka {
	return &Kafka{
		Mode:              ModeStrict,
		Profile:           ProfileDevelopment,
		ReplicationFactor: DefaultReplicationFactor,
		MinInsyncReplicas: DefaultMinInsyncReplicas,
		Acks:              AcksAll,
		Idempotent:        true,
	}
}

// DefaultTarget returns a target with every default but DatabaseURL.
func DefaultTarget() *Target {
	return &Target{Mode: ModeStrict, Schema: DefaultTargetSchema, SynchronousCommit: SynchronousCommitOff}
}

// applyDerivedDefaults fills names derived from the flow name. It runs after
// decoding, because YAML keys may come in any order.
func (c *Config) applyDerivedDefaults() {
	c.deriveSinks()
	if !flowRE.MatchString(c.Flow) {
		return // Validate reports the flow; derived names would only add noise
	}
	if c.Source.Publication == "" {
		c.Source.Publication = "trellara_" + c.Flow
	}
	if c.Source.Slot == "" {
		c.Source.Slot = "trellara_" + c.Flow
	}
	if k := c.Transport.Kafka; k != nil {
		if k.Topic == "" {
			k.Topic = "trellara." + c.Flow
		}
		if k.ConsumerGroup == "" {
			k.ConsumerGroup = "trellara." + c.Flow
		}
		if k.StateDir == "" {
			k.StateDir = "trellara-data/" + c.Flow
		}
	}
}

// deriveSinks makes a single target section the sink named default and
// gives each sink without listen its default address. Validate calls it
// too, for a Config built in code.
func (c *Config) deriveSinks() {
	if c.Target != nil && len(c.Sinks) == 0 {
		c.Sinks = []Sink{{Name: DefaultSinkName, Target: c.Target}}
	}
	for i := range c.Sinks {
		if c.Sinks[i].Listen == "" {
			c.Sinks[i].Listen = offsetPort(c.Run.Listen.Applier, i)
		}
	}
}

// offsetPort returns addr with its port raised by n; addr unchanged when
// it does not parse (validation reports it).
func offsetPort(addr string, n int) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || n == 0 {
		return addr
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(host, strconv.Itoa(p+n))
}

func (c *Config) file() string {
	if c.meta == nil {
		return ""
	}
	return c.meta.file
}

// line returns the line of path, or of its nearest ancestor present in the
// file (a missing key is reported where its section starts), or 0.
func (c *Config) line(path string) int {
	if c.meta == nil {
		return 0
	}
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := c.meta.lines[p]; ok {
			return l
		}
	}
	return 0
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// maxConfigBytes bounds the configuration file. Real files are a few KiB;
// the bound keeps a wrong path (a log, a dump) from being read whole.
const maxConfigBytes = 1 << 20

// Load reads, decodes and validates the configuration at path. Content
// problems come back together as one *ValidationError naming each key and
// line; file problems (missing, unreadable) as one error with the fix.
// Credential references are not resolved: call ResolveSecrets.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &fileError{path: path, err: err,
				msg: "no such file",
				fix: "run `trellara init --source-database-url URL --table SCHEMA.TABLE` (it writes one), or pass --config with the right path"}
		}
		return nil, &fileError{path: path, err: err, msg: "cannot open: " + errReason(err),
			fix: "make the file readable by the user Trellara runs as"}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, &fileError{path: path, err: err, msg: "cannot read: " + errReason(err),
			fix: "pass --config with the path of a configuration file"}
	}
	if len(data) > maxConfigBytes {
		return nil, &fileError{path: path, msg: "larger than 1 MiB; this is not a Trellara configuration",
			fix: "pass --config with the path of a trellara.yml"}
	}
	c, err := parse(data, path)
	if err != nil {
		return nil, err
	}
	// A relative log directory means "next to the config file", so a config
	// written by `trellara init --evaluate` works from any working directory.
	if l := c.Transport.Local; l != nil && l.Dir != "" && !filepath.IsAbs(l.Dir) {
		l.Dir = filepath.Join(filepath.Dir(path), l.Dir)
	}
	if k := c.Transport.Kafka; k != nil && k.StateDir != "" && !filepath.IsAbs(k.StateDir) {
		k.StateDir = filepath.Join(filepath.Dir(path), k.StateDir)
	}
	return c, nil
}

// Parse decodes and validates a configuration held in memory. Relative paths
// are left as written.
func Parse(data []byte) (*Config, error) { return parse(data, "") }

func parse(data []byte, file string) (*Config, error) {
	c, errs := decode(data)
	if c == nil {
		return nil, newValidationError(file, errs)
	}
	c.meta.file = file
	c.applyDerivedDefaults()
	errs = append(errs, c.validate()...)
	if err := newValidationError(file, errs); err != nil {
		return nil, err
	}
	return c, nil
}
