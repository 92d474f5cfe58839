// Package pgoutput decodes and encodes the messages of PostgreSQL's built-in
// logical replication output plugin, pgoutput, for protocol versions 1 and 2.
//
// One pgoutput message is the payload of one XLogData ('w') CopyData message
// of a START_REPLICATION ... LOGICAL session (or one row of
// pg_logical_slot_peek_binary_changes). Decode turns such a payload into one
// small Go value per message type; the Append* functions in encode.go produce
// the exact bytes PostgreSQL would send, so tests and the deterministic
// simulator can generate pgoutput streams without a server.
//
// A session's Decoder decodes row changes and transaction boundaries into
// its own structs and tuple slices, reused from one message to the next,
// with values aliasing the input: decoding allocates nothing on the relay's
// hot path, and a message is valid until the next Decode (Decoder.Decode
// states the contract; FuzzDecoder holds the reused decode equal to the
// package-level Decode, which allocates every message).
//
// # Why our own decoder
//
// The relay consumes untrusted bytes at the edge of the system and must never
// panic or over-allocate on them. Every read here is bounds-checked, every
// count is checked against the bytes that remain before anything is
// allocated from it, unknown flag bits and trailing bytes are rejected, and a
// malformed message is reported as a *DecodeError naming the WAL position,
// the message type and the byte offset. FuzzDecode enforces this, seeded from
// messages captured from a real PostgreSQL 15 (testdata/captured.txt).
//
// Because the decoder is that strict, decoding is an exact inverse of
// encoding: for every accepted input x, Append(nil, Decode(x)) == x.
//
// # Byte order and primitive fields
//
// All integers are big-endian (network byte order), as everywhere in the
// PostgreSQL frontend/backend protocol.
//
//	Int8/Int16/Int32/Int64  fixed-width big-endian integers
//	String                  bytes terminated by a single NUL (C string);
//	                        the bytes themselves never contain NUL
//	LSN                     Int64 WAL position, printed "X/X" (pglogrepl.LSN)
//	Timestamp               Int64 microseconds since 2000-01-01 00:00:00 UTC
//	Xid                     Int32 transaction id; 0 is InvalidTransactionId
//
// # Streaming (protocol version 2)
//
// With streaming on, PostgreSQL sends a large in-progress transaction in
// blocks delimited by StreamStart and StreamStop, before it commits. Inside a
// block, Relation, Type, Insert, Update, Delete, Truncate and Message carry
// the xid of the (sub)transaction that made the change right after the type
// byte; outside a block they do not. The bytes alone cannot tell the two
// forms apart, so Decode takes inStream; Decoder tracks it from the stream
// itself. A streamed transaction ends with StreamCommit, or with StreamAbort,
// which is also sent when only a subtransaction of it rolls back (then
// SubXid names the subtransaction whose changes must be discarded).
//
// # Message layouts
//
// [xid] marks the Int32 xid present only inside a stream block.
//
//	Begin 'B'         +-----+----------+------------+-----+
//	                  | 'B' | FinalLSN | CommitTime | Xid |
//	                  | 1   | 8        | 8          | 4   |
//	                  +-----+----------+------------+-----+
//
//	Commit 'C'        +-----+-----------+-----------+--------+------------+
//	                  | 'C' | Flags = 0 | CommitLSN | EndLSN | CommitTime |
//	                  | 1   | 1         | 8         | 8      | 8          |
//	                  +-----+-----------+-----------+--------+------------+
//
//	Origin 'O'        +-----+-----------+--------+
//	                  | 'O' | CommitLSN | Name   |
//	                  | 1   | 8         | String |
//	                  +-----+-----------+--------+
//	                  Follows Begin, or StreamStart (then CommitLSN is 0).
//
//	Relation 'R'      +-----+-------+-------+-----------+--------+----------+-------+
//	                  | 'R' | [xid] | RelID | Namespace | Name   | RepIdent | NCols |
//	                  | 1   | 4     | 4     | String    | String | 1        | 2     |
//	                  +-----+-------+-------+-----------+--------+----------+-------+
//	                  then NCols times:
//	                  +-------+--------+---------+--------+
//	                  | Flags | Name   | TypeOID | TypMod |
//	                  | 1     | String | 4       | 4      |
//	                  +-------+--------+---------+--------+
//	                  Namespace is "" for pg_catalog. RepIdent is 'd'
//	                  (default), 'n' (nothing), 'f' (full) or 'i' (index).
//	                  Flags is 1 if the column is part of the replica
//	                  identity key, else 0.
//
//	Type 'Y'          +-----+-------+---------+-----------+--------+
//	                  | 'Y' | [xid] | TypeOID | Namespace | Name   |
//	                  | 1   | 4     | 4       | String    | String |
//	                  +-----+-------+---------+-----------+--------+
//
//	Insert 'I'        +-----+-------+-------+-----+-----------+
//	                  | 'I' | [xid] | RelID | 'N' | TupleData |
//	                  +-----+-------+-------+-----+-----------+
//
//	Update 'U'        +-----+-------+-------+-----------------------+-----+-----------+
//	                  | 'U' | [xid] | RelID | optional 'K' or 'O'   | 'N' | TupleData |
//	                  |     |       |       | followed by TupleData |     |           |
//	                  +-----+-------+-------+-----------------------+-----+-----------+
//	                  'K': old key (replica identity columns, when the key
//	                  changed); 'O': whole old row (REPLICA IDENTITY FULL).
//
//	Delete 'D'        +-----+-------+-------+------------+-----------+
//	                  | 'D' | [xid] | RelID | 'K' or 'O' | TupleData |
//	                  +-----+-------+-------+------------+-----------+
//
//	Truncate 'T'      +-----+-------+-------+---------+----------------+
//	                  | 'T' | [xid] | NRels | Options | NRels x RelID  |
//	                  | 1   | 4     | 4     | 1       | 4 each         |
//	                  +-----+-------+-------+---------+----------------+
//	                  Options bit 0: CASCADE, bit 1: RESTART IDENTITY.
//
//	Message 'M'       +-----+-------+-------+-----+--------+--------+---------+
//	                  | 'M' | [xid] | Flags | LSN | Prefix | Length | Content |
//	                  | 1   | 4     | 1     | 8   | String | 4      | Length  |
//	                  +-----+-------+-------+-----+--------+--------+---------+
//	                  Flags bit 0: transactional. (pg_logical_emit_message;
//	                  pgoutput sends these only with the messages option.)
//
//	StreamStart 'S'   +-----+-----+--------------+
//	                  | 'S' | Xid | FirstSegment |   FirstSegment is 1 or 0
//	                  | 1   | 4   | 1            |
//	                  +-----+-----+--------------+
//
//	StreamStop 'E'    +-----+
//	                  | 'E' |
//	                  +-----+
//
//	StreamCommit 'c'  +-----+-----+-----------+-----------+--------+------------+
//	                  | 'c' | Xid | Flags = 0 | CommitLSN | EndLSN | CommitTime |
//	                  | 1   | 4   | 1         | 8         | 8      | 8          |
//	                  +-----+-----+-----------+-----------+--------+------------+
//
//	StreamAbort 'A'   +-----+-----+--------+
//	                  | 'A' | Xid | SubXid |   SubXid == Xid: whole transaction
//	                  | 1   | 4   | 4      |
//	                  +-----+-----+--------+
//
//	TupleData         +-------+----------------+
//	                  | NCols | NCols x Column |
//	                  | 2     |                |
//	                  +-------+----------------+
//	Column            'n'                          NULL
//	                  'u'                          unchanged TOASTed value,
//	                                               not sent
//	                  't' Int32 Length, Bytes      text representation
//	                  'b' Int32 Length, Bytes      binary representation
//	                                               (binary option only)
//
// Not supported (the relay does not request them): protocol version 3
// two-phase messages ('b', 'P', 'K', 'r', 'p') and the protocol version 4
// StreamAbort extension (abort LSN and time, parallel apply).
//
// # Schema fingerprint
//
// The schema fingerprint of a relation is defined once, by the envelope
// protocol (envelope.RelationFingerprint, docs/ENVELOPE.md); the relay
// converts a Relation message with capture.RelationFromPgoutput and hashes
// that, so the relay, the snapshot and the native extension's sidecar all
// agree on one layout.
package pgoutput
