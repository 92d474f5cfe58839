// Package kafka is the Kafka transport (trellara-full): the relay publishes
// through Producer (capture.Transport) and the applier reads through Reader
// (apply.Source, apply.Rewinder, apply.Cursor), over franz-go.
//
// Strict mode: one flow is one topic with one partition, so the partition's
// order is the source's commit order and a record's Kafka offset plays the
// role of the local log's offset: the applier stores it in the target
// checkpoint, in the same transaction as the data, and resumes from it.
// The consumer-group offset is committed after the target commit, for lag
// monitoring only; it is never the position of record.
//
// Partitioned mode (partitioned.go, assemble.go, package manifest): rows
// go to N data partitions by a hash of table and key, a manifest per unit
// to partition 0; the reader holds each unit at the manifest barrier until
// all its chunks have arrived and hands out the whole envelope at the
// manifest's offset, which is then the checkpoint's offset.
//
// Only the full edition imports this package, so franz-go stays out of the
// default binary (go list -deps ./cmd/trellara).
package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Partition is the one partition a strict-mode flow writes and reads.
const Partition int32 = 0

// MaxRecordBytes is the largest record the producer sends, and the least
// max.message.bytes the topic must allow. The relay splits a transaction
// into CHUNK envelopes of at most 4 MiB of row data and snapshot batches
// are bounded the same way; the rest of the bound is room for an
// envelope's relation metadata and the record batch framing. A larger
// envelope is refused by the producer (MESSAGE_TOO_LARGE), never cut.
const MaxRecordBytes = 8 << 20

// Record header keys. The value bytes are the envelope, unchanged; the
// headers let tools route and inspect records without decoding it.
const (
	HeaderFlow      = "trellara-flow"
	HeaderSource    = "trellara-source"
	HeaderCommitLSN = "trellara-commit-lsn" // X/X, as PostgreSQL prints an LSN
	HeaderChecksum  = "trellara-checksum"   // the envelope's xxh3_64 checksum, 16 hex digits
)

// Config is what the transport needs of a flow.
type Config struct {
	Flow     string
	SourceID string
	Kafka    *Options
	// ConfigPath is named in errors' fixes.
	ConfigPath string
	// Logger receives the reader's warnings (a unit held at the manifest
	// barrier); nil means slog.Default().
	Logger *slog.Logger

	// extra options for every client (tests: a short metadata age so a
	// leader move is seen at once).
	extra []kgo.Opt
}

func (c Config) topic() string { return c.Kafka.Topic }

// clientOpts are the connection options shared by every client of a flow:
// brokers, TLS and SASL. Credentials are resolved here, at connect time,
// and never logged.
func clientOpts(c Config) ([]kgo.Opt, error) {
	k := c.Kafka
	opts := []kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.ClientID("trellara-" + c.Flow),
	}
	opts = append(opts, c.extra...)
	if t := k.TLS; t != nil {
		tc, err := tlsConfig(t)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if s := k.SASL; s != nil {
		pw, err := s.password()
		if err != nil {
			return nil, fmt.Errorf("kafka: flow %q: transport.kafka.sasl.password: %w", c.Flow, err)
		}
		switch s.Mechanism {
		case SASLScramSHA256:
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: pw}.AsSha256Mechanism()))
		case SASLScramSHA512:
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: pw}.AsSha512Mechanism()))
		case SASLPlain:
			opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: pw}.AsMechanism()))
		default:
			return nil, fmt.Errorf("kafka: flow %q: SASL mechanism %q is not supported; fix: set transport.kafka.sasl.mechanism to SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN", c.Flow, s.Mechanism)
		}
	}
	return opts, nil
}

func tlsConfig(t *TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: read transport.kafka.tls.ca_file %s: %w; fix: point ca_file at a readable PEM bundle", t.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka: transport.kafka.tls.ca_file %s holds no PEM certificate; fix: point ca_file at the CA that signed the brokers' certificates", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: load client certificate %s (key %s): %w; fix: point tls.cert_file and tls.key_file at a matching PEM pair", t.CertFile, t.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// opTimeout bounds the administrative requests that carry no caller
// context (offset commits from apply.Cursor, Oldest).
const opTimeout = 30 * time.Second
