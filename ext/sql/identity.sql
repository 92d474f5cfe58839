-- Old tuples follow the table's replica identity, as pgoutput sends them:
-- key columns only ('old-key', others null) for DEFAULT and USING INDEX,
-- the whole old row for FULL, nothing for NOTHING.
CREATE TABLE r_full (id int, a text, b text);
ALTER TABLE r_full REPLICA IDENTITY FULL;
CREATE TABLE r_full_toast (id int, small text, big text);
ALTER TABLE r_full_toast ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE r_full_toast REPLICA IDENTITY FULL;
CREATE TABLE r_nothing (id int PRIMARY KEY, a text);
ALTER TABLE r_nothing REPLICA IDENTITY NOTHING;
CREATE TABLE r_index (id int NOT NULL, u int NOT NULL, a text);
CREATE UNIQUE INDEX r_index_u ON r_index (u);
ALTER TABLE r_index REPLICA IDENTITY USING INDEX r_index_u;
CREATE TABLE r_nokey (a text, b text);

SELECT 'init' FROM pg_create_logical_replication_slot('identity_slot', 'trellara');

INSERT INTO r_full VALUES (1, 'a', NULL);
UPDATE r_full SET b = 'b';
DELETE FROM r_full;

INSERT INTO r_full_toast VALUES (1, 's', repeat('x', 5000));
UPDATE r_full_toast SET small = 't';
DELETE FROM r_full_toast;

INSERT INTO r_nothing VALUES (1, 'a');
UPDATE r_nothing SET a = 'b';
DELETE FROM r_nothing;

INSERT INTO r_index VALUES (1, 10, 'a');
UPDATE r_index SET a = 'b';
UPDATE r_index SET u = 11;
DELETE FROM r_index;

INSERT INTO r_nokey VALUES ('a', 'b');
UPDATE r_nokey SET b = 'c';
DELETE FROM r_nokey;

SELECT trellara_frame_text(data, true) FROM pg_logical_slot_get_binary_changes('identity_slot', NULL, NULL);

SELECT pg_drop_replication_slot('identity_slot');
DROP TABLE r_full, r_full_toast, r_nothing, r_index, r_nokey;
