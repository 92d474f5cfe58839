package kafka

import "errors"

// Sentinels of a *RecordError (errors.Is): what the reader found at a
// position of the topic. The reader never skips past either.
var (
	// ErrRecordsMissing: the topic no longer holds records the stream
	// needs (a compacted topic, deleted records): a gap.
	ErrRecordsMissing = errors.New("kafka: records are missing")
	// ErrInvalidRecord: a record is there but is not what the stream
	// needs (not a manifest of this flow, a chunk of another unit, a
	// rebuilt unit that fails its checksum).
	ErrInvalidRecord = errors.New("kafka: invalid record")
)

// RecordError locates a missing or invalid record: Kind is
// ErrRecordsMissing or ErrInvalidRecord, at Topic, Partition, Offset (the
// offset the reader needed). Err is the full description with its fix.
type RecordError struct {
	Kind      error
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *RecordError) Error() string { return e.Err.Error() }

// Unwrap gives the kind and the description.
func (e *RecordError) Unwrap() []error { return []error{e.Kind, e.Err} }
