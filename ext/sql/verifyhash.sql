-- trellara_verify_buckets() must give exactly the per-bucket counts and
-- hash sums of verify's SQL expressions (internal/verify/sql.go), on every
-- kind of column.  Modes: v = the value (its type's hash), c = the value
-- COLLATE "C", t = its text COLLATE "C".
SET extra_float_digits = 1;
SET DateStyle = 'ISO, MDY';
SET IntervalStyle = 'postgres';
SET TimeZone = 'UTC';
CREATE TYPE vh_mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN vh_pos AS int4 CHECK (VALUE > 0);
CREATE TYPE vh_pair AS (a int4, b text);
CREATE TABLE vh (
	id int8 PRIMARY KEY, gone1 int4, i2 int2, i4 int4, b bool, ch "char", o oid,
	d date, tm time, ts timestamp, tz timestamptz, u uuid, by bytea,
	tx text, vc varchar(20), nm name,
	n numeric, f8 float8, f4 float4, j jsonb, js json, arr int4[], tarr text[],
	iv interval, bp char(5), ip inet, mood vh_mood, pos vh_pos, pair vh_pair,
	big text, gone2 text);
ALTER TABLE vh ALTER big SET STORAGE EXTERNAL;
INSERT INTO vh SELECT g, g, g % 32000, g * 7, g % 3 = 0, chr(65 + g % 26)::"char", g,
	DATE '2025-01-01' + g, TIME '00:00' + g * interval '17 seconds',
	TIMESTAMP '2025-01-01' + g * interval '1 minute',
	TIMESTAMPTZ '2025-01-01 00:00+00' + g * interval '1 hour',
	md5(g::text)::uuid, decode(md5(g::text), 'hex'),
	'tëxt ' || g, 'v' || g, 'n' || g,
	g / 7.0, g / 3.0, g / 3.0, jsonb_build_object('k', g, 'a', ARRAY[g, -g]),
	json_build_object('k', g), ARRAY[g, g + 1, NULL], ARRAY['x' || g, NULL],
	g * interval '1 day 3 hours', 'c' || (g % 100), ('10.0.' || (g % 250) || '.1')::inet,
	(ARRAY['sad', 'ok', 'happy']::vh_mood[])[1 + g % 3], 1 + g % 50, ROW(g, 'p' || g)::vh_pair,
	CASE WHEN g % 97 = 0 THEN (SELECT string_agg(md5(g::text || s), '') FROM generate_series(1, 200) s) END,
	'gone'
FROM generate_series(1, 3000) g;
-- a row of NULLs (but the key), equal numerics that print differently, -0
INSERT INTO vh (id) VALUES (0);
INSERT INTO vh (id, n, f8, iv) VALUES (-1, 1.0, -0.0, '1 day'), (-2, 1.00, 0.0, '24 hours');
ALTER TABLE vh DROP COLUMN gone1, DROP COLUMN gone2;
-- out-of-line values exist
SELECT count(*) > 0 AS toasted FROM vh WHERE pg_column_size(big) > 2000;
SELECT pg_relation_size('vh') / current_setting('block_size')::int8 > 10 AS several_pages;

-- verify's row hash and key hashes, written as sql.go writes them
CREATE VIEW vh_sql AS
SELECT t.ctid AS tid,
	pg_catalog.hash_record_extended(ROW(t.id, t.i2, t.i4, t.b, t.ch, t.o, t.d, t.tm, t.ts, t.tz, t.u, t.by,
		t.tx COLLATE "C", t.vc COLLATE "C", t.nm COLLATE "C",
		t.n::text COLLATE "C", t.f8::text COLLATE "C", t.f4::text COLLATE "C", t.j::text COLLATE "C",
		t.js::text COLLATE "C", t.arr::text COLLATE "C", t.tarr::text COLLATE "C", t.iv::text COLLATE "C",
		t.bp::text COLLATE "C", t.ip::text COLLATE "C", t.mood::text COLLATE "C", t.pos::text COLLATE "C",
		t.pair::text COLLATE "C", t.big COLLATE "C"), 0) AS rec,
	pg_catalog.hashint8extended(t.id, 0) AS key_id,
	pg_catalog.hashint8extended(t.id, 3) AS key_id3,
	-- verify's keys are never NULL; the function puts a NULL key in bucket 0
	COALESCE(pg_catalog.hashtextextended(t.n::text COLLATE "C", 0), 0) AS key_n,
	COALESCE(pg_catalog.hashtextextended(t.b::text COLLATE "C", 2), 0) AS key_b2,
	COALESCE(pg_catalog.hashtextextended(t.tx COLLATE "C", 0), 0) AS key_tx,
	pg_catalog.hash_record_extended(ROW(t.i4, t.tx COLLATE "C", t.d), 0) AS key_rec,
	pg_catalog.hash_record_extended(ROW(t.i4, t.tx COLLATE "C", t.d), 5) AS key_rec5
FROM ONLY vh AS t;

CREATE FUNCTION vh_c(keys text[], key_modes text, seed int8, buckets int8, lo int8 DEFAULT 0, hi int8 DEFAULT -1)
RETURNS TABLE (bucket int8, row_count int8, hash_sum text) LANGUAGE sql AS $$
	SELECT * FROM trellara_verify_buckets('vh',
		ARRAY['id', 'i2', 'i4', 'b', 'ch', 'o', 'd', 'tm', 'ts', 'tz', 'u', 'by', 'tx', 'vc', 'nm',
			'n', 'f8', 'f4', 'j', 'js', 'arr', 'tarr', 'iv', 'bp', 'ip', 'mood', 'pos', 'pair', 'big'],
		'vvvvvvvvvvvvccctttttttttttttc', keys, key_modes, seed, buckets, lo, hi)
$$;

-- differences between C and SQL buckets (0 and 0 when equal), and rows seen
CREATE FUNCTION vh_diff(c_q text, sql_q text) RETURNS TABLE (c_only int8, sql_only int8, buckets int8, rows_seen numeric)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('CREATE TEMP TABLE vh_c_out AS %s', c_q);
	EXECUTE format('CREATE TEMP TABLE vh_sql_out AS %s', sql_q);
	RETURN QUERY SELECT
		(SELECT count(*) FROM (TABLE vh_c_out EXCEPT TABLE vh_sql_out) x),
		(SELECT count(*) FROM (TABLE vh_sql_out EXCEPT TABLE vh_c_out) x),
		(SELECT count(*) FROM vh_c_out),
		(SELECT sum(row_count) FROM vh_c_out);
	DROP TABLE vh_c_out, vh_sql_out;
END $$;

-- the total (one bucket)
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{}', '', 0, 1)$$,
	$$SELECT 0::int8, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql$$);
-- buckets by each kind of key: an int8 key, a key hashed as text, bool as
-- text with a seed, text bytewise, a composite key, the whole row
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{id}', 'v', 0, 64)$$,
	$$SELECT (key_id & 9223372036854775807) % 64, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{id}', 'v', 3, 7)$$,
	$$SELECT (key_id3 & 9223372036854775807) % 7, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{n}', 't', 0, 16)$$,
	$$SELECT (key_n & 9223372036854775807) % 16, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{b}', 't', 2, 5)$$,
	$$SELECT (key_b2 & 9223372036854775807) % 5, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{tx}', 'c', 0, 32)$$,
	$$SELECT (key_tx & 9223372036854775807) % 32, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{i4,tx,d}', 'vcv', 0, 128)$$,
	$$SELECT (key_rec & 9223372036854775807) % 128, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{i4,tx,d}', 'vcv', 5, 128)$$,
	$$SELECT (key_rec5 & 9223372036854775807) % 128, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{}', '', 2, 256)$$,
	$$SELECT (hashint8extended(rec, 2) & 9223372036854775807) % 256, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql GROUP BY 1$$);
-- page ranges, as parallel hashing cuts them: [0,3), [3,7), [7,end)
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{id}', 'v', 0, 64, 0, 3)$$,
	$$SELECT (key_id & 9223372036854775807) % 64, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql
	  WHERE tid < '(3,0)'::tid GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{id}', 'v', 0, 64, 3, 7)$$,
	$$SELECT (key_id & 9223372036854775807) % 64, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql
	  WHERE tid >= '(3,0)'::tid AND tid < '(7,0)'::tid GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{}', '', 0, 1, 7, -1)$$,
	$$SELECT 0::int8, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql WHERE tid >= '(7,0)'::tid$$);
-- an empty range has no buckets
SELECT count(*) FROM vh_c('{id}', 'v', 0, 64, 5, 5);
-- a range that starts past the last page has no rows; one that ends past it
-- reads to the end
SELECT count(*) FROM vh_c('{}', '', 0, 1, 100000, -1);
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{}', '', 0, 1, 3, 100000)$$,
	$$SELECT 0::int8, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql WHERE tid >= '(3,0)'::tid$$);

-- Edge values of every type the function hashes without fmgr (and of
-- numeric, whose text it renders from a stack copy): NULLs, extremes,
-- negatives, int8 outside int32, a "char" above 127, NaN and infinities,
-- -0, bpchar with trailing spaces and all spaces, empty strings and bytea,
-- numerics short, long and compressed, strings under a nondeterministic
-- collation (hashed through fmgr, by sort key, in mode v).  Each column is
-- checked alone in every mode that applies, as the row and as a one-column
-- key with a seed, against hash_record_extended of the same expression.
CREATE COLLATION vh_nd (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE vh_edge (
	i2 int2, i4 int4, i8 int8, o oid, b bool, ch "char", d date, tm time, ts timestamp, tz timestamptz,
	u uuid, by bytea, tx text, vc varchar(10), nm name, bp char(6), f4 float4, f8 float8, n numeric,
	tnd text COLLATE vh_nd, bpnd char(4) COLLATE vh_nd);
INSERT INTO vh_edge DEFAULT VALUES;
INSERT INTO vh_edge VALUES
	(-32768, -2147483648, -9223372036854775808, 0, false, '\200', '-infinity', '00:00', '-infinity', '-infinity',
	 '00000000-0000-0000-0000-000000000000', '\x', '', '', '', '', 'NaN', 'NaN', 'NaN', '', ''),
	(32767, 2147483647, 9223372036854775807, 4294967295, true, '\377', 'infinity', '24:00', 'infinity', 'infinity',
	 'ffffffff-ffff-ffff-ffff-ffffffffffff', '\x00ff', 'ä', 'x y', 'ä', 'ab  ', 'Infinity', 'Infinity', 'Infinity', 'ÄB', 'Ab  '),
	(-1, -1, -1, 1, NULL, 'a', '4713-01-01 BC', '23:59:59.999999', '1999-12-31 23:59:59.999999', '2000-01-01 00:00+14',
	 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\x20', ' ', ' ', ' ', '   ', '-Infinity', '-Infinity', '-Infinity', 'äb ', ' '),
	(0, 0, 4294967296, 2147483648, true, ' ', '2000-01-01', '12:00', '2000-01-01', '2000-01-01 00:00+00',
	 NULL, '\x0000', 'trailing  ', 'trail  ', 'trail  ', ' lead', '-0', '-0', '-0.00', 'AB', 'AB'),
	(1, 65536, -4294967297, NULL, false, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, repeat('long text ', 20), NULL, repeat('n', 63), 'x', '1.17549435e-38', '4.9e-324', '0.000', NULL, NULL),
	(NULL, NULL, 1000000000000, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, NULL, NULL, NULL, NULL, '3.4028235e38', '1.7976931348623157e308', '12345678901234567890.123456789', NULL, NULL),
	(NULL, NULL, -1000000000000, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, NULL, NULL, NULL, NULL, '0.1', '0.1', (repeat('98765', 60) || '.125')::numeric, NULL, NULL),
	(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, (repeat('1234567', 1000) || '.5')::numeric, NULL, NULL);
-- a numeric and a jsonb stored out of line (TOAST pointers in the tuple)
ALTER TABLE vh_edge ADD nx numeric, ADD jx jsonb;
ALTER TABLE vh_edge ALTER nx SET STORAGE EXTERNAL, ALTER jx SET STORAGE EXTERNAL;
UPDATE vh_edge SET nx = (repeat('7654321', 1000) || '.25')::numeric,
	jx = jsonb_build_object('k', repeat('x', 3000)) WHERE i2 = 0;
UPDATE vh_edge SET nx = 1.5, jx = '{}' WHERE i2 = 1;
-- the long numerics: one above the short-header limit, one compressed, one out of line
SELECT count(*) FILTER (WHERE pg_column_size(n) > 127) AS long_numerics,
	count(*) FILTER (WHERE pg_column_compression(n) IS NOT NULL) AS compressed_numerics,
	(SELECT pg_relation_size(reltoastrelid) > 0 FROM pg_class WHERE oid = 'vh_edge'::regclass) AS out_of_line FROM vh_edge;
-- hashes of mode m's expression for column c agree: as the row (seed 0) and as a key (seed 7)
CREATE FUNCTION vh_edge_ok(c text, m text) RETURNS bool LANGUAGE plpgsql AS $$
DECLARE
	e text := CASE m WHEN 'v' THEN format('t.%I', c) WHEN 'c' THEN format('t.%I COLLATE "C"', c)
		ELSE format('t.%I::text COLLATE "C"', c) END;
	d record;
BEGIN
	SELECT * INTO d FROM vh_diff(
		format($q$SELECT * FROM trellara_verify_buckets('vh_edge', ARRAY[%L], %L, ARRAY[%L], %L, 7, 13, 0, -1)$q$, c, m, c, m),
		format($q$SELECT (hash_record_extended(ROW(%s), 7) & 9223372036854775807) %% 13, count(*),
			sum(hashint8extended(hash_record_extended(ROW(%s), 0), 0))::text FROM vh_edge AS t GROUP BY 1$q$, e, e));
	RETURN d.c_only = 0 AND d.sql_only = 0 AND d.rows_seen = 9;
END $$;
SELECT c, string_agg(m || CASE WHEN vh_edge_ok(c, m) THEN ' ok' ELSE ' DIFFERS' END, ', ' ORDER BY m) AS modes
FROM unnest(ARRAY['i2', 'i4', 'i8', 'o', 'b', 'ch', 'd', 'tm', 'ts', 'tz', 'u', 'by', 'tx', 'vc', 'nm', 'bp',
	'f4', 'f8', 'n', 'tnd', 'bpnd', 'nx', 'jx']) WITH ORDINALITY AS x(c, i),
	unnest(CASE WHEN c IN ('tx', 'vc', 'nm', 'bp', 'tnd', 'bpnd') THEN ARRAY['v', 'c', 't'] WHEN c IN ('f4', 'f8', 'n', 'nx', 'jx') THEN ARRAY['t']
		ELSE ARRAY['v', 't'] END) AS m
GROUP BY c, i ORDER BY i;
-- numerics rendered from their stored digits (vh_numeric_text): short and
-- long headers (a display scale above 63), negative
-- weights, zero groups inside and at either end, scales cutting a group,
-- large integers, and texts too long for the stack buffer (numeric_out,
-- as for every weight below -64)
CREATE TABLE vh_num (id int PRIMARY KEY, n numeric);
INSERT INTO vh_num SELECT i, v::numeric FROM unnest(ARRAY['0', '0.0', '-0.000', '1', '-1', '9999', '10000', '10001',
	'100000000', '99999999.9999', '-10000.0001', '1.10', '123.4500', '0.5', '-0.5', '0.0001', '0.00012345', '-0.00012345',
	'0.00000000000000000001', '1.000000000000000000000000000001', '1e100', '-1e-100', '1e-300', '123456789e-290',
	'0.' || repeat('0', 70) || '1', '-0.' || repeat('0', 70) || '1' || repeat('0', 9), '12345678901234567890123456789012345678901234567890',
	'3.14159', '2.5e10', '42.000000001', repeat('9', 240), repeat('9', 300) || '.5', '0.' || repeat('3', 300),
	'NaN', 'Infinity', '-Infinity']) WITH ORDINALITY AS x(v, i);
SELECT count(*) AS numerics, count(*) FILTER (WHERE length(n::text) > 250) AS past_the_buffer,
	count(*) FILTER (WHERE scale(n) > 63 OR n <> 0 AND n::text NOT IN ('NaN', 'Infinity', '-Infinity') AND abs(n) < 1e-256) AS long_headers FROM vh_num;
SELECT * FROM vh_diff(
	$$SELECT * FROM trellara_verify_buckets('vh_num', '{n}', 't', '{n}', 't', 7, 13, 0, -1)$$,
	$$SELECT (hash_record_extended(ROW(t.n::text COLLATE "C"), 7) & 9223372036854775807) % 13, count(*),
		sum(hashint8extended(hash_record_extended(ROW(t.n::text COLLATE "C"), 0), 0))::text FROM vh_num AS t GROUP BY 1$$);
-- columns added after the rows were written: the rows have fewer
-- attributes than the table, and read the missing ones as the default the
-- catalog stores (a "fast default") or as NULL
ALTER TABLE vh_num ADD dflt int4 DEFAULT 7, ADD dtx text DEFAULT 'dflt', ADD dnull int8;
INSERT INTO vh_num (id, n, dflt, dtx) VALUES (1000, 1.5, 8, 'set');
SELECT * FROM vh_diff(
	$$SELECT * FROM trellara_verify_buckets('vh_num', '{id,n,dflt,dtx,dnull}', 'vtvcv', '{dtx}', 'c', 3, 5, 0, -1)$$,
	$$SELECT (hashtextextended(t.dtx COLLATE "C", 3) & 9223372036854775807) % 5, count(*),
		sum(hashint8extended(hash_record_extended(ROW(t.id, t.n::text COLLATE "C", t.dflt, t.dtx COLLATE "C", t.dnull), 0), 0))::text
	  FROM vh_num AS t GROUP BY 1$$);
-- float text follows extra_float_digits (float4out/float8out's own rule)
SET extra_float_digits = 0;
SELECT vh_edge_ok('f4', 't') AS f4_digits_0, vh_edge_ok('f8', 't') AS f8_digits_0;
SET extra_float_digits = 1;
-- all at once, as verify's row
SELECT * FROM vh_diff($$SELECT * FROM trellara_verify_buckets('vh_edge',
		'{i2,i4,i8,o,b,ch,d,tm,ts,tz,u,by,tx,vc,nm,bp,f4,f8,n,tnd,bpnd,nx,jx}', 'vvvvvvvvvvvvccctttttttt', '{}', '', 3, 5, 0, -1)$$,
	$$SELECT (hashint8extended(h, 3) & 9223372036854775807) % 5, count(*), sum(hashint8extended(h, 0))::text
	  FROM (SELECT hash_record_extended(ROW(t.i2, t.i4, t.i8, t.o, t.b, t.ch, t.d, t.tm, t.ts, t.tz, t.u, t.by,
		t.tx COLLATE "C", t.vc COLLATE "C", t.nm COLLATE "C", t.bp::text COLLATE "C", t.f4::text COLLATE "C",
		t.f8::text COLLATE "C", t.n::text COLLATE "C", t.tnd::text COLLATE "C", t.bpnd::text COLLATE "C",
		t.nx::text COLLATE "C", t.jx::text COLLATE "C"), 0) AS h
	  FROM vh_edge AS t) s GROUP BY 1$$);

-- a partitioned table whose partitions number their columns differently
CREATE TABLE vhp (id int4, k text, v numeric) PARTITION BY RANGE (id);
CREATE TABLE vhp1 PARTITION OF vhp FOR VALUES FROM (0) TO (1000);
CREATE TABLE vhp2 (dropme int, v numeric, k text, id int4);
ALTER TABLE vhp2 DROP COLUMN dropme;
ALTER TABLE vhp ATTACH PARTITION vhp2 FOR VALUES FROM (1000) TO (3000);
INSERT INTO vhp SELECT g, 'k' || g, g / 3.0 FROM generate_series(1, 2999) g;
SELECT * FROM vh_diff($$SELECT * FROM trellara_verify_buckets('vhp', '{id,k,v}', 'vct', '{id}', 'v', 0, 16, 0, -1)$$,
	$$SELECT (hashint4extended(t.id, 0) & 9223372036854775807) % 16, count(*),
	  sum(hashint8extended(hash_record_extended(ROW(t.id, t.k COLLATE "C", t.v::text COLLATE "C"), 0), 0))::text
	  FROM vhp AS t GROUP BY 1$$);
SELECT * FROM vh_diff($$SELECT * FROM trellara_verify_buckets('vhp', '{id,k,v}', 'vct', '{id}', 'v', 0, 1, 2, -1)$$,
	$$SELECT 0::int8, count(*),
	  sum(hashint8extended(hash_record_extended(ROW(t.id, t.k COLLATE "C", t.v::text COLLATE "C"), 0), 0))::text
	  FROM vhp AS t WHERE t.ctid >= '(2,0)'::tid$$);

-- ONLY: an inheritance child's rows are not the parent's
CREATE TABLE vhi (id int4);
CREATE TABLE vhi_child () INHERITS (vhi);
INSERT INTO vhi VALUES (1), (2);
INSERT INTO vhi_child VALUES (3);
SELECT row_count FROM trellara_verify_buckets('vhi', '{id}', 'v', '{}', '', 0, 1, 0, -1);

-- refusals: bad arguments, a missing column, no privilege, row-level security
SELECT * FROM trellara_verify_buckets('vh', '{id}', 'vv', '{}', '', 0, 1, 0, -1);
SELECT * FROM trellara_verify_buckets('vh', '{id}', 'x', '{}', '', 0, 1, 0, -1);
SELECT * FROM trellara_verify_buckets('vh', '{id}', 'v', '{}', '', 0, 0, 0, -1);
SELECT * FROM trellara_verify_buckets('vh', '{gone1}', 'v', '{}', '', 0, 1, 0, -1);
SELECT * FROM trellara_verify_buckets('vh_sql', '{rec}', 'v', '{}', '', 0, 1, 0, -1);
CREATE ROLE vh_reader;
GRANT SELECT (id, i2) ON vh TO vh_reader;
SET ROLE vh_reader;
SELECT row_count FROM trellara_verify_buckets('vh', '{id,i2}', 'vv', '{id}', 'v', 0, 1, 0, -1);
SELECT row_count FROM trellara_verify_buckets('vh', '{id,i2,i4}', 'vvv', '{id}', 'v', 0, 1, 0, -1);
RESET ROLE;
GRANT SELECT ON vh TO vh_reader;
ALTER TABLE vh ENABLE ROW LEVEL SECURITY;
CREATE POLICY vh_some ON vh FOR SELECT USING (id < 10);
SET ROLE vh_reader;
SELECT row_count FROM trellara_verify_buckets('vh', '{id}', 'v', '{}', '', 0, 1, 0, -1);
RESET ROLE;
-- the owner is not subject to its own table's policies
SELECT row_count FROM trellara_verify_buckets('vh', '{id}', 'v', '{}', '', 0, 1, 0, -1);
ALTER TABLE vh DISABLE ROW LEVEL SECURITY;
REVOKE ALL ON vh FROM vh_reader;
DROP ROLE vh_reader;

-- the upgrade path from 0.1 provides the same function
DROP EXTENSION trellara;
CREATE EXTENSION trellara VERSION '0.1';
SELECT to_regprocedure('trellara_verify_buckets(regclass,text[],text,text[],text,int8,int8,int8,int8)') IS NULL AS absent_in_0_1;
ALTER EXTENSION trellara UPDATE TO '0.2';
SELECT * FROM vh_diff($$SELECT * FROM vh_c('{id}', 'v', 0, 64)$$,
	$$SELECT (key_id & 9223372036854775807) % 64, count(*), sum(hashint8extended(rec, 0))::text FROM vh_sql GROUP BY 1$$);

DROP TABLE vh, vhp, vhi, vh_edge, vh_num CASCADE;
DROP FUNCTION vh_edge_ok(text, text);
DROP COLLATION vh_nd;
DROP FUNCTION vh_diff(text, text);
DROP TYPE vh_mood, vh_pair;
DROP DOMAIN vh_pos;
