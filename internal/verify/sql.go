package verify

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// sessionSettings are pinned with set_config(..., is_local => true) in every
// transaction Verify opens, on both sides. The checksums hash each row's
// text form, so anything that changes how an equal value is rendered would
// make equal rows differ:
//
//   - DateStyle, IntervalStyle, TimeZone: date, interval and timestamptz output.
//   - extra_float_digits 3: exact float output (shortest round-trip on 12+).
//   - bytea_output hex: the escape format is ambiguous to read back.
//   - lc_monetary C: money output carries the locale's currency symbol.
//   - search_path pg_catalog: reg* output and name resolution cannot be
//     steered by objects in the user's schemas (pg_temp is listed last so
//     it is not searched first).
//
// The rest shape the plan, not the result: the planner believes a
// "hash % B" GROUP BY has as many groups as rows and would sort millions of
// rows to form B groups, so sorting is disabled and hash aggregation gets
// memory for the largest bucket count; JIT compilation costs more than it
// saves on one pass over a table.
var sessionSettings = [][2]string{
	{"search_path", "pg_catalog, pg_temp"},
	{"DateStyle", "ISO, YMD"},
	{"IntervalStyle", "postgres"},
	{"TimeZone", "UTC"},
	{"extra_float_digits", "3"},
	{"bytea_output", "hex"},
	{"lc_monetary", "C"},
	{"enable_sort", "off"},
	{"jit", "off"},
	{"work_mem", "64MB"},
}

// settingsSQL renders sessionSettings (and, when workers > 0, the parallel
// query settings) as one statement, so opening a snapshot costs one round
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
	if workers > 0 {
		// The planner prices a partial aggregate by its (wildly
		// overestimated) group count; free tuple transfer lets it see the
		// scan savings.
		set("max_parallel_workers_per_gather", strconv.Itoa(workers))
		set("parallel_tuple_cost", "0")
		set("parallel_setup_cost", "0")
	}
	b.WriteString("pg_catalog.current_setting('server_encoding'), " +
		"pg_catalog.current_setting('server_version_num')::int")
	return b.String()
}

// sqlRelation finds a relation by exact schema and name (no search_path).
const sqlRelation = `SELECT c.oid, c.relkind::text, c.reltuples::float8, c.relreplident::text
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`

// sqlColumns lists live columns in attribute order; format_type output is
// what "type differs" compares (with search_path = pg_catalog it qualifies
// types outside pg_catalog, identically on both sides).
const sqlColumns = `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod)
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

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
const sqlSourceLSN = `SELECT pg_catalog.pg_current_wal_insert_lsn()::text`

// hashMask clears the sign bit, so "hash & mask % B" is never negative
// (abs() would overflow on the minimum int8).
const hashMask = "9223372036854775807"

// plan is how one side reads one table. Both sides hash the same text for
// the same row, but each may need a different expression to produce it.
type plan struct {
	rel      string // quoted relation, with ONLY for plain tables
	keyText  string // text of the key, over alias t (or s.r for whole-row)
	rowText  string // text of the row, over alias t
	wholeRow bool
}

// newPlan builds a side's expressions. cols are the source's column names in
// source order; physicalMatch says this side's own column order equals it,
// so the whole-row reference (t.*)::text renders exactly the text
// ROW(t.c1, t.c2, ...)::text would, without building a new tuple per row
// (measured about 30% cheaper).
func newPlan(tn string, relkind string, cols []string, physicalMatch bool, key []string) plan {
	p := plan{rel: relation(tn, relkind)}
	if physicalMatch {
		p.rowText = "(t.*)::text"
	} else {
		p.rowText = "ROW(" + columnList("t", cols) + ")::text"
	}
	switch len(key) {
	case 0:
		p.wholeRow = true
		p.keyText = "s.r"
	case 1:
		p.keyText = "t." + pgx.Identifier{key[0]}.Sanitize() + "::text"
	default:
		p.keyText = "ROW(" + columnList("t", key) + ")::text"
	}
	return p
}

func columnList(alias string, cols []string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = alias + "." + pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(parts, ", ")
}

// from returns the FROM clause and the key and row text expressions valid
// over it. For whole-row tables the row text is both, so it is computed once
// in a subquery (OFFSET 0 keeps the planner from inlining it back into two
// evaluations).
func (p plan) from() (from, key, row string) {
	if p.wholeRow {
		return "(SELECT " + p.rowText + " AS r FROM " + p.rel + " AS t OFFSET 0) AS s", "s.r", "s.r"
	}
	return p.rel + " AS t", p.keyText, p.rowText
}

// hashExpr is the 64-bit hash of a text. hashtextextended is the hash
// PostgreSQL uses for text in hash indexes and partitioning: fast (about
// twice as fast as md5 here), seedable, and the same function on every
// major since 11. COLLATE "C" pins the bytewise path.
func hashExpr(text string, seed int) string {
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

func bucketExpr(key string, seed int, mod int64) string {
	return fmt.Sprintf("((%s & %s) %% %d)", hashExpr(key, seed), hashMask, mod)
}

// where renders the filters for levels; parameters are $1..$n in order.
func where(key string, levels []level) (string, []any) {
	if len(levels) == 0 {
		return "", nil
	}
	conds := make([]string, len(levels))
	args := make([]any, len(levels))
	for i, l := range levels {
		conds[i] = fmt.Sprintf("%s = ANY($%d::int8[])", bucketExpr(key, l.seed, l.mod), i+1)
		args[i] = l.keep
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// bucketQuery aggregates the rows selected by filters into buckets of
// (seed, mod): per bucket the row count and the exact sum of the rows'
// 64-bit hashes. sum(int8) accumulates in 128 bits and returns numeric, so
// it cannot overflow; it is sent as text and parsed exactly. A sum, unlike
// XOR, does not cancel when two rows swap values.
func (p plan) bucketQuery(filters []level, seed int, mod int64) (string, []any) {
	from, key, row := p.from()
	w, args := where(key, filters)
	return fmt.Sprintf("SELECT %s AS b, count(*), pg_catalog.sum(%s)::text FROM %s%s GROUP BY 1",
		bucketExpr(key, seed, mod), hashExpr(row, 0), from, w), args
}

// rowsQuery fetches (key text, row hash) for the rows selected by filters,
// at most limit of them.
func (p plan) rowsQuery(filters []level, limit int) (string, []any) {
	from, key, row := p.from()
	w, args := where(key, filters)
	return fmt.Sprintf("SELECT %s, %s FROM %s%s LIMIT %d", key, hashExpr(row, 0), from, w, limit), args
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
