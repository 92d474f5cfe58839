package apply

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgconn"

	pb "github.com/trellara/trellara/envelope/envelopepb"

	"github.com/trellara/trellara/lsn"
)

// unescapeCopy is the server's text COPY field decoding, for the round trip.
func unescapeCopy(s string) (string, bool) {
	if s == `\N` {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), true
}

func TestCopyEscaping(t *testing.T) {
	cases := []struct {
		in   *pb.Value
		want string
	}{
		{tv(""), ""},
		{null(), `\N`},
		{tv(`\N`), `\\N`},
		{tv(`\.`), `\\.`},
		{tv("a\tb\nc\rd\\e"), `a\tb\nc\rd\\e`},
		{tv("ünï 🎉 'q' \"dq\""), "ünï 🎉 'q' \"dq\""},
		{tv("trailing\\"), `trailing\\`},
	}
	for _, c := range cases {
		got := string(appendCopyRow(nil, []*pb.Value{c.in}))
		if got != c.want+"\n" {
			t.Errorf("%q → %q, want %q", c.in.GetData(), got, c.want+"\n")
		}
	}
	row := string(appendCopyRow(nil, []*pb.Value{tv("a"), null(), tv(""), tv("x\ty")}))
	if row != "a\t\\N\t\tx\\ty\n" {
		t.Errorf("row = %q", row)
	}
}

func FuzzCopyText(f *testing.F) {
	for _, s := range []string{"", `\N`, `\.`, "a\tb\nc\r\\", "\\\\\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		enc := string(appendCopyText(nil, data))
		if strings.ContainsAny(enc, "\t\n\r") {
			t.Fatalf("%q encodes to %q with a raw delimiter", data, enc)
		}
		if enc == `\N` || enc == `\.` {
			t.Fatalf("%q encodes to the marker %q", data, enc)
		}
		dec, ok := unescapeCopy(enc)
		if !ok || dec != string(data) {
			t.Fatalf("%q → %q → %q", data, enc, dec)
		}
	})
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want errClass
	}{
		{errors.New("connection reset by peer"), classTransient},
		{context.DeadlineExceeded, classTransient},
		{&pgconn.PgError{Code: "08006"}, classTransient},
		{&pgconn.PgError{Code: "40001"}, classTransient},
		{&pgconn.PgError{Code: "40P01"}, classTransient},
		{&pgconn.PgError{Code: "57P01"}, classTransient},
		{&pgconn.PgError{Code: "53100"}, classTransient},
		{&pgconn.PgError{Code: "25006"}, classTransient},
		{&pgconn.PgError{Code: "42501"}, classFatal},
		{&pgconn.PgError{Code: "XX000"}, classFatal},
		{&pgconn.PgError{Code: "23505"}, classApply},
		{&pgconn.PgError{Code: "23503"}, classApply},
		{&pgconn.PgError{Code: "22P02"}, classApply},
		{&pgconn.PgError{Code: "42P01"}, classApply},
		{&pgconn.PgError{Code: "42703"}, classApply},
		{&pgconn.PgError{Code: "0A000"}, classApply},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "23514"}), classApply},
	}
	for _, c := range cases {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Flow: "f", SourceID: "s"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		field string
		mod   func(*Config)
	}{
		{"Flow", func(c *Config) { c.Flow = "" }},
		{"SourceID", func(c *Config) { c.SourceID = strings.Repeat("x", 257) }},
		{"Schema", func(c *Config) { c.Schema = strings.Repeat("x", 64) }},
		{"MaxBatchTxns", func(c *Config) { c.MaxBatchTxns = -1 }},
		{"MaxBatchTxns", func(c *Config) { c.MaxBatchTxns = 10001 }},
		{"MaxBatchRows", func(c *Config) { c.MaxBatchRows = 2_000_000 }},
		{"MaxBatchBytes", func(c *Config) { c.MaxBatchBytes = 10 }},
	}
	for _, c := range cases {
		cfg := ok
		c.mod(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v", c.field, err)
		}
	}
}

func TestLSN(t *testing.T) {
	for _, v := range []uint64{0, 1, 0x16B374D848, 0xFFFFFFFFFFFFFFFF} {
		got, err := parseLSN(lsn.Format(v))
		if err != nil || got != v {
			t.Errorf("%x → %s → %x, %v", v, lsn.Format(v), got, err)
		}
	}
	for _, bad := range []string{"", "16", "x/1", "1/100000000"} {
		if _, err := parseLSN(bad); err == nil {
			t.Errorf("parseLSN(%q) accepted", bad)
		}
	}
}

// TestRowSQL pins the statement shapes, including the unchanged-TOAST rule.
func TestRowSQL(t *testing.T) {
	a, err := New(nil, Config{Flow: "f", SourceID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	keyed := relation("public", "t", 'd', "id*", "a", "big")
	full := relation("public", "f", 'f', "x*", "y*")
	ctx := context.Background()
	cases := []struct {
		name string
		rel  *pb.Relation
		row  *pb.Row
		sql  string
		args string
	}{
		{"update, key unchanged, TOAST omitted", keyed,
			&pb.Row{Op: pb.Op_OP_UPDATE, NewTuple: []*pb.Value{tv("1"), tv("v"), toast()}},
			`UPDATE "public"."t" SET "a" = $1 WHERE "id" = $2`, "[v 1]"},
		{"update, key changed", keyed,
			&pb.Row{Op: pb.Op_OP_UPDATE, OldKind: pb.OldTuple_OLD_TUPLE_KEY, OldTuple: []*pb.Value{tv("1"), null(), null()},
				NewTuple: []*pb.Value{tv("2"), null(), toast()}},
			`UPDATE "public"."t" SET "id" = $1, "a" = $2 WHERE "id" = $3`, "[2 <nil> 1]"},
		{"update that only touches TOAST", keyed,
			&pb.Row{Op: pb.Op_OP_UPDATE, NewTuple: []*pb.Value{tv("1"), toast(), toast()}},
			`SELECT 1 FROM "public"."t" WHERE "id" = $1`, "[1]"},
		{"delete by key", keyed,
			&pb.Row{Op: pb.Op_OP_DELETE, OldKind: pb.OldTuple_OLD_TUPLE_KEY, OldTuple: []*pb.Value{tv("1"), null(), null()}},
			`DELETE FROM "public"."t" WHERE "id" = $1`, "[1]"},
		{"full identity update", full,
			&pb.Row{Op: pb.Op_OP_UPDATE, OldKind: pb.OldTuple_OLD_TUPLE_FULL, OldTuple: []*pb.Value{tv("1"), null()}, NewTuple: []*pb.Value{tv("1"), tv("2")}},
			`UPDATE "public"."f" SET "y" = $1 WHERE (tableoid, ctid) = (SELECT tableoid, ctid FROM "public"."f" WHERE "x" IS NOT DISTINCT FROM $2 AND "y" IS NOT DISTINCT FROM $3 LIMIT 1)`,
			"[2 1 <nil>]"},
	}
	for _, c := range cases {
		p := a.plan(c.rel)
		if p.full {
			p.targetLoaded, p.textCompare = true, make([]bool, len(p.cols)) // no target to ask
		}
		sql, args, err := a.rowStmt(ctx, p, c.rel, c.row)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if sql != c.sql || fmt.Sprint(args) != c.args {
			t.Errorf("%s:\n got %s %v\nwant %s %s", c.name, sql, args, c.sql, c.args)
		}
	}
	if got := a.plan(keyed).insertSQL; got != `INSERT INTO "public"."t" ("id", "a", "big") OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3)` {
		t.Errorf("insert = %s", got)
	}
}

// TestBatching: the reader takes what is queued, within every limit, never
// splits a transaction and never mixes snapshot units into a batch.
func TestBatching(t *testing.T) {
	r := relation("public", "t", 'd', "id*")
	var payloads [][]byte
	for i := 1; i <= 10; i++ {
		tx := newTxn(uint64(i * 10))
		for j := 0; j < i; j++ { // transaction i has i rows
			tx.insert(r, tv("1"))
		}
		payloads = append(payloads, tx.encode(t))
	}
	payloads = append(payloads, snapshotBatch(t, r, 5, 0, vals("1")), newTxn(200).insert(r, tv("1")).encode(t))
	a, err := New(nil, Config{Flow: "f", SourceID: testSource, MaxBatchTxns: 4, MaxBatchRows: 12})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rd := a.startReader(ctx, &memSource{payloads: payloads})
	// Before each batch, let the reader queue all it can, so what is
	// "already available" does not depend on scheduling.
	settle := func() {
		for len(rd.ch) < cap(rd.ch) {
			select {
			case <-rd.done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}
	var sizes []string
	for {
		settle()
		b, err := rd.next(ctx, a.cfg)
		if errors.Is(err, errDrained) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, u := range b {
			s = append(s, fmt.Sprintf("%s:%d", u.kindName()[:1], len(u.env.Rows)))
		}
		sizes = append(sizes, strings.Join(s, "+"))
	}
	got := strings.Join(sizes, " ")
	// Rows per batch ≤ 12 unless one transaction alone is larger; at most
	// 4 transactions; the snapshot batch alone.
	want := "t:1+t:2+t:3+t:4 t:5+t:6 t:7 t:8 t:9 t:10 s:1 t:1"
	if got != want {
		t.Errorf("batches %s, want %s", got, want)
	}
}

// TestReadAheadBytes: the reader's queue holds at most MaxBatchBytes of
// envelope bytes, however many units MaxBatchTxns would allow, so a
// backlog of large transactions is not read into memory ahead of the
// applier.
func TestReadAheadBytes(t *testing.T) {
	r := relation("public", "t", 'd', "id*", "v")
	var payloads [][]byte
	for i := 1; i <= 40; i++ {
		payloads = append(payloads, newTxn(uint64(i*10)).insert(r, tv(fmt.Sprint(i)), tv(strings.Repeat("x", 4096))).encode(t))
	}
	const budget = 5 * 4096 // room for four of these units, not five
	a, err := New(nil, Config{Flow: "f", SourceID: testSource, MaxBatchTxns: 1000, MaxBatchBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	// The test takes units only after counting them as consumed, so
	// fetched-but-not-consumed is never undercounted.
	var mu sync.Mutex
	consumed := 0
	var violations []string
	fetched := make(chan int, len(payloads))
	src := &hookSource{memSource: memSource{payloads: payloads, block: true}, before: func(i int) error {
		mu.Lock()
		queued := 0
		for _, p := range payloads[min(consumed, i):i] {
			queued += len(p)
		}
		if queued > budget {
			violations = append(violations, fmt.Sprintf("fetching entry %d with entries %d..%d (%d bytes) not yet taken", i, consumed, i-1, queued))
		}
		mu.Unlock()
		fetched <- i
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rd := a.startReader(ctx, src)
	// Nothing taken yet: the reader fetches entries 0..4 (the fifth does
	// not fit and waits); without the byte bound it runs on at once.
	for i := 0; i <= 4; i++ {
		<-fetched
	}
	for n := range payloads {
		mu.Lock()
		consumed = n + 1
		mu.Unlock()
		it := rd.one(ctx)
		if it.err != nil {
			t.Fatal(it.err)
		}
		if it.u.offset != uint64(n) {
			t.Fatalf("took offset %d, want %d", it.u.offset, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("read-ahead passed MaxBatchBytes (%d): %s", budget, strings.Join(violations, "; "))
	}
}

// TestReadAheadDecodedBytes: the read-ahead bound counts what the queued
// units hold decoded, not their wire size. Narrow rows decode to many
// times their envelope bytes; with MaxBatchBytes at its maximum (1 GiB)
// the reader must still hold at most readAheadBytesMax of them.
func TestReadAheadDecodedBytes(t *testing.T) {
	r := relation("public", "t", 'd', "id*", "v")
	var payloads [][]byte
	var decoded []int // a lower bound of each unit's decoded memory
	for i := 1; i <= 40; i++ {
		x := newTxn(uint64(i * 10000))
		for j := 0; j < 2000; j++ {
			x.insert(r, tv(fmt.Sprint(j)), tv("x"))
		}
		p := x.encode(t)
		payloads = append(payloads, p)
		decoded = append(decoded, len(p)+2000*int(unsafe.Sizeof(pb.Row{}))+4000*int(unsafe.Sizeof(pb.Value{})))
	}
	a, err := New(nil, Config{Flow: "f", SourceID: testSource, MaxBatchTxns: 1000, MaxBatchBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	consumed := 0
	var violations []string
	fetched := make(chan int, len(payloads))
	src := &hookSource{memSource: memSource{payloads: payloads, block: true}, before: func(i int) error {
		fetched <- i
		mu.Lock()
		defer mu.Unlock()
		queued := 0
		for _, n := range decoded[min(consumed, i):i] {
			queued += n
		}
		if queued > readAheadBytesMax {
			violations = append(violations, fmt.Sprintf("fetching entry %d with entries %d..%d (at least %d bytes decoded) not yet taken", i, consumed, i-1, queued))
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rd := a.startReader(ctx, src)
	// Let the reader run ahead before taking anything: within the bound
	// it stops after about a dozen of these units; past it, it reaches
	// the twentieth (and the hook records the violation).
	wait := time.NewTimer(2 * time.Second)
	defer wait.Stop()
	for ahead := true; ahead; {
		select {
		case i := <-fetched:
			ahead = i < 20
		case <-wait.C:
			ahead = false
		}
	}
	for n := range payloads {
		mu.Lock()
		consumed = n + 1
		mu.Unlock()
		if it := rd.one(ctx); it.err != nil {
			t.Fatal(it.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("read-ahead passed %d decoded bytes: %s", readAheadBytesMax, strings.Join(violations, "; "))
	}
}
