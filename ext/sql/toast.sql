-- Unchanged TOAST values are marked, never fetched or invented; large
-- values and large (spilled) transactions are delivered whole.
SELECT 'init' FROM pg_create_logical_replication_slot('toast_slot', 'trellara');

CREATE TABLE tt (id int PRIMARY KEY, small text, big text);
-- out of line and uncompressed, so the values really are TOAST pointers
ALTER TABLE tt ALTER COLUMN big SET STORAGE EXTERNAL;

INSERT INTO tt VALUES (1, 'a', repeat('x', 10000));
-- does not touch big: its value is not in the WAL, so it is marked
UPDATE tt SET small = 'b' WHERE id = 1;
-- changes big: the new value is sent in full
UPDATE tt SET big = repeat('y', 9000) WHERE id = 1;
-- big set to NULL and to the empty string are not "unchanged"
UPDATE tt SET big = NULL WHERE id = 1;
UPDATE tt SET big = '' WHERE id = 1;
DELETE FROM tt WHERE id = 1;

SELECT trellara_frame_text(data, true) FROM pg_logical_slot_get_binary_changes('toast_slot', NULL, NULL);

-- a single frame larger than the worker's 64 KiB queue slot
INSERT INTO tt VALUES (2, 'huge', repeat('z', 200000));
SELECT trellara_frame_text(data, true), length(data) > 65536 AS bigger_than_slot
FROM pg_logical_slot_get_binary_changes('toast_slot', NULL, NULL);

-- a transaction far larger than logical_decoding_work_mem (64kB here):
-- spilled to disk by the reorder buffer, delivered complete at commit
BEGIN;
INSERT INTO tt SELECT g, 'row ' || g, repeat('w', 100) FROM generate_series(3, 5002) g;
UPDATE tt SET small = 'updated' WHERE id BETWEEN 3 AND 1002;
COMMIT;
WITH f AS (
	SELECT trellara_frame_text(data, true) AS t
	FROM pg_logical_slot_get_binary_changes('toast_slot', NULL, NULL)
)
SELECT count(*) FILTER (WHERE t = 'BEGIN') AS begins,
	count(*) FILTER (WHERE t LIKE 'RELATION%') AS relations,
	count(*) FILTER (WHERE t LIKE 'INSERT%') AS inserts,
	count(*) FILTER (WHERE t LIKE 'UPDATE%') AS updates,
	count(*) FILTER (WHERE t = 'COMMIT') AS commits
FROM f;
SELECT pg_stat_clear_snapshot();
SELECT spill_txns > 0 AS spilled FROM pg_stat_replication_slots WHERE slot_name = 'toast_slot';

SELECT pg_drop_replication_slot('toast_slot');
DROP TABLE tt;
