package flow

import (
	"context"
	"fmt"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/transport"
)

// Broker is a flow's transport when it is a broker cluster rather than the
// local segment log. The full edition registers the Kafka transport with
// RegisterBroker (kafka_full.go, build tag full), so the default binary
// links no Kafka client and refuses transport.kafka by name.
type Broker interface {
	// Publisher returns the relay's transport (capture.Transport: publish
	// durably, then the relay acknowledges the source), checking the
	// topic first. close releases it.
	Publisher(ctx context.Context) (tr capture.Transport, close func(), err error)
	// Reader returns sink s's reader, positioned at its consumer group's
	// offset; apply.Run rewinds it to the sink target's checkpoint.
	Reader(ctx context.Context, s config.Sink) (BrokerReader, error)
	// Remove deletes what the flow keeps in the cluster (its topic and
	// consumer group), for run --cleanup.
	Remove(ctx context.Context) error
	// Describe names the transport for run's report, e.g. "kafka topic
	// trellara.sales on 3 brokers".
	Describe() string
}

// BrokerReader is the applier's side of a broker transport.
type BrokerReader interface {
	apply.Source
	apply.Rewinder
	apply.Cursor
	Close() error
}

// brokerFactory builds a flow's broker transport; nil in the default
// edition.
var brokerFactory func(f *Flow) (Broker, error)

// RegisterBroker sets the constructor of the broker transport; the full
// edition calls it from an init function.
func RegisterBroker(fn func(f *Flow) (Broker, error)) { brokerFactory = fn }

// openBroker builds f's broker transport, or refuses transport.kafka when
// this edition has none.
func (f *Flow) openBroker() error {
	if brokerFactory == nil {
		return fmt.Errorf("flow %s: transport.kafka is available in trellara-full only: this binary is the default edition (trellara --version names it); "+
			"run the same config with trellara-full, or use transport.local", f.Cfg.Flow)
	}
	b, err := brokerFactory(f)
	if err != nil {
		return err
	}
	f.broker = b
	return nil
}

// publisher is the relay's transport: the broker's, else the local log.
func (f *Flow) publisher(ctx context.Context) (capture.Transport, func(), error) {
	if f.broker != nil {
		return f.broker.Publisher(ctx)
	}
	return transport.Local{Log: f.Log}, func() {}, nil
}

// StateDir is the directory of the flow's local state: transport.local.dir,
// or transport.kafka.state_dir.
func (f *Flow) StateDir() string { return f.dir }

// BrokerStatus is what status reports of a broker flow's cluster: the
// topic's partitions, each sink's consumer-group lag per partition, and
// how far the cluster has acknowledged the relay's writes against the
// slot's confirmed position.
type BrokerStatus struct {
	Topic      string            `json:"topic"`
	Mode       string            `json:"mode"`
	Partitions []BrokerPartition `json:"partitions"`
	Groups     []BrokerGroup     `json:"consumer_groups"`
	// ProduceAckedCommitLSN is the commit LSN of the newest unit the
	// cluster has acknowledged ("" for an empty topic); the slot's
	// confirmed_flush_lsn never passes the end of that unit.
	ProduceAckedCommitLSN string `json:"produce_acked_commit_lsn"`
	SlotConfirmedFlushLSN string `json:"slot_confirmed_flush_lsn,omitempty"`
}

// BrokerPartition is one partition of the topic.
type BrokerPartition struct {
	Partition     int32  `json:"partition"`
	Role          string `json:"role"` // log (strict), manifest or data (partitioned)
	StartOffset   int64  `json:"start_offset"`
	HighWatermark int64  `json:"high_watermark"`
}

// BrokerGroup is one sink's consumer group.
type BrokerGroup struct {
	Sink       string                `json:"sink"`
	Group      string                `json:"group"`
	Partitions []BrokerGroupPosition `json:"partitions"`
}

// BrokerGroupPosition is a group's committed offset (-1: none) and lag on
// one partition.
type BrokerGroupPosition struct {
	Partition int32 `json:"partition"`
	Committed int64 `json:"committed"`
	Lag       int64 `json:"lag"`
}

// brokerStatuser is a Broker that reports its cluster for status.
type brokerStatuser interface {
	Status(ctx context.Context, sinks []config.Sink) (*BrokerStatus, error)
}
