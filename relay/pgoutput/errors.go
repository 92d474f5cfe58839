package pgoutput

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// ErrMalformed is matched (errors.Is) by every *DecodeError, so callers can
// classify decode failures without a type assertion. A malformed message is
// never retryable: the same bytes decode the same way every time, so the
// caller stops capture and reports the position.
var ErrMalformed = errors.New("pgoutput: malformed message")

// DecodeError reports a message that is not valid pgoutput: truncated,
// carrying trailing bytes, an unknown type or flag, a count that cannot fit,
// or a message out of sequence for the stream state.
type DecodeError struct {
	// LSN is the WAL start of the XLogData that carried the message.
	LSN pglogrepl.LSN
	// Type is the message type byte, or 0 for an empty message.
	Type byte
	// Offset is the byte offset within the message where decoding failed.
	Offset int
	// Reason says what was wrong, in words.
	Reason string
}

func (e *DecodeError) Error() string {
	t := MessageType(e.Type)
	name := "message"
	if t.known() {
		name = t.String() + " message"
	}
	return fmt.Sprintf("pgoutput: malformed %s at LSN %s, byte %d: %s", name, e.LSN, e.Offset, e.Reason)
}

// Unwrap makes errors.Is(err, ErrMalformed) true.
func (e *DecodeError) Unwrap() error { return ErrMalformed }
