package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/lsn"
)

// The integration tests share one throwaway cluster and give each test its
// own pair of databases, which is as real as two clusters for everything
// but the wire (TestTwoClusters covers that) and much faster. TestVerify
// starts it before its parallel subtests read it.
var sharedCluster *pgtest.Cluster

func cluster(t *testing.T) *pgtest.Cluster {
	t.Helper()
	if sharedCluster == nil {
		t.Fatal("shared cluster not started; run through TestVerify")
	}
	return sharedCluster
}

// pair is a source and a target database with one connection each.
type pair struct {
	c           *pgtest.Cluster
	srcDB       string
	dstDB       string
	src, dst    *pgx.Conn
	textHashing bool
}

var dbSeq atomic.Int64

func newPair(t *testing.T, c *pgtest.Cluster) *pair {
	t.Helper()
	n := dbSeq.Add(1)
	p := &pair{c: c, srcDB: fmt.Sprintf("src_%d", n), dstDB: fmt.Sprintf("dst_%d", n)}
	p.src = connect(t, c.CreateDB(t, p.srcDB))
	p.dst = connect(t, c.CreateDB(t, p.dstDB))
	return p
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (p *pair) both(t *testing.T, sql ...string) {
	t.Helper()
	p.c.ExecDB(t, p.srcDB, sql...)
	p.c.ExecDB(t, p.dstDB, sql...)
}

func (p *pair) source(t *testing.T, sql ...string) { t.Helper(); p.c.ExecDB(t, p.srcDB, sql...) }
func (p *pair) target(t *testing.T, sql ...string) { t.Helper(); p.c.ExecDB(t, p.dstDB, sql...) }

func (p *pair) verify(t *testing.T, opts Options) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts.textHashing = p.textHashing
	// Every scenario hashes its small tables in page ranges over three
	// connections per side, so the scenarios prove parallel hashing's
	// answers too (one connection is the same code with one range).
	if opts.Connections == 0 {
		opts.Connections = 3
	}
	opts.rangePagesMin = 1
	r, err := Verify(ctx, p.src, p.dst, opts)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	checkRendering(t, r)
	if want := map[bool]Hashing{false: HashingTyped, true: HashingText}[p.textHashing]; r.RowHash != want {
		t.Errorf("row hash %s, want %s", r.RowHash, want)
	}
	return r
}

// checkRendering renders both forms of every result a test produces, so
// each scenario also exercises the output code, and logs the text form.
func checkRendering(t *testing.T, r *Result) {
	t.Helper()
	var b strings.Builder
	if err := r.RenderText(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", b.String())
	if !strings.HasPrefix(b.String(), string(r.Verdict)+":") {
		t.Errorf("text form does not start with the verdict %s", r.Verdict)
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back["verdict"] != string(r.Verdict) {
		t.Errorf("JSON verdict %v, want %s", back["verdict"], r.Verdict)
	}
}

func table(t *testing.T, r *Result, name string) TableResult {
	t.Helper()
	for _, tr := range r.Tables {
		if tr.Table == name {
			return tr
		}
	}
	t.Fatalf("no result for %s", name)
	return TableResult{}
}

// wantSamples checks the example keys exactly, order-insensitively.
func wantSamples(t *testing.T, tr TableResult, want ...SampleKey) {
	t.Helper()
	got := slices.Clone(tr.SampleKeys)
	key := func(s SampleKey) string { return string(s.Kind) + " " + s.Key }
	slices.SortFunc(got, func(a, b SampleKey) int { return strings.Compare(key(a), key(b)) })
	slices.SortFunc(want, func(a, b SampleKey) int { return strings.Compare(key(a), key(b)) })
	if !slices.Equal(got, want) {
		t.Errorf("%s sample keys = %v, want %v", tr.Table, got, want)
	}
}

func wantVerdict(t *testing.T, r *Result, v Verdict) {
	t.Helper()
	if r.Verdict != v {
		t.Fatalf("verdict %s, want %s", r.Verdict, v)
	}
}

// TestVerify starts the shared cluster and runs every single-cluster
// scenario against it in parallel, each with its own pair of databases.
// Scenarios marked both also run with HashingText, the path servers older
// than PostgreSQL 14 take.
func TestVerify(t *testing.T) {
	// Each parallel subtest holds a few connections; -parallel follows the
	// core count, so a large CI machine would exceed the default 40.
	sharedCluster = pgtest.Start(t, pgtest.Options{NoFsync: true, Settings: map[string]string{"max_connections": "300"}})
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *pair)
		both bool
	}{
		{"Identical", testIdentical, true},
		{"Empty", testEmpty, true},
		{"PlantedDivergences", testPlantedDivergences, true},
		{"SwappedValues", testSwappedValues, true},
		{"XORWouldCancel", testXORWouldCancel, true},
		{"TableFilter", testTableFilter, false},
		{"WholeRow", testWholeRow, true},
		{"ReplicaIdentity", testReplicaIdentity, false},
		{"NullVersusEmpty", testNullVersusEmpty, true},
		{"CompositeKey", testCompositeKey, true},
		{"Types", testTypes, true},
		{"TypesChanged", testTypesChanged, true},
		{"NondeterministicCollation", testNondeterministicCollation, true},
		{"MissingTargetTable", testMissingTargetTable, false},
		{"ColumnMismatch", testColumnMismatch, false},
		{"ColumnOrder", testColumnOrder, true},
		{"TargetMapping", testTargetMapping, false},
		{"Partitioned", testPartitioned, false},
		{"SubBuckets", testSubBuckets, true},
		{"Parallel", testParallel, false},
		{"WatermarkCatchesUp", testWatermarkCatchesUp, false},
		{"WatermarkNeverCatchesUp", testWatermarkNeverCatchesUp, false},
		{"RecheckComparesEverything", testRecheckComparesEverything, true},
		{"SourceTableMissing", testSourceTableMissing, false},
	} {
		for _, text := range []bool{false, true} {
			if text && !tc.both {
				continue
			}
			name := tc.name
			if text {
				name += "/TextHashing"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				p := newPair(t, cluster(t))
				p.textHashing = text
				tc.fn(t, p)
			})
		}
	}
}

const itemsDDL = `CREATE TABLE public.items (id int PRIMARY KEY, name text, qty int, price numeric(10,2))`
const itemsFill = `INSERT INTO public.items SELECT g, 'item ' || g, g % 7, g * 1.25 FROM generate_series(1, 1000) g`

func testIdentical(t *testing.T, p *pair) {
	p.both(t, itemsDDL, itemsFill)
	r := p.verify(t, Options{Tables: []string{"public.items"}})
	wantVerdict(t, r, Converged)
	tr := table(t, r, "public.items")
	if tr.SourceRows != 1000 || tr.TargetRows != 1000 {
		t.Errorf("rows %d/%d, want 1000/1000", tr.SourceRows, tr.TargetRows)
	}
	if tr.SourceChecksum != tr.TargetChecksum || len(tr.SourceChecksum) != 16 {
		t.Errorf("checksums %q/%q, want equal 16-hex-digit values", tr.SourceChecksum, tr.TargetChecksum)
	}
	if tr.KeyBasis != BasisPrimaryKey || !slices.Equal(tr.KeyColumns, []string{"id"}) {
		t.Errorf("key %s %v, want primary_key [id]", tr.KeyBasis, tr.KeyColumns)
	}
	// Equal totals settle a table without splitting it into buckets.
	if tr.Buckets != 0 || tr.Recovery != "" || r.Watermark != nil {
		t.Errorf("buckets %d recovery %q watermark %v", tr.Buckets, tr.Recovery, r.Watermark)
	}
	if r.SourceRowsPerSecond <= 0 || r.TargetRowsPerSecond <= 0 {
		t.Errorf("rows/s %f/%f, want positive", r.SourceRowsPerSecond, r.TargetRowsPerSecond)
	}
	if ExitCode(r, nil) != 0 {
		t.Errorf("exit code %d, want 0", ExitCode(r, nil))
	}
}

func testPlantedDivergences(t *testing.T, p *pair) {
	p.both(t, itemsDDL, itemsFill)
	p.target(t,
		`UPDATE public.items SET qty = qty + 1 WHERE id = 7`,
		`DELETE FROM public.items WHERE id = 42`,
		`INSERT INTO public.items VALUES (1001, 'stray', 1, 1.00)`)
	r := p.verify(t, Options{Tables: []string{"public.items"}, ConfigPath: "/etc/trellara/prod.yml"})
	wantVerdict(t, r, Diverged)
	tr := table(t, r, "public.items")
	wantSamples(t, tr,
		SampleKey{Key: "7", Kind: KindChanged},
		SampleKey{Key: "42", Kind: KindMissing},
		SampleKey{Key: "1001", Kind: KindExtra})
	if tr.SourceRows != 1000 || tr.TargetRows != 1000 {
		t.Errorf("rows %d/%d, want 1000/1000 (one deleted, one added)", tr.SourceRows, tr.TargetRows)
	}
	if tr.Buckets != bucketsAuto || tr.MismatchingBucketCount < 1 || tr.MismatchingBucketCount > 3 || len(tr.MismatchingBuckets) != tr.MismatchingBucketCount {
		t.Errorf("mismatching buckets %d %v", tr.MismatchingBucketCount, tr.MismatchingBuckets)
	}
	if want := "trellara repair-plan --config /etc/trellara/prod.yml --table public.items"; tr.Recovery != want {
		t.Errorf("recovery %q, want %q", tr.Recovery, want)
	}
	if ExitCode(r, nil) != 1 {
		t.Errorf("exit code %d, want 1", ExitCode(r, nil))
	}
}

func testSwappedValues(t *testing.T, p *pair) {
	p.both(t, itemsDDL, itemsFill)
	// Same multiset of values, same counts: only a per-row hash that
	// includes the key, summed, tells.
	// qty is id % 7: 3 for id 10, 4 for id 11. One bucket, so both rows
	// are summed together: a linear combination of column hashes would
	// cancel here.
	p.target(t, `UPDATE public.items SET qty = CASE id WHEN 10 THEN 4 ELSE 3 END WHERE id IN (10, 11)`)
	r := p.verify(t, Options{Tables: []string{"public.items"}, Buckets: 1})
	wantVerdict(t, r, Diverged)
	wantSamples(t, table(t, r, "public.items"),
		SampleKey{Key: "10", Kind: KindChanged},
		SampleKey{Key: "11", Kind: KindChanged})
}

func testXORWouldCancel(t *testing.T, p *pair) {
	// One bucket, no key: source {a, a, c}, target {b, b, c}. Counts are
	// equal and the XOR of row hashes is h(c) on both sides.
	p.both(t, `CREATE TABLE public.tags (tag text)`)
	p.source(t, `INSERT INTO public.tags VALUES ('a'), ('a'), ('c')`)
	p.target(t, `INSERT INTO public.tags VALUES ('b'), ('b'), ('c')`)
	r := p.verify(t, Options{Tables: []string{"public.tags"}, Buckets: 1})
	wantVerdict(t, r, Diverged)
	wantSamples(t, table(t, r, "public.tags"),
		SampleKey{Key: "(a)", Kind: KindMissing},
		SampleKey{Key: "(b)", Kind: KindExtra})
}

func testTableFilter(t *testing.T, p *pair) {
	p.both(t, itemsDDL, itemsFill,
		`CREATE TABLE public.notes (id int PRIMARY KEY, body text)`,
		`INSERT INTO public.notes SELECT g, 'n' || g FROM generate_series(1, 50) g`)
	p.target(t, `DELETE FROM public.notes WHERE id = 3`)
	wantVerdict(t, p.verify(t, Options{Tables: []string{"public.items"}}), Converged)
	r := p.verify(t, Options{Tables: []string{"public.items", "public.notes"}})
	wantVerdict(t, r, Diverged)
	if got := table(t, r, "public.items").Verdict; got != Converged {
		t.Errorf("public.items %s, want CONVERGED", got)
	}
	wantSamples(t, table(t, r, "public.notes"), SampleKey{Key: "3", Kind: KindMissing})
}

func testWholeRow(t *testing.T, p *pair) {
	p.both(t, `CREATE TABLE public.log (at date, msg text)`,
		`INSERT INTO public.log SELECT DATE '2024-01-01' + g, 'm' || g FROM generate_series(1, 200) g`)
	wantVerdict(t, p.verify(t, Options{Tables: []string{"public.log"}}), Converged)
	p.target(t, `UPDATE public.log SET msg = 'edited' WHERE msg = 'm5'`)
	r := p.verify(t, Options{Tables: []string{"public.log"}})
	wantVerdict(t, r, Diverged)
	tr := table(t, r, "public.log")
	if tr.KeyBasis != BasisWholeRow || len(tr.KeyColumns) != 0 {
		t.Errorf("key basis %s %v, want whole_row", tr.KeyBasis, tr.KeyColumns)
	}
	if len(tr.Notes) == 0 || !strings.Contains(tr.Notes[0], "whole content") {
		t.Errorf("notes %q do not explain the whole-row basis", tr.Notes)
	}
	wantSamples(t, tr,
		SampleKey{Key: "(2024-01-06,m5)", Kind: KindMissing},
		SampleKey{Key: "(2024-01-06,edited)", Kind: KindExtra})
}

func testReplicaIdentity(t *testing.T, p *pair) {
	p.both(t, `CREATE TABLE public.sku (code text NOT NULL, label text)`,
		`CREATE UNIQUE INDEX sku_code ON public.sku (code)`,
		`ALTER TABLE public.sku REPLICA IDENTITY USING INDEX sku_code`,
		`INSERT INTO public.sku SELECT 'c' || g, 'l' || g FROM generate_series(1, 100) g`)
	p.target(t, `UPDATE public.sku SET label = 'x' WHERE code = 'c9'`)
	r := p.verify(t, Options{Tables: []string{"public.sku"}})
	wantVerdict(t, r, Diverged)
	tr := table(t, r, "public.sku")
	if tr.KeyBasis != BasisReplicaIdentity || !slices.Equal(tr.KeyColumns, []string{"code"}) {
		t.Errorf("key %s %v, want replica_identity [code]", tr.KeyBasis, tr.KeyColumns)
	}
	wantSamples(t, tr, SampleKey{Key: "c9", Kind: KindChanged})
}

func testNullVersusEmpty(t *testing.T, p *pair) {
	p.both(t, `CREATE TABLE public.people (id int PRIMARY KEY, nick text, tags text[])`)
	p.source(t, `INSERT INTO public.people VALUES (1, NULL, ARRAY['a']), (2, 'x', ARRAY[NULL]), (3, 'y', NULL)`)
	p.target(t, `INSERT INTO public.people VALUES (1, '', ARRAY['a']), (2, 'x', ARRAY['NULL']), (3, 'y', '{}')`)
	r := p.verify(t, Options{Tables: []string{"public.people"}})
	wantVerdict(t, r, Diverged)
	wantSamples(t, table(t, r, "public.people"),
		SampleKey{Key: "1", Kind: KindChanged},
		SampleKey{Key: "2", Kind: KindChanged},
		SampleKey{Key: "3", Kind: KindChanged})
}

func testCompositeKey(t *testing.T, p *pair) {
	p.both(t, `CREATE TABLE public.lines (order_id int, line text, qty int, PRIMARY KEY (order_id, line))`,
		`INSERT INTO public.lines SELECT g / 3, 'l ' || (g % 3), g FROM generate_series(1, 300) g`)
	wantVerdict(t, p.verify(t, Options{Tables: []string{"public.lines"}}), Converged)
	p.target(t, `UPDATE public.lines SET qty = 0 WHERE order_id = 5 AND line = 'l 1'`,
		`DELETE FROM public.lines WHERE order_id = 7 AND line = 'l 0'`)
	r := p.verify(t, Options{Tables: []string{"public.lines"}})
	wantVerdict(t, r, Diverged)
	tr := table(t, r, "public.lines")
	if !slices.Equal(tr.KeyColumns, []string{"order_id", "line"}) {
		t.Errorf("key columns %v", tr.KeyColumns)
	}
	wantSamples(t, tr,
		SampleKey{Key: `(5,"l 1")`, Kind: KindChanged},
		SampleKey{Key: `(7,"l 0")`, Kind: KindMissing})
}

// typesDDL covers types whose text form depends on session settings.
const typesDDL = `CREATE TABLE public.kinds (
	id bigint PRIMARY KEY, n numeric, ts timestamptz, d date, iv interval,
	f float8, r real, j jsonb, a int[], ta text[], b bytea, u uuid, m money, t time)`

const typesFill = `INSERT INTO public.kinds SELECT g,
	g / 7.0, TIMESTAMPTZ '2024-03-10 01:30:00+00' + g * interval '37 minutes 0.123456 seconds', DATE '2000-02-28' + g,
	g * interval '1 day 3 hours 4.5 seconds', g / 3.0, g / 3.0, jsonb_build_object('k', g, 'nested', jsonb_build_array(g, 'x', null)),
	ARRAY[g, NULL, -g], ARRAY['a b', NULL, 'q"uote', ''], decode(md5(g::text), 'hex'), md5(g::text)::uuid,
	g * 1.01, TIME '12:00' + g * interval '1 second'
	FROM generate_series(1, 500) g`

func testTypes(t *testing.T, p *pair) {
	p.both(t, typesDDL, typesFill)
	// Every output-affecting setting differs at the target's database
	// level; Verify must pin them, or the text forms would differ.
	p.c.Exec(t, fmt.Sprintf(`ALTER DATABASE %s SET TimeZone = 'Asia/Kolkata'`, p.dstDB),
		fmt.Sprintf(`ALTER DATABASE %s SET DateStyle = 'SQL, DMY'`, p.dstDB),
		fmt.Sprintf(`ALTER DATABASE %s SET IntervalStyle = 'sql_standard'`, p.dstDB),
		fmt.Sprintf(`ALTER DATABASE %s SET extra_float_digits = -3`, p.dstDB),
		fmt.Sprintf(`ALTER DATABASE %s SET bytea_output = 'escape'`, p.dstDB))
	p.dst = connect(t, p.c.URL(p.dstDB)) // settings apply to new sessions
	wantVerdict(t, p.verify(t, Options{Tables: []string{"public.kinds"}}), Converged)
}

func testTypesChanged(t *testing.T, p *pair) {
	p.both(t, typesDDL, typesFill)
	p.target(t,
		`UPDATE public.kinds SET n = 1.50 WHERE id = 1`, // was 1/7.0
		`UPDATE public.kinds SET ts = ts + interval '1 microsecond' WHERE id = 2`,
		`UPDATE public.kinds SET j = j || '{"k": 3.0}' WHERE id = 3`, // 3 vs 3.0: jsonb keeps the scale
		`UPDATE public.kinds SET a = ARRAY[4, NULL, -4, 0] WHERE id = 4`,
		`UPDATE public.kinds SET b = b || '\x00'::bytea WHERE id = 5`,
		`UPDATE public.kinds SET f = f + 1e-15 WHERE id = 6`,
		`UPDATE public.kinds SET f = '-0' WHERE id = 7`,
		`UPDATE public.kinds SET iv = '24 hours' WHERE id = 8`)
	// Equal under the types' own equality (and hash), different values:
	// a report must not call them converged.
	p.source(t, `UPDATE public.kinds SET n = 1.5 WHERE id = 1`,
		`UPDATE public.kinds SET f = 0 WHERE id = 7`,
		`UPDATE public.kinds SET iv = '1 day' WHERE id = 8`)
	r := p.verify(t, Options{Tables: []string{"public.kinds"}})
	wantVerdict(t, r, Diverged)
	var want []SampleKey
	for i := 1; i <= 8; i++ {
		want = append(want, SampleKey{Key: fmt.Sprint(i), Kind: KindChanged})
	}
	wantSamples(t, table(t, r, "public.kinds"), want...)
}

func testEmpty(t *testing.T, p *pair) {
	p.both(t, `CREATE TABLE public.e (id int PRIMARY KEY, v text)`)
	r := p.verify(t, Options{Tables: []string{"public.e"}})
	wantVerdict(t, r, Converged)
	if tr := r.Tables[0]; tr.SourceChecksum != "0000000000000000" || tr.SourceRows != 0 {
		t.Errorf("empty table: %+v", tr)
	}
	p.target(t, `INSERT INTO public.e VALUES (5, NULL)`)
	r = p.verify(t, Options{Tables: []string{"public.e"}})
	wantVerdict(t, r, Diverged)
	wantSamples(t, r.Tables[0], SampleKey{Key: "5", Kind: KindExtra})
}

func testNondeterministicCollation(t *testing.T, p *pair) {
	// A case-insensitive collation makes 'Abc' = 'abc' (and hashes them
	// alike); the stored values still differ, so verify must see it.
	p.both(t, `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
		`CREATE TABLE public.users (id int PRIMARY KEY, email text COLLATE ci)`,
		`INSERT INTO public.users VALUES (1, 'Ann@Example.com'), (2, 'bob@example.com')`)
	p.target(t, `UPDATE public.users SET email = 'ann@example.com' WHERE id = 1`)
	r := p.verify(t, Options{Tables: []string{"public.users"}})
	wantVerdict(t, r, Diverged)
	wantSamples(t, table(t, r, "public.users"), SampleKey{Key: "1", Kind: KindChanged})
}

func testMissingTargetTable(t *testing.T, p *pair) {
	p.source(t, itemsDDL, itemsFill)
	r := p.verify(t, Options{Tables: []string{"public.items"}})
	wantVerdict(t, r, Diverged)
	tr := table(t, r, "public.items")
	if len(tr.Reasons) != 1 || tr.Reasons[0] != "target table public.items does not exist" {
		t.Errorf("reasons %q", tr.Reasons)
	}
	if tr.SourceRows != 1000 || tr.TargetRows != 0 || tr.Recovery == "" {
		t.Errorf("rows %d/%d recovery %q", tr.SourceRows, tr.TargetRows, tr.Recovery)
	}
}

func testColumnMismatch(t *testing.T, p *pair) {
	p.source(t, `CREATE TABLE public.acct (id int PRIMARY KEY, owner text, balance numeric(12,2), "Note" text)`)
	p.target(t, `CREATE TABLE public.acct (id int PRIMARY KEY, balance numeric(12,4), "Note" text, extra int)`)
	p.both(t, `INSERT INTO public.acct (id, "Note") VALUES (1, 'x')`)
	r := p.verify(t, Options{Tables: []string{"public.acct"}})
	wantVerdict(t, r, Diverged)
	tr := table(t, r, "public.acct")
	want := []string{
		"column owner is missing at target",
		"column balance is numeric(12,2) at source but numeric(12,4) at target",
		"column extra exists only at target (integer)",
	}
	if !slices.Equal(tr.Reasons, want) {
		t.Errorf("reasons\n%q\nwant\n%q", tr.Reasons, want)
	}
	if tr.SourceRows != 1 || tr.TargetRows != 1 {
		t.Errorf("rows %d/%d, want 1/1", tr.SourceRows, tr.TargetRows)
	}
}

func testColumnOrder(t *testing.T, p *pair) {
	p.source(t, `CREATE TABLE public.o (id int PRIMARY KEY, a text, b int)`)
	// Same columns, different physical order, plus a dropped column.
	p.target(t, `CREATE TABLE public.o (b int, gone int, a text, id int PRIMARY KEY)`, `ALTER TABLE public.o DROP COLUMN gone`)
	p.both(t, `INSERT INTO public.o (id, a, b) SELECT g, 'a' || g, g * 2 FROM generate_series(1, 100) g`)
	wantVerdict(t, p.verify(t, Options{Tables: []string{"public.o"}}), Converged)
	p.target(t, `UPDATE public.o SET a = NULL WHERE id = 50`)
	r := p.verify(t, Options{Tables: []string{"public.o"}})
	wantVerdict(t, r, Diverged)
	wantSamples(t, table(t, r, "public.o"), SampleKey{Key: "50", Kind: KindChanged})
}

func testTargetMapping(t *testing.T, p *pair) {
	p.source(t, itemsDDL, itemsFill)
	p.target(t, `CREATE SCHEMA "Mirror"`, strings.Replace(itemsDDL, "public.items", `"Mirror"."Items"`, 1),
		strings.Replace(itemsFill, "public.items", `"Mirror"."Items"`, 1))
	opts := Options{
		Tables: []string{"public.items"},
		TargetTable: func(tn config.TableName) config.TableName {
			return config.TableName{Schema: "Mirror", Name: "Items"}
		},
	}
	r := p.verify(t, opts)
	wantVerdict(t, r, Converged)
	if tr := r.Tables[0]; tr.TargetTable != `"Mirror"."Items"` {
		t.Errorf("target table %q", tr.TargetTable)
	}
}

func testPartitioned(t *testing.T, p *pair) {
	p.both(t, `CREATE TABLE public.ev (id int, region text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)`,
		`CREATE TABLE public.ev_n PARTITION OF public.ev FOR VALUES IN ('n')`,
		`CREATE TABLE public.ev_s PARTITION OF public.ev FOR VALUES IN ('s')`,
		`INSERT INTO public.ev SELECT g, CASE WHEN g % 2 = 0 THEN 'n' ELSE 's' END FROM generate_series(1, 2000) g`)
	p.target(t, `DELETE FROM public.ev_s WHERE id = 9`)
	r := p.verify(t, Options{Tables: []string{"public.ev"}})
	wantVerdict(t, r, Diverged)
	tr := table(t, r, "public.ev")
	// Several pages per partition: the page ranges split each partition.
	if tr.SourceRows != 2000 || tr.TargetRows != 1999 {
		t.Errorf("rows %d/%d, want 2000/1999 (partitions included)", tr.SourceRows, tr.TargetRows)
	}
	wantSamples(t, tr, SampleKey{Key: "(9,s)", Kind: KindMissing})
}

func testSubBuckets(t *testing.T, p *pair) {
	p.both(t, itemsDDL, itemsFill)
	p.target(t, `UPDATE public.items SET name = 'renamed' WHERE id IN (100, 500, 900)`)
	// One bucket of 1000 rows and room for 40 rows per fetch: drill-down
	// must split the bucket before it can name keys.
	r := p.verify(t, Options{Tables: []string{"public.items"}, Buckets: 1, DrillRowsMax: 40, SampleKeysMax: 3})
	wantVerdict(t, r, Diverged)
	tr := table(t, r, "public.items")
	if len(tr.SampleKeys) == 0 {
		t.Fatalf("no sample keys; notes %q", tr.Notes)
	}
	for _, s := range tr.SampleKeys {
		if s.Kind != KindChanged || !slices.Contains([]string{"100", "500", "900"}, s.Key) {
			t.Errorf("unexpected sample %v", s)
		}
	}
}

func testParallel(t *testing.T, p *pair) {
	p.both(t, itemsDDL, itemsFill)
	p.target(t, `DELETE FROM public.items WHERE id = 77`)
	r := p.verify(t, Options{Tables: []string{"public.items"}, ParallelWorkers: 2})
	wantVerdict(t, r, Diverged)
	wantSamples(t, table(t, r, "public.items"), SampleKey{Key: "77", Kind: KindMissing})
}

// fakeApplier stands in for the applier's checkpoint on the target.
// polled is closed on the first read: Verify reads the checkpoint once its
// first source snapshot is taken, before its first target snapshot.
type fakeApplier struct {
	applied    time.Time // reported as the target's last apply
	checkpoint atomic.Uint64
	once       sync.Once
	polled     chan struct{}
}

func newFakeApplier(checkpoint uint64) *fakeApplier {
	f := &fakeApplier{polled: make(chan struct{})}
	f.checkpoint.Store(checkpoint)
	return f
}

func (f *fakeApplier) read(context.Context) (Position, error) {
	f.once.Do(func() { close(f.polled) })
	return Position{EndLSN: f.checkpoint.Load(), AppliedAt: f.applied}, nil
}

// currentLSN reads the source's insert position on a connection of its own.
func currentLSN(t *testing.T, url string) uint64 {
	t.Helper()
	conn := connect(t, url)
	var s string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	pos, err := lsn.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(pos)
}

func testWatermarkCatchesUp(t *testing.T, p *pair) {
	p.both(t, itemsDDL, itemsFill)
	p.source(t, `INSERT INTO public.items VALUES (1001, 'late', 1, 2.00)`)
	fa := newFakeApplier(currentLSN(t, p.c.URL(p.srcDB)) - 1) // behind
	done := make(chan struct{})
	go func() {
		// Once Verify has compared and is waiting, the applier delivers
		// the missing transaction and then confirms a position past
		// anything the source has written (background WAL keeps moving
		// the insert position).
		defer close(done)
		select {
		case <-fa.polled:
		case <-time.After(time.Minute): // Verify failed; the test reports it
			return
		}
		time.Sleep(200 * time.Millisecond)
		conn, err := pgx.Connect(context.Background(), p.c.URL(p.dstDB))
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), `INSERT INTO public.items VALUES (1001, 'late', 1, 2.00)`); err != nil {
			t.Error(err)
			return
		}
		fa.checkpoint.Store(fa.checkpoint.Load() + 1<<30)
	}()
	r := p.verify(t, Options{Tables: []string{"public.items"}, TargetCheckpoint: fa.read, WaitCaughtUp: 20 * time.Second})
	<-done
	wantVerdict(t, r, Converged)
	if r.Watermark == nil || !r.Watermark.CaughtUp() || r.Watermark.Waited <= 0 {
		t.Fatalf("watermark %+v, want caught up after a wait", r.Watermark)
	}
	// The wait came before the first target snapshot, so one comparison
	// at a common watermark settled it.
	if tr := table(t, r, "public.items"); tr.Rechecks != 0 || tr.SourceRows != 1001 || tr.TargetRows != 1001 {
		t.Errorf("rechecks %d rows %d/%d, want 0 and 1001/1001", tr.Rechecks, tr.SourceRows, tr.TargetRows)
	}
}

// testWatermarkNeverCatchesUp: a target that never reaches the watermark
// is BEHIND, with the lag, whether or not its rows differ meanwhile. A row
// the applier has not delivered yet is not a divergence, and equal rows
// prove nothing while the checkpoint is short: neither DIVERGED nor
// CONVERGED (which once stood beside "NOT caught up").
func testWatermarkNeverCatchesUp(t *testing.T, p *pair) {
	p.both(t, itemsDDL, itemsFill)
	equal := p.verify(t, Options{Tables: []string{"public.items"}, TargetCheckpoint: newFakeApplier(0x1000000).read, WaitCaughtUp: 100 * time.Millisecond})
	wantVerdict(t, equal, Behind)
	if tr := table(t, equal, "public.items"); tr.Verdict != Behind || len(tr.Reasons) != 0 {
		t.Errorf("equal table: verdict %s reasons %q, want BEHIND and none", tr.Verdict, tr.Reasons)
	}

	p.source(t, `UPDATE public.items SET qty = -1 WHERE id = 12`)
	fa := newFakeApplier(0x1000000)
	fa.applied = time.Now().Add(-time.Hour)
	start := time.Now()
	r := p.verify(t, Options{Tables: []string{"public.items"}, TargetCheckpoint: fa.read, WaitCaughtUp: 300 * time.Millisecond, ConfigPath: "flow.yml"})
	wantVerdict(t, r, Behind)
	wm := r.Watermark
	if wm == nil || wm.CaughtUp() || wm.TargetCheckpoint != 0x1000000 {
		t.Fatalf("watermark %+v, want not caught up at 0/1000000", wm)
	}
	if lag := wm.LagBytes(); lag == 0 || lag != uint64(wm.SourceLSN)-0x1000000 {
		t.Errorf("lag %d bytes, want watermark %s - checkpoint 0/1000000", lag, wm.SourceLSN)
	}
	if age, ok := wm.LagAge(); !ok || age < time.Hour {
		t.Errorf("lag age %s %v, want at least the hour since the target last applied", age, ok)
	}
	if w := wm.Waited; w < 300*time.Millisecond || time.Since(start) > 20*time.Second {
		t.Errorf("waited %s (total %s), want the whole 300ms budget and no more", w, time.Since(start))
	}
	tr := table(t, r, "public.items")
	if tr.Verdict != Behind || tr.MismatchingBucketCount != 1 || tr.Recovery != "" {
		t.Errorf("table verdict %s, %d buckets differ, recovery %q; want BEHIND, 1, none", tr.Verdict, tr.MismatchingBucketCount, tr.Recovery)
	}
	// The example keys show where the target stands, with the caveat.
	wantSamples(t, tr, SampleKey{Key: "12", Kind: KindChanged})
	if !slices.ContainsFunc(tr.Notes, func(n string) bool { return strings.Contains(n, "may only be waiting to be applied") }) {
		t.Errorf("notes %q lack the caveat on the example keys of a target behind", tr.Notes)
	}
	if tr.Rechecks != 0 {
		t.Errorf("rechecks %d, want 0 (the wait budget is spent: a re-check would see the same stale target)", tr.Rechecks)
	}
	if r.Recovery != "trellara run --config flow.yml --local --verify" || ExitCode(r, nil) != 3 {
		t.Errorf("recovery %q exit %d, want the catch-up command and 3", r.Recovery, ExitCode(r, nil))
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	if err := json.Unmarshal(js, &j); err != nil {
		t.Fatal(err)
	}
	if j["verdict"] != "BEHIND" || j["watermark_lsn"] != wm.SourceLSN.String() || j["target_checkpoint_lsn"] != "0/1000000" ||
		j["lag_bytes"] != float64(wm.LagBytes()) || j["lag_age_seconds"] == nil {
		t.Errorf("JSON %s lacks the verdict and lag", js)
	}
}

// testRecheckComparesEverything: the verdict comes from one pair of
// snapshots. Round 1 sees one differing bucket in public.items and a
// matching public.notes. Before round 2 the target catches up on that
// bucket but diverges in another bucket of items and in notes (rows the
// first round had seen equal). A re-check that re-hashed only the buckets
// round 1 saw differ, or only the tables that differed, would answer
// CONVERGED with the first round's watermark.
func testRecheckComparesEverything(t *testing.T, p *pair) {
	p.both(t, itemsDDL, itemsFill,
		`CREATE TABLE public.notes (id int PRIMARY KEY, body text)`,
		`INSERT INTO public.notes SELECT g, 'n' || g FROM generate_series(1, 50) g`)
	p.source(t, `INSERT INTO public.items VALUES (1001, 'late', 1, 2.00)`)
	// A row of items in another bucket than 1001's, by the bucket
	// expression Verify itself uses (int4 key, seed 0, 64 buckets).
	var other int
	b := bucketExpr("pg_catalog.hashint4extended(id, 0)", 64)
	q := fmt.Sprintf(`SELECT id FROM public.items WHERE %s <> (SELECT %s FROM (SELECT 1001 AS id) AS x) ORDER BY id LIMIT 1`, b, b)
	if err := p.src.QueryRow(context.Background(), q).Scan(&other); err != nil {
		t.Fatal(err)
	}
	var lsns []uint64
	sourceLSN := func(context.Context) (uint64, error) {
		lsns = append(lsns, uint64(len(lsns)+1)<<24)
		return lsns[len(lsns)-1], nil
	}
	var reads int
	checkpoint := func(ctx context.Context) (Position, error) {
		// The first read comes before round 1's target snapshot, the
		// second before round 2's: change the target in between.
		var err error
		if reads++; reads == 2 {
			func() {
				conn, cerr := pgx.Connect(ctx, p.c.URL(p.dstDB))
				if cerr != nil {
					err = cerr
					return
				}
				defer conn.Close(context.Background())
				for _, s := range []string{
					`INSERT INTO public.items VALUES (1001, 'late', 1, 2.00)`,
					fmt.Sprintf(`UPDATE public.items SET qty = qty + 1 WHERE id = %d`, other),
					`DELETE FROM public.notes WHERE id = 9`,
				} {
					if _, err = conn.Exec(ctx, s); err != nil {
						return
					}
				}
			}()
		}
		return Position{EndLSN: 1 << 40}, err // always past the source: caught up
	}
	r := p.verify(t, Options{Tables: []string{"public.items", "public.notes"}, Buckets: 64, SourceLSN: sourceLSN, TargetCheckpoint: checkpoint})
	wantVerdict(t, r, Diverged)
	wantSamples(t, table(t, r, "public.items"), SampleKey{Key: strconv.Itoa(other), Kind: KindChanged})
	wantSamples(t, table(t, r, "public.notes"), SampleKey{Key: "9", Kind: KindMissing})
	if len(lsns) < 2 {
		t.Fatalf("%d source snapshots, want a re-check", len(lsns))
	}
	if r.Watermark == nil || uint64(r.Watermark.SourceLSN) != lsns[len(lsns)-1] || !r.Watermark.CaughtUp() {
		t.Errorf("watermark %+v, want the last round's source LSN %s (of %d rounds), caught up", r.Watermark, lsn.LSN(lsns[len(lsns)-1]), len(lsns))
	}
	for _, tr := range r.Tables {
		if tr.Rechecks != len(lsns)-1 {
			t.Errorf("%s rechecks %d, want %d (every table in every round)", tr.Table, tr.Rechecks, len(lsns)-1)
		}
	}
}

func testSourceTableMissing(t *testing.T, p *pair) {
	_, err := Verify(context.Background(), p.src, p.dst, Options{Tables: []string{"public.nope"}})
	if !errors.Is(err, ErrSourceTable) || !strings.Contains(err.Error(), "public.nope") {
		t.Fatalf("err %v, want ErrSourceTable naming public.nope", err)
	}
	if ExitCode(nil, err) != 2 {
		t.Errorf("exit code %d, want 2", ExitCode(nil, err))
	}
	// The caller's connections are usable afterwards: no transaction left open.
	for _, c := range []*pgx.Conn{p.src, p.dst} {
		if c.PgConn().TxStatus() != 'I' {
			t.Errorf("connection left in transaction status %q", c.PgConn().TxStatus())
		}
	}
}

// TestTwoClusters runs source and target on separate servers, as in
// production: nothing about the comparison may depend on sharing one.
func TestTwoClusters(t *testing.T) {
	a := pgtest.Start(t, pgtest.Options{NoFsync: true})
	b := pgtest.Start(t, pgtest.Options{NoFsync: true})
	a.Exec(t, typesDDL, typesFill, itemsDDL, itemsFill)
	b.Exec(t, typesDDL, typesFill, itemsDDL, itemsFill,
		`UPDATE public.items SET price = price + 0.01 WHERE id = 333`,
		`DELETE FROM public.kinds WHERE id = 250`)
	ctx := context.Background()
	src, dst := a.Connect(ctx), b.Connect(ctx)
	fa := newFakeApplier(^uint64(0) >> 1)
	r, err := Verify(ctx, src, dst, Options{Tables: []string{"public.kinds", "public.items"}, TargetCheckpoint: fa.read})
	if err != nil {
		t.Fatal(err)
	}
	checkRendering(t, r)
	wantVerdict(t, r, Diverged)
	wantSamples(t, table(t, r, "public.items"), SampleKey{Key: "333", Kind: KindChanged})
	wantSamples(t, table(t, r, "public.kinds"), SampleKey{Key: "250", Kind: KindMissing})
	if !r.Watermark.CaughtUp() {
		t.Errorf("watermark %+v, want caught up", r.Watermark)
	}
	for _, tr := range r.Tables {
		if tr.Rechecks != 1 {
			t.Errorf("%s rechecks %d, want 1 (a stable difference stops re-checking)", tr.Table, tr.Rechecks)
		}
	}
}

// TestParallelHashingSeesOneSnapshot hashes a table in page ranges over
// four source connections while a writer keeps updating rows spread over
// every range. The source's count and checksum must be those of one point
// in time: the snapshot Verify exported, read again here in a single
// transaction that adopts it. If the extra connections took snapshots of
// their own (after the writer committed again, which the SourceLSN hook
// waits for), their ranges would hash newer rows and the totals would
// match no single snapshot.
func TestParallelHashingSeesOneSnapshot(t *testing.T) {
	c := pgtest.Start(t, pgtest.Options{NoFsync: true})
	const ddl = `CREATE TABLE public.acct (id int PRIMARY KEY, v int NOT NULL, pad text NOT NULL) WITH (fillfactor = 100)`
	const fill = `INSERT INTO public.acct SELECT g, 0, repeat('x', 40) FROM generate_series(1, 20000) g`
	srcURL, dstURL := c.CreateDB(t, "src"), c.CreateDB(t, "dst")
	c.ExecDB(t, "src", ddl, fill, `VACUUM ANALYZE public.acct`)
	c.ExecDB(t, "dst", ddl, fill)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, dst, writer, probe := connect(t, srcURL), connect(t, dstURL), connect(t, srcURL), connect(t, srcURL)

	// The writer moves every twentieth row at a time, so each commit
	// changes rows on every page range.
	var commits atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for k := 0; ; k++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := writer.Exec(ctx, `UPDATE public.acct SET v = v + 1 WHERE id % 20 = $1`, k%20); err != nil {
				done <- err
				return
			}
			commits.Add(1)
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("writer: %v", err)
		}
	}()

	type point struct {
		rows     int64
		checksum string
	}
	var want point
	sourceLSN := func(ctx context.Context) (uint64, error) {
		// Verify's source snapshot is open and exported: read the same
		// table in one transaction that adopts it.
		before := commits.Load()
		var id string
		if err := probe.QueryRow(ctx, `SELECT pg_catalog.pg_ls_dir('pg_snapshots')`).Scan(&id); err != nil {
			return 0, fmt.Errorf("find the exported snapshot: %w", err)
		}
		tx, err := probe.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, sqlImportSnapshot+quoteLiteral(id)); err != nil {
			return 0, err
		}
		if _, _, _, err := pin(ctx, tx, -1); err != nil {
			return 0, err
		}
		tn := config.TableName{Schema: "public", Name: "acct"}
		sh, err := readShape(ctx, tx, tn, false, false)
		if err != nil {
			return 0, err
		}
		p, _ := plans(tableSpec{src: tn, dst: tn}, sh, sh, HashingTyped)
		var sum string
		q, args := p.totalQuery(wholeTable)
		if err := tx.QueryRow(ctx, q, args...).Scan(&want.rows, &sum); err != nil {
			return 0, err
		}
		s, ok := new(big.Int).SetString(sum, 10)
		if !ok {
			return 0, fmt.Errorf("sum %q", sum)
		}
		want.checksum = checksum(s)
		// Let the writer commit after Verify's snapshot, before the other
		// connections join it.
		for commits.Load() <= before {
			select {
			case err := <-done:
				return 0, fmt.Errorf("writer stopped: %v", err)
			case <-time.After(time.Millisecond):
			}
		}
		var text string
		if err := probe.QueryRow(ctx, sqlSourceLSN).Scan(&text); err != nil {
			return 0, err
		}
		l, err := lsn.Parse(text)
		return uint64(l), err
	}
	for i := range 5 {
		r, err := Verify(ctx, src, dst, Options{
			Tables: []string{"public.acct"}, Connections: 4, rangePagesMin: 1, SourceLSN: sourceLSN,
		})
		if err != nil {
			t.Fatalf("verify %d: %v", i, err)
		}
		tr := table(t, r, "public.acct")
		got := point{tr.SourceRows, tr.SourceChecksum}
		if got != want {
			t.Fatalf("verify %d: source totals %+v, but the exported snapshot holds %+v: the connections did not hash one snapshot", i, got, want)
		}
	}
	if n := commits.Load(); n < 5 {
		t.Fatalf("writer committed %d times during the verifies; the test proves nothing", n)
	}
}
