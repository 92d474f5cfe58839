package apply

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
)

const nullText = "\x00NULL" // marks SQL NULL in the value tables below

// kindCols are the columns of the type round-trip table with their types.
var kindCols = []struct{ name, typ string }{
	{"id", "integer"}, {"t", "text"}, {"vc", "varchar(40)"}, {"tags", "text[]"}, {"nums", "integer[]"},
	{"doc", "jsonb"}, {"j", "json"}, {"amount", "numeric(20,5)"}, {"raw", "bytea"}, {"at", "timestamptz"},
	{"d", "date"}, {"m", "mood"}, {"p", "posint"}, {"u", "uuid"}, {"iv", "interval"}, {"pt", "point"},
	{"b", "boolean"}, {"f", "double precision"}, {"r", "int4range"},
}

// kindRows are source text forms: ordinary values, every character COPY and
// quoting care about, and NULL next to empty values.
var kindRows = [][]string{
	{"1", "plain", "short", `{a,"b c","d\"e",NULL,""}`, "{1,2,3}", `{"k": [1, 2, {"x": null}]}`, `{"b":1,  "a":2}`,
		"12345.67890", `\x00ff10`, "2024-02-29 23:59:59.123456+00", "2024-02-29", "happy", "42",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "1 day 02:03:04", "(1.5,-2)", "t", "1.0000000000000002", "[1,10)"},
	{"2", "tab\there\nnewline\r\\backslash 'single' \"double\" ünïcödé 🎉 \\N \\. end\\", "\\.", `{"with,comma","with\\back\\slash","tab	in"}`,
		"{-1,0,2147483647}", `{"s": "tab\there \\ and \"q\""}`, `[1, "\n"]`, "-0.00001", `\x5c0a090d`,
		"1999-12-31 23:00:00-05", "0001-01-01", "sad", "1", "00000000-0000-0000-0000-000000000000",
		"-3 mons +4 days -00:00:01.5", "(0,0)", "f", "-1e+300", "empty"},
	{"3", "", "", "{}", nullText, `""`, "null", nullText, `\x`, nullText, nullText, nullText, nullText,
		nullText, nullText, nullText, nullText, "NaN", nullText},
}

const kindDDL = `(
	id integer PRIMARY KEY, t text, vc varchar(40), tags text[], nums integer[], doc jsonb, j json,
	amount numeric(20,5), raw bytea, at timestamptz, d date, m mood, p posint, u uuid, iv interval,
	pt point, b boolean, f double precision, r int4range)`

func kindValues(row []string) []*pb.Value {
	out := make([]*pb.Value, len(row))
	for i, s := range row {
		if s == nullText {
			out[i] = null()
		} else {
			out[i] = tv(s)
		}
	}
	return out
}

// checkKinds asserts that every column of table row id holds what the
// target makes of the source text want: the same text output as casting
// the text directly, and byte-identical text for text, varchar and json.
func checkKinds(t *testing.T, conn *pgx.Conn, table string, id string, want []string) {
	t.Helper()
	for i, c := range kindCols {
		got := queryString(t, conn, fmt.Sprintf("SELECT %s::text FROM %s WHERE id = %s", pgx.Identifier{c.name}.Sanitize(), table, id))
		exp := nullText
		if want[i] != nullText {
			exp = queryString(t, conn, fmt.Sprintf("SELECT ($1::text::%s)::text", c.typ), want[i])
			if c.typ == "text" || c.typ == "varchar(40)" || c.typ == "json" {
				if got != want[i] {
					t.Errorf("%s id %s column %s = %q, want the source text %q byte for byte", table, id, c.name, got, want[i])
				}
			}
		}
		if exp == nullText {
			exp = "<NULL>"
		}
		if got != exp {
			t.Errorf("%s id %s column %s (%s) = %q, want %q", table, id, c.name, c.typ, got, exp)
		}
	}
}

// TestTypeRoundTrip sends every value through INSERT, UPDATE and the COPY
// snapshot path.
func TestTypeRoundTrip(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn,
		"CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
		"CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
		"CREATE TABLE kinds "+kindDDL,
		"CREATE TABLE kinds_snap "+kindDDL)
	names := make([]string, len(kindCols))
	for i, c := range kindCols {
		names[i] = c.name
	}
	names[0] += "*"
	kinds := relation("public", "kinds", 'd', names...)
	snap := relation("public", "kinds_snap", 'd', names...)

	var payloads [][]byte
	// Snapshot first (as the relay orders it), in two batches.
	payloads = append(payloads,
		snapshotBatch(t, snap, 100, 0, kindValues(kindRows[0]), kindValues(kindRows[1])),
		snapshotBatch(t, snap, 100, 1, kindValues(kindRows[2])),
		snapshotEnd(t, snap, 100, 2))
	ins := newTxn(200)
	for _, r := range kindRows {
		ins.insert(kinds, kindValues(r)...)
	}
	payloads = append(payloads, ins.encode(t))
	// Row 1 takes row 2's values through UPDATE (key unchanged).
	upd := append([]string{"1"}, kindRows[1][1:]...)
	payloads = append(payloads, newTxn(300).update(kinds, pb.OldTuple_OLD_TUPLE_NONE, nil, kindValues(upd)).encode(t))

	a := newApplier(t, conn, nil)
	mustDrain(t, a, nil, 0, payloads)

	for _, r := range kindRows {
		checkKinds(t, conn, "kinds_snap", r[0], r)
	}
	checkKinds(t, conn, "kinds", "1", upd)
	checkKinds(t, conn, "kinds", "2", kindRows[1])
	checkKinds(t, conn, "kinds", "3", kindRows[2])

	st := readStatus(t, conn)
	if len(st.Snapshots) != 1 || !st.Snapshots[0].Done || st.Snapshots[0].Rows != 3 || st.Snapshots[0].BoundaryLSN != 100 || !st.Snapshots[0].Ready {
		t.Errorf("snapshot progress = %+v, want done, 3 rows, boundary 0/64, ready", st.Snapshots)
	}
	if cp := st.Checkpoint; cp.CommitLSN != 300 || cp.TxnsApplied != 2 || cp.RowsApplied != 7 || cp.Offset != 4 {
		t.Errorf("checkpoint = %+v, want commit LSN 300, 2 txns, 7 rows, offset 4", cp)
	}
}

// TestOperations covers every op, a multi-table transaction, key changes,
// truncate options and relation mapping.
func TestOperations(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn,
		"CREATE SCHEMA other",
		"CREATE TABLE customers (id int PRIMARY KEY, name text, email text)",
		"CREATE TABLE other.logs (id bigint PRIMARY KEY, customer int, msg text)",
		"CREATE TABLE parents (id int PRIMARY KEY)",
		"CREATE TABLE children (id int PRIMARY KEY, parent int REFERENCES parents (id))",
		"CREATE TABLE counters (id serial PRIMARY KEY, v int)",
		`CREATE TABLE "Mixed Case" ("Id" int PRIMARY KEY, "select" text)`,
	)
	cust := relation("public", "customers", 'd', "id*", "name", "email")
	logs := relation("other", "logs", 'd', "id*", "customer", "msg")
	parents := relation("public", "parents", 'd', "id*")
	children := relation("public", "children", 'd', "id*", "parent")
	counters := relation("public", "counters", 'd', "id*", "v")
	mixed := relation("public", "Mixed Case", 'd', "Id*", "select")
	key := pb.OldTuple_OLD_TUPLE_KEY
	none := pb.OldTuple_OLD_TUPLE_NONE

	payloads := [][]byte{
		newTxn(10).
			insert(cust, vals("1", "Ann", "ann@example.com")...).
			insert(cust, vals("2", "Bob", "")...).
			insert(cust, tv("3"), null(), null()).
			message("app.audit", "not table data").
			insert(logs, vals("10", "1", "signed up")...).
			insert(logs, vals("11", "2", "signed up")...).
			insert(mixed, vals("1", "quoted")...).encode(t),
		newTxn(20).
			update(cust, none, nil, vals("1", "Ann B.", "ann@example.com")).
			update(cust, key, []*pb.Value{tv("2"), null(), null()}, vals("20", "Bob", "bob@example.com")).
			delete(cust, key, []*pb.Value{tv("3"), null(), null()}).
			update(logs, none, nil, vals("10", "1", "renamed")).
			update(mixed, none, nil, vals("1", "still quoted")).encode(t),
		newTxn(30).insert(parents, tv("1")).insert(children, tv("1"), tv("1")).encode(t),
		// parents is referenced by children: only TRUNCATE ... CASCADE works.
		newTxn(40).truncate(truncateCascade, parents).encode(t),
		newTxn(50).insert(parents, tv("2")).insert(children, tv("2"), tv("2")).encode(t),
		// Truncated together in one statement, no CASCADE needed.
		newTxn(60).truncate(0, parents, children).encode(t),
		newTxn(70).insert(counters, vals("1", "1")...).encode(t),
	}
	exec(t, conn, "SELECT setval('counters_id_seq', 100)")
	payloads = append(payloads, newTxn(80).truncate(truncateRestartIdentity, counters).encode(t))

	a := newApplier(t, conn, nil)
	mustDrain(t, a, nil, 0, payloads)

	got := queryString(t, conn, "SELECT string_agg(format('%s|%s|%s', id, coalesce(name, '<null>'), coalesce(email, '<null>')), ';' ORDER BY id) FROM customers")
	if want := "1|Ann B.|ann@example.com;20|Bob|bob@example.com"; got != want {
		t.Errorf("customers = %q, want %q", got, want)
	}
	got = queryString(t, conn, "SELECT string_agg(id || ':' || msg, ';' ORDER BY id) FROM other.logs")
	if want := "10:renamed;11:signed up"; got != want {
		t.Errorf("other.logs = %q, want %q", got, want)
	}
	if got := queryString(t, conn, `SELECT "select" FROM "Mixed Case"`); got != "still quoted" {
		t.Errorf(`"Mixed Case" = %q`, got)
	}
	if n := queryInt(t, conn, "SELECT (SELECT count(*) FROM parents) + (SELECT count(*) FROM children) + (SELECT count(*) FROM counters)"); n != 0 {
		t.Errorf("%d rows left after truncates", n)
	}
	if n := queryInt(t, conn, "SELECT nextval('counters_id_seq')"); n != 1 {
		t.Errorf("sequence after TRUNCATE RESTART IDENTITY = %d, want 1", n)
	}
	s := a.Stats()
	if s.TxnsApplied != 8 || s.MessagesIgnored != 1 || s.RowsApplied != 16 || s.TxnsSkipped != 0 {
		t.Errorf("stats = %+v, want 8 txns, 1 message, 16 rows", s)
	}

	// Mapping: the same source relation lands in another schema.
	exec(t, conn, "CREATE SCHEMA mirror", "CREATE TABLE mirror.customers (id int PRIMARY KEY, name text, email text)")
	m := newApplier(t, conn, func(c *Config) {
		c.Flow = "mapped"
		c.Mapping = func(schema, name string) (string, string) { return "mirror", name }
	})
	mustDrain(t, m, nil, 0, [][]byte{newTxn(10).insert(cust, vals("7", "Mapped", "m@example.com")...).encode(t)})
	if got := queryString(t, conn, "SELECT name FROM mirror.customers WHERE id = 7"); got != "Mapped" {
		t.Errorf("mapped row = %q", got)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM customers WHERE id = 7"); n != 0 {
		t.Error("mapped row also landed in the source-named table")
	}
}

// TestUnchangedToastUntouched: an UPDATE that does not resend a TOASTed
// value must leave it as it is.
func TestUnchangedToastUntouched(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn,
		"CREATE TABLE docs (id int PRIMARY KEY, title text, body text, extra jsonb)",
		"CREATE TABLE docs_full (title text, body text)",
		"ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL", // out of line even when compressible
	)
	// Incompressible and far above the 2 kB TOAST threshold.
	body := queryString(t, conn, "SELECT string_agg(md5(g::text), '') FROM generate_series(1, 4000) g")
	docs := relation("public", "docs", 'd', "id*", "title", "body", "extra")
	full := relation("public", "docs_full", 'f', "title*", "body*")
	payloads := [][]byte{
		newTxn(10).insert(docs, vals("1", "v1", body, `{"a": 1}`)...).insert(full, vals("t1", body)...).encode(t),
		// body and extra unchanged: pgoutput sends 'u' for both.
		newTxn(20).update(docs, pb.OldTuple_OLD_TUPLE_NONE, nil, []*pb.Value{tv("1"), tv("v2"), toast(), toast()}).encode(t),
		// FULL identity: the old tuple may itself say unchanged TOAST; the row
		// is still found by the other columns.
		newTxn(30).update(full, pb.OldTuple_OLD_TUPLE_FULL, []*pb.Value{tv("t1"), toast()}, []*pb.Value{tv("t2"), toast()}).encode(t),
	}
	a := newApplier(t, conn, nil)
	mustDrain(t, a, nil, 0, payloads)

	if n := queryInt(t, conn, "SELECT pg_column_size(body) FROM docs WHERE id = 1"); n < 100000 {
		t.Fatalf("body is %d bytes on disk; the test needs an out-of-line TOAST value", n)
	}
	var title, gotBody, extra string
	if err := conn.QueryRow(context.Background(), "SELECT title, body, extra::text FROM docs WHERE id = 1").Scan(&title, &gotBody, &extra); err != nil {
		t.Fatal(err)
	}
	if title != "v2" || gotBody != body || extra != `{"a": 1}` {
		t.Errorf("after unchanged-TOAST update: title %q, body intact %v (len %d), extra %q", title, gotBody == body, len(gotBody), extra)
	}
	if got := queryString(t, conn, "SELECT title || ':' || (body = $1)::text FROM docs_full", body); got != "t2:true" {
		t.Errorf("docs_full = %q, want t2 with its body intact", got)
	}
}

// TestReplicaIdentityFull: without a key the old tuple finds the row, one
// row per change even among identical duplicates; types without equality
// are matched by text.
func TestReplicaIdentityFull(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn,
		"CREATE TABLE events (kind text, payload json, n int)",
		"CREATE TABLE keyed (id int PRIMARY KEY, v text)", // FULL at the source, PK at the target
	)
	ev := relation("public", "events", 'f', "kind*", "payload*", "n*")
	keyed := relation("public", "keyed", 'f', "id*", "v*")
	full := pb.OldTuple_OLD_TUPLE_FULL
	row := func(n string) []*pb.Value { return []*pb.Value{tv("click"), tv(`{"x": 1}`), tv(n)} }
	payloads := [][]byte{
		newTxn(10).insert(ev, row("1")...).insert(ev, row("1")...).insert(ev, row("1")...).
			insert(ev, tv("null-n"), null(), null()).
			insert(keyed, vals("1", "a")...).insert(keyed, vals("2", "b")...).encode(t),
		newTxn(20).update(ev, full, row("1"), row("2")).
			delete(ev, full, row("1")).
			update(ev, full, []*pb.Value{tv("null-n"), null(), null()}, []*pb.Value{tv("null-n"), null(), tv("5")}).
			update(keyed, full, vals("1", "a"), vals("1", "A")).
			delete(keyed, full, vals("2", "b")).encode(t),
	}
	a := newApplier(t, conn, nil)
	mustDrain(t, a, nil, 0, payloads)
	got := queryString(t, conn, "SELECT string_agg(kind || ':' || coalesce(n::text, 'null'), ',' ORDER BY kind, n) FROM events")
	if want := "click:1,click:2,null-n:5"; got != want {
		t.Errorf("events = %q, want %q", got, want)
	}
	if got := queryString(t, conn, "SELECT string_agg(id || v, ',' ORDER BY id) FROM keyed"); got != "1A" {
		t.Errorf("keyed = %q, want 1A", got)
	}

	// A further delete of a row that no longer exists is a divergence.
	err := drain(t, newApplier(t, conn, nil), nil, 2, [][]byte{newTxn(30).delete(keyed, full, vals("2", "b")).encode(t)})
	if !IsQuarantined(err) || !strings.Contains(err.Error(), "matched 0 target rows") {
		t.Errorf("delete of a missing row: %v, want a quarantined divergence", err)
	}
}
