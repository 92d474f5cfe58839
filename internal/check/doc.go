// Package check grades a PostgreSQL source for change data capture. It holds
// the rules behind trellara-check, `trellara check` and `trellara preflight`.
//
// Inspect reads the server through a session the caller opened read-only
// (Connect does that: default_transaction_read_only=on in the startup packet,
// then verified by Inspect). That stops DDL and DML but not functions such as
// pg_create_logical_replication_slot or pg_switch_wal, so the real guarantee
// is narrower and stricter: every statement is a fixed SELECT or SHOW over
// catalog views and read-only functions, and a test runs the grader against
// a server with log_statement=all and checks each statement it logged. It
// creates no publication, slot, checkpoint, table, temporary table or
// advisory lock, and takes no lock on user tables (sizes come from pg_class
// estimates, not pg_relation_size, which would lock each relation).
//
// Version awareness: columns that exist only on newer majors are read only
// where pg_attribute says they exist (absent ones are selected as NULL), and
// optional views are probed with to_regclass. A view or function the role may
// not read degrades to a Note in the report, never to a failed inspection.
//
// Grading: every Finding has a Severity; the grade is set by the worst one:
//
//	critical → F   capture cannot start (a blocker; --write-config refuses)
//	high     → D   capture would start but risks an outage or data loss
//	warning  → C   some tables or operations would fail
//	notice   → B   works, with a cost or a risk worth fixing
//	info     → A   worth knowing; does not lower the grade
//
// Every finding above info carries an Action: the exact SQL statement or
// setting change that removes it.
package check
