package envelope

import (
	"errors"
	"fmt"

	"github.com/trellara/trellara/lsn"
)

// ErrChecksum is returned (wrapped) when an encoded envelope's checksum does
// not match its bytes: the envelope was damaged after it was written.
var ErrChecksum = errors.New("envelope: checksum mismatch")

// ErrTrailer is returned (wrapped) when the encoding does not end with the
// checksum field: truncated, or not an envelope.
var ErrTrailer = errors.New("envelope: missing checksum trailer")

// InvalidError reports an envelope that breaks a protocol rule. Field names
// the offending field as it appears in envelope.proto.
type InvalidError struct {
	SourceID  string
	CommitLSN uint64
	Field     string
	Reason    string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("envelope: invalid %s (source %q, commit LSN %s): %s",
		e.Field, e.SourceID, FormatLSN(e.CommitLSN), e.Reason)
}

// FormatLSN renders an LSN the way PostgreSQL does: two hex halves. It is
// lsn.Format, kept here because envelope's uint64 positions are printed
// this way across the repository.
func FormatLSN(v uint64) string { return lsn.Format(v) }
