package lake

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeS3Flow writes a minimal flow config a.yml in dir (environment env)
// and returns fleet.yml's path there.
func writeS3Flow(t *testing.T, dir, env string) string {
	t.Helper()
	flow := "version: 2\nflow: a\n" + env + "source: {id: a, database_url: {env: SRC_URL}, owns_slot: true, tables: [public.t]}\ntransport: {local: {dir: data}}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yml"), []byte(flow), 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "fleet.yml")
}

// TestFleetS3Keys: lake.s3 maps to iceberg-go's properties, the key pair
// by reference; the secret is in S3Props only.
//
// Mutation, tried once and red: path_style passed through unnegated
// (s3.force-virtual-addressing = path_style).
func TestFleetS3Keys(t *testing.T) {
	dir := t.TempDir()
	fy := writeS3Flow(t, dir, "")
	t.Setenv("S3_KEY", "AKIDEXAMPLE")
	t.Setenv("S3_SECRET", "s3cret-value-not-to-be-shown-0123")
	body := `version: 1
fleet: f
sources: [{config: a.yml}]
lake:
  catalog: {kind: sql-sqlite, uri: c.db}
  warehouse: s3://bucket/prefix
  s3:
    endpoint: http://127.0.0.1:9000
    region: us-east-1
    path_style: true
    access_key_id: {env: S3_KEY}
    secret_access_key: {env: S3_SECRET}
`
	if err := os.WriteFile(fy, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := LoadFleet(fy)
	if err != nil {
		t.Fatal(err)
	}
	props, err := f.Lake.S3.S3Props()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"s3.endpoint": "http://127.0.0.1:9000", "s3.region": "us-east-1", "s3.force-virtual-addressing": "false",
		"s3.access-key-id": "AKIDEXAMPLE", "s3.secret-access-key": "s3cret-value-not-to-be-shown-0123"}
	for k, v := range want {
		if props[k] != v {
			t.Errorf("%s = %q, want %q", k, props[k], v)
		}
	}
	if s := strings.Join([]string{f.Lake.S3.SecretAccessKey.String(), fmt.Sprintf("%+v %#v", f.Lake, f.Lake.S3)}, " "); strings.Contains(s, "s3cret-value") {
		t.Fatalf("the fleet's printed form shows the secret: %s", s)
	}
	t.Setenv("S3_SECRET", "")
	os.Unsetenv("S3_SECRET")
	if _, err := f.Lake.S3.S3Props(); err == nil || !strings.Contains(err.Error(), "lake.s3.secret_access_key") {
		t.Fatalf("an unset secret variable: %v, want an error naming lake.s3.secret_access_key", err)
	}
}

// TestFleetS3Refusals: each misuse of lake.s3 names its key and the fix,
// never the inline secret.
//
// Mutation, tried once and red: validate without d.validateS3(f) (every
// case but the unknown key and the non-bool path_style passes).
func TestFleetS3Refusals(t *testing.T) {
	for _, c := range []struct{ name, env, lake, want string }{
		{"s3 keys on a file warehouse", "", "  warehouse: file:///w\n  s3: {region: us-east-1}\n", "lake.s3: lake.s3 configures an s3:// warehouse"},
		{"half a key pair", "", "  warehouse: s3://b/p\n  s3: {region: us-east-1, access_key_id: {env: K}}\n", "only one of access_key_id and secret_access_key"},
		{"endpoint without region", "", "  warehouse: s3://b/p\n  s3: {endpoint: \"http://127.0.0.1:9000\"}\n", "lake.s3.region"},
		{"endpoint not a URL", "", "  warehouse: s3://b/p\n  s3: {endpoint: \"127.0.0.1:9000\", region: r}\n", "lake.s3.endpoint"},
		{"endpoint with credentials", "", "  warehouse: s3://b/p\n  s3: {endpoint: \"http://AKID:SeCrEtInUrl99@h:9000\", region: r}\n", "the endpoint URL carries credentials"},
		{"path_style not a bool", "", "  warehouse: s3://b/p\n  s3: {path_style: maybe}\n", "lake.s3.path_style"},
		{"unknown key", "", "  warehouse: s3://b/p\n  s3: {secret: x}\n", "lake.s3.secret: unknown key"},
		{"twice, in properties too", "", "  warehouse: s3://b/p\n  s3: {region: r}\n  properties: {s3.region: r}\n", "lake.properties.s3.region"},
		{"inline secret in production", "environment: production\n", "  warehouse: s3://b/p\n  s3: {access_key_id: {env: K}, secret_access_key: SeCrEtInLine99}\n", "lake.s3.secret_access_key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fy := writeS3Flow(t, dir, c.env)
			body := "version: 1\nfleet: f\nsources: [{config: a.yml}]\nlake:\n  catalog: {kind: sql-sqlite, uri: c.db}\n" + c.lake
			if err := os.WriteFile(fy, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadFleet(fy)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "SeCrEt") {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}
