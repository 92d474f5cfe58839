package consumer

import (
	"errors"
	"fmt"

	"github.com/trellara/trellara/envelope"
)

// The three ways a stream can stop short, on either transport (the local
// log or Kafka). Each is matched with errors.Is on the *StreamError a
// consumer returns; errors.As to *StreamError gives the position and the
// recovery. A consumer never skips past any of them: the next Next returns
// the same error until the operator acts.
var (
	// ErrGap: units are missing between the consumer's position and what
	// the stream holds next (a deleted segment, deleted or compacted
	// Kafka records). The sink would miss transactions.
	ErrGap = errors.New("consumer: gap in the stream")
	// ErrPastRetention: the position the consumer needs is older than
	// anything the stream still holds; retention removed units the
	// consumer had not committed.
	ErrPastRetention = errors.New("consumer: position past the stream's retention")
	// ErrCorrupt: a unit is there but fails validation (a segment's frame
	// checksum, envelope decoding or its XXH3 checksum, a Kafka record
	// that is not the manifest or chunk it should be).
	ErrCorrupt = errors.New("consumer: corrupt unit")
)

// Position locates a StreamError: the local log's directory and offset,
// or Kafka's topic, partition and offset. LSN is the commit LSN of the
// last unit handed out before the error (0 before the first), which is
// the point a rebuilt sink resumes from.
type Position struct {
	Log       string // local log directory; empty on Kafka
	Topic     string // Kafka topic; empty on the local log
	Partition int32  // Kafka partition (0 is a partitioned topic's manifest partition)
	Offset    uint64 // the offset the consumer needed
	LSN       uint64
}

func (p Position) String() string {
	s := ""
	if p.Topic != "" {
		s = fmt.Sprintf("topic %q partition %d offset %d", p.Topic, p.Partition, p.Offset)
	} else {
		s = fmt.Sprintf("log %s offset %d", p.Log, p.Offset)
	}
	if p.LSN != 0 {
		s += ", after commit LSN " + envelope.FormatLSN(p.LSN)
	}
	return s
}

// StreamError is a gap, a position past retention or a corrupt unit
// (Kind: ErrGap, ErrPastRetention or ErrCorrupt), at Position, with the
// Recovery an operator runs. Err is the transport's own description
// (*segmentlog.CorruptionError, *DecodeError, a Kafka fetch error, ...).
type StreamError struct {
	Kind     error
	Consumer string // cursor or group name
	Position Position
	Recovery string
	Err      error
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("consumer %q: %s at %s: %v; recovery: %s",
		e.Consumer, kindText(e.Kind), e.Position, e.Err, e.Recovery)
}

// Unwrap gives the kind (errors.Is) and the transport's error.
func (e *StreamError) Unwrap() []error { return []error{e.Kind, e.Err} }

func kindText(k error) string {
	switch k {
	case ErrGap:
		return "gap in the stream"
	case ErrPastRetention:
		return "position past retention"
	case ErrCorrupt:
		return "corrupt unit"
	}
	return "stream error"
}

// Recoveries, the same on both transports: the sink has to be rebuilt
// from a fresh copy of its data, because the stream can no longer give it
// every transaction; a corrupt local log may instead be restored.
const (
	RecoveryRebuild = "rebuild the sink from a fresh copy of the source tables (trellara reseed --all-tables for a flow's own target; " +
		"for another sink, reload it and reopen the consumer with Start latest) — the consumer does not skip units"
	RecoveryRestoreLog   = "restore the log directory from a replica or backup, or " + RecoveryRebuild
	RecoveryCorruptKafka = "check that only the flow's relay writes to the topic (transport.kafka.topic), then " + RecoveryRebuild
)
