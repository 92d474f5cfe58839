package pilot

import (
	"errors"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/config"
)

// The package's last guard finds a credential in every encoding a file
// may hold it, finds a short password where credentials go without
// false alarms elsewhere, and names a password that is also a table name
// as a collision with data, with what to do — never as a bug.
//
// Mutations tried: encodings returning only the raw form (the JSON, HTML
// and percent-encoded cases go green-to-red); shortSecretBytes scanning
// skipped as before (the short-password leak passes: red); onlyAsName
// returning false (the collision is called a bug: red).
func TestScanSecretsEncodingsAndCollisions(t *testing.T) {
	const pw = `Pw-7rX9!q<&"x`
	src := config.NewSecret("postgres://app:" + "Pw-7rX9%21q%3C%26%22x" + "@db:5432/sales")
	for _, c := range []struct {
		name, file, data string
		sec              config.Secrets
		want             error
		says             string
	}{
		{"raw", "status.json", "auth failed for " + pw + " today", config.Secrets{SourceDatabaseURL: src}, ErrSecret, "the password of source.database_url"},
		{"json-escaped", "status.json", `{"error": "auth failed: Pw-7rX9!q\u003c\u0026\"x"}`, config.Secrets{SourceDatabaseURL: src}, ErrSecret, "report this as a bug"},
		{"json-escaped, no html escapes", "status.json", `{"error": "auth failed: Pw-7rX9!q<&\"x"}`, config.Secrets{SourceDatabaseURL: src}, ErrSecret, "source.database_url"},
		{"html-escaped", "chaos/report.html", `<td>Pw-7rX9!q&lt;&amp;&#34;x</td>`, config.Secrets{SourceDatabaseURL: src}, ErrSecret, "source.database_url"},
		{"html-escaped, &quot;", "chaos/report.html", `<td>Pw-7rX9!q&lt;&amp;&quot;x</td>`, config.Secrets{SourceDatabaseURL: src}, ErrSecret, "source.database_url"},
		{"percent-encoded", "status.json", `{"u": "https://x/?p=Pw-7rX9%21q%3C%26%22x"}`, config.Secrets{SourceDatabaseURL: src}, ErrSecret, "source.database_url"},
		{"a JSON password value", "status.json", `{"password": "Pw-7rX9!q\u003c\u0026\"x"}`, config.Secrets{SourceDatabaseURL: src}, ErrSecret, "report this as a bug"},
		{"sink", "status.json", "x Sink-Pw-1 y", config.Secrets{SinkDatabaseURLs: map[string]config.Secret{"reporting": config.NewSecret("postgres://r:Sink-Pw-1@r/db")}}, ErrSecret, "sink reporting's database_url"},
		{"kafka", "status.json", "x Kafka-Pw-1 y", config.Secrets{KafkaSASLPassword: config.NewSecret("Kafka-Pw-1")}, ErrSecret, "transport.kafka.sasl.password"},
		{"short, in a URL", "status.json", `{"dsn": "postgres://app:ab@db/sales"}`, config.Secrets{SourceDatabaseURL: config.NewSecret("postgres://app:ab@db/sales")}, ErrSecret, "source.database_url"},
		{"short, in a conninfo", "status.json", `{"dsn": "host=db password=ab dbname=x"}`, config.Secrets{SourceDatabaseURL: config.NewSecret("postgres://app:ab@db/sales")}, ErrSecret, "the password of source.database_url"},
		{"short, as text", "status.json", `{"note": "about tables, labs and crabs"}`, config.Secrets{SourceDatabaseURL: config.NewSecret("postgres://app:ab@db/sales")}, nil, ""},
		{"a table named like the password, and the password encoded elsewhere", "check.json", `{"tables": [{"table": "public.Pw-7rX9!q"}], "note": "retry with Pw-7rX9%21q"}`,
			config.Secrets{SourceDatabaseURL: config.NewSecret("postgres://app:Pw-7rX9%21q@db/sales")}, ErrSecret, "report this as a bug"},
		{"a table named like the password", "check.json", `{"tables": [{"table": "public.Pw-7rX9!q"}, {"table": "\"Pw-7rX9!q\".t"}]}`,
			config.Secrets{SourceDatabaseURL: config.NewSecret("postgres://app:Pw-7rX9%21q@db/sales")}, ErrDataCollision, "Change the password"},
	} {
		p := &Package{Files: map[string][]byte{}}
		p.Put(c.file, "f", []byte(c.data))
		err := scanSecrets(p, c.sec)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: %v, want no alarm", c.name, err)
		case c.want != nil && (!errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), c.file)):
			t.Errorf("%s: %v, want %v naming %s and %q", c.name, err, c.want, c.file, c.says)
		case err != nil && (strings.Contains(err.Error(), "Pw-7rX9") || strings.Contains(err.Error(), ":ab@")):
			t.Errorf("%s: the error shows the credential: %v", c.name, err)
		case errors.Is(err, ErrDataCollision) && strings.Contains(err.Error(), "bug"):
			t.Errorf("%s: a collision with data called a bug: %v", c.name, err)
		}
	}
}
