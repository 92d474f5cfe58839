package lake

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kafkaFlow writes a transport.kafka flow config named id into dir.
func kafkaFlow(t *testing.T, dir, id string, relayPort int) string {
	t.Helper()
	p := filepath.Join(dir, id+".yml")
	body := fmt.Sprintf(`version: 2
environment: development
flow: %s
source:
  id: %s
  database_url: postgres://localhost/%s
  tables: [public.t]
transport:
  kafka:
    brokers: [127.0.0.1:9092]
    profile: development
run:
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, id, id, id, relayPort, relayPort+1)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// lakeYAML is a fleet.yml's lake section for the parse tests.
const lakeYAML = "lake:\n  catalog: {kind: sql-sqlite, uri: cat.db}\n  warehouse: file:///tmp/w\n"

// fleetWriter returns a function that writes fleet.yml in dir with the
// body given and returns its path.
func fleetWriter(t *testing.T, dir string) func(body string) string {
	return func(body string) string {
		p := filepath.Join(dir, "fleet.yml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// TestFleetKafkaSourcesAndExternalRelays: a fleet may name
// transport.kafka flows; run.relays sets where relays run, a source's
// relay overrides it; external relays may share ports (they are not in
// the fleet process); a bad placement is refused by key.
func TestFleetKafkaSourcesAndExternalRelays(t *testing.T) {
	dir := t.TempDir()
	kafkaFlow(t, dir, "eu1", 19501)
	kafkaFlow(t, dir, "us1", 19501) // the same relay port as eu1
	write := fleetWriter(t, dir)

	f, err := LoadFleet(write("version: 1\nfleet: pay\nsources:\n  - config: eu1.yml\n  - config: us1.yml\n" + lakeYAML + "run: {relays: external}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Sources {
		if !s.ExternalRelay() || s.Kafka() == nil || s.LogDir() != "" {
			t.Fatalf("source %s: external %v, kafka %v, log dir %q; want an external relay over Kafka", s.ID, s.ExternalRelay(), s.Kafka(), s.LogDir())
		}
	}
	if g := f.KafkaGroup(); g != "trellara.pay.lake" {
		t.Fatalf("KafkaGroup = %q", g)
	}

	// One relay in the fleet, one outside: no port conflict.
	f, err = LoadFleet(write("version: 1\nfleet: pay\nsources:\n  - config: eu1.yml\n  - {config: us1.yml, relay: external}\n" + lakeYAML))
	if err != nil {
		t.Fatal(err)
	}
	if f.Sources[0].ExternalRelay() || !f.Sources[1].ExternalRelay() {
		t.Fatalf("relays: %q %q, want fleet external", f.Sources[0].Relay, f.Sources[1].Relay)
	}

	// Both in the fleet: the shared port is refused, as for local flows.
	if _, err := LoadFleet(write("version: 1\nfleet: pay\nsources:\n  - config: eu1.yml\n  - config: us1.yml\n" + lakeYAML)); err == nil || !strings.Contains(err.Error(), "sources[1].config") {
		t.Fatalf("two fleet relays on one port: %v", err)
	}
	_, err = LoadFleet(write("version: 1\nfleet: pay\nsources:\n  - {config: eu1.yml, relay: remote}\n" + lakeYAML + "run: {relays: elsewhere}\n"))
	for _, want := range []string{"sources[0].relay", "run.relays"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a bad relay placement: error does not name %s: %v", want, err)
		}
	}
}

// TestFleetSourcesNamedByTopic: a source may be named by its topic and a
// source id, with no flow config: its keys mean what trellara.yml's do
// (decoded by config.Parse), its relay is external, and every problem is
// reported under the fleet.yml key the user wrote. The database URL's
// password is in no error.
//
// Mutation: topicKey returning trellara.yml's own path (transport.kafka.mode)
// turns the key checks red.
func TestFleetSourcesNamedByTopic(t *testing.T) {
	dir := t.TempDir()
	kafkaFlow(t, dir, "us1", 19501)
	write := fleetWriter(t, dir)
	const eu1 = `  - id: eu1
    environment: development
    topic: cdc.eu1
    kafka: {brokers: [10.0.0.1:9092, 10.0.0.2:9092], profile: development, mode: partitioned, partitions: 6}
    database_url: {env: EU1_DATABASE_URL}
    tables: [public.accounts, '"Sales"."Orders"']
`
	f, err := LoadFleet(write("version: 1\nfleet: pay\nsources:\n" + eu1 + "  - config: us1.yml\n" + lakeYAML))
	if err != nil {
		t.Fatal(err)
	}
	s, ok := f.Source("eu1")
	if !ok {
		t.Fatalf("sources %v, want eu1", f.SourceIDs())
	}
	k := s.Kafka()
	if !s.ExternalRelay() || k == nil || k.Topic != "cdc.eu1" || strings.Join(k.Brokers, ",") != "10.0.0.1:9092,10.0.0.2:9092" ||
		string(k.Mode) != "partitioned" || k.Partitions != 6 || s.LogDir() != "" {
		t.Fatalf("eu1: external %v, kafka %+v, log dir %q", s.ExternalRelay(), k, s.LogDir())
	}
	if s.Flow.Source.Slot == "" || len(s.Flow.Source.Tables) != 2 || s.Flow.Source.Tables[1].String() != `"Sales"."Orders"` || s.Flow.Source.DatabaseURL.IsInline() {
		t.Fatalf("eu1's source: slot %q, tables %v, url inline %v", s.Flow.Source.Slot, s.Flow.Source.Tables, s.Flow.Source.DatabaseURL.IsInline())
	}
	if us1, _ := f.Source("us1"); us1.ExternalRelay() {
		t.Fatal("us1 (a flow config, run.relays default fleet) has an external relay")
	}

	for _, c := range []struct{ name, entry, want string }{
		{"relay in the fleet", eu1 + "    relay: fleet\n", "sources[0].relay"},
		{"no kafka", "  - {id: eu1, database_url: \"postgres://u:hunter2pw@db/x\", tables: [public.t]}\n", "sources[0].kafka"},
		{"a bad kafka value", strings.Replace(eu1, "mode: partitioned", "mode: sideways", 1), "sources[0].kafka.mode"},
		{"a bad table", strings.Replace(eu1, "public.accounts", "a.b.c.d", 1), "sources[0].tables"},
		{"config and topic keys", "  - {config: us1.yml, topic: cdc.us1}\n", "sources[0].topic"},
		{"neither", "  - {relay: external}\n", "sources[0].config"},
		{"the topic twice", strings.Replace(eu1, "profile: development,", "profile: development, topic: x,", 1), "sources[0].topic"},
	} {
		_, err := LoadFleet(write("version: 1\nfleet: pay\nsources:\n" + c.entry + lakeYAML))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "transport.kafka.") || strings.Contains(err.Error(), "hunter2pw") {
			t.Errorf("%s: error %v, want one naming %s (and no trellara.yml path, no password)", c.name, err, c.want)
		}
	}
}
