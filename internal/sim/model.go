package sim

import (
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"
)

// The data model shared by the simulated source (which applies its own
// history to it, in commit order, to know what every prefix of history
// looks like) and the simulated target (whose committed tables use the
// same storage). A state's hash is the wrapping sum of its rows' hashes, so
// it is updated in O(1) per row change and two states with the same rows
// have the same hash whatever the order they were built in.

// val is one column value in PostgreSQL text form.
type val struct {
	null bool
	s    string
}

func text(s string) val { return val{s: s} }

func num(n int64) val { return val{s: strconv.FormatInt(n, 10)} }

// colDef is one column of a table.
type colDef struct {
	name    string
	typeOID uint32
	key     bool
}

// tableDef is a table as the source publishes it.
type tableDef struct {
	name string // schema.name
	oid  uint32
	cols []colDef
}

func (d *tableDef) schema() string { return d.name[:strings.IndexByte(d.name, '.')] }
func (d *tableDef) rel() string    { return d.name[strings.IndexByte(d.name, '.')+1:] }

func (d *tableDef) keyed() bool {
	for _, c := range d.cols {
		if c.key {
			return true
		}
	}
	return false
}

// The simulated schema. txn_log has no key: every source transaction with
// data inserts its id there once, so a transaction applied twice leaves
// two rows and one never applied leaves none.
var (
	tAccounts = &tableDef{name: "public.accounts", oid: 16401, cols: []colDef{
		{"id", 20, true}, {"balance", 20, false}, {"note", 25, false}}}
	tOrders = &tableDef{name: "public.orders", oid: 16402, cols: []colDef{
		{"id", 20, true}, {"status", 25, false}, {"total", 20, false}, {"doc", 25, false}}}
	tLines = &tableDef{name: "public.order_lines", oid: 16403, cols: []colDef{
		{"order_id", 20, true}, {"n", 23, true}, {"qty", 20, false}, {"amount", 20, false}}}
	tEvents = &tableDef{name: "public.events", oid: 16404, cols: []colDef{
		{"id", 20, true}, {"kind", 25, false}, {"payload", 25, false}}}
	tTxnLog = &tableDef{name: "public.txn_log", oid: 16405, cols: []colDef{{"txn", 20, false}}}
	// tAccountsDrifted is accounts after ALTER TABLE ... ADD COLUMN tier.
	tAccountsDrifted = &tableDef{name: "public.accounts", oid: 16401, cols: []colDef{
		{"id", 20, true}, {"balance", 20, false}, {"note", 25, false}, {"tier", 25, false}}}

	simTables = []*tableDef{tAccounts, tOrders, tLines, tEvents, tTxnLog}
)

// tableData is one table's rows, by key. Rows of a table without a key get
// a synthetic key from a counter.
type tableData struct {
	def   *tableDef
	rows  map[string][]val
	rowID int64
}

// state is a set of tables with the hash of their rows.
type state struct {
	tables map[string]*tableData
	hash   uint64
}

func newState() *state {
	s := &state{tables: map[string]*tableData{}}
	for _, d := range simTables {
		s.tables[d.name] = &tableData{def: d, rows: map[string][]val{}}
	}
	return s
}

// rowHash identifies a row's content in a table. Trailing NULLs do not
// count: a row written before a column was added equals the same row with
// NULL in that column, as in PostgreSQL after ADD COLUMN.
func rowHash(table string, row []val) uint64 {
	for len(row) > 0 && row[len(row)-1].null {
		row = row[:len(row)-1]
	}
	var b strings.Builder
	b.WriteString(table)
	for _, v := range row {
		b.WriteByte(0)
		if v.null {
			b.WriteByte(1)
			continue
		}
		b.WriteString(v.s)
	}
	return xxh3.HashString(b.String())
}

// keyOf is the key of row in d ("" for a table without a key).
func keyOf(d *tableDef, row []val) string {
	var b strings.Builder
	for i, c := range d.cols {
		if c.key && i < len(row) {
			b.WriteString(row[i].s)
			b.WriteByte(0)
		}
	}
	return b.String()
}

// put stores row under key, keeping the hash.
func (s *state) put(table, key string, row []val) {
	t := s.tables[table]
	if old, ok := t.rows[key]; ok {
		s.hash -= rowHash(table, old)
	}
	t.rows[key] = row
	s.hash += rowHash(table, row)
}

// del removes key, keeping the hash.
func (s *state) del(table, key string) {
	t := s.tables[table]
	if old, ok := t.rows[key]; ok {
		s.hash -= rowHash(table, old)
		delete(t.rows, key)
	}
}

func (s *state) truncate(table string) {
	t := s.tables[table]
	for k, r := range t.rows {
		s.hash -= rowHash(table, r)
		delete(t.rows, k)
	}
}

// insert adds row; a table without a key gets the next synthetic key.
func (s *state) insert(d *tableDef, row []val) {
	key := keyOf(d, row)
	if !d.keyed() {
		t := s.tables[d.name]
		t.rowID++
		key = "#" + strconv.FormatInt(t.rowID, 10)
	}
	s.put(d.name, key, row)
}

// count is the number of rows in table whose first column is v.
func (s *state) count(table string, v string) int {
	n := 0
	for _, r := range s.tables[table].rows {
		if len(r) > 0 && r[0].s == v {
			n++
		}
	}
	return n
}
