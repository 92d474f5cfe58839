package config

import (
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The five shapes of issue 30 (a credential typed where a reference
// belongs), and one more: the credential as a reference's key.
var credentialShapes = []string{
	`{env: "Pw-7rX9!q"}`,
	`{file: "Pw-7rX9!q"}`,
	`Pw-7rX9!q`,
	`{env: ["Pw-7rX9!q"]}`,
	`{file: {x: "Pw-7rX9!q"}}`,
	`{"Pw-7rX9!q": x}`,
}

// credentialConfig is a production trellara.yml with shape at one
// credential position.
func credentialConfig(position, shape string) string {
	v := map[string]string{"source": "{env: TRELLARA_SOURCE_URL}", "target": "{env: TRELLARA_TARGET_URL}",
		"sink": "{env: TRELLARA_REPORTING_URL}", "kafka": "{env: TRELLARA_KAFKA_PASSWORD}"}
	v[position] = shape
	return fmt.Sprintf(`version: 2
environment: production
flow: sales
source:
  id: store_001
  database_url: %s
  tables: [public.sales]
transport:
  kafka:
    brokers: [kafka-1:9093, kafka-2:9093, kafka-3:9093]
    profile: production
    tls: {ca_file: /etc/trellara/kafka/ca.pem}
    sasl: {mechanism: SCRAM-SHA-512, username: trellara, password: %s}
sinks:
  main:
    target: {database_url: %s}
  reporting:
    target: {database_url: %s}
    listen: 127.0.0.1:9403
`, v["source"], v["kafka"], v["target"], v["sink"])
}

// Every shape at every credential position — source, target, a sink,
// Kafka's SASL password, fleet.yml's lake catalog URI — is absent from
// config redact's copy and from every error validate, resolve and the
// fleet decoder give.
//
// Mutation tried: redactNode testing isSecretKey (0335858's rule) instead
// of IsCredentialKey — the database_url and uri shapes are printed (red);
// and the decoder echoing a reference's unknown key (red for the last
// shape).
func TestCredentialShapesNeverShown(t *testing.T) {
	const pw = "Pw-7rX9"
	for _, shape := range credentialShapes {
		for _, pos := range []string{"source", "target", "sink", "kafka"} {
			in := credentialConfig(pos, shape)
			out, err := Redact([]byte(in))
			if err != nil {
				t.Fatalf("%s at %s: redact: %v", shape, pos, err)
			}
			if strings.Contains(string(out), pw) {
				t.Errorf("%s at %s: config redact prints it:\n%s", shape, pos, out)
			}
			var msgs []string
			c, err := Parse([]byte(in))
			if err != nil {
				msgs = append(msgs, err.Error())
			} else {
				_, err := c.ResolveSecretsWith(fakeResolver{env: map[string]string{"TRELLARA_SOURCE_URL": "postgres://h/db",
					"TRELLARA_TARGET_URL": "postgres://t/db", "TRELLARA_REPORTING_URL": "postgres://r/db", "TRELLARA_KAFKA_PASSWORD": "k"}})
				if err == nil {
					t.Errorf("%s at %s: validated and resolved", shape, pos)
					continue
				}
				msgs = append(msgs, err.Error())
				msgs = append(msgs, fmt.Sprintf("%v %+v %s", c.Source, c.Sinks, c.Transport.Kafka.SASL.Password))
			}
			for _, m := range msgs {
				if strings.Contains(m, pw) {
					t.Errorf("%s at %s: an error or rendering shows it: %s", shape, pos, m)
				}
			}
		}
		fleet := "version: 1\nfleet: f\nsources: []\nlake:\n  catalog: {kind: sql-postgres, uri: " + shape + "}\n  warehouse: file:///w\n"
		out, err := Redact([]byte(fleet))
		if err != nil || strings.Contains(string(out), pw) {
			t.Errorf("%s at lake.catalog.uri: redact %v:\n%s", shape, err, out)
		}
		_, errs := DecodeSecretRef("lake.catalog.uri", mustNode(t, shape))
		for _, e := range errs {
			if strings.Contains(e.Message, pw) || strings.Contains(e.Fix, pw) {
				t.Errorf("%s at lake.catalog.uri: %s (%s)", shape, e.Message, e.Fix)
			}
		}
	}
}

// A connection string in a connection position keeps what support needs;
// a reference is kept whole.
func TestRedactConnectionPositionsKeepStructure(t *testing.T) {
	in := `database_url: postgres://app:Secret1@db.internal:5432/sales?sslmode=verify-full
uri: "host=cat.internal dbname=catalog password=Secret2"
webhook_url: https://hooks.example.com/T000/Secret3
sink_url: {env: TRELLARA_SINK_URL}
catalog_uri: {file: /etc/trellara/catalog-uri}
note_uri: not a url Secret4
`
	out, err := Redact([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Secret1", "Secret2", "Secret3", "Secret4", "app"} {
		if strings.Contains(string(out), s) {
			t.Errorf("redacted copy holds %s:\n%s", s, out)
		}
	}
	for _, keep := range []string{"postgres://<redacted>@db.internal:5432/sales?sslmode=verify-full", "host=cat.internal dbname=catalog password=<redacted>",
		"https://hooks.example.com/<redacted>", "{env: TRELLARA_SINK_URL}", "{file: /etc/trellara/catalog-uri}", "note_uri: <redacted>"} {
		if !strings.Contains(string(out), keep) {
			t.Errorf("redacted copy lacks %q:\n%s", keep, out)
		}
	}
}

func mustNode(t *testing.T, s string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("v: "+s), &n); err != nil {
		t.Fatal(err)
	}
	return n.Content[0].Content[1]
}
