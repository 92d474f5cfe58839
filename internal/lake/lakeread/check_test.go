package lakeread

import (
	"strings"
	"testing"
)

// test_decoding lines as PostgreSQL 15 prints them (include-xids on).
var tdLines = []string{
	"BEGIN 741",
	"table public.items: INSERT: id[bigint]:1001 v[text]:'row ''1''' n[integer]:0",
	"table public.items: UPDATE: id[bigint]:7 v[text]:'seed 7+' n[integer]:1",
	"table public.items: UPDATE: old-key: id[bigint]:996 new-tuple: id[bigint]:100996 v[text]:null n[integer]:0",
	"table public.items: DELETE: id[bigint]:998",
	`table "My S"."t""x": INSERT: "a b"[character varying]:'x y' c[integer[]]:'{1,2}' d[bit(4)]:B'0101' e[text]:unchanged-toast-datum`,
	"table public.items: DELETE: (no-tuple-data)",
	"table public.items: TRUNCATE: (no-flags)",
	"message: transactional: 1 prefix: p, sz: 1 content:x",
	"COMMIT 741",
}

func TestParseTestDecoding(t *testing.T) {
	s := func(v string) *string { return &v }
	cases := []struct {
		line string
		want TDLine
	}{
		{tdLines[0], TDLine{Kind: "BEGIN", Xid: 741}},
		{tdLines[1], TDLine{Kind: "INSERT", Table: "public.items", Cols: []TDCol{{"id", "bigint", s("1001"), false}, {"v", "text", s("row '1'"), false}, {"n", "integer", s("0"), false}}}},
		{tdLines[3], TDLine{Kind: "UPDATE", Table: "public.items", OldKey: []TDCol{{"id", "bigint", s("996"), false}},
			Cols: []TDCol{{"id", "bigint", s("100996"), false}, {"v", "text", nil, false}, {"n", "integer", s("0"), false}}}},
		{tdLines[4], TDLine{Kind: "DELETE", Table: "public.items", Cols: []TDCol{{"id", "bigint", s("998"), false}}}},
		{tdLines[5], TDLine{Kind: "INSERT", Table: `My S.t"x`, Cols: []TDCol{{"a b", "character varying", s("x y"), false}, {"c", "integer[]", s("{1,2}"), false},
			{"d", "bit(4)", s("0101"), false}, {"e", "text", nil, true}}}},
		{tdLines[6], TDLine{Kind: "DELETE", Table: "public.items", NoData: true}},
		{tdLines[7], TDLine{Kind: "TRUNCATE", Table: "public.items"}},
		{tdLines[8], TDLine{Kind: "MESSAGE"}},
		{tdLines[9], TDLine{Kind: "COMMIT", Xid: 741}},
	}
	for _, c := range cases {
		got, err := ParseTestDecoding(c.line)
		if err != nil {
			t.Fatalf("%q: %v", c.line, err)
		}
		if render(got) != render(c.want) {
			t.Fatalf("%q:\n got %s\nwant %s", c.line, render(got), render(c.want))
		}
	}
	for _, bad := range []string{"", "BEGIN x", "table public: INSERT: a[int]:1", "table public.t: INSERT: a[int]:'1", "table public.t: MERGE: x", "table public.t: INSERT: a[int:1"} {
		if _, err := ParseTestDecoding(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

func render(l TDLine) string {
	var b strings.Builder
	b.WriteString(l.Kind + " " + l.Table)
	for _, cs := range [][]TDCol{l.OldKey, l.Cols} {
		b.WriteString(" |")
		for _, c := range cs {
			b.WriteString(" " + c.Name + "[" + c.Type + "]=" + text(c.Value))
			if c.Unchanged {
				b.WriteString("(unchanged)")
			}
		}
	}
	if l.NoData {
		b.WriteString(" nodata")
	}
	return b.String() + " " + strings.Repeat("x", int(l.Xid%7))
}

// FuzzParseTestDecoding is seeded with the lines above and with lines a
// PostgreSQL 15 server printed (testdata/test_decoding.txt, written by
// TestTestDecodingOnPostgres with LAKEREAD_CAPTURE=1).
func FuzzParseTestDecoding(f *testing.F) {
	for _, l := range tdLines {
		f.Add(l)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(readTestdata(f, "test_decoding.txt"))), "\n") {
		if _, err := ParseTestDecoding(l); err != nil {
			f.Fatalf("a captured line does not parse: %v", err)
		}
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, s string) { _, _ = ParseTestDecoding(s) })
}

// A small source: items(id key, v). Snapshot at 0/100 with keys 1 and 2;
// txn 10 (ends 0/200) inserts 3 and updates 1; txn 11 (ends 0/300)
// deletes 2 and moves 3 to 30. Txn 9 ended at 0/90, inside the snapshot.
func checkFixture() ([]*Table, []Source) {
	s := func(v string) *string { return &v }
	row := func(lsn uint64, xid, seq int64, op string, old *string, id, v string) Row {
		return Row{SourceID: "a", CommitLSN: lsn, Xid: xid, Seq: seq, Op: op, OldKey: old, Cols: map[string]*string{"id": s(id), "v": s(v)}, File: "f1"}
	}
	tb := &Table{Name: "public__items", SourceTable: "public.items", Keys: []string{"id"}, Columns: []string{"id", "v"}, Rows: []Row{
		row(0x100, 0, 0, "snapshot", nil, "1", "one"),
		row(0x100, 0, 1, "snapshot", nil, "2", "two"),
		row(0x1f0, 10, 1, "insert", nil, "3", "three"),
		row(0x1f0, 10, 2, "update", nil, "1", "uno"),
		row(0x2f0, 11, 1, "delete", nil, "2", "two"),
		row(0x2f0, 11, 2, "update", s(`["3"]`), "30", "three"),
	}}
	rec := []string{
		"BEGIN 9", "table public.items: INSERT: id[bigint]:2 v[text]:'two'", "COMMIT 9",
		"BEGIN 10", "table public.items: INSERT: id[bigint]:3 v[text]:'three'", "table public.other: INSERT: id[bigint]:3",
		"table public.items: UPDATE: id[bigint]:1 v[text]:'uno'", "COMMIT 10",
		"BEGIN 11", "table public.items: DELETE: id[bigint]:2", "table public.items: UPDATE: old-key: id[bigint]:3 new-tuple: id[bigint]:30 v[text]:'three'", "COMMIT 11",
	}
	lsns := []uint64{0x80, 0x85, 0x90, 0x1f0, 0x1f0, 0x1f0, 0x1f0, 0x200, 0x2f0, 0x2f0, 0x2f0, 0x300}
	var rows []TDRow
	for i, l := range rec {
		rows = append(rows, TDRow{LSN: lsns[i], Data: l})
	}
	txns, err := RecordFromTestDecoding(rows)
	if err != nil {
		panic(err)
	}
	final := State{`["1"]`: {"id": s("1"), "v": s("uno")}, `["30"]`: {"id": s("30"), "v": s("three")}}
	return []*Table{tb}, []Source{{ID: "a", Record: txns, Final: map[string]State{"public.items": final}}}
}

func TestCheck(t *testing.T) {
	tables, sources := checkFixture()
	rep := Check(tables, sources)
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if tr := rep.Tables[0]; tr.Txns != 2 || tr.Absorbed != 1 || tr.Keys != 2 || tr.SnapshotRows != 2 {
		t.Fatalf("report %+v", tr)
	}
	if d := Duplicates(tables[0]); len(d) != 0 {
		t.Fatal(d)
	}
	mutations := []struct {
		name, want string
		mut        func(t *Table, s *Source)
	}{
		{"a change twice", "twice", func(t *Table, _ *Source) { t.Rows = append(t.Rows, t.Rows[2]) }},
		{"a transaction lost", "is not in the changelog", func(t *Table, _ *Source) { t.Rows = t.Rows[:4] }},
		{"a value wrong", "column v", func(t *Table, _ *Source) {
			v := "UNO"
			t.Rows[3].Cols = map[string]*string{"id": t.Rows[3].Cols["id"], "v": &v}
		}},
		{"an old key lost", "old key", func(t *Table, _ *Source) { t.Rows[5].OldKey = nil }},
		{"a change not committed", "not in the source's record", func(_ *Table, s *Source) { s.Record = s.Record[:2] }},
		{"commit order", "commit LSN is not above", func(t *Table, _ *Source) { t.Rows[4].CommitLSN, t.Rows[5].CommitLSN = 0x1e0, 0x1e0 }},
		{"final state differs", "not in the changelog's net state", func(_ *Table, s *Source) {
			v := "x"
			s.Final["public.items"][`["9"]`] = map[string]*string{"id": &v, "v": &v}
		}},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			tables, sources := checkFixture()
			m.mut(tables[0], &sources[0])
			err := Check(tables, sources).Err()
			if err == nil || !strings.Contains(err.Error(), m.want) {
				t.Fatalf("error %v, want one saying %q", err, m.want)
			}
		})
	}
	tables, _ = checkFixture()
	tables[0].Rows = append(tables[0].Rows, tables[0].Rows[2])
	if d := Duplicates(tables[0]); len(d) != 1 || !strings.Contains(d[0], "twice") {
		t.Fatalf("Duplicates = %v", d)
	}
}
