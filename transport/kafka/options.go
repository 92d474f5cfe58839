package kafka

// Options is a Kafka transport's connection and topic settings. It is the
// package's own type: a program outside this module fills it directly, and
// the trellara CLI maps its transport.kafka section into it
// (internal/flow). docs/CONFIG.md names each setting's YAML key.
type Options struct {
	Brokers       []string // host:port of the seed brokers
	Topic         string   // the flow's topic
	ConsumerGroup string   // the group whose offset the reader commits (lag monitoring only)
	// Mode is ModeStrict (one partition) or ModePartitioned (Partitions
	// data partitions and partition 0 for the manifests).
	Mode       Mode
	Partitions int
	TLS        *TLS  // nil means plaintext
	SASL       *SASL // nil means no SASL
	// ReplicationFactor and MinInsyncReplicas are what topic creation
	// uses and CheckTopic holds the topic to.
	ReplicationFactor int
	MinInsyncReplicas int
	Acks              Acks // the producer's acknowledgement level
	Idempotent        bool // idempotent producer (with AcksAll)
	// AutoCommit commits the group offset of what a reader has handed out
	// as it reads (the relay's own reads turn it off).
	AutoCommit bool
}

// Mode is the topic layout.
type Mode string

// Topic layouts.
const (
	ModeStrict      Mode = "strict"
	ModePartitioned Mode = "partitioned"
)

// Acks is the producer acknowledgement level.
type Acks string

// Acknowledgement levels.
const (
	AcksAll    Acks = "all"    // every in-sync replica
	AcksLeader Acks = "leader" // the partition leader only
	AcksNone   Acks = "none"   // fire and forget
)

// TLS names the PEM files of a TLS connection; empty CAFile means the
// system roots, empty CertFile means no client certificate.
type TLS struct {
	CAFile   string
	CertFile string
	KeyFile  string
}

// SASL mechanisms.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SASL is broker authentication. The password is Password, or, when
// PasswordFunc is set, what it returns at connect time (the CLI resolves a
// secret reference there, so a credential is read only when a client
// connects and is never held in a config value).
type SASL struct {
	Mechanism    string // SASLPlain, SASLScramSHA256 or SASLScramSHA512
	Username     string
	Password     string
	PasswordFunc func() (string, error)
}

func (s *SASL) password() (string, error) {
	if s.PasswordFunc != nil {
		return s.PasswordFunc()
	}
	return s.Password, nil
}

// DefaultOptions returns strict mode with the producer defaults the CLI
// uses (acks all, idempotent, replication factor 3, min.insync.replicas 2).
func DefaultOptions() *Options {
	return &Options{Mode: ModeStrict, ReplicationFactor: 3, MinInsyncReplicas: 2, Acks: AcksAll, Idempotent: true}
}
