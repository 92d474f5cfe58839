package lake

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
)

// Catalog kinds of fleet.yml's lake.catalog.kind.
const (
	CatalogSQLite   = "sql-sqlite"   // SQL catalog in a SQLite file (demo, single host)
	CatalogPostgres = "sql-postgres" // SQL catalog in a PostgreSQL database
	CatalogREST     = "rest"         // REST catalog: configured, not run against a live service here
)

// Fleet defaults (docs/LAKE.md).
const (
	DefaultCloseInterval = 30 * time.Second
	DefaultMaxLag        = 2 * time.Minute
	DefaultNamespace     = "trellara"
	DefaultFleetListen   = "127.0.0.1:9410"
	DefaultCatalogName   = "trellara"
	DefaultCommitEvery   = 5 * time.Second
)

// Fleet is a parsed fleet.yml (version 1).
type Fleet struct {
	Version int
	Name    string // fleet
	Sources []FleetSource
	Lake    Sink
	Epochs  EpochPolicy
	Run     FleetRun

	file string
}

// Where a source's relay runs (sources[].relay, run.relays).
const (
	// RelayFleet: fleet run starts the source's relay in its own process.
	RelayFleet = "fleet"
	// RelayExternal: the relay runs elsewhere (trellara run --role relay
	// with the flow's config, on any machine); fleet run only commits
	// what it publishes. Meant for transport.kafka flows, whose stream the
	// committer reads over the network.
	RelayExternal = "external"
)

// FleetSource is one source of the fleet: a flow with its own
// trellara.yml (source, slot, and a transport.local log or a
// transport.kafka topic).
type FleetSource struct {
	Config string // config: path of the flow's trellara.yml, relative to fleet.yml's directory
	// Relay (relay) is where the source's relay runs: RelayFleet or
	// RelayExternal; the default is run.relays.
	Relay string
	// ID is the flow's source.id, read from Config by Load.
	ID string
	// Flow is the flow's configuration, loaded by Load.
	Flow *config.Config
}

// Kafka is the flow's transport.kafka, nil for a transport.local flow: the
// committer then reads the topic through consumer/kafkaconsumer.
func (s FleetSource) Kafka() *config.Kafka { return s.Flow.Transport.Kafka }

// LogDir is the flow's local log directory, "" for a Kafka flow (its log
// is the topic).
func (s FleetSource) LogDir() string {
	if s.Flow.Transport.Local == nil {
		return ""
	}
	return s.Flow.Transport.Local.LogDir()
}

// ExternalRelay reports whether fleet run leaves the source's relay to
// another process.
func (s FleetSource) ExternalRelay() bool { return s.Relay == RelayExternal }

// Sink is the lake: an Iceberg catalog, a warehouse and a namespace.
type Sink struct {
	Catalog Catalog
	// Warehouse is warehouse: file:///path (a relative file:// path and a
	// relative SQLite catalog path are taken from fleet.yml's directory),
	// or s3://bucket/prefix (iceberg-go's S3 blob IO, linked in the full
	// build; S3 says how the bucket is reached).
	Warehouse string
	Namespace string // namespace
	// S3 is lake.s3, nil when absent: the endpoint, region, addressing
	// and credentials of an s3:// warehouse. Without it iceberg-go uses
	// the AWS SDK's own chain (AWS_REGION, AWS_ACCESS_KEY_ID, ~/.aws, an
	// instance role).
	S3 *S3
	// Properties are passed to iceberg-go as they are (REST credentials by
	// reference are not supported: use the environment iceberg-go reads).
	// The s3.* properties lake.s3 sets are refused here: one place each.
	Properties map[string]string
	// Production is set when any source flow is environment: production:
	// a sql-postgres catalog then needs verified TLS (config.CheckPostgresTLS).
	Production bool
	// Committer (lake.committer) names this fleet process's lake
	// committer: the owner recorded on its table leases (lease.go) and
	// named in another committer's refusal. Default: the fleet name.
	Committer string
	// Tables (lake.tables) are the source tables this committer owns,
	// nil for every table. A committer with Tables set is a shard: it
	// commits only their changelog tables and writes no epoch records
	// (docs/LAKE.md, "Committers, leases and sharding").
	Tables []TableRef
}

// Owns reports whether this committer commits source table t's changelog.
func (s Sink) Owns(t TableRef) bool {
	return s.Tables == nil || slices.Contains(s.Tables, t)
}

// EpochWriter reports whether this committer writes epoch records: only a
// committer that owns every table can claim a source caught up across
// the lake, so a shard writes none.
func (s Sink) EpochWriter() bool { return s.Tables == nil }

// Catalog is lake.catalog.
type Catalog struct {
	Kind string           // kind: sql-sqlite, sql-postgres or rest
	Name string           // name: the catalog name recorded in the catalog tables
	URI  config.SecretRef // uri: file path (sqlite), postgres:// URL, or REST base URL
	// VerifyCAReason (verify_ca_reason): why sslmode=verify-ca is enough
	// for a sql-postgres catalog of a production fleet.
	VerifyCAReason string
}

// S3 is lake.s3. Each key maps to one iceberg-go property (S3Props).
type S3 struct {
	// Endpoint (endpoint) is the S3 API's base URL, for a store other than
	// AWS (http://127.0.0.1:9000); "" is AWS's endpoint for the region.
	Endpoint string
	Region   string // region: the signing region (us-east-1 for most non-AWS stores)
	// PathStyle (path_style) addresses the bucket in the path
	// (endpoint/bucket/key) rather than the host (bucket.endpoint/key);
	// nil leaves iceberg-go's default: path style when an endpoint is set.
	PathStyle *bool
	// AccessKeyID (access_key_id) and SecretAccessKey (secret_access_key)
	// are a static key pair, both or neither, as {env: NAME} or {file:
	// /path} references (inline only outside production); neither leaves
	// the AWS SDK's credential chain.
	AccessKeyID     config.SecretRef
	SecretAccessKey config.SecretRef
}

// s3Keys are the iceberg-go properties lake.s3 owns.
var s3Keys = map[string]string{
	"s3.endpoint":                 "lake.s3.endpoint",
	"s3.region":                   "lake.s3.region",
	"client.region":               "lake.s3.region",
	"s3.force-virtual-addressing": "lake.s3.path_style",
	"s3.access-key-id":            "lake.s3.access_key_id",
	"s3.secret-access-key":        "lake.s3.secret_access_key",
}

// S3Props resolves lake.s3 into iceberg-go's S3 properties. The returned
// map holds the secret in the clear: it goes to iceberg-go and nowhere
// else. Errors name the key, never the value.
func (s *S3) S3Props() (map[string]string, error) {
	props := map[string]string{}
	if s == nil {
		return props, nil
	}
	if s.Endpoint != "" {
		props["s3.endpoint"] = s.Endpoint
	}
	if s.Region != "" {
		props["s3.region"] = s.Region
	}
	if s.PathStyle != nil {
		props["s3.force-virtual-addressing"] = fmt.Sprint(!*s.PathStyle)
	}
	for _, k := range []struct {
		key, prop string
		ref       config.SecretRef
	}{{"lake.s3.access_key_id", "s3.access-key-id", s.AccessKeyID}, {"lake.s3.secret_access_key", "s3.secret-access-key", s.SecretAccessKey}} {
		if k.ref.IsZero() {
			continue
		}
		sec, err := k.ref.Resolve()
		if err != nil {
			return nil, fmt.Errorf("lake: %s: %w", k.key, err)
		}
		props[k.prop] = sec.Reveal()
	}
	return props, nil
}

// EpochPolicy is epochs: how often an epoch closes and how far behind a
// source may be before it counts as a gap.
type EpochPolicy struct {
	CloseInterval time.Duration // close_interval
	MaxLag        time.Duration // max_lag
}

// FleetRun is run: the fleet process's own settings.
type FleetRun struct {
	Listen      string        // listen: /healthz and /metrics of the lake committer
	CommitEvery time.Duration // commit_every: how often the committer writes a batch
	Cursor      string        // cursor: the committer's cursor name in every source's log
	// Relays (relays) is where the sources' relays run unless a source
	// says otherwise: RelayFleet (default) or RelayExternal.
	Relays string
}

// KafkaGroup is the committer's consumer group on every Kafka source's
// topic: trellara.<fleet>.<run.cursor>. It is a hint for lag monitoring
// and for where a restart starts reading; the position of record is the
// per-source marks in the Iceberg tables (docs/LAKE.md).
func (f *Fleet) KafkaGroup() string { return "trellara." + f.Name + "." + f.CommitterCursor() }

// CommitterCursor is the committer's cursor name in every source's log:
// run.cursor, or run.cursor.<lake.committer> when lake.committer is not
// the fleet name. Shards of one fleet read the same logs and commit
// different tables: a shared cursor would let one shard move it past
// units another has not committed yet, and that one would skip them
// after a restart.
func (f *Fleet) CommitterCursor() string {
	if f.Lake.Committer == "" || f.Lake.Committer == f.Name {
		return f.Run.Cursor
	}
	return f.Run.Cursor + "." + f.Lake.Committer
}

// File is the path fleet.yml was loaded from.
func (f *Fleet) File() string { return f.file }

// Source returns the source with id.
func (f *Fleet) Source(id string) (FleetSource, bool) {
	for _, s := range f.Sources {
		if s.ID == id {
			return s, true
		}
	}
	return FleetSource{}, false
}

// SourceIDs are the source ids in file order.
func (f *Fleet) SourceIDs() []string {
	ids := make([]string, len(f.Sources))
	for i, s := range f.Sources {
		ids[i] = s.ID
	}
	return ids
}

// LoadFleet reads and validates fleet.yml and every flow config it names.
// Every problem is reported at once, each naming its key
// (sources[1].config, lake.catalog.kind, ...), as a *config.ValidationError.
func LoadFleet(path string) (*Fleet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fleet: read %s: %w (write one with: %s)", path, err, shell.Command("trellara-full", "fleet", "init", "--config", path, "--source", "trellara.yml"))
	}
	return parseFleet(data, path)
}

// ParseFleet parses fleet.yml text; relative paths are taken from the
// current directory.
func ParseFleet(data []byte) (*Fleet, error) { return parseFleet(data, "") }

type fleetDecoder struct {
	errs []config.FieldError
}

func (d *fleetDecoder) fail(path string, n *yaml.Node, fix, format string, args ...any) {
	d.errs = append(d.errs, config.NodeError(path, n, fix, format, args...))
}

// mapping decodes mapping n at path: each known key's value goes to its
// function; unknown keys and missing required ones are errors.
func (d *fleetDecoder) mapping(path string, n *yaml.Node, keys map[string]func(string, *yaml.Node), required ...string) {
	if n == nil || n.Kind != yaml.MappingNode {
		d.fail(path, n, "write it as a mapping (key: value lines)", "must be a mapping")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		fn, ok := keys[k.Value]
		if !ok {
			names := make([]string, 0, len(keys))
			for name := range keys {
				names = append(names, name)
			}
			sort.Strings(names)
			d.fail(p, k, "use one of: "+strings.Join(names, ", "), "unknown key")
			continue
		}
		if seen[k.Value] {
			d.fail(p, k, "keep one of them", "duplicate key")
			continue
		}
		seen[k.Value] = true
		fn(p, v)
	}
	for _, r := range required {
		if !seen[r] {
			p := r
			if path != "" {
				p = path + "." + r
			}
			d.fail(p, n, "add it (see docs/LAKE.md)", "required")
		}
	}
}

func (d *fleetDecoder) str(dst *string) func(string, *yaml.Node) {
	return func(p string, n *yaml.Node) {
		if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
			d.fail(p, n, "write a string", "must be a string")
			return
		}
		*dst = n.Value
	}
}

func (d *fleetDecoder) duration(dst *time.Duration) func(string, *yaml.Node) {
	return func(p string, n *yaml.Node) {
		if n.Kind != yaml.ScalarNode {
			d.fail(p, n, "write a duration like 30s or 5m", "must be a duration")
			return
		}
		v, err := config.ParseDuration(n.Value)
		if err != nil || v <= 0 {
			d.fail(p, n, "write a positive duration like 30s or 5m", "%q is not a positive duration", n.Value)
			return
		}
		*dst = v
	}
}

func (d *fleetDecoder) boolean(dst **bool) func(string, *yaml.Node) {
	return func(p string, n *yaml.Node) {
		var v bool
		if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
			d.fail(p, n, "write true or false", "must be true or false")
			return
		}
		*dst = &v
	}
}

// relay decodes a relay placement: fleet or external.
func (d *fleetDecoder) relay(dst *string) func(string, *yaml.Node) {
	return func(p string, n *yaml.Node) {
		if n.Kind != yaml.ScalarNode || (n.Value != RelayFleet && n.Value != RelayExternal) {
			d.fail(p, n, "write fleet (fleet run starts the relay) or external (trellara run --role relay runs it elsewhere)", "must be fleet or external")
			return
		}
		*dst = n.Value
	}
}

// secret decodes a credential reference by trellara.yml's rule
// (config.DecodeSecretRef): no error shows the value.
func (d *fleetDecoder) secret(dst *config.SecretRef) func(string, *yaml.Node) {
	return func(p string, n *yaml.Node) {
		r, errs := config.DecodeSecretRef(p, n)
		d.errs = append(d.errs, errs...)
		*dst = r
	}
}

func parseFleet(data []byte, file string) (*Fleet, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &config.ValidationError{File: file, Errors: []config.FieldError{{Message: "not valid YAML: " + err.Error(), Fix: "fix the YAML syntax"}}}
	}
	f := &Fleet{file: file,
		Lake:   Sink{Namespace: DefaultNamespace, Catalog: Catalog{Name: DefaultCatalogName}},
		Epochs: EpochPolicy{CloseInterval: DefaultCloseInterval, MaxLag: DefaultMaxLag},
		Run:    FleetRun{Listen: DefaultFleetListen, CommitEvery: DefaultCommitEvery, Cursor: "lake", Relays: RelayFleet},
	}
	d := &fleetDecoder{}
	if len(root.Content) == 0 {
		d.fail("", nil, "write a fleet.yml (trellara-full fleet init)", "the file is empty")
		return nil, &config.ValidationError{File: file, Errors: d.errs}
	}
	doc := root.Content[0]
	var srcNodes *yaml.Node
	d.mapping("", doc, map[string]func(string, *yaml.Node){
		"version": func(p string, n *yaml.Node) {
			if n.Value != "1" {
				d.fail(p, n, "write version: 1", "unsupported version %q", n.Value)
			}
			f.Version = 1
		},
		"fleet":   d.str(&f.Name),
		"sources": func(_ string, n *yaml.Node) { srcNodes = n },
		"lake": func(p string, n *yaml.Node) {
			d.mapping(p, n, map[string]func(string, *yaml.Node){
				"catalog": func(p string, n *yaml.Node) {
					d.mapping(p, n, map[string]func(string, *yaml.Node){
						"kind":             d.str(&f.Lake.Catalog.Kind),
						"name":             d.str(&f.Lake.Catalog.Name),
						"uri":              d.secret(&f.Lake.Catalog.URI),
						"verify_ca_reason": d.str(&f.Lake.Catalog.VerifyCAReason),
					}, "kind", "uri")
				},
				"warehouse": d.str(&f.Lake.Warehouse),
				"committer": d.str(&f.Lake.Committer),
				"tables": func(p string, n *yaml.Node) {
					if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
						d.fail(p, n, "list the source tables this committer owns, like [public.accounts], or remove lake.tables to own every table", "must be a non-empty list")
						return
					}
					f.Lake.Tables = []TableRef{}
					for i, e := range n.Content {
						ep := fmt.Sprintf("%s[%d]", p, i)
						tn, err := config.ParseTableName(e.Value)
						if e.Kind != yaml.ScalarNode || err != nil {
							d.fail(ep, e, "write schema.table, as in the flows' source.tables", "%q is not a table name", e.Value)
							continue
						}
						ref := TableRef{Schema: tn.Schema, Name: tn.Name}
						if slices.Contains(f.Lake.Tables, ref) {
							d.fail(ep, e, "list each table once", "duplicate table %s", ref)
							continue
						}
						f.Lake.Tables = append(f.Lake.Tables, ref)
					}
				},
				"namespace": d.str(&f.Lake.Namespace),
				"s3": func(p string, n *yaml.Node) {
					f.Lake.S3 = &S3{}
					d.mapping(p, n, map[string]func(string, *yaml.Node){
						"endpoint":          d.str(&f.Lake.S3.Endpoint),
						"region":            d.str(&f.Lake.S3.Region),
						"path_style":        d.boolean(&f.Lake.S3.PathStyle),
						"access_key_id":     d.secret(&f.Lake.S3.AccessKeyID),
						"secret_access_key": d.secret(&f.Lake.S3.SecretAccessKey),
					})
				},
				"properties": func(p string, n *yaml.Node) {
					if n.Kind != yaml.MappingNode {
						d.fail(p, n, "write key: value lines", "must be a mapping")
						return
					}
					f.Lake.Properties = map[string]string{}
					for i := 0; i+1 < len(n.Content); i += 2 {
						f.Lake.Properties[n.Content[i].Value] = n.Content[i+1].Value
					}
				},
			}, "catalog", "warehouse")
		},
		"epochs": func(p string, n *yaml.Node) {
			d.mapping(p, n, map[string]func(string, *yaml.Node){
				"close_interval": d.duration(&f.Epochs.CloseInterval),
				"max_lag":        d.duration(&f.Epochs.MaxLag),
			})
		},
		"run": func(p string, n *yaml.Node) {
			d.mapping(p, n, map[string]func(string, *yaml.Node){
				"listen":       d.str(&f.Run.Listen),
				"commit_every": d.duration(&f.Run.CommitEvery),
				"cursor":       d.str(&f.Run.Cursor),
				"relays":       d.relay(&f.Run.Relays),
			})
		},
	}, "version", "fleet", "sources", "lake")

	if srcNodes != nil {
		if srcNodes.Kind != yaml.SequenceNode || len(srcNodes.Content) == 0 {
			d.fail("sources", srcNodes, "list each flow: - config: flows/NAME.yml", "must be a non-empty list")
		} else {
			for i, n := range srcNodes.Content {
				var s FleetSource
				p := fmt.Sprintf("sources[%d]", i)
				keys := map[string]func(string, *yaml.Node){"config": d.str(&s.Config), "relay": d.relay(&s.Relay)}
				topicKeys := map[string]*yaml.Node{}
				for _, k := range topicSourceKeys {
					keys[k] = func(_ string, v *yaml.Node) { topicKeys[k] = v }
				}
				d.mapping(p, n, keys)
				if s.Config == "" && len(topicKeys) > 0 {
					// A source named by its topic: its relay runs
					// elsewhere, from a flow config the fleet does not see.
					if s.Relay == RelayFleet {
						d.fail(p+".relay", n, "remove relay: fleet, or name the flow's config with config: so fleet run can start its relay", "a source named by topic has no flow config to run a relay from")
						continue
					}
					fc := d.topicFlow(p, n, topicKeys)
					if fc == nil {
						continue
					}
					s.ID, s.Flow, s.Relay = fc.Source.ID, fc, RelayExternal
					f.Lake.Production = f.Lake.Production || fc.Environment == config.Production
					f.Sources = append(f.Sources, s)
					continue
				}
				if s.Config == "" {
					d.fail(p+".config", n, "name the flow's trellara.yml (config: flows/NAME.yml), or name the source by its topic (id, topic, kafka, database_url, tables)", "required")
					continue
				}
				if len(topicKeys) > 0 {
					for _, k := range topicSourceKeys {
						if v := topicKeys[k]; v != nil {
							d.fail(p+"."+k, v, "remove it: with config: the flow config says it", "a source with config: takes no %s", k)
						}
					}
					continue
				}
				cp := s.Config
				if !filepath.IsAbs(cp) && file != "" {
					cp = filepath.Join(filepath.Dir(file), cp)
				}
				fc, err := config.Load(cp)
				if err != nil {
					d.fail(p+".config", n, "fix the flow config ("+shell.Trellara("config validate", cp)+")", "%s: %v", cp, err)
					continue
				}
				if fc.Transport.Local == nil && fc.Transport.Kafka == nil {
					d.fail(p+".config", n, "give the flow a transport.local log or a transport.kafka topic: the lake committer reads it", "flow %s has no transport", fc.Flow)
					continue
				}
				s.Config, s.ID, s.Flow = cp, fc.Source.ID, fc
				f.Lake.Production = f.Lake.Production || fc.Environment == config.Production
				f.Sources = append(f.Sources, s)
			}
		}
	}
	if f.Lake.Committer == "" {
		f.Lake.Committer = f.Name
	}
	for i := range f.Sources {
		if f.Sources[i].Relay == "" {
			f.Sources[i].Relay = f.Run.Relays
		}
	}
	d.validate(f)
	if len(d.errs) > 0 {
		return nil, &config.ValidationError{File: file, Errors: d.errs}
	}
	if file != "" && f.Lake.Catalog.Kind == CatalogSQLite && f.Lake.Catalog.URI.IsInline() {
		// A relative SQLite catalog path is taken from fleet.yml's directory.
		if sec, err := f.Lake.Catalog.URI.Resolve(); err == nil {
			if p := strings.TrimPrefix(sec.Reveal(), "file:"); !filepath.IsAbs(p) {
				f.Lake.Catalog.URI = config.InlineRef(filepath.Join(filepath.Dir(file), p))
			}
		}
	}
	if file != "" && strings.HasPrefix(f.Lake.Warehouse, "file://") {
		// A relative file:// warehouse is taken from fleet.yml's directory.
		if p := strings.TrimPrefix(f.Lake.Warehouse, "file://"); !filepath.IsAbs(p) {
			abs, err := filepath.Abs(filepath.Join(filepath.Dir(file), p))
			if err == nil {
				f.Lake.Warehouse = "file://" + abs
			}
		}
	}
	return f, nil
}

func (d *fleetDecoder) validate(f *Fleet) {
	seen := map[string]int{}
	for i, s := range f.Sources {
		if j, dup := seen[s.ID]; dup {
			d.fail(fmt.Sprintf("sources[%d].config", i), nil, "give every flow its own source.id", "source id %q is also sources[%d]'s", s.ID, j)
		}
		seen[s.ID] = i
	}
	// fleet run serves every source's relay and the committer in one
	// process: two of them on one port would loop on "address already in
	// use". Refuse it here, with the keys.
	type listener struct{ key, addr string }
	listeners := []listener{{"run.listen", f.Run.Listen}}
	// The pair to suggest: the first default pair no listener of the
	// fleet takes.
	suggest := func() config.Listen {
		for n := 1; ; n++ {
			p, free := config.ListenPair("127.0.0.1", n), true
			for _, s := range f.Sources {
				for _, a := range append(s.Flow.ListenAddrs(), config.ListenAddr{Addr: f.Run.Listen}) {
					free = free && !config.ListenConflict(a.Addr, p.Relay) && !config.ListenConflict(a.Addr, p.Applier)
				}
			}
			if free {
				return p
			}
		}
	}
	for i, s := range f.Sources {
		if s.ExternalRelay() {
			continue // its relay listens in its own process, maybe on another machine
		}
		a := listener{fmt.Sprintf("sources[%d] (flow %s, %s) run.listen.relay", i, s.Flow.Flow, s.Config), s.Flow.Run.Listen.Relay}
		for _, b := range listeners {
			if config.ListenConflict(a.addr, b.addr) {
				p := suggest()
				d.fail(fmt.Sprintf("sources[%d].config", i), nil,
					fmt.Sprintf("give the flow its own ports: set run.listen.relay and run.listen.applier in %s, e.g. %s and %s", s.Config, p.Relay, p.Applier),
					"%s %s takes the same port as %s %s", a.key, a.addr, b.key, b.addr)
			}
		}
		listeners = append(listeners, a)
	}
	kinds := []string{CatalogSQLite, CatalogPostgres, CatalogREST}
	if k := f.Lake.Catalog.Kind; k != "" && !slices.Contains(kinds, k) {
		d.fail("lake.catalog.kind", nil, "use one of: "+strings.Join(kinds, ", "), "unknown catalog kind %q", k)
	}
	if w := f.Lake.Warehouse; w != "" {
		u, err := url.Parse(w)
		switch {
		case err != nil || u.Scheme == "":
			d.fail("lake.warehouse", nil, "write file:///absolute/path or s3://bucket/prefix", "%q is not a URL", w)
		case u.Scheme != "file" && u.Scheme != "s3":
			d.fail("lake.warehouse", nil, "write file:///absolute/path or s3://bucket/prefix", "scheme %q is not supported", u.Scheme)
		}
	}
	d.validateS3(f)
	if f.Lake.Namespace == "" || strings.ContainsAny(f.Lake.Namespace, ". ") {
		d.fail("lake.namespace", nil, "write a single name without dots or spaces", "%q is not a namespace name", f.Lake.Namespace)
	}
	if f.Epochs.MaxLag < f.Run.CommitEvery {
		d.fail("epochs.max_lag", nil, "raise max_lag to at least run.commit_every", "max_lag %s is shorter than run.commit_every %s: every source would count as lagging", f.Epochs.MaxLag, f.Run.CommitEvery)
	}
	if len(f.Lake.Tables) > 0 && f.Lake.Catalog.Kind == CatalogREST {
		d.fail("lake.tables", nil, "use a sql-postgres or sql-sqlite catalog (their database holds the committers' leases), or remove lake.tables and run one committer",
			"a rest catalog has no lease table: sharded committers could race on a table")
	}
	if f.Run.Cursor == "" {
		d.fail("run.cursor", nil, "name the committer's cursor", "must not be empty")
	}
	// The committer name is part of its cursor's file name and of its
	// lease rows: the cursor's character set.
	if c := f.Lake.Committer; c != "" && (c[0] == '.' || len(c) > 100 || strings.IndexFunc(c, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0) {
		d.fail("lake.committer", nil, "use 1 to 100 of A-Z a-z 0-9 . _ -, not starting with '.'", "%q is not a committer name", c)
	}
	// A table no source publishes would never be committed: a typo that
	// would leave the table's real owner unassigned.
	for i, t := range f.Lake.Tables {
		published := false
		for _, s := range f.Sources {
			for _, st := range s.Flow.Source.Tables {
				published = published || (st.Schema == t.Schema && st.Name == t.Name)
			}
		}
		if !published && len(f.Sources) > 0 {
			d.fail(fmt.Sprintf("lake.tables[%d]", i), nil, "name a table one of the sources publishes (their source.tables)", "no source publishes %s", t)
		}
	}
}

// validateS3 checks lake.s3 against the warehouse and lake.properties.
func (d *fleetDecoder) validateS3(f *Fleet) {
	for k := range f.Lake.Properties {
		if key, ok := s3Keys[k]; ok && f.Lake.S3 != nil {
			d.fail("lake.properties."+k, nil, "set it once, as "+key, "lake.s3 sets %s", k)
		}
	}
	s := f.Lake.S3
	if s == nil {
		return
	}
	if !strings.HasPrefix(f.Lake.Warehouse, "s3://") {
		d.fail("lake.s3", nil, "remove lake.s3, or write lake.warehouse: s3://bucket/prefix", "lake.s3 configures an s3:// warehouse; lake.warehouse is %q", f.Lake.Warehouse)
	}
	if s.Endpoint != "" {
		if u, err := url.Parse(s.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d.fail("lake.s3.endpoint", nil, "write the store's base URL, e.g. https://s3.example.com or http://127.0.0.1:9000", "%q is not an http(s) URL", s.Endpoint)
		} else if u.User != nil {
			d.fail("lake.s3.endpoint", nil, "remove the user info from the URL; put the key pair in lake.s3.access_key_id and lake.s3.secret_access_key as {env: NAME}", "the endpoint URL carries credentials (not shown)")
		}
		if s.Region == "" {
			d.fail("lake.s3.region", nil, "set the store's signing region (us-east-1 for most S3-compatible stores)", "required when lake.s3.endpoint is set: requests are signed for a region")
		}
	}
	if s.AccessKeyID.IsZero() != s.SecretAccessKey.IsZero() {
		d.fail("lake.s3", nil, "set both access_key_id and secret_access_key, or neither (the AWS SDK's credential chain)", "only one of access_key_id and secret_access_key is set")
	}
	if f.Lake.Production && s.SecretAccessKey.IsInline() {
		d.fail("lake.s3.secret_access_key", nil, "write secret_access_key: {env: TRELLARA_S3_SECRET} or {file: /etc/trellara/s3-secret}", "an inline secret in a production fleet (the value is not shown)")
	}
}

// ErrGappedEpoch is returned when the latest epoch misses sources and the
// caller did not allow gaps.
var ErrGappedEpoch = errors.New("the latest epoch is complete_with_gaps")
