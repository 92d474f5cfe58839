package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Marshal renders c as a commented schema v2 YAML file that Load reads back
// to the same configuration. It validates first (validate right before
// writing), so it never produces a file Load would refuse.
//
// Inline credentials are written as given: Marshal is the writer behind
// `trellara init`, and an evaluation config may hold an inline URL. Use
// Redact for anything meant to be shared.
func Marshal(c *Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	root := mapping(false)
	root.HeadComment = "Trellara configuration, schema v2. Every key is described in docs/CONFIG.md.\n" +
		"Check it with: trellara config validate --config <this file>"
	put(root, "version", intNode(SchemaVersion), "")
	put(root, "environment", strNode(string(c.Environment)), "development | staging | production (production refuses inline credentials)")
	put(root, "flow", strNode(c.Flow), "")

	s := c.Source
	src := mapping(false)
	put(src, "id", strNode(s.ID), "")
	put(src, "database_url", refNode(s.DatabaseURL), "{env: NAME} or {file: /absolute/path}")
	put(src, "capture", strNode(string(s.Capture)), "pgoutput | extension")
	if s.Socket != "" {
		put(src, "socket", strNode(s.Socket), "")
	}
	put(src, "publication", strNode(s.Publication), "")
	put(src, "slot", strNode(s.Slot), "")
	tables := make([]string, len(s.Tables))
	for i, t := range s.Tables {
		tables[i] = t.String()
	}
	if len(tables) > 0 || len(s.Schemas) == 0 {
		put(src, "tables", listNode(tables), "")
	}
	if len(s.Schemas) > 0 {
		schemas := make([]string, len(s.Schemas))
		for i, n := range s.Schemas {
			schemas[i] = QuoteIdent(n)
		}
		put(src, "schemas", listNode(schemas), "captured whole; new tables join under schema.unknown_table_policy: allow_compatible")
	}
	put(src, "owns_slot", boolNode(s.OwnsSlot), "true: Trellara creates the publication and slot")
	put(src, "protocol_version", intNode(s.ProtocolVersion), "pgoutput protocol; 1 requires streaming: false")
	put(src, "streaming", boolNode(s.Streaming), "")
	put(src, "memory_bytes_max", sizeNode(s.MemoryBytesMax), "per transaction; larger transactions spill to disk")
	if s.VerifyCAReason != "" {
		put(src, "verify_ca_reason", strNode(s.VerifyCAReason), "why sslmode=verify-ca is enough in production")
	}
	putSection(root, "source", src, "The database changes are captured from.")

	tr := mapping(false)
	if l := c.Transport.Local; l != nil {
		local := mapping(false)
		put(local, "dir", strNode(l.Dir), "relative paths are taken from this file's directory")
		put(local, "fsync", strNode(l.Fsync), "")
		put(local, "segment_bytes_max", sizeNode(l.SegmentBytesMax), "")
		ret := mapping(false)
		put(ret, "max_bytes", sizeNode(l.Retention.MaxBytes), "")
		put(ret, "max_age", durationNode(l.Retention.MaxAge), "")
		put(local, "retention", ret, "")
		put(local, "expire_past_retention", boolNode(l.ExpirePastRetention), "true: drop segments a lagging consumer still needs (it must then reseed)")
		if l.StalledConsumerAfter != DefaultStalledConsumerAfter {
			put(local, "stalled_consumer_after", durationNode(l.StalledConsumerAfter), "status names a consumer stalled after its cursor stays still this long while the log grows")
		}
		put(tr, "local", local, "")
	}
	if k := c.Transport.Kafka; k != nil {
		kn := mapping(false)
		put(kn, "brokers", listNode(k.Brokers), "")
		put(kn, "topic", strNode(k.Topic), "")
		put(kn, "consumer_group", strNode(k.ConsumerGroup), "")
		put(kn, "state_dir", strNode(k.StateDir), "pins, acknowledged positions, snapshot marker; relative paths are taken from this file's directory")
		put(kn, "mode", strNode(string(k.Mode)), "strict | partitioned (partitions: N data partitions plus a manifest partition)")
		if k.Mode == ModePartitioned {
			put(kn, "partitions", intNode(k.Partitions), "")
		}
		put(kn, "profile", strNode(string(k.Profile)), "development | production (production enforces the contract)")
		if t := k.TLS; t != nil {
			tn := mapping(false)
			if t.CAFile != "" {
				put(tn, "ca_file", strNode(t.CAFile), "")
			}
			if t.CertFile != "" {
				put(tn, "cert_file", strNode(t.CertFile), "")
			}
			if t.KeyFile != "" {
				put(tn, "key_file", strNode(t.KeyFile), "")
			}
			if len(tn.Content) == 0 {
				tn.Style = yaml.FlowStyle // tls: {} — TLS on, system roots
			}
			put(kn, "tls", tn, "")
		}
		if sa := k.SASL; sa != nil {
			sn := mapping(false)
			put(sn, "mechanism", strNode(string(sa.Mechanism)), "SCRAM-SHA-512 | SCRAM-SHA-256 | PLAIN")
			put(sn, "username", strNode(sa.Username), "")
			put(sn, "password", refNode(sa.Password), "")
			put(kn, "sasl", sn, "")
		}
		put(kn, "replication_factor", intNode(k.ReplicationFactor), "")
		put(kn, "min_insync_replicas", intNode(k.MinInsyncReplicas), "")
		put(kn, "acks", strNode(string(k.Acks)), "all | leader | none")
		put(kn, "idempotent", boolNode(k.Idempotent), "")
		put(kn, "auto_commit", boolNode(k.AutoCommit), "false: the consumer-group offset is committed only after the target commit")
		put(tr, "kafka", kn, "")
	}
	putSection(root, "transport", tr, "Where envelopes are made durable before the source is acknowledged.")

	targetNode := func(t *Target) *yaml.Node {
		tn := mapping(false)
		put(tn, "database_url", refNode(t.DatabaseURL), "")
		put(tn, "mode", strNode(string(t.Mode)), "strict | partitioned")
		put(tn, "schema", strNode(t.Schema), "Trellara-owned schema on the target (checkpoints, quarantine)")
		put(tn, "create_tables", boolNode(t.CreateTables), "true: create missing target tables from the source definitions")
		put(tn, "synchronous_commit", strNode(t.SynchronousCommit), "off | on: off commits asynchronously; the log cursor waits for the target's flush")
		if t.VerifyCAReason != "" {
			put(tn, "verify_ca_reason", strNode(t.VerifyCAReason), "why sslmode=verify-ca is enough in production")
		}
		return tn
	}
	if t := c.Target; t != nil {
		putSection(root, "target", targetNode(t), "The Postgres database changes are applied to.")
	} else if len(c.Sinks) > 0 {
		sn := mapping(false)
		for _, s := range c.Sinks {
			one := mapping(false)
			put(one, "target", targetNode(s.Target), "")
			put(one, "listen", strNode(s.Listen), "this sink's applier: /livez /readyz /healthz /metrics")
			put(sn, s.Name, one, "")
		}
		putSection(root, "sinks", sn, "The Postgres databases changes are applied to, each by its own applier.")
	}

	sp := mapping(false)
	put(sp, "unknown_table_policy", strNode(string(c.Schema.UnknownTablePolicy)), "block | allow_compatible")
	if c.Schema.OnBlocked == HoldTable {
		put(sp, "on_blocked", strNode(string(c.Schema.OnBlocked)), "hold_flow | hold_table")
	}
	if len(c.Schema.Renames) > 0 {
		put(sp, "renames", renamesNode(c.Schema.Renames), "column renames that flow to the target (docs/SCHEMA.md)")
	}
	putSection(root, "schema", sp, "")

	run := mapping(false)
	put(run, "evaluate", boolNode(c.Run.Evaluate), "true: a bounded evaluation flow whose slot and publication may be dropped")
	listen := mapping(false)
	put(listen, "relay", strNode(c.Run.Listen.Relay), "")
	put(listen, "applier", strNode(c.Run.Listen.Applier), "")
	put(run, "listen", listen, "health and metrics endpoints (/livez /readyz /healthz /metrics)")
	if c.Run.ListenPublic || c.Run.ListenPublicReason != "" {
		put(run, "listen_public", boolNode(c.Run.ListenPublic), "endpoints on a non-loopback address in production (no authentication)")
		put(run, "listen_public_reason", strNode(c.Run.ListenPublicReason), "")
	}
	putSection(root, "run", run, "")

	if c.Chaos.SourceRestart != "" || c.Chaos.TargetRestart != "" {
		ch := mapping(false)
		if c.Chaos.SourceRestart != "" {
			put(ch, "source_restart", strNode(c.Chaos.SourceRestart), "shell command that restarts the source (trellara chaos live)")
		}
		if c.Chaos.TargetRestart != "" {
			put(ch, "target_restart", strNode(c.Chaos.TargetRestart), "shell command that restarts the target (trellara chaos live)")
		}
		putSection(root, "chaos", ch, "Commands trellara chaos live runs; refused in production.")
	}

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	return buf.Bytes(), nil
}

// CreateFile writes c to path with mode 0600 (it may hold an inline
// credential) and refuses to replace an existing file: `trellara init` must
// never overwrite a configuration someone has edited.
func CreateFile(path string, c *Config) error {
	data, err := Marshal(c)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return &fileError{path: path, err: err, msg: "already exists; not overwriting it",
				fix: "remove it first, or write to another path"}
		}
		return &fileError{path: path, err: err, msg: "cannot create: " + errReason(err),
			fix: "write to a directory you can write to"}
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(path) // a half-written config would be worse than none
		return &fileError{path: path, err: err, msg: "cannot write: " + err.Error(), fix: "check free space and permissions"}
	}
	return nil
}

// StarterOptions are the inputs of `trellara init`.
type StarterOptions struct {
	Flow              string      // default: the first table's name
	SourceID          string      // default: "source"
	SourceDatabaseURL SecretRef   // required
	TargetDatabaseURL SecretRef   // zero: no target section (capture only)
	Tables            []string    // schema.table, at least one
	Environment       Environment // default: development
	// Evaluate writes an evaluation flow: Trellara owns (and may drop) the
	// slot and publication, creates target tables, and the log lives next
	// to the config file.
	Evaluate bool
	// Database is the source database's name; the flow is named after it
	// when Flow is empty. With neither, Starter asks for a flow name.
	Database string
	// Listen is the relay's and applier's health and metrics addresses;
	// zero: the defaults (127.0.0.1:9401, 127.0.0.1:9402).
	Listen Listen
	// Dir is the local log directory. Default: trellara-data/<flow> (beside
	// the config file) when Evaluate, else /var/lib/trellara/<flow>.
	Dir string
}

// Starter builds a starting configuration for `trellara init` and validates
// it. Write it with CreateFile.
func Starter(o StarterOptions) (*Config, error) {
	c := Default()
	c.meta = &meta{lines: map[string]int{}, bad: map[string]bool{}}
	if o.Environment != "" {
		c.Environment = o.Environment
	}
	var errs []FieldError
	for i, s := range o.Tables {
		t, err := ParseTableName(s)
		if err != nil {
			p := fmt.Sprintf("source.tables[%d]", i)
			errs = append(errs, FieldError{Path: p, Message: fmt.Sprintf("%s: %s %v", p, quoteValue(s), err), Fix: "write schema.table, e.g. public.sales"})
			c.meta.bad[p] = true
			// Derived problems (no tables, no flow name) would only repeat this one.
			c.meta.bad["source.tables"] = true
			c.meta.bad["flow"] = o.Flow == ""
			continue
		}
		c.Source.Tables = append(c.Source.Tables, t)
	}
	c.Flow = o.Flow
	if c.Flow == "" && o.Database != "" {
		c.Flow = flowFromName(o.Database)
	}
	c.Source.ID = o.SourceID
	if c.Source.ID == "" {
		c.Source.ID = "source"
	}
	c.Source.DatabaseURL = o.SourceDatabaseURL
	c.Source.OwnsSlot = o.Evaluate
	c.Run.Evaluate = o.Evaluate
	if o.Listen.Relay != "" {
		c.Run.Listen.Relay = o.Listen.Relay
	}
	if o.Listen.Applier != "" {
		c.Run.Listen.Applier = o.Listen.Applier
	}
	c.Transport.Local = DefaultLocal()
	c.Transport.Local.Dir = o.Dir
	if c.Transport.Local.Dir == "" {
		if o.Evaluate {
			c.Transport.Local.Dir = "trellara-data/" + c.Flow
		} else {
			c.Transport.Local.Dir = "/var/lib/trellara/" + c.Flow
		}
	}
	if !o.TargetDatabaseURL.IsZero() {
		c.Target = DefaultTarget()
		c.Target.DatabaseURL = o.TargetDatabaseURL
		c.Target.CreateTables = o.Evaluate
	}
	c.applyDerivedDefaults()
	errs = append(errs, c.validate()...)
	if err := newValidationError("", errs); err != nil {
		return nil, err
	}
	c.meta = nil
	return c, nil
}

// flowFromName turns a database name into a flow name: lower case, anything
// outside [a-z0-9_] replaced by '_', at most 48 bytes.
func flowFromName(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 48 {
			break
		}
	}
	if b.Len() == 0 {
		return "flow"
	}
	return b.String()
}

func mapping(flow bool) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return n
}

// put appends key: value, with comment (if any) after the value.
func put(m *yaml.Node, key string, v *yaml.Node, comment string) {
	k := strNode(key)
	if comment != "" {
		if v.Kind == yaml.ScalarNode || v.Style == yaml.FlowStyle {
			v.LineComment = comment
		} else {
			k.HeadComment = comment
		}
	}
	m.Content = append(m.Content, k, v)
}

// putSection appends a top-level section with a comment line above it.
func putSection(m *yaml.Node, key string, v *yaml.Node, comment string) {
	k := strNode(key)
	k.HeadComment = comment
	m.Content = append(m.Content, k, v)
}

func strNode(s string) *yaml.Node {
	n := &yaml.Node{}
	n.SetString(s)
	return n
}

func intNode(i int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(i)}
}

func boolNode(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func sizeNode(b ByteSize) *yaml.Node {
	if s := b.String(); !strings.HasSuffix(s, "iB") {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(b), 10)}
	}
	return strNode(b.String())
}

func durationNode(d time.Duration) *yaml.Node { return strNode(formatDuration(d)) }

func listNode(items []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
	for _, s := range items {
		n.Content = append(n.Content, strNode(s))
	}
	return n
}

// refNode writes a reference in flow form ({env: NAME}); an inline value is
// written as a quoted string.
func refNode(r SecretRef) *yaml.Node {
	switch {
	case r.Env != "":
		m := mapping(true)
		m.Content = append(m.Content, strNode("env"), strNode(r.Env))
		return m
	case r.File != "":
		m := mapping(true)
		m.Content = append(m.Content, strNode("file"), strNode(r.File))
		return m
	}
	n := strNode(r.inline.Reveal())
	n.Style = yaml.DoubleQuotedStyle
	return n
}

// RenamesYAML is a schema section holding renames (schema.renames), as a
// message that tells what to add to a configuration file writes it.
func RenamesYAML(renames []ColumnRename) string {
	sp := mapping(false)
	put(sp, "renames", renamesNode(renames), "")
	root := mapping(false)
	put(root, "schema", sp, "")
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return fmt.Sprintf("schema.renames: %v", err)
	}
	_ = enc.Close()
	return buf.String()
}

func renamesNode(renames []ColumnRename) *yaml.Node {
	rn := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, r := range renames {
		e := mapping(false)
		put(e, "table", strNode(r.Table.String()), "")
		put(e, "from", strNode(r.From), "")
		put(e, "to", strNode(r.To), "")
		rn.Content = append(rn.Content, e)
	}
	return rn
}
