package lakeread

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// TestTestDecodingOnPostgres: the parser reads what a real server's
// test_decoding prints: quoted identifiers, quotes inside text, NULL,
// arrays, numeric, a key change, a delete, an unchanged TOAST value, a
// transaction with changes to two tables. Every value parsed equals the
// column's ::text on the source (booleans aside: test_decoding prints
// true/false, the text form is t/f, and the table has none). With
// LAKEREAD_CAPTURE=1 the lines are written to testdata/test_decoding.txt,
// the seeds of FuzzParseTestDecoding.
func TestTestDecodingOnPostgres(t *testing.T) {
	pgtest.Require(t)
	c := pgtest.Start(t, pgtest.Options{})
	c.Exec(t, `CREATE TABLE "Odd ""Name""" ("the id" bigint PRIMARY KEY, v text, a int[], n numeric(12,2), big text)`,
		`CREATE TABLE plain (id int PRIMARY KEY, v text)`,
		`SELECT pg_create_logical_replication_slot('lr', 'test_decoding')`,
		`INSERT INTO "Odd ""Name""" VALUES (1, 'it''s "q"', '{1,2}', 3.50, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 4000) g)), (2, NULL, NULL, NULL, 'y')`,
		`BEGIN; UPDATE "Odd ""Name""" SET v = 'moved' WHERE "the id" = 1; INSERT INTO plain VALUES (1, 'a b'); COMMIT`,
		`UPDATE "Odd ""Name""" SET "the id" = 20 WHERE "the id" = 2`,
		`DELETE FROM plain WHERE id = 1`)
	ctx := context.Background()
	conn := c.Connect(ctx)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_changes('lr', NULL, NULL, 'include-xids', '1', 'skip-empty-xacts', '1')`)
	if err != nil {
		t.Fatal(err)
	}
	var td []TDRow
	var lines []string
	for rows.Next() {
		var lsn, data string
		var xid int64
		if err := rows.Scan(&lsn, &xid, &data); err != nil {
			t.Fatal(err)
		}
		l, err := ParseLSN(lsn)
		if err != nil {
			t.Fatal(err)
		}
		td = append(td, TDRow{LSN: l, Xid: xid, Data: data})
		if len(data) < 300 {
			lines = append(lines, data)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("LAKEREAD_CAPTURE") == "1" {
		if err := os.WriteFile("testdata/test_decoding.txt", []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	txns, err := RecordFromTestDecoding(td)
	if err != nil {
		t.Fatal(err)
	}
	if len(txns) != 4 {
		t.Fatalf("%d transactions, want 4: %+v", len(txns), txns)
	}
	ins := txns[0].Changes
	if len(ins) != 2 || ins[0].Table != `public.Odd "Name"` || ins[0].Kind != "INSERT" {
		t.Fatalf("first transaction %+v", ins)
	}
	got := tdMap(ins[0].Cols)
	var want [5]*string
	if err := conn.QueryRow(ctx, `SELECT 1::bigint::text, $1::text, '{1,2}'::int[]::text, 3.50::numeric(12,2)::text, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 4000) g)`, `it's "q"`).
		Scan(&want[0], &want[1], &want[2], &want[3], &want[4]); err != nil {
		t.Fatal(err)
	}
	for i, col := range []string{"the id", "v", "a", "n", "big"} {
		if text(got[col]) != text(want[i]) {
			t.Fatalf("column %s: parsed %s, source %s", col, text(got[col]), text(want[i]))
		}
	}
	if g := tdMap(ins[1].Cols); g["v"] != nil || g["a"] != nil || *g["the id"] != "2" {
		t.Fatalf("second row %+v", ins[1].Cols)
	}
	if ch := txns[1].Changes; len(ch) != 2 || ch[0].Kind != "UPDATE" || ch[0].OldKey != nil || ch[1].Table != "public.plain" {
		t.Fatalf("second transaction %+v", ch)
	}
	// The big value was not changed: unchanged-toast-datum, left out.
	if _, sent := tdMap(txns[1].Changes[0].Cols)["big"]; sent {
		t.Fatalf("an unchanged TOAST value was taken as a value: %+v", txns[1].Changes[0].Cols)
	}
	if ch := txns[2].Changes[0]; ch.Kind != "UPDATE" || KeyOf(tdMap(ch.OldKey), []string{"the id"}) != `["2"]` || *tdMap(ch.Cols)["the id"] != "20" {
		t.Fatalf("key change %+v", ch)
	}
	if ch := txns[3].Changes[0]; ch.Kind != "DELETE" || KeyOf(tdMap(ch.Cols), []string{"id"}) != `["1"]` {
		t.Fatalf("delete %+v", ch)
	}
	for i := 1; i < len(txns); i++ {
		if txns[i].EndLSN <= txns[i-1].EndLSN {
			t.Fatalf("transactions out of commit order: %+v", txns)
		}
	}
}
