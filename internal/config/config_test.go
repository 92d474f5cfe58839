package config

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// edit applies old→new replacements to a YAML text, failing if any old is
// absent, so a table entry cannot silently test the unmodified file.
func edit(t testing.TB, base string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(base, pairs[i]) {
			t.Fatalf("test input does not contain %q", pairs[i])
		}
		base = strings.Replace(base, pairs[i], pairs[i+1], 1)
	}
	return base
}

func validationErrors(t testing.TB, err error) []FieldError {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want *ValidationError, got %T: %v", err, err)
	}
	if !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("error does not start with \"config: \": %q", err.Error())
	}
	return ve.Errors
}

func TestParseValid(t *testing.T) {
	c, err := Parse([]byte(readTestdata(t, "local.yml")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Environment != Development || c.Flow != "sales" || c.Source.ID != "store_001" {
		t.Errorf("top level: %+v", c)
	}
	if c.Source.DatabaseURL.Env != "TRELLARA_SOURCE_URL" {
		t.Errorf("database_url = %v", c.Source.DatabaseURL)
	}
	want := []TableName{{Schema: "public", Name: "sales"}, {Schema: "public", Name: "line_items"}}
	if len(c.Source.Tables) != 2 || c.Source.Tables[0] != want[0] || c.Source.Tables[1] != want[1] {
		t.Errorf("tables = %v", c.Source.Tables)
	}
	// Defaults.
	s := c.Source
	if s.Capture != CapturePgoutput || s.ProtocolVersion != 2 || !s.Streaming || s.MemoryBytesMax != 64*MiB || s.OwnsSlot {
		t.Errorf("source defaults: %+v", s)
	}
	l := c.Transport.Local
	if l == nil || l.Fsync != "always" || l.SegmentBytesMax != DefaultSegmentBytesMax ||
		l.Retention.MaxBytes != 50*GiB || l.Retention.MaxAge != 7*24*time.Hour || l.ExpirePastRetention {
		t.Errorf("local defaults: %+v", l)
	}
	if c.Target == nil || c.Target.Mode != ModeStrict || c.Target.Schema != "trellara" || c.Target.CreateTables ||
		c.Target.SynchronousCommit != SynchronousCommitOff {
		t.Errorf("target defaults: %+v", c.Target)
	}
	if c.Run.Listen.Relay != "127.0.0.1:9401" || c.Run.Listen.Applier != "127.0.0.1:9402" || c.Run.Evaluate {
		t.Errorf("run defaults: %+v", c.Run)
	}
}

// Health and metrics are not exposed beyond the host unless configured: the
// default listen addresses are loopback, and a configured address is kept.
func TestDefaultListenIsLoopback(t *testing.T) {
	c, err := Parse([]byte(readTestdata(t, "local.yml")))
	if err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"relay": c.Run.Listen.Relay, "applier": c.Run.Listen.Applier} {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("run.listen.%s defaults to %q: not a loopback address", name, addr)
		}
	}
	c, err = Parse([]byte(readTestdata(t, "local.yml") + "run: {listen: {relay: \":9401\", applier: \"0.0.0.0:9402\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Run.Listen.Relay != ":9401" || c.Run.Listen.Applier != "0.0.0.0:9402" {
		t.Errorf("configured listen addresses not kept: %+v", c.Run.Listen)
	}
}

func TestParseDerivedDefaults(t *testing.T) {
	c, err := Parse([]byte(edit(t, readTestdata(t, "local.yml"),
		"  publication: trellara_sales\n", "", "  slot: trellara_sales\n", "")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.Publication != "trellara_sales" || c.Source.Slot != "trellara_sales" {
		t.Errorf("publication %q slot %q", c.Source.Publication, c.Source.Slot)
	}
	k, err := Parse([]byte(readTestdata(t, "kafka-production.yml")))
	if err != nil {
		t.Fatal(err)
	}
	if kt := k.Transport.Kafka; kt.Topic != "trellara.sales" || kt.ConsumerGroup != "trellara.sales" || kt.StateDir != "trellara-data/sales" {
		t.Errorf("topic %q group %q state_dir %q", kt.Topic, kt.ConsumerGroup, kt.StateDir)
	}
}

// TestKafkaStateDir: a Kafka flow's local state directory defaults to
// trellara-data/<flow> beside the config file, a relative state_dir is
// taken from the config file's directory, and one holding a NUL byte is refused.
func TestKafkaStateDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trellara.yml")
	base := readTestdata(t, "kafka-production.yml")
	for _, tc := range []struct{ in, want string }{
		{base, filepath.Join(dir, "trellara-data/sales")},
		{edit(t, base, "    profile: production\n", "    profile: production\n    state_dir: state/k\n"), filepath.Join(dir, "state/k")},
		{edit(t, base, "    profile: production\n", "    profile: production\n    state_dir: /srv/k\n"), "/srv/k"},
	} {
		if err := os.WriteFile(path, []byte(tc.in), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Transport.Kafka.StateDir; got != tc.want {
			t.Errorf("state_dir = %q, want %q", got, tc.want)
		}
	}
	_, err := Parse([]byte(edit(t, base, "    profile: production\n", "    profile: production\n    state_dir: \"a\\0b\"\n")))
	errs := validationErrors(t, err)
	if len(errs) != 1 || errs[0].Path != "transport.kafka.state_dir" {
		t.Fatalf("state_dir with a NUL byte: %v", err)
	}
}

// transport.kafka.mode defaults to strict; partitioned carries its
// partition count through parsing and back out of Marshal.
func TestKafkaMode(t *testing.T) {
	base := readTestdata(t, "kafka-production.yml")
	c, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Transport.Kafka; k.Mode != ModeStrict || k.Partitions != 0 {
		t.Fatalf("default mode %q partitions %d, want strict", k.Mode, k.Partitions)
	}
	c, err = Parse([]byte(edit(t, base, "    profile: production\n", "    profile: production\n    mode: partitioned\n    partitions: 12\n")))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Transport.Kafka; k.Mode != ModePartitioned || k.Partitions != 12 {
		t.Fatalf("mode %q partitions %d, want partitioned 12", k.Mode, k.Partitions)
	}
	out, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out)
	if err != nil {
		t.Fatalf("marshalled config does not parse: %v\n%s", err, out)
	}
	if k := again.Transport.Kafka; k.Mode != ModePartitioned || k.Partitions != 12 {
		t.Fatalf("after Marshal: mode %q partitions %d\n%s", k.Mode, k.Partitions, out)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trellara.yml")
	data := edit(t, readTestdata(t, "local.yml"), "dir: /var/lib/trellara/sales", "dir: data/sales")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// A relative log directory is taken from the config file's directory.
	if got, want := c.Transport.Local.Dir, filepath.Join(dir, "data/sales"); got != want {
		t.Errorf("dir = %q, want %q", got, want)
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.yml")
	_, err := Load(missing)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: errors.Is(ErrNotExist) false: %v", err)
	}
	for _, want := range []string{"config: ", missing, "no such file", "trellara init"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing file error %v lacks %q", err, want)
		}
	}

	if _, err := Load(dir); err == nil || !strings.HasPrefix(err.Error(), "config: "+dir) {
		t.Errorf("directory: %v", err)
	}

	big := filepath.Join(dir, "big.yml")
	if err := os.WriteFile(big, make([]byte, maxConfigBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Errorf("large file: %v", err)
	}

	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte("version: 2\nflow: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	errs := validationErrors(t, err)
	if len(errs) != 1 || errs[0].Line == 0 || !strings.Contains(err.Error(), "config: "+bad+": line ") ||
		!strings.Contains(err.Error(), "invalid YAML") {
		t.Errorf("bad YAML: %v", err)
	}
}

// TestUnknownKeyLine pins the exact wording of the most common mistake.
func TestUnknownKeyLine(t *testing.T) {
	in := edit(t, readTestdata(t, "local.yml"), "  database_url: {env: TRELLARA_SOURCE_URL}\n",
		"  database_url: {env: TRELLARA_SOURCE_URL}\n  databse_url: x\n")
	_, err := Parse([]byte(in))
	errs := validationErrors(t, err)
	if len(errs) != 1 {
		t.Fatalf("want 1 error, got %v", err)
	}
	if got, want := errs[0].Error(), "line 7: unknown key source.databse_url (did you mean database_url?)"; !strings.HasPrefix(got, want) {
		t.Errorf("got  %q\nwant %q...", got, want)
	}
	if errs[0].Path != "source.databse_url" || errs[0].Line != 7 || errs[0].Fix == "" {
		t.Errorf("field error: %+v", errs[0])
	}
}

// TestErrorClasses: every class of problem names its key path (in Path and
// in the message), the line where known, and a fix.
func TestErrorClasses(t *testing.T) {
	local := readTestdata(t, "local.yml")
	kafka := edit(t, readTestdata(t, "kafka-production.yml"), "environment: production", "environment: development",
		"profile: production", "profile: development")
	tests := []struct {
		name string
		in   string
		path string
		line int    // 0: not checked
		want string // substring of the message
	}{
		{"yaml syntax", "version: 2\nflow: sales\n  bad: [\n", "", 3, "invalid YAML"},
		{"empty file", "# nothing\n", "", 0, "empty"},
		{"two documents", local + "---\nversion: 2\n", "", 0, "more than one YAML document"},
		{"top level list", "- version: 2\n", "", 1, "top level must be a mapping"},
		{"version missing", edit(t, local, "version: 2\n", ""), "version", 0, "version 2 is the only supported version"},
		{"version 1", edit(t, local, "version: 2", "version: 1"), "version", 1, "version 2 is the only supported version"},
		{"version string", edit(t, local, "version: 2", `version: "2"`), "version", 1, `is the string "2"; the schema version is the number 2`},
		{"version string 3", edit(t, local, "version: 2", `version: "3"`), "version", 1, `must be the number 2, not "3"`},
		{"version float", edit(t, local, "version: 2", `version: 2.5`), "version", 1, `must be the number 2, not "2.5"`},
		{"unknown top-level key", local + "sorce: {}\n", "sorce", 17, "unknown key sorce (did you mean source?)"},
		{"unknown key in reference", edit(t, local, "{env: TRELLARA_SOURCE_URL}", "{evn: TRELLARA_SOURCE_URL}"),
			"source.database_url", 6, "another key (not shown: it may be the credential itself; did you mean env?)"},
		{"duplicate key", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  slot: x\n"), "source.slot", 9, "duplicate key (first set on line 8)"},
		{"alias", edit(t, local, "flow: sales", "flow: &f sales", "id: store_001", "id: *f"), "source.id", 5, "aliases (*name) are not supported"},
		{"alias in list", edit(t, local, "flow: sales", "flow: &f public.x", "public.line_items]", "*f]"), "source.tables[1]", 9, "aliases (*name) are not supported"},
		{"merge key", edit(t, local, "  id: store_001\n", "  <<: {id: store_001}\n"), "source", 5, "merge keys (<<) are not supported"},
		{"bool type", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  owns_slot: yes please\n"), "source.owns_slot", 9, "must be true or false"},
		{"int type", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  protocol_version: two\n"), "source.protocol_version", 9, "must be a whole number"},
		{"size type", edit(t, local, "max_bytes: 50GiB", "max_bytes: 50 gigs"), "transport.local.retention.max_bytes", 11, "not a byte size"},
		{"duration no unit", edit(t, local, "max_bytes: 50GiB", "max_bytes: 50GiB, max_age: 7"), "transport.local.retention.max_age", 11, "has no unit"},
		{"duration bad", edit(t, local, "max_bytes: 50GiB", "max_bytes: 50GiB, max_age: a week"), "transport.local.retention.max_age", 11, "not a duration"},
		{"list type", edit(t, local, "tables: [public.sales, public.line_items]", "tables: public.sales"), "source.tables", 9, "must be a list"},
		{"mapping type", edit(t, local, "schema:\n  unknown_table_policy: block", "schema: block"), "schema", 15, "must be a mapping"},
		{"environment", edit(t, local, "environment: development", "environment: prod"), "environment", 2, "must be development, staging or production"},
		{"flow missing", edit(t, local, "flow: sales\n", ""), "flow", 0, "required"},
		{"flow invalid", edit(t, local, "flow: sales", "flow: Sales-EU"), "flow", 3, "not a valid flow name"},
		{"source id missing", edit(t, local, "  id: store_001\n", ""), "source.id", 4, "required"},
		{"source id invalid", edit(t, local, "id: store_001", "id: Store 1"), "source.id", 5, "not a valid source id"},
		{"database_url missing", edit(t, local, "  database_url: {env: TRELLARA_SOURCE_URL}\n", ""), "source.database_url", 4, "required"},
		{"database_url empty reference", edit(t, local, "{env: TRELLARA_SOURCE_URL}", "{}"), "source.database_url", 6, "neither env nor file"},
		{"database_url number", edit(t, local, "{env: TRELLARA_SOURCE_URL}", "5432"), "source.database_url", 6, "must be a reference"},
		{"env name invalid", edit(t, local, "{env: TRELLARA_SOURCE_URL}", "{env: 'MY VAR'}"), "source.database_url.env", 6, "is not an environment variable name"},
		{"file relative", edit(t, local, "{env: TRELLARA_SOURCE_URL}", "{file: secrets/source}"), "source.database_url.file", 6, "is not an absolute path"},
		{"capture invalid", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  capture: wal2json\n"), "source.capture", 9, "must be pgoutput or extension"},
		{"extension without socket", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  capture: extension\n"), "source.socket", 4, "required with capture: extension"},
		{"socket relative", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  capture: extension\n  socket: run/t.sock\n"), "source.socket", 10, "must be absolute"},
		{"socket with pgoutput", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  socket: /run/t.sock\n"), "source.socket", 9, "only used with capture: extension"},
		{"owns_slot with extension", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  capture: extension\n  socket: /run/t.sock\n  owns_slot: true\n"), "source.owns_slot", 11, "only used with capture: pgoutput"},
		{"publication invalid", edit(t, local, "publication: trellara_sales", "publication: Trellara-Sales"), "source.publication", 7, "not a valid name for a publication"},
		{"slot invalid", edit(t, local, "slot: trellara_sales", "slot: 9slot"), "source.slot", 8, "not a valid name for a replication slot"},
		{"tables missing", edit(t, local, "  tables: [public.sales, public.line_items]\n", ""), "source.tables", 4, "at least one table"},
		{"table unqualified", edit(t, local, "public.line_items]", "line_items]"), "source.tables[1]", 9, "must be schema-qualified"},
		{"table duplicate", edit(t, local, "public.line_items]", "PUBLIC.Sales]"), "source.tables[1]", 9, "listed twice"},
		{"table empty entry", edit(t, local, "tables: [public.sales, public.line_items]", "tables:\n    - public.sales\n    -"), "source.tables[1]", 11, "empty list entry"},
		{"protocol_version 3", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  protocol_version: 3\n"), "source.protocol_version", 9, "must be 1 or 2"},
		{"protocol_version 1 streaming", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  protocol_version: 1\n"), "source.protocol_version", 9, "only valid with streaming: false"},
		{"memory too small", edit(t, local, "  slot: trellara_sales\n", "  slot: trellara_sales\n  memory_bytes_max: 4KiB\n"), "source.memory_bytes_max", 9, "below the minimum of 1MiB"},
		{"transport missing", edit(t, local, "transport:\n  local: {dir: /var/lib/trellara/sales, fsync: always, retention: {max_bytes: 50GiB}}\n", ""), "transport", 0, "exactly one of local or kafka is required"},
		{"transport both", edit(t, local, "transport:\n", "transport:\n  kafka: {brokers: [k:9092]}\n"), "transport", 10, "not both"},
		{"local dir missing", edit(t, local, "dir: /var/lib/trellara/sales, ", ""), "transport.local.dir", 11, "required"},
		{"fsync", edit(t, local, "fsync: always", "fsync: never"), "transport.local.fsync", 11, "must be always"},
		{"segment too small", edit(t, local, "fsync: always", "fsync: always, segment_bytes_max: 1000"), "transport.local.segment_bytes_max", 11, "outside 1MiB..1GiB"},
		{"segment too large", edit(t, local, "fsync: always", "fsync: always, segment_bytes_max: 2GiB"), "transport.local.segment_bytes_max", 11, "outside 1MiB..1GiB"},
		{"retention unbounded", edit(t, local, "max_bytes: 50GiB", "max_bytes: 0, max_age: 0"), "transport.local.retention", 11, "needs a limit"},
		{"retention below segment", edit(t, local, "max_bytes: 50GiB", "max_bytes: 1MiB"), "transport.local.retention.max_bytes", 11, "smaller than one segment"},
		{"brokers missing", edit(t, kafka, "    brokers: [kafka-1:9093, kafka-2:9093, kafka-3:9093]\n", ""), "transport.kafka.brokers", 9, "at least one broker"},
		{"broker invalid", edit(t, kafka, "kafka-2:9093", "kafka-2"), "transport.kafka.brokers[1]", 10, "not host:port"},
		{"broker port", edit(t, kafka, "kafka-2:9093", "kafka-2:99999"), "transport.kafka.brokers[1]", 10, "invalid port"},
		{"topic invalid", edit(t, kafka, "    profile:", "    topic: 'sales topic'\n    profile:"), "transport.kafka.topic", 11, "not a valid topic name"},
		{"profile invalid", edit(t, kafka, "profile: development", "profile: prod"), "transport.kafka.profile", 11, "must be development or production"},
		{"acks invalid", edit(t, kafka, "acks: all", "acks: -1"), "transport.kafka.acks", 20, "must be all, leader or none"},
		{"idempotent needs acks all", edit(t, kafka, "acks: all", "acks: leader"), "transport.kafka.idempotent", 21, "requires acks: all"},
		{"replication factor range", edit(t, kafka, "replication_factor: 3", "replication_factor: 0"), "transport.kafka.replication_factor", 18, "outside 1..32"},
		{"min isr above rf", edit(t, kafka, "min_insync_replicas: 2", "min_insync_replicas: 4"), "transport.kafka.min_insync_replicas", 19, "above replication_factor 3"},
		{"min isr zero", edit(t, kafka, "min_insync_replicas: 2", "min_insync_replicas: 0"), "transport.kafka.min_insync_replicas", 19, "below 1"},
		{"kafka mode invalid", edit(t, kafka, "    profile:", "    mode: eventual\n    profile:"), "transport.kafka.mode", 11, "must be strict or partitioned"},
		{"kafka partitioned without partitions", edit(t, kafka, "    profile:", "    mode: partitioned\n    profile:"), "transport.kafka.partitions", 0, "needs 2 to 1024 data partitions, not 0"},
		{"kafka partitions too many", edit(t, kafka, "    profile:", "    mode: partitioned\n    partitions: 2000\n    profile:"), "transport.kafka.partitions", 12, "needs 2 to 1024 data partitions, not 2000"},
		{"kafka strict with partitions", edit(t, kafka, "    profile:", "    partitions: 6\n    profile:"), "transport.kafka.partitions", 11, "needs mode: partitioned"},
		{"tls relative", edit(t, kafka, "ca_file: /etc/trellara/kafka/ca.pem", "ca_file: ca.pem"), "transport.kafka.tls.ca_file", 13, "must be absolute"},
		{"tls cert without key", edit(t, kafka, "ca_file: /etc/trellara/kafka/ca.pem", "cert_file: /etc/c.pem"), "transport.kafka.tls", 12, "go together"},
		{"sasl mechanism", edit(t, kafka, "SCRAM-SHA-512", "GSSAPI"), "transport.kafka.sasl.mechanism", 15, "must be SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN"},
		{"sasl username", edit(t, kafka, "      username: trellara\n", ""), "transport.kafka.sasl.username", 14, "required"},
		{"sasl password", edit(t, kafka, "      password: {env: TRELLARA_KAFKA_PASSWORD}\n", ""), "transport.kafka.sasl.password", 14, "required"},
		{"target database_url", edit(t, local, "  database_url: {env: TRELLARA_TARGET_URL}\n", ""), "target.database_url", 12, "required"},
		{"target mode", edit(t, local, "mode: strict", "mode: eventual"), "target.mode", 14, "must be strict or partitioned"},
		{"target schema", edit(t, local, "  mode: strict\n", "  mode: strict\n  schema: Trellara-Meta\n"), "target.schema", 15, "not a valid schema name"},
		{"target synchronous_commit", edit(t, local, "  mode: strict\n", "  mode: strict\n  synchronous_commit: local\n"), "target.synchronous_commit", 15, "must be on or off"},
		{"unknown table policy", edit(t, local, "unknown_table_policy: block", "unknown_table_policy: allow"), "schema.unknown_table_policy", 16, "must be block or allow_compatible"},
		{"on blocked", edit(t, local, "unknown_table_policy: block", "unknown_table_policy: block\n  on_blocked: hold"), "schema.on_blocked", 17, "must be hold_flow or hold_table"},
		{"listen invalid", local + "run: {listen: {relay: 9401}}\n", "run.listen.relay", 17, "not host:port"},
		{"listen same", local + "run: {listen: {relay: ':9500', applier: ':9500'}}\n", "run.listen.applier", 17, "same address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatal("no error")
			}
			errs := validationErrors(t, err)
			var found *FieldError
			for i := range errs {
				if errs[i].Path == tc.path && strings.Contains(errs[i].Message, tc.want) {
					found = &errs[i]
					break
				}
			}
			if found == nil {
				t.Fatalf("no error at %q containing %q; got:\n%v", tc.path, tc.want, err)
			}
			if tc.line != 0 && found.Line != tc.line {
				t.Errorf("line = %d, want %d: %v", found.Line, tc.line, found)
			}
			if !strings.Contains(found.Message, tc.path) {
				t.Errorf("message does not name %q: %q", tc.path, found.Message)
			}
			if found.Fix == "" {
				t.Errorf("no fix: %v", found)
			}
			if !strings.Contains(found.Error(), "; fix: "+found.Fix) {
				t.Errorf("Error() does not carry the fix: %q", found.Error())
			}
		})
	}
}

// TestOneMistakeOneError: a value that failed to decode is not reported
// again by validation.
func TestOneMistakeOneError(t *testing.T) {
	in := edit(t, readTestdata(t, "local.yml"), "  slot: trellara_sales\n", "  slot: trellara_sales\n  protocol_version: two\n  memory_bytes_max: lots\n")
	_, err := Parse([]byte(in))
	if errs := validationErrors(t, err); len(errs) != 2 {
		t.Errorf("want 2 errors, got %d:\n%v", len(errs), err)
	}
}

func TestMultipleErrorsAtOnce(t *testing.T) {
	in := `version: 2
environment: development
flow: sales
source:
  id: store_001
  databse_url: {env: X}
  tables: [sales]
  protocol_version: 1
transport:
  local: {fsync: sometimes}
target:
  mode: fast
schema:
  unknown_table_policy: maybe
`
	_, err := Parse([]byte(in))
	errs := validationErrors(t, err)
	want := []string{"source.databse_url", "source.database_url", "source.tables[0]", "source.protocol_version",
		"transport.local.dir", "transport.local.fsync", "target.database_url", "target.mode", "schema.unknown_table_policy"}
	got := map[string]bool{}
	for _, fe := range errs {
		got[fe.Path] = true
	}
	for _, p := range want {
		if !got[p] {
			t.Errorf("missing error for %s", p)
		}
	}
	// One line per problem, after a header line.
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(errs)+1 || !strings.HasPrefix(lines[0], "config: ") {
		t.Errorf("Error() layout:\n%s", err)
	}
	// Sorted by line.
	for i := 1; i < len(errs); i++ {
		if errs[i].Line != 0 && errs[i-1].Line > errs[i].Line {
			t.Errorf("errors out of line order: %v", err)
		}
	}
}

func TestProductionGate(t *testing.T) {
	prod := readTestdata(t, "kafka-production.yml")
	if _, err := Parse([]byte(prod)); err != nil {
		t.Fatalf("baseline production config: %v", err)
	}
	mtls := edit(t, prod, "      ca_file: /etc/trellara/kafka/ca.pem\n",
		"      ca_file: /etc/trellara/kafka/ca.pem\n      cert_file: /etc/trellara/kafka/client.pem\n      key_file: /etc/trellara/kafka/client.key\n",
		"    sasl:\n      mechanism: SCRAM-SHA-512\n      username: trellara\n      password: {env: TRELLARA_KAFKA_PASSWORD}\n", "")
	if _, err := Parse([]byte(mtls)); err != nil {
		t.Fatalf("mTLS production config: %v", err)
	}

	const inlineURL = "postgres://app:Hunter2Secret@db.internal:5432/sales"
	tests := []struct {
		name string
		in   string
		path string
		want string
	}{
		{"inline source url", edit(t, prod, "{file: /etc/trellara/source-url}", "'"+inlineURL+"'"), "source.database_url", "inline credential refused"},
		{"inline target url", edit(t, prod, "  database_url: {env: TRELLARA_TARGET_URL}", "  database_url: "+inlineURL), "target.database_url", "inline credential refused"},
		{"inline kafka password", edit(t, prod, "password: {env: TRELLARA_KAFKA_PASSWORD}", "password: Hunter2Secret"), "transport.kafka.sasl.password", "inline credential refused"},
		{"kafka development profile", edit(t, prod, "profile: production", "profile: development"), "transport.kafka.profile", "refuses Kafka profile \"development\""},
		{"kafka default profile", edit(t, prod, "    profile: production\n", ""), "transport.kafka.profile", "refuses Kafka profile"},
		{"no tls", edit(t, prod, "    tls:\n      ca_file: /etc/trellara/kafka/ca.pem\n", ""), "transport.kafka.tls", "TLS is required"},
		{"no client auth", edit(t, prod, "    sasl:\n      mechanism: SCRAM-SHA-512\n      username: trellara\n      password: {env: TRELLARA_KAFKA_PASSWORD}\n", ""), "transport.kafka", "client authentication is required"},
		{"sasl plain", edit(t, prod, "SCRAM-SHA-512", "PLAIN"), "transport.kafka.sasl.mechanism", "PLAIN is not accepted"},
		{"replication factor", edit(t, prod, "replication_factor: 3", "replication_factor: 2"), "transport.kafka.replication_factor", "below 3 (production contract)"},
		{"min insync", edit(t, prod, "min_insync_replicas: 2", "min_insync_replicas: 1"), "transport.kafka.min_insync_replicas", "below 2 (production contract)"},
		{"acks", edit(t, prod, "acks: all", "acks: leader"), "transport.kafka.acks", "must be all (production contract)"},
		{"idempotent", edit(t, prod, "idempotent: true", "idempotent: false"), "transport.kafka.idempotent", "must be true (production contract)"},
		{"auto commit", edit(t, prod, "idempotent: true", "idempotent: true\n    auto_commit: true"), "transport.kafka.auto_commit", "must be false (production contract)"},
		{"evaluate", prod + "run: {evaluate: true}\n", "run.evaluate", "refuses evaluate: true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			errs := validationErrors(t, err)
			var hits []FieldError
			for _, fe := range errs {
				if fe.Path == tc.path && strings.Contains(fe.Message, tc.want) {
					hits = append(hits, fe)
				}
			}
			if len(hits) != 1 {
				t.Fatalf("want one error at %s containing %q; got:\n%v", tc.path, tc.want, err)
			}
			if hits[0].Fix == "" || hits[0].Line == 0 {
				t.Errorf("error lacks fix or line: %+v", hits[0])
			}
			// The refused value itself must never be echoed.
			if strings.Contains(err.Error(), "Hunter2Secret") {
				t.Errorf("error echoes the credential: %v", err)
			}
		})
	}

	// The same inline URL is accepted outside production.
	for _, env := range []string{"development", "staging"} {
		in := edit(t, readTestdata(t, "local.yml"), "environment: development", "environment: "+env,
			"{env: TRELLARA_SOURCE_URL}", "'"+inlineURL+"'")
		c, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("%s with inline URL: %v", env, err)
		}
		s, err := c.Source.DatabaseURL.Resolve()
		if err != nil || s.Reveal() != inlineURL {
			t.Errorf("%s: inline resolve = %v, %v", env, s, err)
		}
	}
}

// TestKafkaProductionProfile: profile production holds a Kafka section to
// the contract in any environment, one named error per clause, inline
// credentials included.
func TestKafkaProductionProfile(t *testing.T) {
	prod := edit(t, readTestdata(t, "kafka-production.yml"), "environment: production", "environment: development")
	if _, err := Parse([]byte(prod)); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	tests := []struct {
		name, in, path, want string
	}{
		{"inline kafka password", edit(t, prod, "password: {env: TRELLARA_KAFKA_PASSWORD}", "password: Hunter2Secret"), "transport.kafka.sasl.password", "inline credential refused: the Kafka profile is production"},
		{"no tls", edit(t, prod, "    tls:\n      ca_file: /etc/trellara/kafka/ca.pem\n", ""), "transport.kafka.tls", "TLS is required"},
		{"no client auth", edit(t, prod, "    sasl:\n      mechanism: SCRAM-SHA-512\n      username: trellara\n      password: {env: TRELLARA_KAFKA_PASSWORD}\n", ""), "transport.kafka", "client authentication is required"},
		{"sasl plain", edit(t, prod, "SCRAM-SHA-512", "PLAIN"), "transport.kafka.sasl.mechanism", "PLAIN is not accepted"},
		{"replication factor", edit(t, prod, "replication_factor: 3", "replication_factor: 2"), "transport.kafka.replication_factor", "below 3 (production contract)"},
		{"min insync", edit(t, prod, "min_insync_replicas: 2", "min_insync_replicas: 1"), "transport.kafka.min_insync_replicas", "below 2 (production contract)"},
		{"min insync above rf", edit(t, prod, "min_insync_replicas: 2", "min_insync_replicas: 4"), "transport.kafka.min_insync_replicas", "above replication_factor 3"},
		{"acks", edit(t, prod, "acks: all", "acks: none"), "transport.kafka.acks", "must be all (production contract)"},
		{"idempotent", edit(t, prod, "idempotent: true", "idempotent: false"), "transport.kafka.idempotent", "must be true (production contract)"},
		{"auto commit", edit(t, prod, "idempotent: true", "idempotent: true\n    auto_commit: true"), "transport.kafka.auto_commit", "must be false (production contract)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			errs := validationErrors(t, err)
			n := 0
			for _, fe := range errs {
				if fe.Path == tc.path && strings.Contains(fe.Message, tc.want) && fe.Fix != "" && fe.Line != 0 {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("want one error at %s containing %q with fix and line; got:\n%v", tc.path, tc.want, err)
			}
			if strings.Contains(err.Error(), "Hunter2Secret") {
				t.Errorf("error echoes the credential: %v", err)
			}
		})
	}
	// The development profile accepts what the contract refuses.
	dev := edit(t, prod, "profile: production", "profile: development", "password: {env: TRELLARA_KAFKA_PASSWORD}", "password: Hunter2Secret",
		"idempotent: true", "idempotent: true\n    auto_commit: true")
	if _, err := Parse([]byte(dev)); err != nil {
		t.Fatalf("development profile: %v", err)
	}
}

// TestProductionAllGapsAtOnce: a production config with a development Kafka
// section gets the profile error and every contract clause in one pass.
func TestProductionAllGapsAtOnce(t *testing.T) {
	in := `version: 2
environment: production
flow: sales
source: {id: s1, database_url: 'postgres://u:p@h/db', tables: [public.sales]}
transport:
  kafka: {brokers: ['k:9092'], profile: development, acks: leader, idempotent: false, replication_factor: 1, min_insync_replicas: 1}
`
	_, err := Parse([]byte(in))
	errs := validationErrors(t, err)
	want := []string{"source.database_url", "transport.kafka.profile", "transport.kafka.tls", "transport.kafka",
		"transport.kafka.replication_factor", "transport.kafka.min_insync_replicas", "transport.kafka.acks", "transport.kafka.idempotent"}
	got := map[string]int{}
	for _, fe := range errs {
		got[fe.Path]++
	}
	for _, p := range want {
		if got[p] == 0 {
			t.Errorf("missing %s in:\n%v", p, err)
		}
	}
}

func TestValidateInCode(t *testing.T) {
	c := Default()
	c.Flow = "sales"
	c.Source.ID = "s1"
	c.Source.DatabaseURL = EnvRef("SRC")
	c.Source.Publication, c.Source.Slot = "p", "s"
	c.Source.Tables = []TableName{{Schema: "public", Name: "sales"}}
	c.Transport.Local = DefaultLocal()
	c.Transport.Local.Dir = "/tmp/x"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Environment = Production
	c.Source.DatabaseURL = InlineRef("postgres://u:secretpw@h/db")
	err := c.Validate()
	errs := validationErrors(t, err)
	if len(errs) != 1 || errs[0].Path != "source.database_url" || errs[0].Line != 0 {
		t.Errorf("got %v", err)
	}
	if strings.HasPrefix(err.Error(), "config: line") || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("unexpected text: %v", err)
	}
}

func TestValidationErrorFormat(t *testing.T) {
	one := &ValidationError{File: "t.yml", Errors: []FieldError{{Path: "flow", Line: 3, Message: "flow: required", Fix: "name it"}}}
	if got, want := one.Error(), "config: t.yml: line 3: flow: required; fix: name it"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
	two := &ValidationError{Errors: []FieldError{{Path: "a", Message: "a: x"}, {Path: "b", Line: 2, Message: "b: y", Fix: "z"}}}
	if got, want := two.Error(), "config: 2 problems:\n  a: x\n  line 2: b: y; fix: z"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
}

func TestSuggest(t *testing.T) {
	keys := []string{"database_url", "publication", "slot", "tables"}
	for in, want := range map[string]string{"databse_url": "database_url", "DATABASE_URL": "database_url", "table": "tables",
		"slots": "slot", "zzzzzz": "", "publicaton": "publication"} {
		if got := suggest(in, keys); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestErrorsNeverEchoCredentials: a credential typed where a key or a plain
// value belongs is scrubbed from the error message.
func TestErrorsNeverEchoCredentials(t *testing.T) {
	local := readTestdata(t, "local.yml")
	for _, in := range []string{
		local + "'postgres://u:EchoPw1@h/db': 1\n",
		edit(t, local, "publication: trellara_sales", "publication: 'postgres://u:EchoPw1@h/db'"),
		edit(t, local, "mode: strict", "mode: host=h password=EchoPw1"),
		edit(t, local, "public.line_items]", "'postgres://u:EchoPw1@h/db']"),
	} {
		_, err := Parse([]byte(in))
		if err == nil {
			t.Fatal("no error")
		}
		if strings.Contains(err.Error(), "EchoPw1") {
			t.Errorf("error echoes a credential: %v", err)
		}
	}
}

// version: "2" is the supported version written as a string: the refusal
// says exactly that and how to fix it, and never calls version 2
// unsupported (which would contradict itself).
func TestVersionStringIsRefusedConsistently(t *testing.T) {
	_, err := Parse([]byte(edit(t, readTestdata(t, "local.yml"), "version: 2", `version: "2"`)))
	errs := validationErrors(t, err)
	if len(errs) != 1 {
		t.Fatalf("want exactly one error, got:\n%v", err)
	}
	fe := errs[0]
	if strings.Contains(fe.Message, "unsupported") || !strings.Contains(fe.Fix, "without quotes") {
		t.Errorf("version \"2\": %q, fix %q", fe.Message, fe.Fix)
	}
}

// source.schemas: names fold as in SQL, a schema may stand alone or beside
// tables of other schemas, and every mistake names the field and its fix.
func TestSourceSchemas(t *testing.T) {
	local := readTestdata(t, "local.yml")
	c, err := Parse([]byte(edit(t, local, "  tables: [public.sales, public.line_items]\n", "  schemas: [App, '\"Sales\"']\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Source.Tables) != 0 || len(c.Source.Schemas) != 2 || c.Source.Schemas[0] != "app" || c.Source.Schemas[1] != "Sales" {
		t.Fatalf("schemas = %q, tables = %v", c.Source.Schemas, c.Source.Tables)
	}
	// A table of another schema beside them is fine; the round trip keeps both.
	c, err = Parse([]byte(edit(t, local, "  tables: [public.sales, public.line_items]\n", "  tables: [public.sales]\n  schemas: [app]\n")))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(b)
	if err != nil {
		t.Fatalf("marshalled config does not parse: %v", err)
	}
	if len(back.Source.Schemas) != 1 || back.Source.Schemas[0] != "app" || len(back.Source.Tables) != 1 {
		t.Errorf("round trip: schemas %q tables %v", back.Source.Schemas, back.Source.Tables)
	}
	// A rename mapping may name a table of a listed schema.
	if _, err := Parse([]byte(edit(t, local, "  tables: [public.sales, public.line_items]\n", "  schemas: [app]\n",
		"unknown_table_policy: block", "unknown_table_policy: block\n  renames: [{table: app.orders, from: note, to: remark}]"))); err != nil {
		t.Errorf("a rename of a table in source.schemas: %v", err)
	}

	tests := []struct {
		name, in, path, want, fix string
	}{
		{"table of a listed schema", edit(t, local, "  tables: [public.sales, public.line_items]\n", "  tables: [public.sales]\n  schemas: [public]\n"),
			"source.tables[0]", "which source.schemas captures whole", "remove it from source.tables"},
		{"duplicate", edit(t, local, "  tables: [public.sales, public.line_items]\n", "  schemas: [app, APP]\n"),
			"source.schemas[1]", "listed twice", "remove the duplicate"},
		{"system schema", edit(t, local, "  tables: [public.sales, public.line_items]\n", "  schemas: [pg_catalog]\n"),
			"source.schemas[0]", "system schema", "system schemas cannot be published"},
		{"bad name", edit(t, local, "  tables: [public.sales, public.line_items]\n", "  schemas: [app.x]\n"),
			"source.schemas[0]", "must be one schema name", "write a schema name"},
		{"extension", edit(t, local, "  tables: [public.sales, public.line_items]\n",
			"  schemas: [app]\n  capture: extension\n  socket: /run/trellara.sock\n"),
			"source.schemas", "only supported with capture: pgoutput", "set capture: pgoutput"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatal("accepted")
			}
			var hit bool
			for _, fe := range validationErrors(t, err) {
				if fe.Path == tc.path && strings.Contains(fe.Message, tc.want) && strings.Contains(fe.Fix, tc.fix) {
					hit = true
				}
			}
			if !hit {
				t.Errorf("no error at %s with %q and fix %q: %v", tc.path, tc.want, tc.fix, err)
			}
		})
	}
}
