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
	// mod is the type modifier (varchar(n): n+4); 0 means none (-1 on
	// the wire).
	mod int32
	// What the source catalog says beyond pgoutput (schemachange.Facts).
	notNull, hasDefault bool
}

// typmod is the column's type modifier as pgoutput sends it.
func (c colDef) typmod() int32 {
	if c.mod == 0 {
		return -1
	}
	return c.mod
}

// col looks a column up by name (-1 when d has none).
func (d *tableDef) col(name string) int {
	for i, c := range d.cols {
		if c.name == name {
			return i
		}
	}
	return -1
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
		{name: "id", typeOID: 20, key: true}, {name: "balance", typeOID: 20, key: false}, {name: "note", typeOID: 25, key: false}}}
	tOrders = &tableDef{name: "public.orders", oid: 16402, cols: []colDef{
		{name: "id", typeOID: 20, key: true}, {name: "status", typeOID: 25, key: false}, {name: "total", typeOID: 20, key: false}, {name: "doc", typeOID: 25, key: false}}}
	tLines = &tableDef{name: "public.order_lines", oid: 16403, cols: []colDef{
		{name: "order_id", typeOID: 20, key: true}, {name: "n", typeOID: 23, key: true}, {name: "qty", typeOID: 20, key: false}, {name: "amount", typeOID: 20, key: false}}}
	tEvents = &tableDef{name: "public.events", oid: 16404, cols: []colDef{
		{name: "id", typeOID: 20, key: true}, {name: "kind", typeOID: 25, key: false}, {name: "payload", typeOID: 25, key: false}}}
	tTxnLog = &tableDef{name: "public.txn_log", oid: 16405, cols: []colDef{{name: "txn", typeOID: 20, key: false}}}
	// tAccountsDrifted is accounts after ALTER TABLE ... ADD COLUMN tier.
	tAccountsDrifted = &tableDef{name: "public.accounts", oid: 16401, cols: []colDef{
		{name: "id", typeOID: 20, key: true}, {name: "balance", typeOID: 20, key: false}, {name: "note", typeOID: 25, key: false}, {name: "tier", typeOID: 25, key: false}}}

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

// newStateOf is an empty state of the tables defs.
func newStateOf(defs []*tableDef) *state {
	s := &state{tables: map[string]*tableData{}}
	for _, d := range defs {
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

// tableHash is the hash of one table's rows (a part of the state's hash).
func (s *state) tableHash(table string) uint64 {
	var h uint64
	for _, r := range s.tables[table].rows {
		h += rowHash(table, r)
	}
	return h
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
