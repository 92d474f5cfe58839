package sidecar

import (
	"errors"
	"fmt"
	"strings"

	"github.com/trellara/trellara/envelope"
)

// ErrMalformed is matched (errors.Is) by every *FrameError and
// *ProtocolError. Malformed input is never retryable: the server replays
// the same bytes after a reconnect, so capture stops and reports where.
var ErrMalformed = errors.New("sidecar: malformed input from the extension")

// FrameError reports a frame that is not a valid version-1 frame.
type FrameError struct {
	// LSN is the position the frame belongs to where known: the open
	// transaction's commit LSN, else the last commit's end LSN; 0 if none.
	LSN uint64
	// Type is the frame type byte, 0 when the frame was too short to have one.
	Type byte
	// Offset is the byte offset in the frame where decoding failed.
	Offset int
	Reason string
}

func (e *FrameError) Error() string {
	t := "frame"
	if e.Type != 0 {
		t = fmt.Sprintf("%q frame", rune(e.Type))
	}
	return fmt.Sprintf("sidecar: malformed %s near LSN %s, byte %d: %s", t, envelope.FormatLSN(e.LSN), e.Offset, e.Reason)
}

// Unwrap makes errors.Is(err, ErrMalformed) true.
func (e *FrameError) Unwrap() error { return ErrMalformed }

// ProtocolError reports a socket message stream that breaks the protocol:
// a bad hello, an unknown message type, an oversized chunk.
type ProtocolError struct {
	LSN    uint64
	Reason string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("sidecar: socket protocol violation near LSN %s: %s", envelope.FormatLSN(e.LSN), e.Reason)
}

// Unwrap makes errors.Is(err, ErrMalformed) true.
func (e *ProtocolError) Unwrap() error { return ErrMalformed }

// FrameTooLargeError refuses a frame beyond Options.FrameBytesMax. The
// frame is valid as far as we know, but holding it would break the memory
// bound; one row that large needs an explicitly larger limit.
type FrameTooLargeError struct {
	LSN   uint64
	Bytes int64 // received so far when the limit was crossed
	Max   int64
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("sidecar: frame near LSN %s exceeds the %d-byte frame limit (%d bytes received so far); "+
		"a single row this large needs a larger limit: raise the sidecar's frame size limit (Options.FrameBytesMax) and restart it",
		envelope.FormatLSN(e.LSN), e.Max, e.Bytes)
}

// ServerError is an 'E' message: the server explains why it closed the
// connection.
type ServerError struct {
	Message string
}

func (e *ServerError) Error() string {
	return "sidecar: the trellara extension closed the connection: " + e.Message + serverHint(e.Message)
}

// Retryable reports whether reconnecting can succeed without anyone
// changing anything:
//   - "decoder restarted": the server rewound to the slot's confirmed
//     position; the next connection is served from there.
//   - "another sidecar is connected": the other one may be a previous
//     instance of this one whose connection the server has not yet noticed
//     closing.
//
// Everything else (peer uid, protocol version, magic, an invalid
// acknowledgement) repeats identically on every attempt.
func (e *ServerError) Retryable() bool {
	return strings.Contains(e.Message, "decoder restarted") || strings.Contains(e.Message, "another sidecar is connected")
}

func serverHint(msg string) string {
	switch {
	case strings.Contains(msg, "peer uid"):
		return "; run the sidecar as the PostgreSQL server's OS user (usually postgres)"
	case strings.Contains(msg, "protocol version"):
		return "; the sidecar and the extension are from different releases: install matching versions"
	}
	return ""
}

// UnsupportedChangeError refuses a change the envelope cannot carry: a
// DELETE without an old tuple (REPLICA IDENTITY NOTHING, or DEFAULT without
// a primary key). pgoutput drops such deletes silently; passing them on
// would give the applier a row it cannot find, and dropping them would lose
// a change. The WAL holding it is replayed after every restart, so the
// table has to be excluded to get past it.
type UnsupportedChangeError struct {
	Relation string // schema.name
	LSN      uint64 // commit LSN of the transaction
	Reason   string
}

func (e *UnsupportedChangeError) Error() string {
	return fmt.Sprintf("sidecar: transaction at LSN %s: %s on %s; capture stopped rather than drop the change. "+
		"Give the table a key (ALTER TABLE %s REPLICA IDENTITY FULL) for future changes, and exclude it from "+
		"trellara.tables (then restart the server) to get past this one",
		envelope.FormatLSN(e.LSN), e.Reason, e.Relation, e.Relation)
}

// SlotError reports a trellara slot the extension will not decode, found by
// CheckServer (the decoder worker logs the same and restarts every 2 s, but
// a sidecar only ever sees silence).
type SlotError struct {
	Slot   string
	Reason string
	Fix    string
}

func (e *SlotError) Error() string {
	return fmt.Sprintf("sidecar: replication slot %s %s; fix: %s", e.Slot, e.Reason, e.Fix)
}

// PeerError is a socket whose server is not the PostgreSQL server's OS
// user (SO_PEERCRED), or whose peer could not be identified. Nothing was
// sent to it and nothing it sent was read. Not retried: it does not fix
// itself.
type PeerError struct {
	Path    string
	UID     int // the peer's uid
	PID     int // the peer's pid
	WantUID int
	Err     error // set when the credentials could not be read
}

func (e *PeerError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("sidecar: cannot identify the process serving %s (SO_PEERCRED): %v; refusing to use the socket", e.Path, e.Err)
	}
	return fmt.Sprintf("sidecar: the process serving %s (pid %d) runs as uid %d, not uid %d, so it is not the PostgreSQL server "+
		"this sidecar serves; refusing to use the socket. Fix: point source.socket at the server's trellara.socket_path, "+
		"make sure only the server's OS user can create files in its directory, and run the sidecar as that user",
		e.Path, e.PID, e.UID, e.WantUID)
}

func (e *PeerError) Unwrap() error { return e.Err }
