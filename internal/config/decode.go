package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The decoder walks the yaml.Node tree by hand instead of unmarshalling into
// tagged structs: that is what lets it name every unknown key with its full
// path and line, report every problem in one pass, and accept the two shapes
// a credential can take (a mapping reference or, outside production, a
// string).

type decoder struct {
	errs []FieldError
	m    *meta
}

// keyFn decodes the value of one known key; path is the key's full path.
type keyFn func(path string, n *yaml.Node)

type key struct {
	name string
	fn   keyFn
}

const fixSeeDocs = "remove it or correct the spelling; docs/CONFIG.md lists every key"

// decode parses data into a Config with defaults applied. It returns a nil
// Config when the file cannot be read as a v2 configuration at all (YAML
// syntax, wrong version); otherwise every decoding problem is in errs.
func decode(data []byte) (c *Config, errs []FieldError) {
	root, fe := parseYAML(data)
	if fe != nil {
		return nil, []FieldError{*fe}
	}
	if fe := checkVersion(root); fe != nil {
		// A file of another version would otherwise produce a screen of
		// unknown-key errors that hide the one that matters.
		return nil, []FieldError{*fe}
	}
	d := &decoder{m: &meta{lines: map[string]int{}, bad: map[string]bool{}}}
	c = Default()
	c.meta = d.m
	d.mapping("", root, []key{
		{"version", func(string, *yaml.Node) {}}, // checked above
		{"environment", d.str((*string)(&c.Environment))},
		{"flow", d.str(&c.Flow)},
		{"source", d.source(&c.Source)},
		{"transport", d.transport(&c.Transport)},
		{"target", func(p string, n *yaml.Node) {
			c.Target = DefaultTarget()
			d.target(c.Target)(p, n)
		}},
		{"sinks", d.sinks(&c.Sinks)},
		{"schema", func(p string, n *yaml.Node) {
			d.mapping(p, n, []key{{"unknown_table_policy", d.str((*string)(&c.Schema.UnknownTablePolicy))},
				{"on_blocked", d.str((*string)(&c.Schema.OnBlocked))}, {"renames", d.renames(&c.Schema.Renames)}})
		}},
		{"run", func(p string, n *yaml.Node) {
			d.mapping(p, n, []key{
				{"evaluate", d.boolean(&c.Run.Evaluate)},
				{"listen", func(p string, n *yaml.Node) {
					d.mapping(p, n, []key{
						{"relay", d.str(&c.Run.Listen.Relay)},
						{"applier", d.str(&c.Run.Listen.Applier)},
					})
				}},
				{"listen_public", d.boolean(&c.Run.ListenPublic)},
				{"listen_public_reason", d.str(&c.Run.ListenPublicReason)},
			})
		}},
		{"chaos", func(p string, n *yaml.Node) {
			d.mapping(p, n, []key{
				{"source_restart", d.str(&c.Chaos.SourceRestart)},
				{"target_restart", d.str(&c.Chaos.TargetRestart)},
			})
		}},
	})
	return c, d.errs
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML returns the root mapping of the single document in data.
func parseYAML(data []byte) (root *yaml.Node, fe *FieldError) {
	docs, err := parseDocuments(data)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		return nil, &FieldError{Line: line, Message: "invalid YAML: " + msg, Err: err,
			Fix: "correct the YAML syntax (indent with spaces; quote values that contain \": \" or start with a special character)"}
	}
	if len(docs) == 0 || len(docs[0].Content) == 0 {
		return nil, &FieldError{Message: "the file is empty",
			Fix: "`trellara init --source-database-url URL --table SCHEMA.TABLE` writes a starting configuration"}
	}
	if len(docs) > 1 {
		return nil, &FieldError{Line: docs[1].Line, Message: "more than one YAML document (---)",
			Fix: "keep one configuration per file"}
	}
	root = docs[0].Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &FieldError{Line: root.Line, Message: "the top level must be a mapping (version: 2, flow: ..., source: ...)",
			Fix: "start from `trellara init`, or see the example in docs/CONFIG.md"}
	}
	return root, nil
}

// parseDocuments reads every YAML document in data as nodes. The YAML
// library reports bad input by panicking internally and recovering; this
// recover turns any panic that escapes it into an error, because a
// configuration decoder must never crash on input.
func parseDocuments(data []byte) (docs []*yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, &n)
	}
}

func checkVersion(root *yaml.Node) *FieldError {
	fix := "set version: 2 at the top of the file (`trellara init` writes a v2 configuration; docs/CONFIG.md describes it)"
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "version" {
			continue
		}
		var n int64
		isInt := v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" && v.Decode(&n) == nil
		switch {
		case isInt && n == SchemaVersion:
			return nil
		case isInt:
			return &FieldError{Path: "version", Line: k.Line, Fix: fix,
				Message: fmt.Sprintf("version: unsupported configuration schema version %d; version %d is the only supported version", n, SchemaVersion)}
		case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && strings.TrimSpace(v.Value) == strconv.Itoa(SchemaVersion):
			// The right version, quoted: say exactly that, not that the
			// version is unsupported.
			return &FieldError{Path: "version", Line: k.Line,
				Fix:     fmt.Sprintf("write version: %d without quotes", SchemaVersion),
				Message: fmt.Sprintf("version: is the string %s; the schema version is the number %d", quoteValue(v.Value), SchemaVersion)}
		}
		got := "a list or mapping"
		if v.Kind == yaml.ScalarNode {
			got = quoteValue(v.Value)
		}
		return &FieldError{Path: "version", Line: k.Line, Fix: fix,
			Message: fmt.Sprintf("version: must be the number %d, not %s", SchemaVersion, got)}
	}
	return &FieldError{Path: "version", Line: root.Line, Fix: fix,
		Message: "version: missing; version 2 is the only supported version and must be stated"}
}

// NodeError is the FieldError for path at node n (its line; 0 without a
// node): the message is prefixed with the path, the fix says what to write.
// Every YAML file Trellara reads reports its fields this way.
func NodeError(path string, n *yaml.Node, fix, format string, args ...any) FieldError {
	line := 0
	if n != nil {
		line = n.Line
	}
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	return FieldError{Path: path, Line: line, Message: msg, Fix: fix}
}

func (d *decoder) fail(path string, n *yaml.Node, fix, format string, args ...any) {
	d.errs = append(d.errs, NodeError(path, n, fix, format, args...))
	d.m.bad[path] = true
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// mapping decodes a mapping node key by key. A null value (`key:`) is an
// empty mapping. Unknown and duplicate keys are errors; so are aliases,
// which a configuration has no use for and which would let one value appear
// under two keys (one of them a credential).
func (d *decoder) mapping(path string, n *yaml.Node, keys []key) {
	if isNull(n) {
		return
	}
	if n.Kind == yaml.AliasNode {
		d.fail(path, n, "write the value out in full", "YAML aliases (*name) are not supported")
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "write it as a mapping of keys, e.g. key: value on indented lines", "must be a mapping, not %s", describe(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(path, k, "keys are plain names such as database_url", "a key must be a plain name, not %s", describe(k))
			continue
		}
		// The key is echoed in messages; scrub it in case a credential was
		// typed where a key belongs.
		p := joinPath(path, scrubScalar(k.Value))
		if k.ShortTag() == "!!merge" {
			d.fail(path, k, "write the keys out in full", "YAML merge keys (<<) are not supported")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.fail(p, k, "keep one of them", "duplicate key (first set on line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		var fn keyFn
		names := make([]string, len(keys))
		for j, kk := range keys {
			names[j] = kk.name
			if kk.name == k.Value {
				fn = kk.fn
			}
		}
		if fn == nil {
			msg := "unknown key " + p
			if s := suggest(k.Value, names); s != "" {
				msg += " (did you mean " + s + "?)"
			}
			d.errs = append(d.errs, FieldError{Path: p, Line: k.Line, Message: msg, Fix: fixSeeDocs})
			continue
		}
		d.m.lines[p] = k.Line
		if v.Kind == yaml.AliasNode {
			d.fail(p, v, "write the value out in full", "YAML aliases (*name) are not supported")
			continue
		}
		fn(p, v)
	}
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if isNull(n) {
			return "empty"
		}
		return "the value " + quoteValue(n.Value)
	}
	return "an unsupported YAML node"
}

// scalar returns the node when it is a non-null scalar, reporting anything
// else. ok is false for null (the key is then treated as absent, and any
// "required" error comes from validation).
func (d *decoder) scalar(path string, n *yaml.Node, want string) (*yaml.Node, bool) {
	if isNull(n) {
		return nil, false
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(path, n, "write "+want, "must be %s, not %s", want, describe(n))
		return nil, false
	}
	if n.ShortTag() == "!!binary" {
		d.fail(path, n, "write "+want, "must be %s, not binary data", want)
		return nil, false
	}
	return n, true
}

func (d *decoder) str(dst *string) keyFn {
	return func(path string, n *yaml.Node) {
		if s, ok := d.scalar(path, n, "a string"); ok {
			*dst = s.Value
		}
	}
}

func (d *decoder) boolean(dst *bool) keyFn {
	return func(path string, n *yaml.Node) {
		s, ok := d.scalar(path, n, "true or false")
		if !ok {
			return
		}
		if s.ShortTag() != "!!bool" {
			d.fail(path, n, "write true or false", "must be true or false, not %s", quoteValue(s.Value))
			return
		}
		var b bool
		if err := s.Decode(&b); err != nil {
			d.fail(path, n, "write true or false", "must be true or false, not %s", quoteValue(s.Value))
			return
		}
		*dst = b
	}
}

// maxConfigInt bounds integer keys; every integer in the schema is a small
// count or version, and the bound keeps int conversions safe on any platform.
const maxConfigInt = 1 << 30

func (d *decoder) integer(dst *int) keyFn {
	return func(path string, n *yaml.Node) {
		s, ok := d.scalar(path, n, "a whole number")
		if !ok {
			return
		}
		var v int64
		if s.ShortTag() != "!!int" || s.Decode(&v) != nil {
			d.fail(path, n, "write a whole number, e.g. 3", "must be a whole number, not %s", quoteValue(s.Value))
			return
		}
		if v < -maxConfigInt || v > maxConfigInt {
			d.fail(path, n, "write a value in the documented range", "%d is out of range", v)
			return
		}
		*dst = int(v)
	}
}

func (d *decoder) size(dst *ByteSize) keyFn {
	return func(path string, n *yaml.Node) {
		s, ok := d.scalar(path, n, "a byte size")
		if !ok {
			return
		}
		fix := "write a number of bytes or a size with a unit, e.g. 64MiB or 50GiB"
		switch s.ShortTag() {
		case "!!int":
			var v int64
			if err := s.Decode(&v); err != nil || v < 0 {
				d.fail(path, n, fix, "%s is not a byte size", quoteValue(s.Value))
				return
			}
			*dst = ByteSize(v)
		case "!!str":
			v, err := ParseByteSize(s.Value)
			if err != nil {
				d.fail(path, n, fix, "%v", err)
				return
			}
			*dst = v
		default:
			d.fail(path, n, fix, "%s is not a byte size", quoteValue(s.Value))
		}
	}
}

func (d *decoder) duration(dst *time.Duration) keyFn {
	return func(path string, n *yaml.Node) {
		s, ok := d.scalar(path, n, "a duration")
		if !ok {
			return
		}
		fix := "write a duration with a unit, e.g. 7d, 36h or 90m"
		if s.ShortTag() == "!!int" && s.Value != "0" {
			d.fail(path, n, fix, "%s has no unit", quoteValue(s.Value))
			return
		}
		v, err := ParseDuration(s.Value)
		if err != nil {
			d.fail(path, n, fix, "%v", err)
			return
		}
		*dst = v
	}
}

// maxListItems bounds every list in the schema (tables, brokers).
const maxListItems = 10000

// list decodes a sequence of strings, calling each with the item's path
// ("source.tables[2]") so errors name the exact entry.
func (d *decoder) list(path string, n *yaml.Node, each func(path string, n *yaml.Node, value string)) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(path, n, "write a list, e.g. [a, b] or one \"- item\" per line", "must be a list, not %s", describe(n))
		return
	}
	if len(n.Content) > maxListItems {
		d.fail(path, n, "split the flow", "more than %d entries", maxListItems)
		return
	}
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.m.lines[p] = item.Line
		if item.Kind == yaml.AliasNode {
			d.fail(p, item, "write the value out in full", "YAML aliases (*name) are not supported")
			continue
		}
		if s, ok := d.scalar(p, item, "a string"); ok {
			each(p, item, s.Value)
		} else if isNull(item) {
			d.fail(p, item, "remove the empty entry", "empty list entry")
		}
	}
}

// secretRef decodes {env: NAME}, {file: /path} or an inline string.
func (d *decoder) secretRef(dst *SecretRef) keyFn {
	return func(path string, n *yaml.Node) {
		*dst = SecretRef{path: path, line: d.m.lines[path]}
		if isNull(n) {
			return
		}
		const fix = "write {env: VARIABLE} or {file: /absolute/path}"
		switch n.Kind {
		case yaml.ScalarNode:
			if t := n.ShortTag(); t != "!!str" {
				// An unquoted number or word here is most likely the
				// credential itself: say what it is, never what it says.
				d.fail(path, n, fix, "must be a reference such as {env: VARIABLE}, not an unquoted %s value (not shown: it may be the credential itself)",
					strings.TrimPrefix(t, "!!"))
				return
			}
			dst.inline = NewSecret(n.Value)
		case yaml.MappingNode:
			for i := 0; i < len(n.Content); i += 2 {
				if k := n.Content[i]; k.Kind != yaml.ScalarNode || (k.Value != "env" && k.Value != "file") {
					// The key is not echoed: in a credential position it
					// may be the credential itself (credential.go).
					hint := ""
					if k.Kind == yaml.ScalarNode {
						if s := suggest(k.Value, []string{"env", "file"}); s != "" {
							hint = "; did you mean " + s + "?"
						}
					}
					d.fail(path, k, fix, "a reference holds only env or file; it has another key (not shown: it may be the credential itself%s)", hint)
					return
				}
			}
			d.mapping(path, n, []key{{"env", d.str(&dst.Env)}, {"file", d.str(&dst.File)}})
			if dst.Env == "" && dst.File == "" && !d.m.bad[path+".env"] && !d.m.bad[path+".file"] {
				d.fail(path, n, fix, "the reference names neither env nor file")
			}
		default:
			d.fail(path, n, fix, "must be a reference such as {env: VARIABLE}, not %s", describe(n))
		}
	}
}

func (d *decoder) source(s *Source) keyFn {
	return func(path string, n *yaml.Node) {
		d.mapping(path, n, []key{
			{"id", d.str(&s.ID)},
			{"database_url", d.secretRef(&s.DatabaseURL)},
			{"capture", d.str((*string)(&s.Capture))},
			{"socket", d.str(&s.Socket)},
			{"publication", d.str(&s.Publication)},
			{"slot", d.str(&s.Slot)},
			{"tables", func(p string, n *yaml.Node) {
				d.list(p, n, func(ip string, in *yaml.Node, v string) {
					t, err := ParseTableName(v)
					if err != nil {
						d.fail(ip, in, "write schema.table, e.g. public.sales", "%s %v", quoteValue(v), err)
						return
					}
					s.Tables = append(s.Tables, t)
				})
			}},
			{"schemas", func(p string, n *yaml.Node) {
				d.list(p, n, func(ip string, in *yaml.Node, v string) {
					name, err := ParseSchemaName(v)
					if err != nil {
						d.fail(ip, in, "write a schema name, e.g. public", "%s %v", quoteValue(v), err)
						return
					}
					s.Schemas = append(s.Schemas, name)
				})
			}},
			{"owns_slot", d.boolean(&s.OwnsSlot)},
			{"protocol_version", d.integer(&s.ProtocolVersion)},
			{"streaming", d.boolean(&s.Streaming)},
			{"memory_bytes_max", d.size(&s.MemoryBytesMax)},
			{"verify_ca_reason", d.str(&s.VerifyCAReason)},
		})
	}
}

func (d *decoder) transport(t *Transport) keyFn {
	return func(path string, n *yaml.Node) {
		d.mapping(path, n, []key{
			{"local", func(p string, n *yaml.Node) {
				t.Local = DefaultLocal()
				l := t.Local
				d.mapping(p, n, []key{
					{"dir", d.str(&l.Dir)},
					{"fsync", d.str(&l.Fsync)},
					{"segment_bytes_max", d.size(&l.SegmentBytesMax)},
					{"retention", func(p string, n *yaml.Node) {
						d.mapping(p, n, []key{
							{"max_bytes", d.size(&l.Retention.MaxBytes)},
							{"max_age", d.duration(&l.Retention.MaxAge)},
						})
					}},
					{"expire_past_retention", d.boolean(&l.ExpirePastRetention)},
					{"stalled_consumer_after", d.duration(&l.StalledConsumerAfter)},
				})
			}},
			{"kafka", func(p string, n *yaml.Node) {
				t.Kafka = DefaultKafka()
				d.kafka(t.Kafka)(p, n)
			}},
		})
	}
}

func (d *decoder) kafka(k *Kafka) keyFn {
	return func(path string, n *yaml.Node) {
		d.mapping(path, n, []key{
			{"brokers", func(p string, n *yaml.Node) {
				d.list(p, n, func(_ string, _ *yaml.Node, v string) { k.Brokers = append(k.Brokers, v) })
			}},
			{"topic", d.str(&k.Topic)},
			{"consumer_group", d.str(&k.ConsumerGroup)},
			{"state_dir", d.str(&k.StateDir)},
			{"mode", d.str((*string)(&k.Mode))},
			{"partitions", d.integer(&k.Partitions)},
			{"profile", d.str((*string)(&k.Profile))},
			{"tls", func(p string, n *yaml.Node) {
				// Present, even empty (`tls: {}` or `tls:`), means TLS on.
				k.TLS = &TLS{}
				d.mapping(p, n, []key{
					{"ca_file", d.str(&k.TLS.CAFile)},
					{"cert_file", d.str(&k.TLS.CertFile)},
					{"key_file", d.str(&k.TLS.KeyFile)},
				})
			}},
			{"sasl", func(p string, n *yaml.Node) {
				k.SASL = &SASL{}
				d.mapping(p, n, []key{
					{"mechanism", d.str((*string)(&k.SASL.Mechanism))},
					{"username", d.str(&k.SASL.Username)},
					{"password", d.secretRef(&k.SASL.Password)},
				})
			}},
			{"replication_factor", d.integer(&k.ReplicationFactor)},
			{"min_insync_replicas", d.integer(&k.MinInsyncReplicas)},
			{"acks", d.str((*string)(&k.Acks))},
			{"idempotent", d.boolean(&k.Idempotent)},
			{"auto_commit", d.boolean(&k.AutoCommit)},
		})
	}
}

func (d *decoder) target(t *Target) keyFn {
	return func(path string, n *yaml.Node) {
		d.mapping(path, n, []key{
			{"database_url", d.secretRef(&t.DatabaseURL)},
			{"mode", d.str((*string)(&t.Mode))},
			{"schema", d.str(&t.Schema)},
			{"create_tables", d.boolean(&t.CreateTables)},
			{"synchronous_commit", d.str(&t.SynchronousCommit)},
			{"verify_ca_reason", d.str(&t.VerifyCAReason)},
		})
	}
}

// sinkNameRE: a sink name becomes part of a log cursor's file name
// (applier.NAME) and a metric label.
var sinkNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// sinks decodes `sinks:`, a mapping from sink name to {target, listen}.
// The names are the user's, so they are checked here rather than matched
// against known keys.
func (d *decoder) sinks(dst *[]Sink) keyFn {
	return func(path string, n *yaml.Node) {
		if isNull(n) {
			d.fail(path, n, "name at least one sink, e.g. sinks: {reporting: {target: {database_url: {env: REPORTING_URL}}}}", "is empty")
			return
		}
		if n.Kind != yaml.MappingNode {
			d.fail(path, n, "write it as a mapping from sink name to its settings, e.g. reporting: {target: {...}}", "must be a mapping, not %s", describe(n))
			return
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				d.fail(path, k, "name each sink with a plain name such as reporting", "a sink name must be a plain name, not %s", describe(k))
				continue
			}
			p := joinPath(path, scrubScalar(k.Value))
			d.m.lines[p] = k.Line
			if first, dup := seen[k.Value]; dup {
				d.fail(p, k, "give each sink its own name", "duplicate sink (first named on line %d)", first)
				continue
			}
			seen[k.Value] = k.Line
			if !sinkNameRE.MatchString(k.Value) {
				d.fail(p, k, "use up to 32 lower-case letters, digits, _ and -, starting with a letter, e.g. reporting",
					"%s is not a valid sink name (it becomes part of the sink's log cursor, applier.NAME, and a metric label)", quoteValue(k.Value))
				continue
			}
			if v.Kind == yaml.AliasNode {
				d.fail(p, v, "write the value out in full", "YAML aliases (*name) are not supported")
				continue
			}
			s := Sink{Name: k.Value}
			d.mapping(p, v, []key{
				{"target", func(p string, n *yaml.Node) {
					s.Target = DefaultTarget()
					d.target(s.Target)(p, n)
				}},
				{"listen", d.str(&s.Listen)},
			})
			*dst = append(*dst, s)
		}
	}
}

// suggest returns the candidate closest to name by edit distance, if it is
// close enough to be a plausible typo.
func suggest(name string, candidates []string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		dist := editDistance(strings.ToLower(name), c)
		if bestDist < 0 || dist < bestDist {
			best, bestDist = c, dist
		}
	}
	limit := max(2, len(name)/3)
	if bestDist < 0 || bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance, bounded in cost by key lengths
// (keys longer than 64 bytes are not worth a suggestion).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// quoteValue renders a user value for an error message: connection strings
// scrubbed (a credential typed into the wrong key must not reach a log), and
// long values cut.
func quoteValue(s string) string {
	s = scrubScalar(s)
	const maxLen = 64
	if len(s) > maxLen {
		s = s[:maxLen] + "..."
	}
	return strconv.Quote(s)
}

// renames decodes schema.renames: a list of {table, from, to} mappings,
// each item's errors named by its path ("schema.renames[1].from").
func (d *decoder) renames(dst *[]ColumnRename) keyFn {
	return func(path string, n *yaml.Node) {
		if isNull(n) {
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(path, n, "write one \"- {table: public.orders, from: note, to: remark}\" entry per renamed column", "must be a list, not %s", describe(n))
			return
		}
		if len(n.Content) > maxListItems {
			d.fail(path, n, "split the flow", "more than %d entries", maxListItems)
			return
		}
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			d.m.lines[ip] = item.Line
			if item.Kind != yaml.MappingNode && item.Kind != yaml.AliasNode && !isNull(item) {
				d.fail(ip, item, "write the entry as {table: public.orders, from: note, to: remark}", "must be a mapping, not %s", describe(item))
				continue
			}
			var r ColumnRename
			var table string
			d.mapping(ip, item, []key{{"table", d.str(&table)}, {"from", d.str(&r.From)}, {"to", d.str(&r.To)}})
			if table != "" {
				t, err := ParseTableName(table)
				if err != nil {
					d.fail(ip+".table", item, "write schema.table, e.g. public.orders", "%s %v", quoteValue(table), err)
				}
				r.Table = t
			}
			*dst = append(*dst, r)
		}
	}
}
