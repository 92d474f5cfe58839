package relay

import (
	"errors"
	"fmt"

	"github.com/trellara/trellara/envelope"
)

// ErrProtocol is matched by errors caused by a message stream that breaks
// pgoutput's sequencing (a change outside a transaction, a commit without a
// begin). Capture stops: continuing would mis-assemble transactions.
var ErrProtocol = errors.New("relay: protocol violation")

// SchemaDriftError stops capture for a relation whose live shape no longer
// matches the pinned one. No row is assembled under the new shape.
type SchemaDriftError struct {
	Relation       string // schema.name
	Pinned, Live   uint64 // fingerprints
	LSN            uint64 // where the new shape was seen
	PinnedColumns  string
	LiveColumns    string
	InspectCommand string
}

func (e *SchemaDriftError) Error() string {
	return fmt.Sprintf("relay: schema drift on %s at LSN %s: pinned fingerprint %016x (%s), live %016x (%s); "+
		"capture stopped before any row was assembled under the new shape. Inspect with: %s",
		e.Relation, envelope.FormatLSN(e.LSN), e.Pinned, e.PinnedColumns, e.Live, e.LiveColumns, e.InspectCommand)
}
