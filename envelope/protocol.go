package envelope

// Protocol messages: the names capture and the applier share on the wire.
// They travel inside ordinary envelopes (a logical message is a row with
// Op_OP_MESSAGE and a prefix; a barrier is a DDLEvent with a kind), so a
// reader that knows none of them still decodes and verifies every unit.
// docs/ENVELOPE.md ("Protocol messages") is the reference, with the payload
// shapes and the version rule: a new kind or prefix is added, never
// renamed, and a reader passes through a kind it does not know.

// Logical-message prefixes (pg_logical_emit_message, transactional).
const (
	// FencePrefix marks "everything committed before this point": a target
	// checkpoint at or past a fence proves the target has seen everything
	// the source committed before it was written. Content: an opaque token.
	FencePrefix = "trellara.fence"
	// ReseedPrefix is a reseed watermark; content is JSON
	// {"id":N,"phase":"begin|low|high|handoff","window":N,"upper":[...],"last":bool}.
	// Capture re-checks its held relations at each.
	ReseedPrefix = "trellara.reseed"
)

// DDLEvent kinds of a barrier. An event with no kind and a column is an
// ordinary schema change; AddTableKind (envelope.go) is a table joining the
// flow.
const (
	// HoldKind is a blocked change held per table (schema.on_blocked:
	// hold_table): no target DDL; the relation's rows stop at it until a
	// reseed copies the table again.
	HoldKind = "hold"
	// ReseedKind is a blocked change a reseed took over: the target table
	// is replaced by the reseed's copy at its handoff, so no target DDL is
	// run.
	ReseedKind = "reseed"
)

// BarrierID names relation's barrier in the transaction committed at
// commitLSN ("schema.table@0/16B3748"); capture and the applier derive it
// alike.
func BarrierID(relation string, commitLSN uint64) string {
	return relation + "@" + FormatLSN(commitLSN)
}
