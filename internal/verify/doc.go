// Package verify proves, or disproves, that a target database holds the same
// rows as the source for a set of tables. It is the engine behind
// `trellara verify` and `trellara run --verify`; docs/VERIFY.md is the
// operator's page.
//
// # Method
//
// No row leaves either database except the few keys drill-down names. Each
// side runs the same aggregates inside a REPEATABLE READ READ ONLY
// transaction, both sides at once. First, per table, the total:
//
//	SELECT count(*), sum(<row hash>)::text FROM ONLY schema.table AS t
//
// and, only for tables whose totals differ, the buckets, in the same
// snapshots:
//
//	SELECT (<key hash> & 9223372036854775807) % B AS b, count(*), sum(<row hash>)::text
//	FROM ONLY schema.table AS t GROUP BY 1
//
//	row hash  HashingTyped (both sides PostgreSQL 14+):
//	            hashint8extended(hash_record_extended(ROW(c1, c2, ...), 0), 0)
//	          where each column enters as itself when its type's hash is
//	          exact (integers, bool, "char", oid, date, time, timestamp,
//	          timestamptz, uuid, bytea), COLLATE "C" for text, varchar and
//	          name, and as its text (c::text) for every other type;
//	          HashingText (older servers):
//	            hashtextextended(ROW(c1, c2, ...)::text, 0)
//	          Columns are named in source order, so the target's physical
//	          column order does not matter.
//	key hash  the primary key (else the replica identity index) hashed with
//	          its type's function (hashint8extended, hashtextextended, ...;
//	          a composite key as a record); with neither, the row hash
//	          itself: the row is its own key
//	B         Options.Buckets, or a power of two from the source's row
//	          estimate (64 .. 65536, about 8192 rows per bucket)
//
// A table's total is the sum of its buckets' totals, so equal totals settle
// it; skipping the GROUP BY when they match saves about a third of the
// time. A row lands in the same bucket on both sides because the bucket
// depends only on its key. Counts and exact sums of 64-bit row hashes are
// compared (sum(int8) accumulates in 128 bits and returns numeric, so it
// never overflows). Sums, unlike XOR, do not cancel when a row appears
// twice; the final hashint8extended keeps hash_record_extended's linear
// column combination from letting two rows that swap a column's values
// cancel out.
//
// # Parallel hashing, one snapshot
//
// Each side hashes a table over Options.Connections connections (default
// min(4, CPUs)), each query over its own range of heap pages:
//
//	... FROM ONLY schema.table AS t WHERE t.ctid >= '(lo,0)'::tid AND t.ctid < '(hi,0)'::tid
//
// (the last range open-ended), read by TID range scans (PostgreSQL 14+),
// and the ranges' counts and sums are added. All connections of a side see
// one snapshot: the first connection's transaction exports it
// (pg_export_snapshot) and each other connection's REPEATABLE READ
// transaction adopts it with SET TRANSACTION SNAPSHOT as its first
// statement, so the result is what one connection would have computed and
// the watermark rule below is unchanged. Tables under 1024 pages are one
// query.
//
// For mismatching buckets Verify drills down in the same snapshots: it
// fetches (key text, row hash) for a few of the smallest of them from both
// sides and names example keys as missing (at source, not at target), extra
// (at target only) or changed. A bucket too large to fetch within
// Options.DrillRowsMax is first split by the key hash with another seed,
// repeatedly, keeping only parts that still differ.
//
// Before hashing, Verify compares each table's shape. A missing target
// table, a missing or extra column, or a column whose type differs makes the
// table DIVERGED with that reason; column order does not matter.
//
// # Equal values, equal hashes
//
// Values that a type's own equality calls equal but that differ when
// printed (numeric 1.0 and 1.00, float -0 and 0, interval '1 day' and
// '24 hours', text under a case-insensitive collation) are different
// values, and Verify reports them: such columns are hashed through their
// text, strings bytewise.
//
// Every snapshot pins, with SET LOCAL semantics: DateStyle 'ISO, YMD',
// IntervalStyle postgres, TimeZone UTC, extra_float_digits 3, bytea_output
// hex, lc_monetary C and search_path pg_catalog, so text forms do not
// depend on either side's configuration. The servers' encodings must match
// (otherwise Verify returns ErrIncomparable). The hash functions are the
// ones PostgreSQL's hash indexes and hash partitioning rely on, unchanged
// across majors, but the text output of a few types has changed between
// majors (floats in 12): across majors such a column can report as
// changed, and the Result carries a note.
//
// # Watermark
//
// A target applies the source's changes some time after they commit, so a
// comparison is only meaningful at a watermark: the target snapshot must be
// taken after the target checkpoint passed the source LSN observed when the
// source snapshot was taken. Verify, in rounds, each with one fresh pair of
// snapshots:
//
//  1. opens the source snapshot, then reads the source LSN L, the
//     watermark (Options.SourceLSN, default pg_current_wal_insert_lsn());
//     every transaction the snapshot sees committed before L;
//  2. with Options.TargetCheckpoint, waits (polling with backoff, within
//     Options.WaitCaughtUp over all rounds) until the target checkpoint
//     passes L, keeping the last position read;
//  3. opens the target snapshot and compares every table;
//  4. when a table differs and the round reached its watermark, starts
//     another round (a table split into buckets the round before is split
//     again straight away, its totals summed from the buckets): the target
//     snapshot may hold changes the source snapshot did not see, and such a
//     difference moves between rounds. Rounds stop when nothing differs,
//     when a round sees exactly what the previous one saw, when a round's
//     wait ran out, or after Options.RechecksMax re-checks.
//
// The watermark reported is the last round's L, the checkpoint read just
// before its target snapshot, and caught_up as checkpoint >= L. The verdict,
// counts, checksums, example keys and watermark all come from that one pair
// of snapshots; nothing is carried over from an earlier round, so a bucket
// or table that matched then and differs now is reported.
//
// decide makes every verdict, per table and for the whole result: a target
// short of the watermark is BEHIND whether its rows differ or not (a
// difference may be a change still on its way; a match proves nothing yet),
// so CONVERGED never stands beside "not caught up" and DIVERGED always
// means a difference at a common watermark. A BEHIND result carries the lag
// (Watermark.LagBytes, Watermark.LagAge); its example keys come with a note
// that they may only be waiting to be applied. Without a
// TargetCheckpoint hook there is no watermark: rows are compared as found,
// never re-checked, and the verdict is CONVERGED or DIVERGED.
//
// The applier only ever reaches positions it is sent, so either the
// checkpoint must advance past idle stretches of the source (a
// keepalive-confirmed position) or SourceLSN must return a position the
// applier will pass, such as a logical message written for the purpose;
// otherwise a source with no writes to the flow's tables never counts as
// caught up. The flow writes such a fence while a pipeline runs. For a flow
// at rest nothing would apply one, so the flow's SourceLSN hook instead
// counts, after the source snapshot, the committed transactions the target
// lacks and returns the end of the newest (or the target checkpoint when
// there is none), recording the count in Watermark.Pending: BEHIND then
// means changes the target has not applied, never WAL that merely moved.
//
// # Output
//
// Result is the answer; its JSON form is documented on Result, its text
// form is RenderText. ExitCode maps it to the CLI's exit status: 0
// CONVERGED, 1 DIVERGED, 3 BEHIND, 2 error. A DIVERGED table carries the
// command that plans its repair: `trellara repair-plan --config <file>
// --table <t>`; a BEHIND result carries CatchUpCommand.
//
// # Cost
//
// One sequential scan per side per table (in page ranges over the side's
// connections); a table whose totals differ gets
// one more to split it, plus one scan per table per re-check round and one
// filtered scan per drill-down level. Both sides run concurrently. The
// source snapshot stays open while Verify waits for the target. On one core a side hashes
// about 1.7 million rows of a five-column table per second (see
// BenchmarkVerify); Options.Connections divides that time across a
// server's spare cores, and Options.ParallelWorkers lets PostgreSQL's
// parallel query share the work too. Snapshots hold back vacuum on both servers
// for the duration and hold ACCESS SHARE locks, which block DDL (not
// writes) on the compared tables.
package verify
