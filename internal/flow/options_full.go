//go:build full

package flow

import (
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/transport/kafka"
)

// This file is the one place the CLI's YAML schema (internal/config) is
// turned into the data path's own Options: the data-path packages never
// import internal/config (docs/DESIGN.md, STYLE.md rule 12).

// KafkaOptions is kafkaOptions for the lake committer (internal/lake),
// which reads a fleet source's topic through consumer/kafkaconsumer.
func KafkaOptions(k *config.Kafka) *kafka.Options { return kafkaOptions(k) }

// kafkaOptions maps transport.kafka to kafka.Options. The SASL password
// stays a reference, resolved when a client connects.
func kafkaOptions(k *config.Kafka) *kafka.Options {
	if k == nil {
		return nil
	}
	o := &kafka.Options{
		Brokers:           k.Brokers,
		Topic:             k.Topic,
		ConsumerGroup:     k.ConsumerGroup,
		Mode:              kafka.Mode(k.Mode),
		Partitions:        k.Partitions,
		ReplicationFactor: k.ReplicationFactor,
		MinInsyncReplicas: k.MinInsyncReplicas,
		Acks:              kafka.Acks(k.Acks),
		Idempotent:        k.Idempotent,
		AutoCommit:        k.AutoCommit,
	}
	if t := k.TLS; t != nil {
		o.TLS = &kafka.TLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile}
	}
	if s := k.SASL; s != nil {
		ref := s.Password
		o.SASL = &kafka.SASL{Mechanism: string(s.Mechanism), Username: s.Username,
			PasswordFunc: func() (string, error) {
				pw, err := ref.Resolve()
				if err != nil {
					return "", err
				}
				return pw.Reveal(), nil
			}}
	}
	return o
}
