-- Every decoding callback, rendered redacted (stable) and then checked
-- against the LSN/xid columns pg_logical_slot_* report.
SET timezone = 'UTC';
SET datestyle = 'ISO, YMD';
SET extra_float_digits = 0;

CREATE TABLE t1 (id int PRIMARY KEY, data text, n numeric(10,2));
CREATE TABLE t2 (k text PRIMARY KEY, v int);
CREATE TABLE t3 (a int PRIMARY KEY, dropme int, b int GENERATED ALWAYS AS (a * 2) STORED, c varchar(8));
ALTER TABLE t3 DROP COLUMN dropme;
CREATE TABLE t4 (id int PRIMARY KEY, ts timestamptz, arr int[], j jsonb, b bytea, f float8, bo bool, q text);

SELECT 'init' FROM pg_create_logical_replication_slot('decode_slot', 'trellara');

-- single-statement transactions: insert (NULL vs empty string), update, key update, delete
INSERT INTO t1 VALUES (1, 'one', 1.5), (2, NULL, NULL), (3, '', 0);
UPDATE t1 SET data = 'uno' WHERE id = 1;
UPDATE t1 SET id = 20 WHERE id = 2;
DELETE FROM t1 WHERE id = 3;

-- multi-table transaction: each relation described once, before first use
BEGIN;
INSERT INTO t1 VALUES (4, 'four', 4);
INSERT INTO t2 VALUES ('a', 1);
UPDATE t2 SET v = 2 WHERE k = 'a';
INSERT INTO t1 VALUES (5, 'five', 5);
DELETE FROM t1 WHERE id = 4;
COMMIT;

-- truncate, plain and with flags
TRUNCATE t2;
TRUNCATE t1, t2 RESTART IDENTITY CASCADE;

-- rolled back: no frames; subtransactions: only the surviving rows
BEGIN; INSERT INTO t1 VALUES (6, 'gone'); ROLLBACK;
BEGIN;
INSERT INTO t1 VALUES (7, 'kept');
SAVEPOINT sp;
INSERT INTO t1 VALUES (8, 'rolled back');
ROLLBACK TO sp;
INSERT INTO t1 VALUES (9, 'kept too');
COMMIT;

-- DDL inside a transaction: the relation is described again with the new shape
BEGIN;
INSERT INTO t1 VALUES (10, 'before');
ALTER TABLE t1 ADD COLUMN extra int;
INSERT INTO t1 VALUES (11, 'after', 1, 42);
COMMIT;

-- a catalog-only transaction produces nothing
CREATE TABLE t5 (id int);

-- dropped and generated columns are not sent (as in pgoutput)
INSERT INTO t3 (a, c) VALUES (1, 'c');

-- values are in their type's text output form
INSERT INTO t4 VALUES (1, '2024-01-02 03:04:05+00', '{1,2}', '{"a": 1}', '\x00ff', 1.5, true, 'it''s');

SELECT trellara_frame_text(data, true) FROM pg_logical_slot_peek_binary_changes('decode_slot', NULL, NULL);

-- unredacted fields agree with what the server reports: every COMMIT's
-- end_lsn is the lsn column of its row, BEGIN's final_lsn is the COMMIT's
-- commit_lsn, BEGIN's xid is the xid column, commit times are recent
WITH f AS (
	SELECT lsn, xid, trellara_frame_text(data) AS t
	FROM pg_logical_slot_get_binary_changes('decode_slot', NULL, NULL)
), b AS (
	SELECT xid, substring(t from 'xid=(\d+)') AS fxid,
		substring(t from 'final_lsn=(\S+)')::pg_lsn AS final_lsn
	FROM f WHERE t LIKE 'BEGIN%'
), c AS (
	SELECT xid, lsn,
		substring(t from 'commit_lsn=(\S+)')::pg_lsn AS commit_lsn,
		substring(t from 'end_lsn=(\S+)')::pg_lsn AS end_lsn,
		substring(t from 'commit_time=(.*)$')::timestamptz AS commit_time
	FROM f WHERE t LIKE 'COMMIT%'
)
SELECT count(*) AS transactions,
	bool_and(c.end_lsn = c.lsn) AS end_lsn_is_row_lsn,
	bool_and(c.commit_lsn < c.end_lsn) AS commit_before_end,
	bool_and(b.final_lsn = c.commit_lsn) AS final_lsn_is_commit_lsn,
	bool_and(b.fxid = b.xid::text) AS xid_matches,
	bool_and(c.commit_time BETWEEN now() - interval '1 hour' AND clock_timestamp()) AS commit_time_recent
FROM b JOIN c USING (xid);

-- consumed: nothing left
SELECT count(*) FROM pg_logical_slot_get_binary_changes('decode_slot', NULL, NULL);
SELECT pg_drop_replication_slot('decode_slot');
DROP TABLE t1, t2, t3, t4, t5;
