package apply

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/internal/pgtest"
	"strings"
	"testing"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

func ctext(s string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(s)} }

var ctoast = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST}

func crel(identity byte) *pb.Relation {
	r := &pb.Relation{Schema: "public", Name: "t", ReplicaIdentity: uint32(identity), Columns: []*pb.RelationColumn{
		{Name: "id", TypeOid: 23, TypeModifier: -1, Key: identity != 'n'}, {Name: "v", TypeOid: 25, TypeModifier: -1}, {Name: "doc", TypeOid: 25, TypeModifier: -1}}}
	if identity == 'f' {
		for _, c := range r.Columns {
			c.Key = true
		}
	}
	r.Fingerprint = envelope.RelationFingerprint(r)
	return r
}

// ctxn builds one transaction from a compact script: "I1a" insert id 1 v a,
// "U1b" update id 1 to v b (doc unchanged TOAST), "D1" delete id 1,
// "K12" update moving id 1 to 2, "T" truncate.
func ctxn(rel *pb.Relation, script string) *pb.Envelope {
	e := &pb.Envelope{Relations: []*pb.Relation{rel}}
	for _, op := range strings.Fields(script) {
		r := &pb.Row{}
		switch op[0] {
		case 'I':
			r.Op, r.NewTuple = pb.Op_OP_INSERT, []*pb.Value{ctext(op[1:2]), ctext(op[2:]), ctext("doc" + op[1:2])}
		case 'U':
			r.Op, r.NewTuple = pb.Op_OP_UPDATE, []*pb.Value{ctext(op[1:2]), ctext(op[2:]), ctoast}
		case 'D':
			r.Op, r.OldKind, r.OldTuple = pb.Op_OP_DELETE, pb.OldTuple_OLD_TUPLE_KEY, []*pb.Value{ctext(op[1:2]), {Kind: pb.ValueKind_VALUE_KIND_NULL}, {Kind: pb.ValueKind_VALUE_KIND_NULL}}
		case 'K':
			r.Op, r.OldKind = pb.Op_OP_UPDATE, pb.OldTuple_OLD_TUPLE_KEY
			r.OldTuple = []*pb.Value{ctext(op[1:2]), {Kind: pb.ValueKind_VALUE_KIND_NULL}, {Kind: pb.ValueKind_VALUE_KIND_NULL}}
			r.NewTuple = []*pb.Value{ctext(op[2:3]), ctext("moved"), ctoast}
		case 'T':
			r.Op = pb.Op_OP_TRUNCATE
		}
		e.Rows = append(e.Rows, r)
	}
	return e
}

func describe(b *netBatch) string {
	var parts []string
	for _, t := range b.tables {
		for _, k := range t.order {
			r := t.rows[k]
			s := string(r.op) + k
			for _, v := range r.vals {
				switch v.GetKind() {
				case pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST:
					s += ":~"
				default:
					s += ":" + string(v.Data)
				}
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, " ")
}

func TestCompact(t *testing.T) {
	rel := crel('d')
	cases := []struct {
		txns []string
		want string // "" = refused
	}{
		{[]string{"I1a", "U1b"}, "I1:1:b:doc1"},           // insert then update: one insert, TOAST from the insert
		{[]string{"U1a", "U1b U2c"}, "U1:1:b:~ U2:2:c:~"}, // updates fold, unchanged TOAST stays unchanged
		{[]string{"U1a", "D1"}, "D1"},                     // update then delete: the delete
		{[]string{"D1", "I1z"}, "R1:1:z:doc1"},            // delete then insert: replace
		{[]string{"D1 I1z", "U1y"}, "R1:1:y:doc1"},        // ... then update: replace with the last values
		{[]string{"D1 I1z", "D1"}, "D1"},                  // ... then delete: the first delete
		{[]string{"I1a I2b", "I3c"}, "I1:1:a:doc1 I2:2:b:doc2 I3:3:c:doc3"},
		{[]string{"I1a", "D1"}, ""},  // insert then delete: row by row
		{[]string{"I1a", "I1b"}, ""}, // duplicate insert: an error row by row
		{[]string{"U1a", "I1b"}, ""}, // insert over an updated row: an error row by row
		{[]string{"D1", "U1a"}, ""},  // update of a deleted row: an error row by row
		{[]string{"D1", "D1"}, ""},   // double delete
		{[]string{"K12"}, ""},        // key change
		{[]string{"I1a", "T"}, ""},   // truncate
	}
	for _, c := range cases {
		var envs []*pb.Envelope
		for _, s := range c.txns {
			envs = append(envs, ctxn(rel, s))
		}
		b, ok := compact(envs)
		got := ""
		if ok {
			got = describe(b)
		}
		if got != c.want {
			t.Errorf("%q: got %q, want %q", c.txns, got, c.want)
		}
	}
	if _, ok := compact([]*pb.Envelope{ctxn(crel('f'), "U1a")}); ok {
		t.Error("REPLICA IDENTITY FULL folded")
	}
	if _, ok := compact([]*pb.Envelope{ctxn(crel('n'), "I1a")}); ok {
		t.Error("a relation without a key folded")
	}
}

// Folded statements must enforce column modifiers exactly as row-by-row
// statements do: a value too long for varchar(3) or char(3) is an error,
// never silently truncated by a cast.
func TestCompactKeepsModifierChecks(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, `CREATE TABLE public.mods (id int PRIMARY KEY, v varchar(3), c char(3), b bit(3), n numeric(5,2))`)
	rel := &pb.Relation{Schema: "public", Name: "mods", ReplicaIdentity: 'd', Columns: []*pb.RelationColumn{
		{Name: "id", TypeOid: 23, TypeModifier: -1, Key: true}, {Name: "v", TypeOid: 1043, TypeModifier: 7},
		{Name: "c", TypeOid: 1042, TypeModifier: 7}, {Name: "b", TypeOid: 1560, TypeModifier: 3}, {Name: "n", TypeOid: 1700, TypeModifier: 327686}}}
	rel.Fingerprint = envelope.RelationFingerprint(rel)
	ins := func(id, v, ch string) *pb.Envelope {
		return &pb.Envelope{Relations: []*pb.Relation{rel}, Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION},
			Rows: []*pb.Row{{Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{ctext(id), ctext(v), ctext(ch), ctext("101"), ctext("1.005")}}}}
	}
	tgt := newPGTarget(conn, Config{Flow: "f", SourceID: "s"}.withDefaults())
	if _, err := tgt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer tgt.Stop(context.Background())
	apply := func(envs ...*pb.Envelope) error {
		tx, err := tgt.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		for i, e := range envs {
			if _, _, err := tx.Apply(context.Background(), i, e); err != nil {
				return err
			}
		}
		if err := tx.Flush(context.Background()); err != nil {
			return err
		}
		_, err = tx.Commit(context.Background())
		return err
	}
	if err := apply(ins("1", "abc", "ab"), ins("2", "toolong", "x")); err == nil {
		t.Fatal("a folded insert of a too-long varchar value succeeded")
	}
	if err := apply(ins("3", "ab", "toolong"), ins("4", "x", "y")); err == nil {
		t.Fatal("a folded insert of a too-long char value succeeded")
	}
	if err := apply(ins("5", "abc", "ab"), ins("6", "x", "abc")); err != nil {
		t.Fatalf("valid folded inserts failed: %v", err)
	}
	var c6 string
	if err := conn.QueryRow(context.Background(), `SELECT c || '|' || b::text || '|' || n::text FROM public.mods WHERE id = 6`).Scan(&c6); err != nil {
		t.Fatal(err)
	}
	if c6 != "abc|101|1.01" {
		t.Fatalf("folded values stored as %q", c6)
	}
}

// A folded batch's UPDATE finds its rows through the key's index: a plan
// that knows a thousand keys are coming prefers a hash join over a
// sequential scan of the whole table (100,000 accounts here, millions in
// production), which costs the target more than all the lookups.
func TestFoldedUpdatesLookKeysUpThroughTheIndex(t *testing.T) {
	conn, payloads := tpcbKeyed(t, 2500, true)
	seqScans := func() int64 {
		t.Helper()
		// This session's counters reach the statistics views once flushed.
		exec(t, conn, "SELECT pg_catalog.pg_stat_force_next_flush()")
		var n int64
		if err := conn.QueryRow(context.Background(), "SELECT seq_scan FROM pg_catalog.pg_stat_user_tables WHERE relid = 'public.accounts'::regclass").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := seqScans()
	a := newApplier(t, conn, nil)
	if err := drain(t, a, nil, 0, payloads); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.FoldedTxns < st.TxnsApplied/2 {
		t.Fatalf("only %d of %d transactions folded", st.FoldedTxns, st.TxnsApplied)
	}
	if n := seqScans() - before; n != 0 {
		t.Errorf("the folded batches scanned accounts sequentially %d times, want 0 (index lookups)", n)
	}
}

// Folded statements send integer columns as binary integer arrays
// (arrayArg); the target must end up with exactly what the text path
// (row by row) writes: NULLs, each type's minimum and maximum, signs,
// leading zeros, and values the binary conversion leaves to the target as
// text (surrounding spaces), in keys (DELETE, UPDATE) and in values.
func TestFoldedIntegersWriteWhatTextWrites(t *testing.T) {
	c, rowsConn := target(t, pgtest.Options{NoFsync: true})
	foldConn := connect(t, c.CreateDB(t, "folded"))
	ddl := `CREATE TABLE ints (id int8 PRIMARY KEY, a int2, b int4, c int8)`
	for _, conn := range []*pgx.Conn{rowsConn, foldConn} {
		exec(t, conn, ddl)
		if err := EnsureSchema(context.Background(), conn, ""); err != nil {
			t.Fatal(err)
		}
	}
	rel := relation("public", "ints", 'd', "id*", "a", "b", "c")
	v := func(ss ...string) []*pb.Value {
		out := vals(ss...)
		for i, s := range ss {
			if s == "NULL" {
				out[i] = null()
			}
		}
		return out
	}
	none, key := pb.OldTuple_OLD_TUPLE_NONE, pb.OldTuple_OLD_TUPLE_KEY
	const minInt8, maxInt8 = "-9223372036854775808", "9223372036854775807"
	inserts := [][]*pb.Value{
		v(minInt8, "-32768", "-2147483648", minInt8),
		v(maxInt8, "32767", "2147483647", maxInt8),
		v("0", "NULL", "NULL", "NULL"),
		v("3", "+7", "007", "-0"),
		v("4", " 42", "42 ", "1"),
		v("5", "-1", "-1", "-1"),
		v("6", "1", "2", "3"),
		v("7", "0", "0", "4294967296"),
	}
	var payloads [][]byte
	lsn := uint64(0x1000)
	next := func() *txn { lsn += 0x100; return newTxn(lsn) }
	for _, row := range inserts {
		payloads = append(payloads, next().insert(rel, row...).encode(t))
	}
	payloads = append(payloads,
		next().update(rel, none, nil, v(maxInt8, "NULL", "2147483647", "-4294967297")).encode(t),
		next().update(rel, none, nil, v(minInt8, "-32768", "5", minInt8)).encode(t),
		next().update(rel, none, nil, v("0", "12", "-12", "9223372036854775806")).encode(t),
		next().delete(rel, key, v("6", "NULL", "NULL", "NULL")).encode(t),
		next().update(rel, none, nil, v("7", "0", "0", "NULL")).encode(t),
		next().update(rel, none, nil, v("4", "-5", " 9", "1")).encode(t),
		next().delete(rel, key, v("5", "NULL", "NULL", "NULL")).insert(rel, v("-5", "-1", "-1", "5")...).encode(t),
		next().delete(rel, key, v(minInt8, "NULL", "NULL", "NULL")).
			delete(rel, key, v("3", "NULL", "NULL", "NULL")).insert(rel, v("3", "-8", "08", "-0")...).encode(t),
	)
	apply := func(conn *pgx.Conn, maxBatch int) (folded int64) {
		a, err := stepApplier(t, conn, maxBatch, true, payloads)
		if err != nil {
			t.Fatal(err)
		}
		return a.Stats().FoldedTxns
	}
	if n := apply(rowsConn, 1); n != 0 {
		t.Fatalf("%d transactions folded with one transaction per batch", n)
	}
	if n := apply(foldConn, len(inserts)); n != int64(len(payloads)) {
		t.Fatalf("%d of %d transactions folded", n, len(payloads))
	}
	const q = `SELECT string_agg(format('%s:%s:%s:%s', id, coalesce(a::text, 'NULL'), coalesce(b::text, 'NULL'), coalesce(c::text, 'NULL')), ' ' ORDER BY id) FROM ints`
	want := "-5:-1:-1:5 0:12:-12:9223372036854775806 3:-8:8:0 4:-5:9:1 7:0:0:NULL 9223372036854775807:NULL:2147483647:-4294967297"
	if got := queryString(t, rowsConn, q); got != want {
		t.Fatalf("row by row wrote\n%s\nwant\n%s", got, want)
	}
	if got := queryString(t, foldConn, q); got != want {
		t.Errorf("folded wrote\n%s\nrow by row\n%s", got, want)
	}
}
