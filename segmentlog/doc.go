// Package segmentlog is Trellara's durable local log: an append-only
// sequence of opaque payloads (envelopes) at dense offsets 0, 1, 2, ...,
// stored as segment files in one directory, with named consumer cursors,
// retention, torn-tail repair and tailing readers. It knows nothing about
// Postgres. This comment is the format specification; docs/LOG-FORMAT.md
// says the same with a worked example, and TestGoldenFormat pins both to
// testdata/.
//
// # Directory
//
//	<dir>/LOCK                              flock(2) held by the writing process
//	<dir>/DURABLE                           the writer's durable end (durable.go)
//	<dir>/CURSORS.LOCK                      flock(2) around every cursor-file update
//	<dir>/00000000000000000000.seg          segment, named by its base offset (20 digits)
//	<dir>/00000000000000000000.idx          sparse index of a sealed segment (a cache)
//	<dir>/00000000000000000000.seg.torn-1   bytes cut off by a torn-tail repair
//	<dir>/cursors/<name>.cursor             one file per consumer cursor
//	*.tmp                                   interrupted writes; removed by Open
//
// One process writes (Open); any number of others read with OpenReadOnly,
// which takes no lock, repairs nothing and reads only up to the durable
// end the writer publishes after each fsync (see durable.go and
// readonly.go; docs/LOG-FORMAT.md "Several processes").
//
// Segments are contiguous: each segment's base offset is the previous
// segment's end offset. Only the newest (active) segment is appended to.
// An entry never spans segments; a single entry larger than
// SegmentBytesMax gets a segment of its own.
//
// # Byte order and checksums
//
// All integers are little-endian and unsigned unless noted. Checksums are
// XXH3-64 with seed 0 (the reference XXH3 algorithm); "sum32" means the
// low 32 bits of that 64-bit value. Format version: 1.
//
// # Segment header
//
// A segment file starts with a 32-byte header:
//
//	 0       4       6       8               16              24      28      32
//	+-------+-------+-------+---------------+---------------+-------+-------+
//	| magic |version| flags |  base offset  | created (ns)  | rsvd  | sum32 |
//	| TRSG  |  u16  |  u16  |      u64      |      i64      | zero  |  u32  |
//	+-------+-------+-------+---------------+---------------+-------+-------+
//
// magic is the ASCII bytes "TRSG"; version is 1; flags and reserved are
// zero; created is the Unix time in nanoseconds at which the segment was
// created (retention by age uses it); sum32 covers bytes 0..27. The base
// offset equals the number in the file name.
//
// # Frames
//
// From position 32 to the end of the file the segment holds frames, each a
// 32-byte header followed by the payload:
//
//	 0       4       8               16              24  25  26   28      32
//	+-------+-------+---------------+---------------+---+---+----+-------+------------+
//	| hsum  |length |    offset     |  payload sum  |typ|flg|rsvd| group | payload... |
//	|  u32  |  u32  |      u64      |      u64      |u8 |u8 |zero|  u32  | length B   |
//	+-------+-------+---------------+---------------+---+---+----+-------+------------+
//
// Fields:
//
//   - hsum: sum32 of header bytes 4..31. Every header field, the payload
//     checksum included, is covered, so a torn or flipped length is
//     detected before it is used to size a read.
//   - length: payload bytes, at most 64 MiB (format limit).
//   - offset: the logical offset of the entry this frame belongs to.
//   - payload sum: XXH3-64 of the payload bytes.
//   - typ: 1 = full (the whole entry), 2 = chunk, 3 = manifest.
//   - flg: 0; no flags are defined in version 1 and readers reject others.
//   - rsvd: zero.
//   - group: offset minus the first offset of the commit group (the set of
//     entries written and fsynced together) that wrote this frame.
//
// Frames follow each other with no padding. Entry offsets are dense:
// the first entry of a segment has the segment's base offset and each
// following entry has the previous one plus 1.
//
// # Large entries
//
// A payload longer than FrameBytesMax is written as two or more chunk
// frames (each at most FrameBytesMax bytes, in order, all carrying the
// entry's offset) followed by one manifest frame with the same offset,
// whose 24-byte payload is:
//
//	 0               8       12      16              24
//	+---------------+-------+-------+---------------+
//	|  total bytes  |chunks | rsvd  | payload sum   |
//	|      u64      |  u32  | zero  | XXH3-64 u64   |
//	+---------------+-------+-------+---------------+
//
// The entry is the concatenation of the chunk payloads; it exists only
// once its manifest exists. Chunks without a manifest (a crash mid-way)
// are never returned to readers: Open cuts them off the newest segment
// and the next append reuses their offset, so offsets stay dense.
//
// # Index file
//
// Sealed segments have an index file:
//
//	 0       4       6       8               16              24              32      36      40
//	+-------+-------+-------+---------------+---------------+---------------+-------+-------+
//	| TRSI  |version| rsvd  |  base offset  |  end offset   | segment size  | count |interval|
//	+-------+-------+-------+---------------+---------------+---------------+-------+-------+
//	then count entries of { offset u64, position u64 }, then XXH3-64 u64 of all preceding bytes.
//
// Each entry gives the position of the first frame of the entry at offset.
// An entry is added when the entry starts at least IndexIntervalBytes after
// the previous index point (the first point being the segment header), so
// a seek is a binary search plus a scan of about that many bytes. The
// index is a cache: Open uses it only if its checksum, base, end offset
// (the next segment's base) and segment size all match, and otherwise
// rebuilds it by scanning and verifying the segment. The active segment
// has no index file; Open scans it.
//
// # Cursor file
//
//	 0       4       6       8               16              24
//	+-------+-------+-------+---------------+---------------+
//	| TRSC  |version| flags |    offset     | XXH3-64 0..15 |
//	+-------+-------+-------+---------------+---------------+
//
// offset is the next offset the consumer will read (everything below it
// is processed). flags bit 0 marks the cursor past-retention. Cursor files
// are replaced atomically: write <name>.cursor.tmp, fsync, rename, fsync
// the cursors directory.
//
// # Durability and group commit
//
// Append hands its payload to one flusher goroutine. The flusher takes
// every append queued at that moment (bounded), encodes them as one commit
// group, writes them, calls fdatasync once, and only then publishes the new
// end offset to readers and returns to each caller. Appends arriving
// during the fdatasync form the next group, so concurrent writers share
// fsyncs without a timer. A failed fdatasync is fatal for the Log instance
// (*FatalError): after a failed fsync the kernel may have dropped the
// dirty pages and reports the failure once, so a retry could "succeed"
// over lost data. A failed write that is cut back off cleanly (ENOSPC, a
// short write) fails only its own group.
//
// New segments are created as <name>.tmp, fsynced, renamed and the
// directory fsynced, so a file with a segment name always has a header.
//
// # Repair
//
// Open scans the newest segment. If a frame fails to decode (short header,
// checksum mismatch, a length running past end of file) or the file ends
// inside a chunked entry, Open looks at everything after it. If any intact
// frame there belongs to a later commit group (its offset minus group is
// greater than the failing entry's offset), the failing bytes had been
// fsynced and acknowledged, so Open returns *CorruptionError and changes
// nothing. Otherwise the bytes from the start of the incomplete entry to
// the end of file were never acknowledged (pages of an unsynced write can
// reach the disk in any order, so intact frames of the same group may
// follow the damage): Open copies them to <segment>.torn-<n>, fsyncs the
// copy and the directory, truncates the segment, fsyncs it, and returns a
// *RepairReport. Damage in an older segment is always *CorruptionError.
//
// Sealed segments with a valid index are not scanned on Open; a damaged
// frame in one is reported as *CorruptionError by the reader that reaches
// it.
//
// # Retention
//
// ApplyRetention removes whole segments, oldest first, never the active
// one, while retained bytes exceed Retention.MaxBytes or the segment's
// successor was created more than Retention.MaxAge ago. A segment that a
// registered cursor still needs is kept unless Retention.Expire is set; then
// the cursor is marked past-retention before the segment is removed and its
// reader gets *PastRetentionError. Errors name no commands: the caller adds
// its recovery (AddRecovery).
package segmentlog
