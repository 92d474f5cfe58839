package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestJudgeTopic: each rule of the live topic check, alone.
func TestJudgeTopic(t *testing.T) {
	good := map[string]string{"min.insync.replicas": "2", "cleanup.policy": "delete",
		"max.message.bytes": "8388608", "retention.ms": "604800000", "retention.bytes": "-1"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	cfg := Config{Flow: "sales", Kafka: &Options{Topic: "trellara.sales", ReplicationFactor: 3, MinInsyncReplicas: 2}}
	tests := []struct {
		name       string
		partitions int
		rf         int
		vals       map[string]string
		refuse     string
		warn       string
	}{
		{"good", 1, 3, good, "", ""},
		{"partitions", 3, 3, good, "partitions", ""},
		{"replication factor", 1, 2, good, "replication.factor", ""},
		{"min isr below config", 1, 3, with("min.insync.replicas", "1"), "min.insync.replicas", ""},
		{"min isr above replicas", 1, 3, with("min.insync.replicas", "4"), "min.insync.replicas", ""},
		{"compacted", 1, 3, with("cleanup.policy", "compact,delete"), "cleanup.policy", ""},
		{"max message bytes", 1, 3, with("max.message.bytes", "1048588"), "max.message.bytes", ""},
		{"short retention", 1, 3, with("retention.ms", "3600000"), "", "retention.ms"},
		{"small retention bytes", 1, 3, with("retention.bytes", "1000000"), "", "retention.bytes"},
		{"infinite retention", 1, 3, with("retention.ms", "-1"), "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			refuse, warn := judgeTopic(cfg, tc.partitions, tc.rf, tc.vals)
			keys := func(ps []TopicProblem) string {
				var s []string
				for _, p := range ps {
					if p.Fix == "" || p.Message == "" {
						t.Errorf("problem without message or fix: %+v", p)
					}
					s = append(s, p.Key)
				}
				return strings.Join(s, ",")
			}
			if got := keys(refuse); got != tc.refuse {
				t.Errorf("refused %q, want %q", got, tc.refuse)
			}
			if got := keys(warn); got != tc.warn {
				t.Errorf("warned %q, want %q", got, tc.warn)
			}
		})
	}
}

// TestCheckTopicLive: against a cluster, a created topic passes with RF 3,
// and an existing topic with kfake's defaults (three partitions here,
// min.insync.replicas 1, max.message.bytes 1 MiB) is refused by name.
func TestCheckTopicLive(t *testing.T) {
	c := cluster(t, kfake.SeedTopics(3, "bad"))
	cfg := testConfig(c)
	ctx := testCtx(t)
	if _, err := CheckTopic(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckTopic(ctx, cfg); err != nil {
		t.Fatalf("second check of the created topic: %v", err)
	}
	bad := cfg
	k := *cfg.Kafka
	k.Topic = "bad"
	bad.Kafka = &k
	_, err := CheckTopic(ctx, bad)
	var te *TopicError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want *TopicError", err)
	}
	var keys []string
	for _, p := range te.Problems {
		keys = append(keys, p.Key)
	}
	if got := strings.Join(keys, ","); got != "partitions,min.insync.replicas,max.message.bytes" {
		t.Fatalf("refused %s, want partitions,min.insync.replicas,max.message.bytes:\n%v", got, err)
	}
}

// TestSCRAMOverTLS: the production contract's connection (TLS verified
// against a CA file, SASL SCRAM-SHA-512 with the password by reference)
// against a three-broker cluster that requires both.
func TestSCRAMOverTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, serverCert := selfSigned(t, dir)
	c := cluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "trellara", "s3cret-pw"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}}))
	cfg := testConfig(c)
	t.Setenv("TRELLARA_TEST_KAFKA_PASSWORD", "s3cret-pw")
	cfg.Kafka.TLS = &TLS{CAFile: caFile}
	cfg.Kafka.SASL = &SASL{Mechanism: SASLScramSHA512, Username: "trellara",
		PasswordFunc: func() (string, error) { return os.Getenv("TRELLARA_TEST_KAFKA_PASSWORD"), nil }}
	ctx := testCtx(t)
	if _, err := CheckTopic(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := envelopes(t, 0x1000, 3)
	if err := p.PublishBatch(ctx, want); err != nil {
		t.Fatal(err)
	}
	if _, got := readAll(t, cfg, 3); string(got[2]) != string(want[2]) {
		t.Fatal("round trip over SCRAM+TLS differs")
	}

	// A wrong password is refused by the cluster.
	t.Setenv("TRELLARA_TEST_KAFKA_PASSWORD", "wrong")
	if _, err := CheckTopic(ctx, cfg); err == nil {
		t.Fatal("a wrong SCRAM password was accepted")
	}
}

// selfSigned writes a CA certificate for 127.0.0.1 to dir and returns its
// path and the matching server certificate.
func selfSigned(t *testing.T, dir string) (string, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kfake"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return path, cert
}
