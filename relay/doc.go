// Package relay captures a PostgreSQL source over the logical replication
// protocol with the built-in pgoutput plugin and publishes each committed
// transaction, as envelope units, to a transport (the local segment log
// today). It is one of the two capture paths; the other is the extension's
// sidecar (package sidecar). What both paths share, including the rule
// below, lives once in package capture; the relay only turns pgoutput
// messages into units (Assembler) and talks to the server (Session).
//
// # The acknowledgement rule
//
// The replication slot is confirmed only through positions that are durable
// in the transport. A confirmed position is a promise to the server that it
// may discard the WAL before it: if the relay confirmed a transaction that
// was still only in memory, a crash would lose it with no way to ask for it
// again. So the order is always publish, then record, then acknowledge,
// and it is written once, in capture.Publisher.Publish:
//
//  1. Publish: the batch's units are made durable in the transport
//     (capture.Transport.PublishBatch returns only after they are). If that fails,
//     nothing is acknowledged and the server resends the whole batch.
//  2. Record: a position the relay is about to acknowledge although no
//     unit in the transport ends there (a transaction without rows, a
//     transaction skipped on resume, an idle advance) is first written to
//     the ack store (capture.AckStore, Options.Acks). Without that record a
//     restart would see the slot ahead of the transport and refuse it as a
//     gap (capture.CheckResume).
//  3. Acknowledge: only then does the position become the one sent in
//     standby status updates (Session.sendStatus reports Publisher.Acked,
//     never anything newer).
//
// A position is acknowledgeable only at the end of a complete transaction:
// all the units of a multi-unit (chunked) transaction must be durable first.
//
// Keepalive-driven advancement: a keepalive carries the server's WAL end.
// The relay confirms it only when no transaction is open in the assembler,
// no multi-unit transaction is partly published, and nothing assembled is
// still unflushed; then every change the server decoded up to that point is
// already durable, confirming it loses nothing, and an idle slot stops
// holding WAL. The advance itself goes through capture.Publisher like any
// other position, so it is recorded in the ack store before it is sent.
//
// See package capture for resume, gap and fence rules, and docs/DESIGN.md
// for where this sits in the whole flow.
package relay
