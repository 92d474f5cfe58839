-- Workload behind testdata/captured.txt. Not run by tests: the captured bytes
-- are committed so that tests need no PostgreSQL. To recapture:
--
--   1. Start a scratch PostgreSQL 15 cluster with
--        wal_level = logical
--        logical_decoding_work_mem = 64kB   -- forces streaming of the big
--                                           -- transactions below
--   2. psql -X -v ON_ERROR_STOP=1 -v phase=run -f capture.sql
--   3. For each (proto, binary, streaming) in
--        (2, false, on), (2, true, on), (1, false, off):
--      psql -X -At -v phase=export -v proto=P -v binary=B -v streaming=S \
--           -f capture.sql
--      and append its output to captured.txt under a "# --- ..." line.
--
-- Each phase below covers one pgoutput message or variant; the comment
-- says which.

\if :{?phase}
\else
\echo 'set -v phase=run or -v phase=export'
\quit
\endif

SELECT :'phase' = 'run' AS run \gset
\if :run

-- Relation 'R' and Type 'Y' (enum; a domain is described by its base type),
-- a quoted schema and names, every replica identity setting.
CREATE TYPE mood AS ENUM ('sad','ok','happy');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TABLE items (id int PRIMARY KEY, name text, mood mood, qty posint, payload text, amount numeric(10,2), tags text[], created timestamptz DEFAULT '2024-01-02 03:04:05+00', flag bool, raw bytea, vc varchar(12));
ALTER TABLE items ALTER payload SET STORAGE EXTERNAL;
CREATE TABLE full_t (id int, v text);
ALTER TABLE full_t REPLICA IDENTITY FULL;
CREATE TABLE idx_t (a int NOT NULL, b int NOT NULL, c text);
CREATE UNIQUE INDEX idx_t_ab ON idx_t (a, b);
ALTER TABLE idx_t REPLICA IDENTITY USING INDEX idx_t_ab;
CREATE TABLE nothing_t (id int, v text);
ALTER TABLE nothing_t REPLICA IDENTITY NOTHING;
CREATE TABLE parent (id serial PRIMARY KEY);
CREATE TABLE child (id int PRIMARY KEY, pid int REFERENCES parent (id));
CREATE TABLE big (id int PRIMARY KEY, v text);
CREATE SCHEMA "Odd Schema";
CREATE TABLE "Odd Schema"."Mixed Name" (k text PRIMARY KEY, "two words" int);
CREATE PUBLICATION pub FOR ALL TABLES;
SELECT pg_create_logical_replication_slot('s', 'pgoutput');
SELECT pg_replication_origin_create('upstream');

-- plain transaction: Relation + Type (enum, domain) + Insert with nulls, arrays, numerics
INSERT INTO items (id, name, mood, qty, amount, tags, flag, raw, vc) VALUES
  (1, 'one', 'happy', 5, 12.50, '{a,"b c"}', true, '\x00ff10', 'v'),
  (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '');
-- TOAST: an external, uncompressed payload, then an update that does not touch it
INSERT INTO items (id, name, payload) SELECT 3, 'toasty', string_agg(md5(g::text), '') FROM generate_series(1, 300) g;
UPDATE items SET name = 'toasty-2' WHERE id = 3;
-- update without key change (no old tuple), with key change (old key 'K')
UPDATE items SET name = 'uno' WHERE id = 1;
UPDATE items SET id = 20 WHERE id = 2;
DELETE FROM items WHERE id = 20;
-- REPLICA IDENTITY FULL: old tuple 'O'
INSERT INTO full_t VALUES (1, 'a'), (2, NULL);
UPDATE full_t SET v = 'b' WHERE id = 1;
DELETE FROM full_t WHERE id = 2;
-- REPLICA IDENTITY USING INDEX
INSERT INTO idx_t VALUES (1, 2, 'x');
UPDATE idx_t SET a = 10 WHERE a = 1;
DELETE FROM idx_t WHERE a = 10;
INSERT INTO nothing_t VALUES (1, 'n');
INSERT INTO "Odd Schema"."Mixed Name" VALUES ('k1', 7);
-- TRUNCATE with options
INSERT INTO parent DEFAULT VALUES;
INSERT INTO child VALUES (1, 1);
TRUNCATE parent, child RESTART IDENTITY;
INSERT INTO parent DEFAULT VALUES;
TRUNCATE parent CASCADE;
-- logical decoding messages
SELECT pg_logical_emit_message(false, 'trellara.nontx', '\x00ff'::bytea);
BEGIN;
SELECT pg_logical_emit_message(true, 'trellara.tx', 'hello');
SELECT pg_logical_emit_message(true, '', '');
INSERT INTO full_t VALUES (3, 'with-message');
COMMIT;
-- replication origin
SELECT pg_replication_origin_session_setup('upstream');
BEGIN;
SELECT pg_replication_origin_xact_setup('0/ABCDEF0', '2024-01-02 03:04:05+00');
INSERT INTO full_t VALUES (4, 'from-origin');
COMMIT;
SELECT pg_replication_origin_session_reset();
-- streamed transaction with a rolled-back subtransaction, commits
BEGIN;
INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 2000) g;
SAVEPOINT sp;
INSERT INTO big SELECT g, repeat('y', 100) FROM generate_series(2001, 4000) g;
ROLLBACK TO SAVEPOINT sp;
INSERT INTO items (id, name, mood) VALUES (50, 'in-stream', 'ok');
UPDATE big SET v = 'z' WHERE id <= 3;
DELETE FROM big WHERE id <= 2;
UPDATE full_t SET v = 'streamed' WHERE id = 1;
SELECT pg_logical_emit_message(true, 'trellara.stream', 'in stream');
TRUNCATE nothing_t;
INSERT INTO big SELECT g, repeat('w', 100) FROM generate_series(4001, 6000) g;
COMMIT;
-- streamed transaction aborted as a whole
BEGIN;
INSERT INTO big SELECT g, repeat('q', 100) FROM generate_series(10001, 13000) g;
ROLLBACK;
-- a closing small transaction
INSERT INTO full_t VALUES (5, 'end');

\else

-- Export one message per line in the captured.txt format. Runs of Inserts
-- beyond three per transaction or stream block are dropped.
WITH c AS (
  SELECT n, lsn, data, chr(get_byte(data, 0)) AS t
  FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL,
         'proto_version', :'proto', 'publication_names', 'pub',
         'streaming', :'streaming', 'binary', :'binary', 'messages', 'true')
       WITH ORDINALITY AS x(lsn, xid, data, n)
), s AS (
  SELECT *,
         sum(CASE t WHEN 'S' THEN 1 WHEN 'E' THEN -1 ELSE 0 END) OVER (ORDER BY n) AS depth,
         sum(CASE WHEN t IN ('B', 'S') THEN 1 ELSE 0 END) OVER (ORDER BY n) AS block
  FROM c
), r AS (
  SELECT *, row_number() OVER (PARTITION BY block, t ORDER BY n) AS rn FROM s
)
SELECT concat_ws(' ', t, :'proto', CASE WHEN :'binary' = 'true' THEN 'b' ELSE 't' END,
                 CASE WHEN depth = 1 AND t <> 'S' THEN 1 ELSE 0 END, lsn, encode(data, 'hex'))
FROM r WHERE t <> 'I' OR rn <= 3 ORDER BY n;
\endif
