package config

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestRedactEverySecretField: each credential field, in every form it can
// take, is absent from the redacted copy, while references and the
// information support needs are kept.
func TestRedactEverySecretField(t *testing.T) {
	in := `# Old password: CommentPw1 (rotated)
version: 2
environment: development
flow: sales
source:
  id: store_001
  database_url: postgres://app_user:SrcPw1%40x@db.internal:5432/sales?sslmode=require&password=QueryPw1&sslpassword=SslPw1
  publication: trellara_sales
  tables: [public.sales]   # db was postgres://old:CommentPw2@old/sales
transport:
  kafka:
    brokers: [kafka-1:9093]
    tls: {ca_file: /etc/trellara/ca.pem, cert_file: /etc/trellara/c.pem, key_file: /etc/trellara/c.key}
    sasl:
      mechanism: SCRAM-SHA-512
      username: trellara
      password: KafkaPw1
target:
  database_url: "host=target.internal port=5432 dbname=analytics user=tgt_user password='Tgt Pw1' sslmode=verify-full sslkey=/k sslpassword=TgtKeyPw1"
  mode: strict
extra:
  api_token: ApiTok1
  clientSecret: ClientSec1
  passphrase: Phrase1
  private_key: |
    -----BEGIN PRIVATE KEY-----
    PrivKeyBody1
    -----END PRIVATE KEY-----
  credentials: [Cred1, Cred2]
  pwd: Pwd1
  ssl-key: SslKey1
  apiKey: ApiKey1
  note: "connect with password=NotePw1 please"
  legacy: admin:LegacyPw1@legacy.internal:5432
  webhook: https://hooks.example.com/services/T000/HookTok1?sig=HookSig1
  env_ref_password: {env: TRELLARA_KAFKA_PASSWORD}
  file_ref_token: {file: /etc/trellara/token}
  not_a_ref_password: {env: "Bad Pw1"}
  anchor_src: &pw AnchorPw1
  secret_alias: *pw
  blob: !!binary QmluYXJ5UHcx
`
	out, err := Redact([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, secret := range []string{
		"CommentPw1", "CommentPw2", "app_user", "SrcPw1", "QueryPw1", "SslPw1", "KafkaPw1", "tgt_user", "Tgt Pw1",
		"TgtKeyPw1", "ApiTok1", "ClientSec1", "Phrase1", "PrivKeyBody1", "BEGIN PRIVATE KEY", "Cred1", "Cred2",
		"Pwd1", "SslKey1", "ApiKey1", "NotePw1", "admin", "LegacyPw1", "HookTok1", "HookSig1", "Bad Pw1",
		"AnchorPw1", "QmluYXJ5UHcx",
	} {
		if strings.Contains(got, secret) {
			t.Errorf("redacted output contains %q:\n%s", secret, got)
		}
	}
	for _, keep := range []string{
		"postgres://<redacted>@db.internal:5432/sales?sslmode=require&password=<redacted>&sslpassword=<redacted>",
		"host=target.internal port=5432 dbname=analytics user=<redacted> password=<redacted> sslmode=verify-full sslkey=<redacted> sslpassword=<redacted>",
		"password: <redacted>", "{env: TRELLARA_KAFKA_PASSWORD}", "{file: /etc/trellara/token}",
		"key_file: /etc/trellara/c.key", "username: trellara", "https://hooks.example.com/<redacted>?<redacted>",
		"<redacted>@legacy.internal:5432", "password=<redacted> please", "flow: sales",
	} {
		if !strings.Contains(got, keep) {
			t.Errorf("redacted output lacks %q:\n%s", keep, got)
		}
	}
	// Still YAML, and stable: redacting twice changes nothing more.
	var n yaml.Node
	if err := yaml.Unmarshal(out, &n); err != nil {
		t.Fatalf("output is not YAML: %v\n%s", err, got)
	}
	again, err := Redact(out)
	if err != nil || !bytes.Equal(again, out) {
		t.Errorf("redact not idempotent (%v):\n%s\n---\n%s", err, out, again)
	}
}

// TestRedactKeepsReferenceConfig: a configuration holding only references
// means the same thing after redaction.
func TestRedactKeepsReferenceConfig(t *testing.T) {
	for _, name := range []string{"local.yml", "kafka-production.yml"} {
		in := readTestdata(t, name)
		out, err := Redact([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		a, err := Parse([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Parse(out)
		if err != nil {
			t.Fatalf("%s: redacted copy does not parse: %v\n%s", name, err, out)
		}
		ma, _ := Marshal(a)
		mb, _ := Marshal(b)
		if !bytes.Equal(ma, mb) {
			t.Errorf("%s: meaning changed:\n%s\n---\n%s", name, ma, mb)
		}
	}
}

func TestScrubScalar(t *testing.T) {
	tests := []struct {
		in, want string
		secrets  []string
	}{
		{"postgres://u:p4ss@h:5432/db", "postgres://<redacted>@h:5432/db", []string{"p4ss", "u:"}},
		{"postgresql://h/db?sslmode=disable", "postgresql://h/db?sslmode=disable", nil},
		{"postgres://u:p/a?s#s@w@h/db", "postgres://<redacted>@h/db", []string{"p/a", "s#s", "s@w"}},
		{"postgres://u:pa ss@h/db", "postgres://<redacted>@h/db", []string{"pa ss", "pa", "ss@"}},
		{"postgres://u:pw@h1:5432,h2:5433/db?target_session_attrs=read-write", "postgres://<redacted>@h1:5432,h2:5433/db?target_session_attrs=read-write", []string{"pw"}},
		{"postgres://h/db?user=u&password=pw&weird", "postgres://h/db?user=<redacted>&password=<redacted>&<redacted>", []string{"pw", "weird"}},
		{"postgres:///db?host=/var/run/postgresql", "postgres:///db?host=/var/run/postgresql", nil},
		{"postgres://h/db?dbname=host%3Dx%20password%3Dpw", "postgres://h/db?dbname=<redacted>", []string{"pw"}},
		{"postgres://h/a=b", "postgres://h/<redacted>", nil},
		{"postgres://h/db#frag", "postgres://h/db#<redacted>", []string{"frag"}},
		{"host=h dbname=d user=u password=pw", "host=h dbname=d user=<redacted> password=<redacted>", []string{"pw", "=u"}},
		{"host = h  password = 'p w\\' x'", "host=h password=<redacted>", []string{"p w", "x'"}},
		{`password=p\ w host=h`, "password=<redacted> host=h", []string{"p\\", " w"}},
		{"dbname='host=x password=pw' host=h", "dbname=<redacted> host=h", []string{"pw"}},
		{"password='unterminated pw", "password=<redacted>", []string{"unterminated", "pw"}},
		{"service=prod", "service=<redacted>", []string{"prod"}},
		{"a=b c=d", "a=b c=d", nil},
		{"https://u:pw@api.example.com/v1/tok?k=v", "https://<redacted>@api.example.com/<redacted>?<redacted>", []string{"pw", "tok", "k=v"}},
		{"https://example.com/", "https://example.com/", nil},
		{"see postgres://u:pw@h/db and more", "see postgres://<redacted>@h/db and more", []string{"pw"}},
		{"u:pw@h:5432/db", "<redacted>@h:5432/db", []string{"pw"}},
		{"token: abc123", "token: <redacted>", []string{"abc123"}},
		{"my_api_key=\"abc 123\" rest", "my_api_key=<redacted> rest", []string{"abc"}},
		{"trellara_sales", "trellara_sales", nil},
		{"/var/lib/trellara/sales", "/var/lib/trellara/sales", nil},
		{"ops@example.com", "ops@example.com", nil},
		{":9401", ":9401", nil},
		{"SCRAM-SHA-512", "SCRAM-SHA-512", nil},
	}
	for _, tc := range tests {
		got := scrubScalar(tc.in)
		if got != tc.want {
			t.Errorf("scrubScalar(%q)\n got  %q\n want %q", tc.in, got, tc.want)
		}
		for _, s := range tc.secrets {
			if strings.Contains(got, s) {
				t.Errorf("scrubScalar(%q) = %q still contains %q", tc.in, got, s)
			}
		}
	}
}

func TestIsSecretKey(t *testing.T) {
	secret := []string{"password", "sasl_password", "Password", "passwd", "pwd", "pass", "passphrase", "token",
		"api_token", "accessToken", "secret", "client_secret", "key", "ssl-key", "private_key", "privateKey",
		"apiKey", "api_key", "credentials", "keys"}
	plain := []string{"key_file", "keyFile", "password_file", "token_path", "secret_dir", "password_env", "username",
		"database_url", "keyspace", "monkey", "mechanism", "slot", "env", "file", "tables", ""}
	for _, k := range secret {
		if !isSecretKey(k) {
			t.Errorf("isSecretKey(%q) = false", k)
		}
	}
	for _, k := range plain {
		if isSecretKey(k) {
			t.Errorf("isSecretKey(%q) = true", k)
		}
	}
}

func TestRedactErrors(t *testing.T) {
	for _, in := range []string{"a: [\n", "a: 'PwInBadYaml\n"} {
		_, err := Redact([]byte(in))
		if err == nil || !strings.HasPrefix(err.Error(), "config: ") || !strings.Contains(err.Error(), "invalid YAML") {
			t.Errorf("Redact(%q) error = %v", in, err)
		}
		if err != nil && strings.Contains(err.Error(), "PwInBadYaml") {
			t.Errorf("error echoes input: %v", err)
		}
	}
	if _, err := Redact(make([]byte, maxConfigBytes+1)); err == nil {
		t.Error("oversized input accepted")
	}
	// Any YAML is accepted, configuration or not, and multiple documents too.
	out, err := Redact([]byte("a: 1\n---\npassword: x\n"))
	if err != nil || strings.Contains(string(out), ": x") || !strings.Contains(string(out), "---") {
		t.Errorf("multi-document: %v\n%s", err, out)
	}
}

// ScrubConnText removes a connection string's credentials by structure and
// leaves the rest of the text alone: a short password ("a") or one that is
// a common word is never cut out of ordinary words.
func TestScrubConnTextStructural(t *testing.T) {
	for _, tc := range []struct {
		name, conn, text string
		keep             []string // must survive verbatim
		gone             []string // must not appear
	}{
		{
			name: "one-letter password",
			conn: "postgres://app:a@db.internal:5432/sales",
			text: "failed to connect to `user=app database=sales`: server error: FATAL: password authentication failed for user \"app\" (via postgres://app:a@db.internal:5432/sales)",
			keep: []string{"failed to connect to `user=app database=sales`", "FATAL: password authentication failed for user \"app\"", "postgres://<redacted>@db.internal:5432/sales"},
			gone: []string{"app:a@"},
		},
		{
			name: "password that is a common word",
			conn: "postgres://app:failed@db.internal/sales?sslmode=require",
			text: "connect failed: postgres://app:failed@db.internal/sales?sslmode=require: authentication failed",
			keep: []string{"connect failed: ", ": authentication failed", "db.internal/sales?sslmode=require"},
			gone: []string{"app:failed@"},
		},
		{
			name: "keyword/value with a one-letter password",
			conn: "host=db.internal user=app password=a dbname=sales",
			text: "cannot parse `host=db.internal user=app password=a dbname=sales`: a failure",
			keep: []string{"cannot parse `", "host=db.internal", "dbname=sales", "`: a failure"},
			gone: []string{"password=a "},
		},
		{
			name: "raw space inside the URL's password: the whole string is replaced",
			conn: "postgres://app:pa ss@db.internal/sales",
			text: "dial postgres://app:pa ss@db.internal/sales: refused",
			keep: []string{"dial postgres://<redacted>@db.internal/sales: refused"},
			gone: []string{"pa ss", "ss@"},
		},
		{
			name: "another URL in the text is scrubbed by its structure",
			conn: "postgres://app:a@db.internal/sales",
			text: "retry against postgres://other:Secret9@replica.internal/sales failed",
			keep: []string{"retry against postgres://<redacted>@replica.internal/sales failed"},
			gone: []string{"Secret9"},
		},
		{
			name: "no connection string in the text: unchanged",
			conn: "postgres://app:a@db.internal/sales",
			text: "a transaction failed at 0/16B3748 (a table was altered)",
			keep: []string{"a transaction failed at 0/16B3748 (a table was altered)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ScrubConnText(tc.text, tc.conn)
			for _, k := range tc.keep {
				if !strings.Contains(got, k) {
					t.Errorf("lost %q:\n%s", k, got)
				}
			}
			for _, g := range tc.gone {
				if strings.Contains(got, g) {
					t.Errorf("still holds %q:\n%s", g, got)
				}
			}
		})
	}

	base := errors.New("dial postgres://app:a@db.internal/sales: refused")
	err := ScrubConnError(fmt.Errorf("connect: %w", base), "postgres://app:a@db.internal/sales")
	if !errors.Is(err, base) || strings.Contains(err.Error(), "app:a@") {
		t.Errorf("ScrubConnError: %v (errors.Is %v)", err, errors.Is(err, base))
	}
	plain := errors.New("nothing to hide")
	if ScrubConnError(plain, "postgres://app:a@db.internal/sales") != plain {
		t.Error("an error with nothing to scrub was replaced")
	}
}
