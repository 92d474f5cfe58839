package verify

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/internal/pgsession"
)

// sessionSettings are pinned with set_config(..., is_local => true) in every
// transaction Verify opens, on both sides. The checksums hash each row's
// text form, so anything that changes how an equal value is rendered would
// make equal rows differ: every setting pgsession pins on Trellara's
// connections (DateStyle, IntervalStyle, TimeZone, extra_float_digits,
// bytea_output, lc_monetary, ...) is pinned again here, because Verify may
// be handed connections opened elsewhere; and
//
//   - search_path pg_catalog: reg* output and name resolution cannot be
//     steered by objects in the user's schemas (pg_temp is listed last so
//     it is not searched first).
//
// The rest shape the plan, not the result: the planner believes a
// "hash % B" GROUP BY has as many groups as rows and would sort millions of
// rows to form B groups, so sorting is disabled and hash aggregation gets
// memory for the largest bucket count; JIT compilation costs more than it
// saves on one pass over a table.
var sessionSettings = func() [][2]string {
	out := [][2]string{{"search_path", "pg_catalog, pg_temp"}}
	for _, s := range pgsession.Pinned() {
		out = append(out, [2]string{s.Name, s.Value})
	}
	return append(out, [][2]string{
		{"enable_sort", "off"},
		{"jit", "off"},
		{"work_mem", "64MB"},
	}...)
}()

// settingsSQL renders sessionSettings (and the parallel query settings
// Options.ParallelWorkers asks for) as one statement, so opening a snapshot costs one round
// trip. It also returns the server facts compareServers needs.
func settingsSQL(workers int) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	set := func(name, value string) {
		fmt.Fprintf(&b, "pg_catalog.set_config('%s', '%s', true), ", name, value)
	}
	for _, kv := range sessionSettings {
		set(kv[0], kv[1])
	}
	switch {
	case workers > 0:
		// The planner prices a partial aggregate by its (wildly
		// overestimated) group count; free tuple transfer lets it see the
		// scan savings.
		set("max_parallel_workers_per_gather", strconv.Itoa(workers))
		set("parallel_tuple_cost", "0")
		set("parallel_setup_cost", "0")
	case workers < 0:
		set("max_parallel_workers_per_gather", "0")
	}
	b.WriteString("pg_catalog.current_setting('server_encoding'), " +
		"pg_catalog.current_setting('server_version_num')::int, " + sqlNative)
	return b.String()
}

// nativeFunction is the C row hash's signature in the trellara extension
// (0.2 and later; ext/verifyhash.c).
const nativeFunction = "trellara_verify_buckets(pg_catalog.regclass, text[], text, text[], text, int8, int8, int8, int8)"

// sqlNative is the trellara extension's C row hash, schema-qualified and
// quoted, when this session can call it: the extension is created in this
// database at a version that has the function (0.2 or later), the session
// may execute it, and the server preloads the library (trellara refuses
// to load any other way, which would abort the snapshot's transaction).
// The preload is seen in pg_settings, which any role may read (unlike
// shared_preload_libraries): a loaded library defines
// trellara.queue_wait_timeout as an integer, where a setting in
// postgresql.conf without the library would be a text placeholder.
// Otherwise the empty string. The extension is relocatable: its schema comes from
// pg_extension.
const sqlNative = `COALESCE((SELECT pg_catalog.quote_ident(n.nspname) || '.trellara_verify_buckets'
  FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace,
  LATERAL pg_catalog.to_regprocedure(pg_catalog.quote_ident(n.nspname) || '.` + nativeFunction + `') AS f(oid)
  WHERE e.extname = 'trellara' AND f.oid IS NOT NULL AND pg_catalog.has_function_privilege(f.oid, 'EXECUTE')
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_settings WHERE name = 'trellara.queue_wait_timeout' AND vartype = 'integer')), '')`

// sqlRelation finds a relation by exact schema and name (no search_path).
const sqlRelation = `SELECT c.oid, c.relkind::text, c.reltuples::float8, c.relreplident::text
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`

// sqlColumns lists live columns in attribute order; format_type output is
// what "type differs" compares (with search_path = pg_catalog it qualifies
// types outside pg_catalog, identically on both sides).
const sqlColumns = `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), a.atttypid
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

// sqlNativeTable says whether the extension's C row hash may read a table
// instead of SQL: not where row-level security applies to this session
// (the C scan would not apply the policies, and refuses), nor where the
// table or a partition is not a plain heap table (a foreign table, which
// only SQL reads; another table access method, which may lack the TID
// range scans the function uses).
const sqlNativeTable = `SELECT NOT pg_catalog.row_security_active($1::pg_catalog.oid) AND NOT EXISTS (
  SELECT 1 FROM pg_catalog.pg_partition_tree($1::pg_catalog.oid) AS p JOIN pg_catalog.pg_class c ON c.oid = p.relid
  LEFT JOIN pg_catalog.pg_am a ON a.oid = c.relam
  WHERE p.isleaf AND (c.relkind <> 'r' OR a.amname IS DISTINCT FROM 'heap'))`

// sqlKeyColumns lists the primary key's columns, then the replica identity
// index's, each in index order; the caller takes the first group present.
const sqlKeyColumns = `SELECT i.indisprimary, a.attname::text
FROM pg_catalog.pg_index i
CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident)
ORDER BY i.indisprimary DESC, k.ord`

// sqlSourceLSN is the default SourceLSN. The insert position, not the
// write position: with synchronous_commit off a transaction is visible
// before its commit record is written, so only the insert position is an
// upper bound for everything the snapshot sees.
// sqlPages is a table's size in pages (for a partitioned table, its
// largest partition's), to cut it into ranges for parallel hashing. Only an
// estimate of balance: the ranges cover every page whatever it says.
const sqlPages = `SELECT GREATEST(pg_catalog.pg_relation_size($1::int8::oid::regclass),
  COALESCE((SELECT max(pg_catalog.pg_relation_size(p.relid)) FROM pg_catalog.pg_partition_tree($1::int8::oid::regclass) AS p WHERE p.isleaf), 0))
  / pg_catalog.current_setting('block_size')::int8`

// sqlExportSnapshot publishes a snapshot transaction's snapshot so the
// side's other connections can adopt it (sqlImportSnapshot).
const sqlExportSnapshot = `SELECT pg_catalog.pg_export_snapshot()`

// sqlImportSnapshot must be the first statement of a REPEATABLE READ
// transaction; the identifier comes from sqlExportSnapshot, quoted.
const sqlImportSnapshot = `SET TRANSACTION SNAPSHOT `

const sqlSourceLSN = `SELECT pg_catalog.pg_current_wal_insert_lsn()::text`

// hashMask clears the sign bit, so "hash & mask % B" is never negative
// (abs() would overflow on the minimum int8).
const hashMask = "9223372036854775807"

// Hashing is how a row becomes a 64-bit hash. Both sides always use the same
// one; Result.RowHash names it.
type Hashing string

const (
	// HashingTyped (PostgreSQL 14+ on both sides) hashes each column with
	// its type's own extended hash function where that function is exact
	// (equal hash input if and only if identical stored value: integers,
	// bool, "char", oid, date, time, timestamp, timestamptz, uuid, bytea,
	// and text, varchar and name compared bytewise), and the column's text
	// form for every other type (numeric, floats, json, jsonb, arrays,
	// intervals, composites, domains, enums, ...), whose hash functions
	// equate values that print differently (1.0 and 1.00, -0 and 0,
	// '1 day' and '24 hours'). hash_record_extended combines the columns
	// and hashint8extended mixes the result. It skips rendering most
	// columns as text, which is where the time goes: about twice as fast
	// as HashingText on typical tables.
	HashingTyped Hashing = "typed"
	// HashingText hashes the text form of the whole row,
	// ROW(c1, c2, ...)::text, with hashtextextended. Used when either side
	// is older than PostgreSQL 14 (no hash_record_extended).
	HashingText Hashing = "text"
)

// Type OIDs are fixed for built-in types across PostgreSQL versions.
const (
	oidBool        = 16
	oidBytea       = 17
	oidChar        = 18
	oidName        = 19
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidOid         = 26
	oidVarchar     = 1043
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidUUID        = 2950
)

// hashMode is how a value enters a typed hash. The same letters are
// trellara_verify_buckets' column modes (ext/verifyhash.c), so this file
// alone decides which type enters how, for the SQL and the C path alike.
type hashMode byte

const (
	// modeValue: the value itself, hashed by its type's extended hash
	// function under its own collation.
	modeValue hashMode = 'v'
	// modeBytes: the value under COLLATE "C" (text, varchar, name: the
	// bytes).
	modeBytes hashMode = 'c'
	// modeText: the value's text form (col::text) under COLLATE "C".
	modeText hashMode = 't'
)

// columnMode is how a column of type typ enters hash_record_extended:
// itself when its type's hash is exact, bytewise for strings, else its
// text.
func columnMode(typ uint32) hashMode {
	switch typ {
	case oidBool, oidBytea, oidChar, oidInt8, oidInt2, oidInt4, oidOid, oidDate, oidTime, oidTimestamp, oidTimestamptz, oidUUID:
		return modeValue
	case oidText, oidVarchar, oidName:
		return modeBytes
	}
	return modeText
}

// singleKeyHashFunc names the hash function of the single-column key
// types hashed as themselves (keyMode modeValue): each type's own extended
// hash function, which exists on every supported major.
var singleKeyHashFunc = map[uint32]string{
	oidInt2: "hashint2extended",
	oidInt4: "hashint4extended",
	oidInt8: "hashint8extended",
	oidUUID: "uuid_hash_extended",
}

// keyMode is how a single-column key of type typ is hashed on its own.
func keyMode(typ uint32) hashMode {
	if _, ok := singleKeyHashFunc[typ]; ok {
		return modeValue
	}
	if typ == oidText || typ == oidVarchar {
		return modeBytes
	}
	return modeText
}

// sql renders ref as it enters a record in mode m.
func (m hashMode) sql(ref string) string {
	switch m {
	case modeValue:
		return ref
	case modeBytes:
		return ref + ` COLLATE "C"`
	}
	return ref + `::text COLLATE "C"`
}

// typedColumn is a column as it enters hash_record_extended.
func typedColumn(ref string, typ uint32) string { return columnMode(typ).sql(ref) }

// plan is how one side reads one table. Both sides get the same expressions
// over their own relation; columns are addressed by name in source order,
// so the target's physical column order does not matter.
type plan struct {
	rel      string   // quoted relation, with ONLY for plain tables
	oid      uint32   // the relation, for the C path
	native   string   // trellara_verify_buckets, qualified; "" hashes in SQL
	cols     []column // source columns, source order
	key      []column // key columns; none for whole-row
	hashing  Hashing
	wholeRow bool
}

func newPlan(quoted, relkind string, oid uint32, cols, key []column, h Hashing) plan {
	return plan{rel: relation(quoted, relkind), oid: oid, cols: cols, key: key, hashing: h, wholeRow: len(key) == 0}
}

func ref(c column) string { return "t." + pgx.Identifier{c.name}.Sanitize() }

// rowText is the row's text form over alias t: ROW(...) in source column
// order renders what (t.*)::text would for the source, without depending
// on either side's physical order (and measured cheaper than (t.*)::text,
// which copies and flattens the tuple first).
func (p plan) rowText() string { return "ROW(" + p.list(p.cols, false) + ")::text" }

func (p plan) list(cols []column, typed bool) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = ref(c)
		if typed {
			parts[i] = typedColumn(ref(c), c.oid)
		}
	}
	return strings.Join(parts, ", ")
}

// recordHash is the row's hash before the final mix.
func (p plan) recordHash() string {
	if p.hashing == HashingTyped {
		return "pg_catalog.hash_record_extended(ROW(" + p.list(p.cols, true) + "), 0)"
	}
	return textHash(p.rowText(), 0)
}

// mix turns a record hash into the row hash that is summed.
// hash_record_extended combines column hashes linearly (h = 31h + hi), so
// without a non-linear mix the sum over a bucket would split into per-column
// sums, and two rows swapping one column's values would cancel out.
func (p plan) mix(h string) string {
	if p.hashing == HashingTyped {
		return "pg_catalog.hashint8extended(" + h + ", 0)"
	}
	return h // hashtextextended of the whole row text is already mixed
}

// keyHash is the 64-bit hash of the key with seed. A single column uses its
// type's hash function directly when there is one for the type (these exist
// on every supported major); anything else hashes the key's text, or, with
// HashingTyped, the typed key record.
func (p plan) keyHash(seed int) string {
	if len(p.key) == 1 {
		c := p.key[0]
		switch keyMode(c.oid) {
		case modeValue:
			return fmt.Sprintf("pg_catalog.%s(%s, %d)", singleKeyHashFunc[c.oid], ref(c), seed)
		case modeBytes:
			return textHash(ref(c), seed)
		}
		return textHash(ref(c)+"::text", seed)
	}
	if p.hashing == HashingTyped {
		return fmt.Sprintf("pg_catalog.hash_record_extended(ROW(%s), %d)", p.list(p.key, true), seed)
	}
	return textHash("ROW("+p.list(p.key, false)+")::text", seed)
}

// keyText is the key as the report names it: the column's text, or the
// key record's text for composite keys.
func (p plan) keyText() string {
	if len(p.key) == 1 {
		return ref(p.key[0]) + "::text"
	}
	return "ROW(" + p.list(p.key, false) + ")::text"
}

// exprs returns the FROM clause and, valid over it, the key hash for a seed
// and the row hash, plus the condition that restricts the rows to rng
// ("" for the whole table). A whole-row table's key is its row, so the
// record hash is computed once in a subquery (OFFSET 0 keeps the planner
// from inlining it back into several evaluations), with the range applied
// inside it, and both hashes derive from it; withText adds the row text for
// drill-down's report.
func (p plan) exprs(withText bool, rng tidRange) (from string, key func(seed int) string, row string, cond string) {
	if p.wholeRow {
		inner := p.recordHash() + " AS h"
		if withText {
			inner += ", " + p.rowText() + " AS r"
		}
		w := ""
		if c := rng.cond("t"); c != "" {
			w = " WHERE " + c
		}
		return "(SELECT " + inner + " FROM " + p.rel + " AS t" + w + " OFFSET 0) AS s",
			func(seed int) string { return fmt.Sprintf("pg_catalog.hashint8extended(s.h, %d)", seed) },
			p.mix("s.h"), ""
	}
	return p.rel + " AS t", p.keyHash, p.mix(p.recordHash()), rng.cond("t")
}

// tidRange is a range of heap pages, [lo, hi), or [lo, end of table) when
// hi is negative. Parallel hashing splits a table into ranges of its
// physical pages, one query each: TID range scans (PostgreSQL 14+) read
// only their pages, so N connections read the table once between them,
// whatever its key. The last range is open, so rows on pages added after
// the size was read are still counted, by exactly one range. On a
// partitioned table the condition applies to each partition's own ctid.
type tidRange struct{ lo, hi int64 }

// wholeTable is the range that needs no condition.
var wholeTable = tidRange{0, -1}

// cond renders rng as a condition on alias's ctid; "" for the whole table.
func (r tidRange) cond(alias string) string {
	var parts []string
	if r.lo > 0 {
		parts = append(parts, fmt.Sprintf("%s.ctid >= '(%d,0)'::pg_catalog.tid", alias, r.lo))
	}
	if r.hi >= 0 {
		parts = append(parts, fmt.Sprintf("%s.ctid < '(%d,0)'::pg_catalog.tid", alias, r.hi))
	}
	return strings.Join(parts, " AND ")
}

// splitPages cuts a table of pages pages into at most n ranges of at least
// minPages pages each (one range when it is smaller than that), covering
// every page number from 0 up, the last one open-ended.
func splitPages(pages int64, n, minPages int) []tidRange {
	k := int64(n)
	if minPages > 0 {
		k = min(k, pages/int64(minPages))
	}
	if k <= 1 {
		return []tidRange{wholeTable}
	}
	out := make([]tidRange, k)
	for i := range k {
		out[i] = tidRange{lo: pages * i / k, hi: pages * (i + 1) / k}
	}
	out[k-1].hi = -1
	return out
}

// textHash is the 64-bit hash of a text. hashtextextended is the hash
// PostgreSQL uses for text in hash indexes and partitioning: seedable,
// stable across majors, and about twice as fast as md5 here. COLLATE "C"
// pins the bytewise path.
func textHash(text string, seed int) string {
	return fmt.Sprintf(`pg_catalog.hashtextextended(%s COLLATE "C", %d)`, text, seed)
}

// level is one bucketing of the key hash: rows whose hash with seed, mod
// mod, is in keep. Level 0 is the table's buckets; deeper levels split
// mismatching buckets during drill-down.
type level struct {
	seed int
	mod  int64
	keep []int64
}

func bucketExpr(keyHash string, mod int64) string {
	return fmt.Sprintf("((%s & %s) %% %d)", keyHash, hashMask, mod)
}

// where renders cond and the filters for levels; parameters are $1..$n
// in order.
func where(key func(int) string, levels []level, cond string) (string, []any) {
	var conds []string
	if cond != "" {
		conds = append(conds, cond)
	}
	args := make([]any, len(levels))
	for i, l := range levels {
		conds = append(conds, fmt.Sprintf("%s = ANY($%d::int8[])", bucketExpr(key(l.seed), l.mod), i+1))
		args[i] = l.keep
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// bucketQuery aggregates the rows of rng selected by filters into buckets
// of (seed, mod): per bucket the row count and the exact sum of the rows'
// 64-bit hashes. sum(int8) accumulates in 128 bits and returns numeric, so
// it cannot overflow; it is sent as text and parsed exactly. A sum, unlike
// XOR, does not cancel when a row appears twice; and because it is a sum,
// the buckets of a table are the bucket-wise sums of its ranges' buckets.
// Without filters, a plan with the C path computes the same buckets with
// nativeQuery.
func (p plan) bucketQuery(filters []level, seed int, mod int64, rng tidRange) (string, []any) {
	if p.native != "" && len(filters) == 0 {
		return p.nativeQuery("bucket, row_count, hash_sum", seed, mod, rng)
	}
	from, key, row, cond := p.exprs(false, rng)
	w, args := where(key, filters, cond)
	return fmt.Sprintf("SELECT %s AS b, count(*), pg_catalog.sum(%s)::text FROM %s%s GROUP BY 1",
		bucketExpr(key(seed), mod), row, from, w), args
}

// totalQuery is the count and hash sum of rng's rows: a bucket query with
// one bucket and no GROUP BY. sum() of no rows is NULL.
func (p plan) totalQuery(rng tidRange) (string, []any) {
	if p.native != "" {
		return p.nativeQuery("COALESCE(pg_catalog.sum(row_count), 0)::int8, pg_catalog.sum(hash_sum::numeric)::text", 0, 1, rng)
	}
	from, _, row, cond := p.exprs(false, rng)
	w := ""
	if cond != "" {
		w = " WHERE " + cond
	}
	return fmt.Sprintf("SELECT count(*), pg_catalog.sum(%s)::text FROM %s%s", row, from, w), nil
}

// nativeQuery selects out from trellara_verify_buckets over rng: the
// extension's C row hash, which computes what bucketQuery's SQL computes,
// bit for bit (ext/verifyhash.c; proven by ext/sql/verifyhash.sql and
// TestNativeRowHashEqualsSQL). The modes are the ones the SQL uses: the
// columns' as they enter the row's record, the key's as keyHash hashes it
// (a single column on its own, several as a record; none: the row).
func (p plan) nativeQuery(out string, seed int, mod int64, rng tidRange) (string, []any) {
	names := func(cs []column) []string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = c.name
		}
		return out
	}
	modes := func(cs []column, mode func(uint32) hashMode) string {
		b := make([]byte, len(cs))
		for i, c := range cs {
			b[i] = byte(mode(c.oid))
		}
		return string(b)
	}
	keyModes := modes(p.key, columnMode)
	if len(p.key) == 1 {
		keyModes = modes(p.key, keyMode)
	}
	q := fmt.Sprintf("SELECT %s FROM %s($1::pg_catalog.oid::pg_catalog.regclass, $2, $3, $4, $5, $6, $7, $8, $9)", out, p.native)
	return q, []any{p.oid, names(p.cols), modes(p.cols, columnMode), names(p.key), keyModes, int64(seed), mod, rng.lo, rng.hi}
}

// rowsQuery fetches (key text, row hash) for the rows selected by filters,
// at most limit of them.
func (p plan) rowsQuery(filters []level, limit int) (string, []any) {
	from, key, row, _ := p.exprs(true, wholeTable)
	text := p.keyText()
	if p.wholeRow {
		text = "s.r"
	}
	w, args := where(key, filters, "")
	return fmt.Sprintf("SELECT %s, %s FROM %s%s LIMIT %d", text, row, from, w, limit), args
}

// relation renders a table for FROM. Inheritance children are separate
// tables to replication, so a plain table is read with ONLY; a partitioned
// table ('p') must include its partitions.
func relation(quoted, relkind string) string {
	if relkind == "r" {
		return "ONLY " + quoted
	}
	return quoted
}

// countQuery counts rows when the shapes differ and hashes would mean nothing.
func countQuery(rel string) string {
	return "SELECT count(*) FROM " + rel
}
