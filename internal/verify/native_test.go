package verify

import (
	"context"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgtest"
)

// startWithExtension starts a cluster that preloads the trellara library
// (no workers: trellara.database is unset). Databases get the extension
// only where a test creates it.
func startWithExtension(t testing.TB, settings map[string]string) *pgtest.Cluster {
	t.Helper()
	pgtest.Require(t)
	c := pgtest.Start(t, pgtest.Options{NoFsync: true, Settings: settings})
	pgtest.InstallExtension(t, c.BinDir())
	f, err := os.OpenFile(filepath.Join(c.DataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(f, "shared_preload_libraries = 'trellara'"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	c.Restart()
	return c
}

// nativeSchema is a table of every kind of column verify hashes
// differently (exact types, strings bytewise, everything else as text),
// with NULLs, out-of-line TOAST values, equal numerics that print
// differently, a dropped column, and keys of each kind: a single int8, a
// single timestamptz (hashed as text on its own, by value in the row), a
// numeric, a composite (with a column name that needs quoting), none
// (whole row), a bpchar with trailing spaces; a partitioned table whose
// partitions number their columns differently; the edge values of every
// type the C function hashes without fmgr (extremes, int8 outside int32,
// a "char" above 127, NaN and infinities, -0, empty strings, numerics
// long, compressed and out of line, text under a nondeterministic
// collation); and a table whose row-level security applies to its owner
// (hashed in SQL).
var nativeSchema = []string{
	`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`,
	`CREATE DOMAIN pos AS int4 CHECK (VALUE > 0)`,
	`CREATE TYPE pair AS (a int4, b text)`,
	`CREATE TABLE public.typed (
		id int8 PRIMARY KEY, gone int4, i2 int2, i4 int4, b bool, ch "char", o oid,
		d date, tm time, ts timestamp, tz timestamptz, u uuid, by bytea,
		tx text, vc varchar(20), nm name,
		n numeric, f8 float8, f4 float4, j jsonb, js json, arr int4[], tarr text[],
		iv interval, bp char(5), ip inet, md mood, ps pos, pr pair, big text)`,
	`ALTER TABLE public.typed ALTER big SET STORAGE EXTERNAL`,
	`INSERT INTO public.typed SELECT g, g, g % 32000, g * 7, g % 3 = 0, chr(65 + g % 26)::"char", g,
		DATE '2025-01-01' + g, TIME '00:00' + g * interval '17 seconds',
		TIMESTAMP '2025-01-01' + g * interval '1 minute',
		TIMESTAMPTZ '2025-01-01 00:00+00' + g * interval '1 hour',
		md5(g::text)::uuid, decode(md5(g::text), 'hex'),
		'tëxt ' || g, 'v' || g, 'n' || g,
		g / 7.0, g / 3.0, g / 3.0, jsonb_build_object('k', g, 'a', ARRAY[g, -g]),
		json_build_object('k', g), ARRAY[g, g + 1, NULL], ARRAY['x' || g, NULL],
		g * interval '1 day 3 hours', 'c' || (g % 100), ('10.0.' || (g % 250) || '.1')::inet,
		(ARRAY['sad', 'ok', 'happy']::mood[])[1 + g % 3], 1 + g % 50, ROW(g, 'p' || g)::pair,
		CASE WHEN g % 97 = 0 THEN (SELECT string_agg(md5(g::text || s), '') FROM generate_series(1, 200) s) END
		FROM generate_series(1, 4000) g`,
	`INSERT INTO public.typed (id) VALUES (0)`,
	`INSERT INTO public.typed (id, n, f8, iv) VALUES (-1, 1.0, -0.0, '1 day'), (-2, 1.00, 0.0, '24 hours')`,
	`ALTER TABLE public.typed DROP COLUMN gone`,
	`CREATE TABLE public.tzkey (at timestamptz PRIMARY KEY, v text)`,
	`INSERT INTO public.tzkey SELECT TIMESTAMPTZ '2025-01-01 00:00+00' + g * interval '1 minute', 'v' || g FROM generate_series(1, 3000) g`,
	`CREATE TABLE public.numkey (k numeric PRIMARY KEY, v int4)`,
	`INSERT INTO public.numkey SELECT g / 8.0, g FROM generate_series(1, 3000) g`,
	`CREATE TABLE public.comp (a int4, "B ""quoted""" text, v float8, PRIMARY KEY (a, "B ""quoted"""))`,
	`INSERT INTO public.comp SELECT g % 50, 'b' || g, g / 3.0 FROM generate_series(1, 3000) g`,
	`CREATE TABLE public.nokey (a int4, b text)`,
	`INSERT INTO public.nokey SELECT g % 700, 'b' || (g % 300) FROM generate_series(1, 3000) g`,
	`CREATE TABLE public.parted (id int4 PRIMARY KEY, k text, v numeric) PARTITION BY RANGE (id)`,
	`CREATE TABLE public.parted1 PARTITION OF public.parted FOR VALUES FROM (0) TO (1000)`,
	`CREATE TABLE public.parted2 (dropme int, v numeric, k text, id int4 NOT NULL)`,
	`ALTER TABLE public.parted2 DROP COLUMN dropme`,
	`ALTER TABLE public.parted ATTACH PARTITION public.parted2 FOR VALUES FROM (1000) TO (4000)`,
	`INSERT INTO public.parted SELECT g, 'k' || g, g / 3.0 FROM generate_series(1, 3999) g`,
	// edge values of every type the C function hashes without fmgr
	`CREATE COLLATION public.nd (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
	`CREATE TABLE public.edge (id int4 PRIMARY KEY, i2 int2, i4 int4, i8 int8, o oid, b bool, ch "char", d date,
		tm time, ts timestamp, tz timestamptz, u uuid, by bytea, tx text, vc varchar(10), nm name, bp char(6),
		f4 float4, f8 float8, n numeric, tnd text COLLATE public.nd, bpnd char(4) COLLATE public.nd)`,
	`INSERT INTO public.edge SELECT g * 10 + v.k, i2, i4, i8, o, b, ch, d, tm, ts, tz, u, by, tx, vc, nm, bp, f4, f8, n, tnd, bpnd
		FROM generate_series(0, 99) g, (VALUES
		(0, NULL::int2, NULL::int4, NULL::int8, NULL::oid, NULL::bool, NULL::"char", NULL::date, NULL::time, NULL::timestamp,
		 NULL::timestamptz, NULL::uuid, NULL::bytea, NULL::text, NULL::varchar, NULL::name, NULL::char(6), NULL::float4,
		 NULL::float8, NULL::numeric, NULL::text, NULL::char(4)),
		(1, -32768, -2147483648, -9223372036854775808, 0, false, '\200', '-infinity', '00:00', '-infinity', '-infinity',
		 '00000000-0000-0000-0000-000000000000', '\x', '', '', '', '', 'NaN', 'NaN', 'NaN', '', ''),
		(2, 32767, 2147483647, 9223372036854775807, 4294967295, true, '\377', 'infinity', '24:00', 'infinity', 'infinity',
		 'ffffffff-ffff-ffff-ffff-ffffffffffff', '\x00ff', 'ä', 'x y', 'ä', 'ab  ', 'Infinity', 'Infinity', 'Infinity', 'ÄB', 'Ab  '),
		(3, -1, -1, -1, 1, NULL, 'a', '4713-01-01 BC', '23:59:59.999999', '1999-12-31 23:59:59.999999', '2000-01-01 00:00+14',
		 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\x20', ' ', ' ', ' ', '   ', '-Infinity', '-Infinity', '-Infinity', 'äb ', ' '),
		(4, 0, 0, 4294967296, 2147483648, true, ' ', '2000-01-01', '12:00', '2000-01-01', '2000-01-01 00:00+00',
		 NULL, '\x0000', 'trailing  ', 'trail  ', 'trail  ', ' lead', '-0', '-0', '-0.00', 'AB', 'AB'),
		(5, 1, 65536, -4294967297, NULL, false, NULL, NULL, NULL, NULL, NULL,
		 NULL, NULL, repeat('long text ', 20), NULL, repeat('n', 63), 'x', '1.17549435e-38', '4.9e-324', '0.000', NULL, NULL),
		(6, NULL, NULL, 1000000000000, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
		 NULL, NULL, NULL, NULL, NULL, NULL, '3.4028235e38', '1.7976931348623157e308', '12345678901234567890.123456789', NULL, NULL),
		(7, NULL, NULL, -1000000000000, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
		 NULL, NULL, NULL, NULL, NULL, NULL, '0.1', '0.1', (repeat('98765', 60) || '.125')::numeric, NULL, NULL),
		(8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
		 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, (repeat('1234567', 1000) || '.5')::numeric, NULL, NULL))
		AS v(k, i2, i4, i8, o, b, ch, d, tm, ts, tz, u, by, tx, vc, nm, bp, f4, f8, n, tnd, bpnd)`,
	// a numeric and a jsonb stored out of line (their text through the output function)
	`ALTER TABLE public.edge ADD nx numeric, ADD jx jsonb`,
	`ALTER TABLE public.edge ALTER nx SET STORAGE EXTERNAL, ALTER jx SET STORAGE EXTERNAL`,
	`UPDATE public.edge SET nx = (repeat('7654321', 1000) || '.' || id)::numeric,
		jx = jsonb_build_object('k', repeat('x', 3000), 'id', id) WHERE id % 10 = 4`,
	`UPDATE public.edge SET nx = id / 8.0, jx = jsonb_build_object('id', id) WHERE id % 10 = 5`,
	// a bpchar key (hashed as its text, trailing spaces stripped, with a seed)
	`CREATE TABLE public.bpkey (k char(8) PRIMARY KEY, t text COLLATE public.nd, f float8)`,
	`INSERT INTO public.bpkey SELECT 'k' || g || repeat(' ', g % 3), CASE WHEN g % 2 = 0 THEN 'Ä' || g END, g / 3.0 FROM generate_series(1, 3000) g`,
	`CREATE TABLE public.guarded (id int4 PRIMARY KEY, v text)`,
	`INSERT INTO public.guarded SELECT g, 'v' || g FROM generate_series(1, 500) g`,
	`ALTER TABLE public.guarded ENABLE ROW LEVEL SECURITY`,
	`ALTER TABLE public.guarded FORCE ROW LEVEL SECURITY`,
	`CREATE POLICY everything ON public.guarded USING (true)`,
}

var nativeTables = []string{"public.typed", "public.tzkey", "public.numkey", "public.comp", "public.nokey", "public.parted", "public.edge", "public.bpkey", "public.guarded"}

// TestNativeRowHash runs verify with the trellara extension's C row hash
// (trellara_verify_buckets) against the SQL path, on one server that
// preloads the library: database "ext" has the extension, "plain" does
// not.
func TestNativeRowHash(t *testing.T) {
	c := startWithExtension(t, nil)
	for _, db := range []string{"ext", "plain", "ext_target"} {
		c.CreateDB(t, db)
		c.ExecDB(t, db, nativeSchema...)
	}
	c.ExecDB(t, "ext", `CREATE EXTENSION trellara`)
	c.ExecDB(t, "ext_target", `CREATE EXTENSION trellara`)
	for _, db := range []string{"ext", "plain", "ext_target"} {
		c.ExecDB(t, db, `VACUUM ANALYZE`)
	}
	t.Run("EqualsSQL", func(t *testing.T) { testNativeEqualsSQL(t, c) })
	t.Run("RowLevelSecurity", func(t *testing.T) { testNativeRowLevelSecurity(t, c) })
	t.Run("ForeignPartition", func(t *testing.T) { testNativeForeignPartition(t, c) })
	t.Run("NotPreloaded", testNativeNotPreloaded)
	t.Run("Verdicts", func(t *testing.T) { testNativeVerdicts(t, c) })
}

// testNativeEqualsSQL computes every table's buckets and totals with the C
// function and with the SQL, in one snapshot, over the whole table and
// over page ranges, and requires identical numbers.
func testNativeEqualsSQL(t *testing.T, c *pgtest.Cluster) {
	ctx := context.Background()
	conn := connect(t, c.URL("ext"))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, _, native, err := pin(ctx, tx, -1)
	if err != nil {
		t.Fatal(err)
	}
	if native != "public.trellara_verify_buckets" {
		t.Fatalf("C row hash detected as %q, want public.trellara_verify_buckets", native)
	}
	s := &side{role: "source"}
	for _, name := range nativeTables {
		tn, err := config.ParseTableName(name)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := readShape(ctx, tx, tn, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if !sh.native {
			t.Errorf("%s: C row hash not allowed for a superuser", name)
		}
		sqlPlan, _ := plans(tableSpec{src: tn, dst: tn}, sh, sh, HashingTyped)
		cPlan := sqlPlan
		cPlan.native = native
		ranges := append([]tidRange{wholeTable}, splitPages(sh.pages, 3, 1)...)
		if len(ranges) < 4 {
			t.Fatalf("%s has %d pages: too few for three ranges", name, sh.pages)
		}
		for _, rng := range ranges {
			for _, mod := range []int64{64, 1000} {
				want, n, err := s.bucketsIn(ctx, tx, tn, sqlPlan, nil, 0, mod, rng)
				if err != nil {
					t.Fatal(err)
				}
				got, _, err := s.bucketsIn(ctx, tx, tn, cPlan, nil, 0, mod, rng)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 && rng == wholeTable {
					t.Fatalf("%s: no rows", name)
				}
				if !maps.EqualFunc(got, want, bucketStat.equal) {
					t.Errorf("%s %v mod %d: C buckets differ from SQL's:\nC   %v\nSQL %v", name, rng, mod, got, want)
				}
			}
			wantTot, err := totalOf(ctx, tx, sqlPlan, rng)
			if err != nil {
				t.Fatal(err)
			}
			gotTot, err := totalOf(ctx, tx, cPlan, rng)
			if err != nil {
				t.Fatal(err)
			}
			if !gotTot.equal(wantTot) {
				t.Errorf("%s %v: C total %d/%v, SQL %d/%v", name, rng, gotTot.rows, gotTot.sum, wantTot.rows, wantTot.sum)
			}
		}
	}
}

// testNativeRowLevelSecurity: for a role that row-level security applies
// to, the table is hashed in SQL (where its policies apply); the others
// still in C.
func testNativeRowLevelSecurity(t *testing.T, c *pgtest.Cluster) {
	ctx := context.Background()
	c.ExecDB(t, "ext", `CREATE ROLE reader LOGIN`, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader`)
	cfg, err := pgx.ParseConfig(c.URL("ext"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = "reader"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, _, native, err := pin(ctx, tx, -1); err != nil || native == "" {
		t.Fatalf("C row hash %q, %v: want it detected for a role that may execute it", native, err)
	}
	for name, want := range map[string]bool{"public.guarded": false, "public.typed": true} {
		tn, _ := config.ParseTableName(name)
		sh, err := readShape(ctx, tx, tn, false, true)
		if err != nil {
			t.Fatal(err)
		}
		if sh.native != want {
			t.Errorf("%s as a role row-level security applies to: C row hash allowed = %v, want %v", name, sh.native, want)
		}
	}
}

// testNativeForeignPartition: a partitioned table with a foreign
// partition is hashed in SQL (the C function reads only heap tables and
// refuses it); verify answers as usual.
func testNativeForeignPartition(t *testing.T, c *pgtest.Cluster) {
	c.CreateDB(t, "foreign")
	c.ExecDB(t, "foreign", `CREATE EXTENSION trellara`, `CREATE EXTENSION file_fdw`,
		`CREATE SERVER files FOREIGN DATA WRAPPER file_fdw`,
		`CREATE TABLE public.mixed (id int4, v text) PARTITION BY RANGE (id)`,
		`CREATE TABLE public.mixed_local PARTITION OF public.mixed FOR VALUES FROM (0) TO (1000)`,
		`CREATE FOREIGN TABLE public.mixed_file PARTITION OF public.mixed FOR VALUES FROM (1000) TO (2000)
			SERVER files OPTIONS (filename '/dev/null', format 'csv')`,
		`INSERT INTO public.mixed SELECT g, 'v' || g FROM generate_series(1, 999) g`,
		`CREATE TABLE public.plain (id int4 PRIMARY KEY)`)
	ctx := context.Background()
	r, err := Verify(ctx, connect(t, c.URL("foreign")), connect(t, c.URL("foreign")), Options{Tables: []string{"public.mixed", "public.plain"}, Connections: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantVerdict(t, r, Converged)
	if r.native != [2]int{1, 1} {
		t.Errorf("tables hashed in C: %v, want public.plain only on each side", r.native)
	}
}

// testNativeNotPreloaded: an extension whose server no longer preloads
// the library (the setting removed after CREATE EXTENSION) must not be
// called: the library would refuse to load and abort the snapshot. Verify
// hashes in SQL and answers, also with a trellara setting left in
// postgresql.conf (a placeholder, not the library's).
func testNativeNotPreloaded(t *testing.T) {
	c := startWithExtension(t, map[string]string{"trellara.queue_wait_timeout": "5s"})
	c.CreateDB(t, "restored")
	c.ExecDB(t, "restored", `CREATE EXTENSION trellara`)
	c.ExecDB(t, "restored", `CREATE TABLE public.t (id int8 PRIMARY KEY, v numeric)`, `INSERT INTO public.t SELECT g, g / 3.0 FROM generate_series(1, 100) g`)
	f, err := os.OpenFile(filepath.Join(c.DataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(f, "shared_preload_libraries = ''"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	c.Restart()
	ctx := context.Background()
	r, err := Verify(ctx, connect(t, c.URL("restored")), connect(t, c.URL("restored")), Options{Tables: []string{"public.t"}, Connections: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantVerdict(t, r, Converged)
	if r.native != [2]int{} {
		t.Errorf("hashed %v tables in C on a server that does not preload trellara", r.native)
	}
}

func totalOf(ctx context.Context, tx pgx.Tx, p plan, rng tidRange) (bucketStat, error) {
	q, args := p.totalQuery(rng)
	st := bucketStat{sum: new(big.Int)}
	var sum *string
	if err := tx.QueryRow(ctx, q, args...).Scan(&st.rows, &sum); err != nil {
		return st, err
	}
	if sum != nil {
		st.sum.SetString(*sum, 10)
	}
	return st, nil
}

// testNativeVerdicts runs Verify over every pairing of sides with and
// without the extension, with the C path allowed and forbidden
// (SQLRowHash): identical tables are CONVERGED and a changed, a missing and
// an extra row give the same DIVERGED answer, buckets and example keys
// whichever side hashed in C.
func testNativeVerdicts(t *testing.T, c *pgtest.Cluster) {
	ctx := context.Background()
	// the target copies differ from the source in three rows of one table
	c.Exec(t, `CREATE DATABASE plain_changed TEMPLATE plain`)
	c.ExecDB(t, "plain_changed", `UPDATE public.typed SET n = 1.50 WHERE id = 17`,
		`DELETE FROM public.typed WHERE id = 18`, `INSERT INTO public.typed (id, tx) VALUES (99999, 'extra')`,
		`UPDATE public.tzkey SET v = 'changed' WHERE at = TIMESTAMPTZ '2025-01-01 00:05+00'`)
	c.Exec(t, `CREATE DATABASE ext_changed TEMPLATE plain_changed`)
	c.ExecDB(t, "ext_changed", `CREATE EXTENSION trellara`)
	type run struct {
		src, dst   string
		sqlRowHash bool
		native     [2]bool // which sides must have hashed in C
	}
	runs := []run{
		{"ext", "ext_target", false, [2]bool{true, true}},
		{"ext", "plain", false, [2]bool{true, false}},
		{"plain", "ext_target", false, [2]bool{false, true}},
		{"ext", "ext_target", true, [2]bool{false, false}},
	}
	verify := func(t *testing.T, src, dst string, sqlRowHash bool) *Result {
		t.Helper()
		r, err := Verify(ctx, connect(t, c.URL(src)), connect(t, c.URL(dst)), Options{
			Tables: nativeTables, Buckets: 256, Connections: 2, rangePagesMin: 1, SQLRowHash: sqlRowHash,
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	check := func(t *testing.T, r *Result, rn run) {
		t.Helper()
		for i, want := range rn.native {
			wantN := map[bool]int{true: len(nativeTables), false: 0}[want]
			if got := r.native[i]; got != wantN {
				t.Errorf("%s → %s sqlRowHash=%v: side %d hashed %d tables in C, want %d", rn.src, rn.dst, rn.sqlRowHash, i, got, wantN)
			}
		}
	}
	var converged, diverged []*Result
	for _, rn := range runs {
		r := verify(t, rn.src, rn.dst, rn.sqlRowHash)
		check(t, r, rn)
		wantVerdict(t, r, Converged)
		converged = append(converged, r)
		changed := map[string]string{"ext_target": "ext_changed", "plain": "plain_changed"}[rn.dst]
		r = verify(t, rn.src, changed, rn.sqlRowHash)
		check(t, r, rn)
		wantVerdict(t, r, Diverged)
		checkRendering(t, r)
		diverged = append(diverged, r)
	}
	// Everything but timings must be the same in every run.
	same := func(r *Result) string {
		var b strings.Builder
		for _, tr := range r.Tables {
			fmt.Fprintf(&b, "%s %s %d/%d %s/%s %d %v %v %q\n", tr.Table, tr.Verdict, tr.SourceRows, tr.TargetRows,
				tr.SourceChecksum, tr.TargetChecksum, tr.MismatchingBucketCount, tr.MismatchingBuckets, tr.SampleKeys, tr.Reasons)
		}
		return b.String()
	}
	for i, rs := range [][]*Result{converged, diverged} {
		want := same(rs[len(rs)-1]) // SQL on both sides
		for j, r := range rs[:len(rs)-1] {
			if got := same(r); got != want {
				t.Errorf("run %d (%s → %s), %s: differs from the SQL path:\n%s\nSQL:\n%s", j, runs[j].src, runs[j].dst,
					[]string{"identical tables", "changed target"}[i], got, want)
			}
		}
	}
	typed := table(t, diverged[0], "public.typed")
	wantSamples(t, typed, SampleKey{Kind: KindChanged, Key: "17"}, SampleKey{Kind: KindMissing, Key: "18"}, SampleKey{Kind: KindExtra, Key: "99999"})
	if tz := table(t, diverged[0], "public.tzkey"); tz.Verdict != Diverged || tz.MismatchingBucketCount != 1 {
		t.Errorf("public.tzkey: %s with %d mismatching buckets, want DIVERGED with 1", tz.Verdict, tz.MismatchingBucketCount)
	}
}
