// Package sidecar is the Go side of the trellara PostgreSQL extension: it
// reads committed-transaction frames from the extension's Unix socket,
// assembles them into envelopes identical to what the pgoutput relay
// produces for the same history, publishes them durably, and only then
// acknowledges them so that the server's slot may advance.
//
// docs/EXTENSION.md ("Socket protocol", "Frame format", "Go sidecar") is the
// normative description; this comment repeats what a reader of this package
// needs. All integers are big-endian. Both versions below are part of the
// wire contract; do not change them without changing the extension.
//
// # Socket protocol (version 1)
//
//	sidecar → server
//	+-----+--------+---------+
//	| 'H' | "TRLA" | u16 = 1 |                            hello, 7 bytes, first
//	+-----+--------+---------+
//	| 'A' | u64 lsn          |                            ack, 9 bytes
//	+-----+------------------+
//
//	server → sidecar
//	+-----+--------+---------+------------+-------------+----------------+-----------------+
//	| 'H' | "TRLA" | u16 = 1 | u8 frame=1 | u32 version | u64 system id  | u64 slot confirm |  28 bytes
//	+-----+--------+---------+------------+-------------+----------------+-----------------+
//	| 'F' | u8 flags (bit 0 MORE) | u32 len ≤ 65536 | len bytes  |        frame chunk
//	+-----+-----------------------+-----------------+------------+
//	| 'K' | u64 ackable lsn | i64 server time (µs since 1970) |           keepalive, 17 bytes
//	+-----+-----------------+---------------------------------+
//	| 'E' | u16 len | UTF-8 text |                                        error, then close
//	+-----+---------+------------+
//
// A frame is the concatenation of consecutive 'F' payloads up to one without
// MORE. The sidecar refuses frames larger than Options.FrameBytesMax
// (default 64 MiB) so that a damaged length can never make it allocate
// without bound.
//
// # Frame format (version 1)
//
//	+------------+---------+-----------------+
//	| u8 version | u8 type | body (by type)  |
//	+------------+---------+-----------------+
//
//	'B' u32 xid | u64 final_lsn | i64 commit_time                   22 bytes
//	'R' u32 relid | str namespace | str name | u8 replica_identity |
//	    u16 ncols | ncols × (u8 flags | str name | u32 type | i32 typmod)
//	'I' u32 relid | tuple
//	'U' u32 relid | u8 old_kind | [tuple old] | tuple new
//	'D' u32 relid | u8 old_kind | [tuple old]
//	'T' u8 flags (1 CASCADE, 2 RESTART IDENTITY) | u32 n | n × u32 relid
//	'M' u64 lsn | str prefix | str content
//	'C' u8 flags (0) | u64 commit_lsn | u64 end_lsn | i64 commit_time 27 bytes
//	'P' u64 lsn                                                       10 bytes
//
//	str   = u32 length | bytes
//	tuple = u16 ncols | ncols × (u8 kind ['n' null, 'u' unchanged TOAST,
//	        't' text followed by str])
//	old_kind: 'K' identity key, 'O' full old row, '-' none
//	times: microseconds since 1970-01-01 UTC
//
// # Assembly
//
// Frames are translated into the relay's pgoutput message structs and fed
// to capture.Assembler, so the extension path and the pgoutput path share one
// assembly code path: the same relation metadata gives the same fingerprint,
// the same memory bound and spill, the same CHUNK units for large
// transactions. The only frames without a pgoutput counterpart are 'P'
// (progress: an acknowledgeable position when nothing is open) and a DELETE
// without an old tuple, which pgoutput drops silently and this package
// refuses (UnsupportedChangeError): an applier cannot apply it, and dropping
// it would lose a change.
//
// # Durability
//
// Units are published in groups (one Transport.PublishBatch, so one fsync,
// for many transactions) by a publishing goroutine, overlapped with reading
// the next frames. Only after a group is durable is the end LSN of its last
// transaction acknowledged; the server moves its slot only on
// acknowledgements. After any reconnect the server replays from the slot's
// confirmed position and transactions the transport already holds (commit
// LSN ≤ the newest durable one, relay.ResumeFrom) are skipped.
package sidecar
