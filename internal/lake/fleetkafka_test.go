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

// TestFleetKafkaSourcesAndExternalRelays: a fleet may name
// transport.kafka flows; run.relays sets where relays run, a source's
// relay overrides it; external relays may share ports (they are not in
// the fleet process); a bad placement is refused by key.
func TestFleetKafkaSourcesAndExternalRelays(t *testing.T) {
	dir := t.TempDir()
	kafkaFlow(t, dir, "eu1", 19501)
	kafkaFlow(t, dir, "us1", 19501) // the same relay port as eu1
	write := func(body string) string {
		p := filepath.Join(dir, "fleet.yml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const lakeYAML = "lake:\n  catalog: {kind: sql-sqlite, uri: cat.db}\n  warehouse: file:///tmp/w\n"

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
