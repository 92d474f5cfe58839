// Package verify proves, or disproves, that a target database holds the same
// rows as the source for a set of tables. It is the engine behind
// `trellara verify` and `trellara run --verify`; docs/VERIFY.md is the
// operator's page.
//
// # Method
//
// No row leaves either database. Each side runs the same aggregate inside a
// REPEATABLE READ READ ONLY transaction, both sides at once:
//
//	SELECT ((hashtextextended(<key text> COLLATE "C", 0) & 9223372036854775807) % B) AS b,
//	       count(*),
//	       sum(hashtextextended(<row text> COLLATE "C", 0))::text
//	FROM ONLY schema.table AS t
//	GROUP BY 1
//
//	row text  (t.*)::text, or ROW(t.c1, t.c2, ...)::text in source column
//	          order when the target's physical column order differs
//	key text  the primary key column as text; ROW(k1, k2)::text for a
//	          composite key; the replica identity index when there is no
//	          primary key; the row text itself when there is neither
//	B         Options.Buckets, or a power of two from the source's row
//	          estimate (64 .. 65536, about 8192 rows per bucket)
//
// A row lands in the same bucket on both sides because the bucket depends
// only on its key. Per bucket the count and the exact sum of 64-bit row
// hashes are compared (sum(int8) accumulates in 128 bits and returns
// numeric, so it never overflows). Sums, unlike XOR, do not cancel when two
// rows swap values or a row is duplicated.
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
// # Equal values, equal text
//
// Every snapshot pins, with SET LOCAL semantics: DateStyle 'ISO, YMD',
// IntervalStyle postgres, TimeZone UTC, extra_float_digits 3, bytea_output
// hex, lc_monetary C and search_path pg_catalog. The servers' encodings
// must match (otherwise Verify returns ErrIncomparable). hashtextextended
// is the same function on every major since 11, but text output of a few
// types has changed between majors (floats in 12): across majors such a
// column can report as changed, and the Result carries a note.
//
// # Watermark
//
// A target applies the source's changes some time after they commit, so a
// comparison is only meaningful at a watermark: the target checkpoint must
// have passed the source LSN observed when the comparison started. Verify:
//
//  1. opens the source snapshot, then reads the source LSN L0
//     (Options.SourceLSN, default pg_current_wal_insert_lsn()); every
//     transaction the snapshot sees committed before L0;
//  2. opens the target snapshot and compares every bucket;
//  3. for tables that differ, and when Options.TargetCheckpoint is given,
//     re-checks: a fresh source snapshot and LSN L, a wait (polling with
//     backoff, within Options.WaitCaughtUp over all rounds) until the
//     target checkpoint passes L, a fresh target snapshot, and a new
//     comparison of only the mismatching buckets. Rounds stop when nothing
//     differs, when a round sees exactly what the previous one saw, when the
//     wait budget is spent, or after Options.RechecksMax rounds;
//  4. reads the target checkpoint once more and reports caught_up as
//     checkpoint >= L0.
//
// So differences seen while the target was behind are reported only if they
// are still there after it caught up, or if it never did (then caught_up is
// false). Tables that matched at the first comparison are CONVERGED even if
// the target checkpoint lags, since their rows are equal.
//
// The checkpoint hook must return a position that advances past idle
// stretches of the source (the applier's keepalive-confirmed position), or
// a source with no writes to the flow's tables would never count as caught
// up.
//
// # Output
//
// Result is the answer; its JSON form is documented on Result, its text
// form is RenderText. ExitCode maps it to the CLI's exit status: 0
// CONVERGED, 1 DIVERGED, 2 error. A DIVERGED table carries the command that
// plans its repair: `trellara repair-plan --config <file> --table <t>`.
//
// # Cost
//
// One sequential scan per side per table, plus, only for differing tables,
// one filtered scan per re-check round and per drill-down level. Both sides
// run concurrently. The cost per row is dominated by rendering the row as
// text; Options.ParallelWorkers lets PostgreSQL's parallel query share it
// across cores. Snapshots hold back vacuum on both servers for the duration
// and hold ACCESS SHARE locks, which block DDL (not writes) on the compared
// tables.
package verify
