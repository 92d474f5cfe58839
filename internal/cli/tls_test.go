package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// tlsFiles makes a CA and a server certificate for 127.0.0.1 signed by
// it, in a directory the server's OS user can read: ca.crt, server.crt,
// server.key (0600, owned by that user when the test runs as root).
func tlsFiles(t *testing.T) (dir string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "trellara-tls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "trellara test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			u, err := user.Lookup("postgres")
			if err != nil {
				t.Fatal(err)
			}
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("ca.crt", "CERTIFICATE", caDER, 0o644)
	write("server.crt", "CERTIFICATE", srvDER, 0o644)
	write("server.key", "EC PRIVATE KEY", keyDER, 0o600)
	return dir
}

// The production TLS rule against a real TLS-only PostgreSQL (a CA made
// here; plaintext rejected by pg_hba): a production config with
// sslmode=verify-full and sslrootcert connects, over TLS; one without
// sslmode is refused by check and config validate, naming the key and the
// fix, before any connection reaches the server; a development config
// without verification still works and check says so in one line.
//
// Mutation tried: ResolveSecretsWith without checkTLS — the production
// config without sslmode is not refused (red; its connection is then
// rejected by pg_hba, after reaching the server).
func TestProductionTLSToPostgres(t *testing.T) {
	dir := tlsFiles(t)
	pg := pgtest.Start(t, pgtest.Options{NoFsync: true,
		Settings: map[string]string{"ssl": "on", "ssl_cert_file": filepath.Join(dir, "server.crt"), "ssl_key_file": filepath.Join(dir, "server.key"), "log_connections": "on"},
		// Role app may not connect in plaintext (pgtest's own connections,
		// as postgres, stay plaintext).
		HBA: []string{"hostnossl all app 127.0.0.1/32 reject"}})
	pg.CreateDB(t, "shop")
	pg.Exec(t, `CREATE ROLE app LOGIN SUPERUSER`)
	pg.ExecDB(t, "shop", `CREATE TABLE public.orders (id int PRIMARY KEY, v text)`)

	work := t.TempDir()
	cfgFor := func(env string) string {
		p := filepath.Join(work, env+".yml")
		body := fmt.Sprintf(`version: 2
environment: %s
flow: shop
source:
  id: shop
  database_url: {env: TLS_TEST_SOURCE_URL}
  tables: [public.orders]
transport:
  local: {dir: %s}
`, env, filepath.Join(work, "log"))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	prod, dev := cfgFor("production"), cfgFor("development")
	base := fmt.Sprintf("postgres://app@127.0.0.1:%d/shop", pg.Port())
	logText := func() string {
		b, err := os.ReadFile(pg.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	t.Setenv("TLS_TEST_SOURCE_URL", base+"?sslmode=verify-full&sslrootcert="+filepath.Join(dir, "ca.crt"))
	appTLS := regexp.MustCompile(`connection authorized: user=app database=shop .*SSL enabled`)
	before := len(appTLS.FindAllString(logText(), -1))
	if out, errOut, code := run(t, "check", "--config", prod); code == ExitError || strings.Contains(out, "without verified TLS") {
		t.Fatalf("check of a production config with verify-full: exit %d\n%s%s", code, out, errOut)
	}
	if len(appTLS.FindAllString(logText(), -1)) <= before {
		t.Errorf("check with verify-full made no TLS connection; server log:\n%s", logText())
	}

	t.Setenv("TLS_TEST_SOURCE_URL", base)
	before = strings.Count(logText(), "connection received")
	for _, args := range [][]string{{"check", "--config", prod}, {"config", "validate", "--config", prod}} {
		out, errOut, code := run(t, args...)
		if code == 0 || !strings.Contains(out+errOut, "source.database_url: has no sslmode") || !strings.Contains(out+errOut, "sslmode=verify-full&sslrootcert=") {
			t.Errorf("%s of a production config without sslmode: exit %d, want a refusal naming the key and the fix\n%s%s", args[0], code, out, errOut)
		}
	}
	if after := strings.Count(logText(), "connection received"); after != before {
		t.Errorf("the refused production config reached the server (%d connections before, %d after)", before, after)
	}

	// Evaluation without verification: works, and says so.
	t.Setenv("TLS_TEST_SOURCE_URL", base+"?sslmode=require")
	out, errOut, code := run(t, "check", "--config", dev)
	if code == ExitError || strings.Count(out, "source.database_url connect without verified TLS") != 1 {
		t.Errorf("check of a development config with sslmode=require: exit %d, want it to work and note the plaintext risk once\n%s%s", code, out, errOut)
	}
}
