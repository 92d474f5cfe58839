package config

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	// flowRE: the flow name is embedded in slot, publication, topic and
	// metric names, so it is restricted to what all of them accept.
	flowRE = regexp.MustCompile(`^[a-z0-9_]{1,48}$`)
	// sourceIDRE: stored in checkpoints and used as a metric label value.
	sourceIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// slotRE is PostgreSQL's rule for replication slot names; publications
	// and the Trellara schema use it too so no quoting is ever needed.
	slotRE   = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	envVarRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	topicRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)
)

// Limits on values whose range the schema fixes.
const (
	minMemoryBytesMax    = 1 * MiB
	minSegmentBytesMax   = 1 * MiB
	maxSegmentBytesMax   = 1 * GiB
	maxReplicationFactor = 32
)

type validator struct {
	c    *Config
	errs []FieldError
	// flowOK is false when the flow name is invalid: names derived from it
	// were then not filled in, and saying they are missing would be noise.
	flowOK bool
}

// add records a problem at path. A path that already failed to decode is
// skipped, so one mistake yields one message.
func (v *validator) add(path, fix, format string, args ...any) {
	if m := v.c.meta; m != nil && m.bad[path] {
		return
	}
	v.errs = append(v.errs, FieldError{
		Path:    path,
		Line:    v.c.line(path),
		Message: path + ": " + fmt.Sprintf(format, args...),
		Fix:     fix,
	})
}

// Validate checks the configuration as a whole and returns every problem in
// one *ValidationError, or nil. Load calls it; call it again after changing
// a Config in code. It does not resolve credential references.
func (c *Config) Validate() error {
	return newValidationError(c.file(), c.validate())
}

func (c *Config) validate() []FieldError {
	c.deriveSinks()
	v := &validator{c: c, flowOK: flowRE.MatchString(c.Flow)}
	prod := c.Environment == Production

	if c.Version != SchemaVersion {
		v.add("version", "set version: 2", "unsupported configuration schema version %d; version 2 is the only supported version", c.Version)
	}
	switch c.Environment {
	case Development, Staging, Production:
	default:
		v.add("environment", "set environment to development, staging or production",
			"must be development, staging or production, not %s", quoteValue(string(c.Environment)))
	}
	switch {
	case c.Flow == "":
		v.add("flow", "name the flow, e.g. flow: sales", "required")
	case !flowRE.MatchString(c.Flow):
		v.add("flow", "use 1–48 lower-case letters, digits and underscores, e.g. sales_eu",
			"%s is not a valid flow name (it becomes part of slot, publication and topic names)", quoteValue(c.Flow))
	}

	v.source(&c.Source, prod)
	v.transport(&c.Transport, prod)
	v.sinks(c, prod)
	switch c.Schema.UnknownTablePolicy {
	case PolicyBlock, PolicyAllowCompatible:
	default:
		v.add("schema.unknown_table_policy", "set it to block or allow_compatible",
			"must be block or allow_compatible, not %s", quoteValue(string(c.Schema.UnknownTablePolicy)))
	}
	v.renames(c)
	switch c.Schema.OnBlocked {
	case HoldFlow, HoldTable:
	default:
		v.add("schema.on_blocked", "set it to hold_flow (a blocked change stops the whole flow) or hold_table (only the changed table stops)",
			"must be hold_flow or hold_table, not %s", quoteValue(string(c.Schema.OnBlocked)))
	}
	v.run(&c.Run, prod)
	v.listeners(c, prod)
	v.chaos(c, prod)
	return v.errs
}

// renames checks schema.renames: each entry names a configured table and
// two different column names, and no column is renamed twice.
func (v *validator) renames(c *Config) {
	type col struct {
		table TableName
		name  string
	}
	from, to := map[col]int{}, map[col]int{}
	for i, r := range c.Schema.Renames {
		p := fmt.Sprintf("schema.renames[%d]", i)
		switch {
		case r.Table == (TableName{}):
			v.add(p+".table", "name the table, e.g. table: public.orders", "required")
		case !slices.Contains(c.Source.Tables, r.Table) && !slices.Contains(c.Source.Schemas, r.Table.Schema):
			// A table of source.schemas is the flow's once captured.
			v.add(p+".table", "name one of source.tables, or add "+r.Table.String()+" to source.tables",
				"%s is not one of source.tables", quoteValue(r.Table.String()))
		}
		for _, k := range []struct{ key, val, when, example string }{{"from", r.From, "before", "note"}, {"to", r.To, "after", "remark"}} {
			switch {
			case k.val == "":
				v.add(p+"."+k.key, fmt.Sprintf("give the column's name %s the rename, e.g. %s: %s", k.when, k.key, k.example), "required")
			case len(k.val) > maxIdentifierBytes:
				v.add(p+"."+k.key, "write the column's name as the catalog holds it (at most 63 bytes)", "%s is longer than PostgreSQL's 63-byte identifier limit", quoteValue(k.val))
			}
		}
		if r.From != "" && r.From == r.To {
			v.add(p+".to", "give the column's new name in to, or remove the entry", "is the same as from (%s): that is no rename", quoteValue(r.From))
			continue
		}
		if first, dup := from[col{r.Table, r.From}]; dup && r.From != "" {
			v.add(p+".from", fmt.Sprintf("keep one entry per renamed column (remove this one or schema.renames[%d])", first),
				"%s of %s is already renamed by schema.renames[%d]", quoteValue(r.From), r.Table, first)
		} else if first, dup := to[col{r.Table, r.To}]; dup && r.To != "" {
			v.add(p+".to", fmt.Sprintf("keep one entry per renamed column (remove this one or schema.renames[%d])", first),
				"%s of %s is already the new name in schema.renames[%d]", quoteValue(r.To), r.Table, first)
		}
		if _, ok := from[col{r.Table, r.From}]; !ok {
			from[col{r.Table, r.From}] = i
		}
		if _, ok := to[col{r.Table, r.To}]; !ok {
			to[col{r.Table, r.To}] = i
		}
	}
}

// chaos checks the chaos section: its commands restart databases, which a
// production flow must never do on a tool's say-so.
func (v *validator) chaos(c *Config, prod bool) {
	for _, k := range []struct{ key, val string }{{"source_restart", c.Chaos.SourceRestart}, {"target_restart", c.Chaos.TargetRestart}} {
		present := c.meta != nil && c.meta.lines["chaos."+k.key] > 0
		switch {
		case prod && (k.val != "" || present):
			v.add("chaos."+k.key, "remove the chaos section; chaos live runs only outside environment: production",
				"environment production refuses chaos commands (they restart a database)")
		case present && strings.TrimSpace(k.val) == "":
			v.add("chaos."+k.key, "give the shell command that restarts the server and returns when it accepts connections, or remove the key",
				"is empty")
		}
	}
}

func (v *validator) source(s *Source, prod bool) {
	switch {
	case s.ID == "":
		v.add("source.id", "name the source database, e.g. id: store_001", "required")
	case !sourceIDRE.MatchString(s.ID):
		v.add("source.id", "use up to 63 lower-case letters, digits, _ and -, starting with a letter or digit",
			"%s is not a valid source id (it is stored in checkpoints and used as a metric label)", quoteValue(s.ID))
	}
	v.secretRef("source.database_url", s.DatabaseURL, inlineRefusal(prod))

	switch s.Capture {
	case CapturePgoutput:
		if s.Socket != "" {
			v.add("source.socket", "remove socket, or set capture: extension", "is only used with capture: extension")
		}
	case CaptureExtension:
		switch {
		case s.Socket == "":
			v.add("source.socket", "set socket to the extension's socket path (the trellara.socket_path setting)", "required with capture: extension")
		case !filepath.IsAbs(s.Socket):
			v.add("source.socket", "use an absolute path, e.g. /var/run/postgresql/trellara.sock", "path %s must be absolute", quoteValue(s.Socket))
		}
	default:
		v.add("source.capture", "set capture to pgoutput (the default) or extension",
			"must be pgoutput or extension, not %s", quoteValue(string(s.Capture)))
	}

	v.identifier("source.publication", s.Publication, "a publication")
	v.identifier("source.slot", s.Slot, "a replication slot")

	if len(s.Tables) == 0 && len(s.Schemas) == 0 {
		v.add("source.tables", "list the tables to capture, e.g. tables: [public.sales], or whole schemas in source.schemas", "at least one table or schema is required")
	}
	v.schemas(s)
	if len(s.Tables) > maxListItems {
		v.add("source.tables", "split the tables across flows", "more than %d tables", maxListItems)
	}
	seen := map[TableName]int{}
	for i, t := range s.Tables {
		p := fmt.Sprintf("source.tables[%d]", i)
		if t.Schema == "" || t.Name == "" {
			v.add(p, "write schema.table, e.g. public.sales", "must name both schema and table")
			continue
		}
		if first, dup := seen[t]; dup {
			v.add(p, "remove the duplicate", "%s is listed twice (first at source.tables[%d])", t, first)
			continue
		}
		if slices.Contains(s.Schemas, t.Schema) {
			v.add(p, "remove it from source.tables: source.schemas captures every table of "+QuoteIdent(t.Schema),
				"%s is in schema %s, which source.schemas captures whole", t, QuoteIdent(t.Schema))
		}
		seen[t] = i
	}

	switch s.ProtocolVersion {
	case 2:
	case 1:
		if s.Streaming {
			v.add("source.protocol_version", "set streaming: false, or use protocol_version: 2",
				"protocol_version 1 cannot stream in-progress transactions, so it is only valid with streaming: false")
		}
	default:
		v.add("source.protocol_version", "set protocol_version: 2 (the default)",
			"must be 1 or 2 (pgoutput proto_version), not %d", s.ProtocolVersion)
	}
	if s.MemoryBytesMax < minMemoryBytesMax {
		v.add("source.memory_bytes_max", "set it to at least 1MiB; the default is 64MiB",
			"%s is below the minimum of 1MiB (larger transactions spill to disk beyond this bound)", s.MemoryBytesMax)
	}
	if s.OwnsSlot && s.Capture == CaptureExtension {
		v.add("source.owns_slot", "remove owns_slot; the extension's worker owns its slot",
			"is only used with capture: pgoutput")
	}
}

func (v *validator) identifier(path, value, what string) {
	switch {
	case value == "" && !v.flowOK:
	case value == "":
		v.add(path, "name it, or remove the key to use the default trellara_<flow>", "required")
	case !slotRE.MatchString(value):
		v.add(path, "use up to 63 lower-case letters, digits and underscores, starting with a letter or _",
			"%s is not a valid name for %s", quoteValue(value), what)
	}
}

// secretRef checks a credential reference. An env name or file path of the
// wrong shape is reported without its value (SecretRef.shapeError).
// refuse names why an inline value is refused ("environment is production");
// empty accepts it.
func (v *validator) secretRef(path string, r SecretRef, refuse string) {
	exampleEnv, exampleFile := refExamples(path)
	fix := fmt.Sprintf("write %s: {env: %s} or {file: %s}", lastSegment(path), exampleEnv, exampleFile)
	switch {
	case r.IsZero():
		v.add(path, fix, "required")
	case r.Env != "" && r.File != "":
		v.add(path, "keep only one of env or file", "names both an environment variable and a file")
	case r.Env != "" || r.File != "":
		if sub, msg, fix := r.shapeError(path); sub != "" {
			v.add(path+"."+sub, fix, "%s", msg)
		}
	case r.IsInline():
		if refuse != "" {
			// The value itself is never echoed: it is the credential.
			v.add(path, "move the value into an environment variable or a file readable only by the service user, and "+fix,
				"inline credential refused: %s, where credentials must be {env: ...} or {file: ...} references", refuse)
		}
	}
}

// inlineRefusal is why an inline credential is refused in this
// environment, or "" where it is accepted.
func inlineRefusal(prod bool) string {
	if prod {
		return "environment is production"
	}
	return ""
}

func lastSegment(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:]
	}
	return path
}

func (v *validator) transport(t *Transport, prod bool) {
	switch {
	case t.Local == nil && t.Kafka == nil:
		v.add("transport", "add transport: {local: {dir: /var/lib/trellara/<flow>}} (or a kafka section)",
			"exactly one of local or kafka is required")
		return
	case t.Local != nil && t.Kafka != nil:
		v.add("transport", "keep either transport.local or transport.kafka",
			"exactly one of local or kafka may be set, not both")
		return
	}
	if l := t.Local; l != nil {
		v.local(l)
	}
	if k := t.Kafka; k != nil {
		v.kafka(k, prod)
	}
}

func (v *validator) local(l *Local) {
	const p = "transport.local"
	if l.Dir == "" {
		v.add(p+".dir", "set dir to the log directory, e.g. /var/lib/trellara/sales", "required")
	}
	if l.Fsync != "always" {
		v.add(p+".fsync", "set fsync: always (or remove the key)",
			"must be always, not %s: the relay acknowledges the source only after the log is on disk", quoteValue(l.Fsync))
	}
	if l.SegmentBytesMax < minSegmentBytesMax || l.SegmentBytesMax > maxSegmentBytesMax {
		v.add(p+".segment_bytes_max", "use a size between 1MiB and 1GiB; the default is 128MiB",
			"%s is outside 1MiB..1GiB", l.SegmentBytesMax)
	}
	if l.StalledConsumerAfter < time.Second {
		v.add(p+".stalled_consumer_after", fmt.Sprintf("use a duration of at least 1s; the default is %s", formatDuration(DefaultStalledConsumerAfter)),
			"%s is under 1s: every consumer between two cursor commits would look stalled", formatDuration(l.StalledConsumerAfter))
	}
	r := l.Retention
	switch {
	case r.MaxBytes < 0 || r.MaxAge < 0:
		v.add(p+".retention", "use positive limits", "limits must not be negative")
	case r.MaxBytes == 0 && r.MaxAge == 0:
		v.add(p+".retention", "set max_bytes (e.g. 50GiB) or max_age (e.g. 7d)",
			"needs a limit: both max_bytes and max_age are 0 (unbounded)")
	case r.MaxBytes != 0 && r.MaxBytes < l.SegmentBytesMax:
		v.add(p+".retention.max_bytes", fmt.Sprintf("raise max_bytes to at least segment_bytes_max (%s)", l.SegmentBytesMax),
			"%s is smaller than one segment (%s)", r.MaxBytes, l.SegmentBytesMax)
	}
}

func (v *validator) kafka(k *Kafka, prod bool) {
	const p = "transport.kafka"
	if len(k.Brokers) == 0 {
		v.add(p+".brokers", "list the bootstrap brokers, e.g. brokers: [kafka-1:9092]", "at least one broker is required")
	}
	for i, b := range k.Brokers {
		if err := checkHostPort(b, false); err != nil {
			v.add(fmt.Sprintf("%s.brokers[%d]", p, i), "write host:port, e.g. kafka-1:9092", "%s %v", quoteValue(b), err)
		}
	}
	if (k.Topic != "" || v.flowOK) && (!topicRE.MatchString(k.Topic) || k.Topic == "." || k.Topic == "..") {
		v.add(p+".topic", "use up to 249 letters, digits, '.', '_' and '-', or remove the key for trellara.<flow>",
			"%s is not a valid topic name", quoteValue(k.Topic))
	}
	if k.ConsumerGroup == "" && v.flowOK {
		v.add(p+".consumer_group", "name it, or remove the key to use trellara.<flow>", "required")
	}
	if k.StateDir == "" && v.flowOK {
		v.add(p+".state_dir", "set state_dir to a directory, e.g. /var/lib/trellara/sales, or remove the key for trellara-data/<flow>", "required")
	} else if strings.ContainsRune(k.StateDir, 0) {
		v.add(p+".state_dir", "write a directory path", "contains a NUL byte")
	}
	switch k.Mode {
	case ModeStrict:
		if k.Partitions != 0 && k.Partitions != 1 {
			v.add(p+".partitions", "remove partitions, or set mode: partitioned",
				"strict mode writes one partition; partitions %d needs mode: partitioned", k.Partitions)
		}
	case ModePartitioned:
		if k.Partitions < 2 || k.Partitions > MaxKafkaPartitions {
			v.add(p+".partitions", fmt.Sprintf("set partitions to the number of data partitions, 2 to %d", MaxKafkaPartitions),
				"partitioned mode needs 2 to %d data partitions, not %d", MaxKafkaPartitions, k.Partitions)
		}
	default:
		v.add(p+".mode", "set mode to strict or partitioned",
			"must be strict or partitioned, not %s", quoteValue(string(k.Mode)))
	}
	switch k.Profile {
	case ProfileDevelopment, ProfileProduction:
	default:
		v.add(p+".profile", "set profile to development or production",
			"must be development or production, not %s", quoteValue(string(k.Profile)))
	}
	switch k.Acks {
	case AcksAll, AcksLeader, AcksNone:
	default:
		v.add(p+".acks", "set acks to all (recommended), leader or none", "must be all, leader or none, not %s", quoteValue(string(k.Acks)))
	}
	if k.ReplicationFactor < 1 || k.ReplicationFactor > maxReplicationFactor {
		v.add(p+".replication_factor", "use a value from 1 to 32 (3 or more in production)", "%d is outside 1..32", k.ReplicationFactor)
	}
	if k.MinInsyncReplicas < 1 {
		v.add(p+".min_insync_replicas", "use a value of at least 1 (2 or more in production)", "%d is below 1", k.MinInsyncReplicas)
	} else if k.ReplicationFactor >= 1 && k.MinInsyncReplicas > k.ReplicationFactor {
		v.add(p+".min_insync_replicas", "lower min_insync_replicas or raise replication_factor",
			"%d is above replication_factor %d: no write could ever be acknowledged", k.MinInsyncReplicas, k.ReplicationFactor)
	}
	if k.Idempotent && (k.Acks == AcksLeader || k.Acks == AcksNone) && k.Profile != ProfileProduction && !prod {
		// Under the production contract the acks clause already says this.
		v.add(p+".idempotent", "set acks: all, or idempotent: false",
			"an idempotent producer requires acks: all (got %s)", k.Acks)
	}
	if t := k.TLS; t != nil {
		for _, f := range []struct{ key, val string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
			if f.val != "" && !filepath.IsAbs(f.val) {
				v.add(p+".tls."+f.key, "use an absolute path, e.g. /etc/trellara/kafka/"+filepath.Base(f.val),
					"path %s must be absolute", quoteValue(f.val))
			}
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			v.add(p+".tls", "set both cert_file and key_file for mutual TLS, or neither",
				"cert_file and key_file go together")
		}
	}
	if s := k.SASL; s != nil {
		switch s.Mechanism {
		case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		default:
			v.add(p+".sasl.mechanism", "set mechanism to SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN",
				"must be SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN, not %s", quoteValue(string(s.Mechanism)))
		}
		if s.Username == "" {
			v.add(p+".sasl.username", "set the SASL user name", "required")
		}
		// Under the production profile credentials are references only,
		// whatever the environment.
		refuse := inlineRefusal(prod)
		if refuse == "" && k.Profile == ProfileProduction {
			refuse = "the Kafka profile is production"
		}
		v.secretRef(p+".sasl.password", s.Password, refuse)
	}

	if prod && k.Profile != ProfileProduction {
		v.add(p+".profile", "set profile: production and meet the production contract (docs/CONFIG.md)",
			"environment production refuses Kafka profile %s; only the production contract is allowed", quoteValue(string(k.Profile)))
	}
	// In production the contract is checked even when the profile is wrong,
	// so every gap is reported in one pass.
	if prod || k.Profile == ProfileProduction {
		v.kafkaContract(k)
	}
}

// kafkaContract enforces the production contract. Each clause is its own
// error so an operator sees every gap at once. It runs on the configuration,
// before any broker is contacted.
func (v *validator) kafkaContract(k *Kafka) {
	const p = "transport.kafka"
	const why = " (production contract)"
	if k.TLS == nil {
		v.add(p+".tls", "add tls: {ca_file: /etc/trellara/kafka/ca.pem} (or tls: {} for the system roots)",
			"TLS is required"+why)
	}
	mtls := k.TLS != nil && k.TLS.CertFile != "" && k.TLS.KeyFile != ""
	scram := k.SASL != nil && (k.SASL.Mechanism == SASLScramSHA256 || k.SASL.Mechanism == SASLScramSHA512)
	switch {
	case k.SASL != nil && k.SASL.Mechanism == SASLPlain && !mtls:
		v.add(p+".sasl.mechanism", "use SCRAM-SHA-512 or SCRAM-SHA-256, or authenticate with mutual TLS (tls.cert_file and tls.key_file)",
			"PLAIN is not accepted"+why+": authentication must be mutual TLS or SASL SCRAM")
	case !mtls && !scram:
		v.add(p, "set tls.cert_file and tls.key_file (mutual TLS), or add sasl: {mechanism: SCRAM-SHA-512, username: ..., password: {env: TRELLARA_KAFKA_PASSWORD}}",
			"client authentication is required"+why+": mutual TLS or SASL SCRAM")
	}
	if k.ReplicationFactor < 3 {
		v.add(p+".replication_factor", "set replication_factor: 3 or more", "%d is below 3%s", k.ReplicationFactor, why)
	}
	if k.MinInsyncReplicas < 2 {
		v.add(p+".min_insync_replicas", "set min_insync_replicas: 2 or more (and not above replication_factor)", "%d is below 2%s", k.MinInsyncReplicas, why)
	}
	if k.Acks != AcksAll {
		v.add(p+".acks", "set acks: all", "must be all%s, not %s", why, quoteValue(string(k.Acks)))
	}
	if !k.Idempotent {
		v.add(p+".idempotent", "set idempotent: true", "must be true%s", why)
	}
	if k.AutoCommit {
		v.add(p+".auto_commit", "set auto_commit: false (or remove the key)",
			"must be false%s: the consumer-group offset is committed only after the target commit", why)
	}
}

// SinkPath is the key path of sink s's settings: "target" for the
// single-target form, "sinks.NAME" otherwise (its target under
// SinkPath+".target").
func (c *Config) SinkPath(s Sink) string {
	if c.Target != nil && s.Target == c.Target {
		return ""
	}
	return "sinks." + s.Name
}

// targetPath is the key path of sink s's target section.
func (c *Config) targetPath(s Sink) string {
	if p := c.SinkPath(s); p != "" {
		return p + ".target"
	}
	return "target"
}

func (v *validator) sinks(c *Config, prod bool) {
	if c.Target != nil && c.Sinks != nil && (len(c.Sinks) != 1 || c.Sinks[0].Target != c.Target) {
		v.add("sinks", "keep one of them: a single target: section, or that target as one of the named sinks",
			"cannot be combined with target: (line %d); a flow states its targets one way", c.line("target"))
		return
	}
	type where struct{ name, key string }
	databases := map[string]where{}
	type addr struct{ key, addr string }
	addrs := []addr{{"run.listen.relay", c.Run.Listen.Relay}}
	for _, s := range c.Sinks {
		p := v.c.SinkPath(s)
		tp := v.c.targetPath(s)
		if s.Target == nil {
			v.add(tp, "add target: {database_url: {env: VARIABLE}} under the sink", "required: every sink is a Postgres target")
			continue
		}
		v.target(tp, s.Target, prod)
		// Two sinks on one database would write the same tables and fight
		// over one checkpoint row: refuse the same reference twice.
		if ref := s.Target.DatabaseURL; !ref.IsZero() {
			key := ref.Env + "\x00" + ref.File + "\x00" + ref.inline.Reveal()
			if prev, dup := databases[key]; dup {
				v.add(tp+".database_url", "point each sink at its own database",
					"is the same database as sink %s (%s); each sink applies to a database of its own", prev.name, prev.key)
			} else {
				databases[key] = where{s.Name, tp + ".database_url"}
			}
		}
		lp := "run.listen.applier"
		if p != "" {
			lp = p + ".listen"
		}
		if err := checkHostPort(s.Listen, true); err != nil {
			v.add(lp, "write [host]:port, e.g. 127.0.0.1:9403", "%s %v", quoteValue(s.Listen), err)
			continue
		}
		for _, a := range addrs {
			if a.addr == s.Listen {
				fix := "give each sink's applier its own port with sinks.NAME.listen"
				if p == "" {
					fix = "give the applier its own port, e.g. :9402"
				}
				v.add(lp, fix, "%s is the same address as %s; each service listens on its own port (they may run in one process)",
					quoteValue(s.Listen), a.key)
			}
		}
		addrs = append(addrs, addr{"sink " + s.Name + "'s applier (" + lp + ")", s.Listen})
	}
}

func (v *validator) target(path string, t *Target, prod bool) {
	v.secretRef(path+".database_url", t.DatabaseURL, inlineRefusal(prod))
	switch t.Mode {
	case ModeStrict, ModePartitioned:
	default:
		v.add(path+".mode", "set mode to strict (the default) or partitioned", "must be strict or partitioned, not %s", quoteValue(string(t.Mode)))
	}
	switch t.SynchronousCommit {
	case SynchronousCommitOn, SynchronousCommitOff:
	default:
		v.add(path+".synchronous_commit", "set synchronous_commit to off (the default) or on",
			"must be on or off, not %s", quoteValue(t.SynchronousCommit))
	}
	switch {
	case t.Schema == "":
		v.add(path+".schema", "remove the key to use trellara, or name a schema", "required")
	case !slotRE.MatchString(t.Schema):
		v.add(path+".schema", "use up to 63 lower-case letters, digits and underscores, e.g. trellara",
			"%s is not a valid schema name", quoteValue(t.Schema))
	}
}

func (v *validator) run(r *Run, prod bool) {
	if prod && r.Evaluate {
		v.add("run.evaluate", "remove evaluate (or set it to false); evaluation flows are for non-production environments",
			"environment production refuses evaluate: true (an evaluation flow may drop its slot and publication)")
	}
	for _, l := range []struct{ key, val string }{{"relay", r.Listen.Relay}, {"applier", r.Listen.Applier}} {
		if err := checkHostPort(l.val, true); err != nil {
			v.add("run.listen."+l.key, "write [host]:port, e.g. :9401 or 127.0.0.1:9401", "%s %v", quoteValue(l.val), err)
		}
	}
}

// checkHostPort validates "host:port"; emptyHost allows ":9401".
func checkHostPort(s string, emptyHost bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("is not host:port")
	}
	if host == "" && !emptyHost {
		return fmt.Errorf("has no host")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("has an invalid port (1-65535)")
	}
	return nil
}

// schemas checks source.schemas: names, duplicates, the capture path and
// the list bound. A table of a listed schema is refused in source.tables
// (checked there): one place says a table is captured.
func (v *validator) schemas(s *Source) {
	if len(s.Schemas) == 0 {
		return
	}
	if s.Capture == CaptureExtension {
		v.add("source.schemas", "list the tables in source.tables, or set capture: pgoutput",
			"is only supported with capture: pgoutput (the extension decodes the tables it is given by name)")
	}
	if len(s.Schemas) > maxListItems {
		v.add("source.schemas", "split the schemas across flows", "more than %d schemas", maxListItems)
	}
	seen := map[string]int{}
	for i, n := range s.Schemas {
		p := fmt.Sprintf("source.schemas[%d]", i)
		if strings.HasPrefix(n, "pg_") || n == "information_schema" {
			v.add(p, "remove it: system schemas cannot be published", "%s is a system schema", QuoteIdent(n))
			continue
		}
		if first, dup := seen[n]; dup {
			v.add(p, "remove the duplicate", "%s is listed twice (first at source.schemas[%d])", QuoteIdent(n), first)
			continue
		}
		seen[n] = i
	}
}

// Listener is one health-and-metrics endpoint of the flow: the key that
// sets it and its address.
type Listener struct {
	Key  string // run.listen.relay, run.listen.applier, sinks.NAME.listen
	Addr string
}

// Listeners are the flow's endpoint addresses: the relay's and each sink's
// applier (run.listen.applier when the flow has no sink).
func (c *Config) Listeners() []Listener {
	c.deriveSinks()
	out := []Listener{{"run.listen.relay", c.Run.Listen.Relay}}
	if len(c.Sinks) == 0 {
		return append(out, Listener{"run.listen.applier", c.Run.Listen.Applier})
	}
	for _, s := range c.Sinks {
		key := "run.listen.applier"
		if p := c.SinkPath(s); p != "" {
			key = p + ".listen"
		}
		out = append(out, Listener{key, s.Listen})
	}
	return out
}

// PublicListeners are the Listeners whose address is not loopback: an
// empty host (":9401"), an unspecified one (0.0.0.0, ::), any other IP or
// a host name other than localhost.
func (c *Config) PublicListeners() []Listener {
	var out []Listener
	for _, l := range c.Listeners() {
		if !IsLoopbackAddr(l.Addr) {
			out = append(out, l)
		}
	}
	return out
}

// IsLoopbackAddr reports whether host:port listens on loopback only. An
// address that does not parse counts as loopback: validation reports it.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listeners enforces the production listener rule: the endpoints have no
// authentication, so a non-loopback address needs run.listen_public: true
// and a run.listen_public_reason. The opt-in is stated in trellara status.
func (v *validator) listeners(c *Config, prod bool) {
	r := &c.Run
	if r.ListenPublic && strings.TrimSpace(r.ListenPublicReason) == "" {
		v.add("run.listen_public_reason", `say why unauthenticated endpoints on a non-loopback address are safe here, e.g. listen_public_reason: "firewalled to the monitoring subnet 10.0.9.0/24"`,
			"required with run.listen_public: true")
	}
	if !r.ListenPublic && r.ListenPublicReason != "" {
		v.add("run.listen_public", "set run.listen_public: true, or remove run.listen_public_reason", "run.listen_public_reason is set but run.listen_public is not true")
	}
	if !prod || r.ListenPublic {
		return
	}
	for _, l := range c.PublicListeners() {
		_, port, _ := net.SplitHostPort(l.Addr)
		v.add(l.Key, fmt.Sprintf(`listen on loopback (127.0.0.1:%s) and scrape through an agent on the host, or opt in with run.listen_public: true and run.listen_public_reason: "why it is safe"`, port),
			"%s listens beyond loopback; the endpoints (/livez /readyz /healthz /metrics) have no authentication, and environment production refuses that without run.listen_public",
			quoteValue(l.Addr))
	}
}
