package capture

import (
	"errors"
	"fmt"
	"strings"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/schemachange"
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
	// Xid is the source transaction that first used the new shape (stream).
	Xid uint32
	// Plan is the classified change and its recovery commands (stream);
	// nil for drift found by the snapshot. PlanCommand shows it.
	Plan        *schemachange.Plan
	PlanCommand string
}

func (e *SchemaDriftError) Error() string {
	if p := e.Plan; p != nil {
		var b strings.Builder
		fmt.Fprintf(&b, "relay: schema change on %s at LSN %s (xid %d) is blocked: %s", e.Relation, envelope.FormatLSN(e.LSN), e.Xid, p.Kinds())
		for _, c := range p.Changes {
			fmt.Fprintf(&b, "; %s %s: %s, %s, mode %s", c.Kind, changeText(c.Change), c.Classification.Compatibility,
				c.Classification.Decision, c.Classification.Mode)
		}
		fmt.Fprintf(&b, "; pinned columns (%s), live (%s); capture stopped at the barrier before any row was assembled under the new shape; %s",
			e.PinnedColumns, e.LiveColumns, p.Holds)
		if e.PlanCommand != "" {
			fmt.Fprintf(&b, ". The plan: `%s`", e.PlanCommand)
		}
		for _, c := range p.Commands {
			fmt.Fprintf(&b, ". Recovery: %s", c)
		}
		if e.InspectCommand != "" {
			fmt.Fprintf(&b, ". Inspect with: %s", e.InspectCommand)
		}
		return b.String()
	}
	return fmt.Sprintf("relay: schema drift on %s at LSN %s: pinned fingerprint %016x (%s), live %016x (%s); "+
		"capture stopped before any row was assembled under the new shape. Inspect with: %s",
		e.Relation, envelope.FormatLSN(e.LSN), e.Pinned, e.PinnedColumns, e.Live, e.LiveColumns, e.InspectCommand)
}

func changeText(c schemachange.Change) string {
	switch {
	case c.From != "" && c.To != "":
		return c.From + " → " + c.To
	case c.To != "":
		return "(" + c.To + ")"
	}
	return "(" + c.From + ")"
}
