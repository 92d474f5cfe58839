-- trellara_queue(): the decoder's shared-memory queue as one row (0.3).
-- verifyhash left the extension at 0.2 (updated from 0.1): 0.2 has no
-- trellara_queue(), the update to 0.3 adds it.
SELECT extversion FROM pg_extension WHERE extname = 'trellara';
SELECT to_regprocedure('trellara_queue()') IS NULL AS absent_in_0_2;
ALTER EXTENSION trellara UPDATE TO '0.3';
-- No decoder runs here (trellara.database is not set): nothing published,
-- nothing taken, no sidecar position.
SELECT slots, filled, published, taken, acked_lsn, socket_pid FROM trellara_queue();
-- A fresh CREATE EXTENSION is 0.3 and has it; every role may read it, as
-- every role may read pg_replication_slots.
DROP EXTENSION trellara;
CREATE EXTENSION trellara;
SELECT extversion FROM pg_extension WHERE extname = 'trellara';
CREATE ROLE regress_trellara_queue_reader;
SET ROLE regress_trellara_queue_reader;
SELECT slots, filled >= 0 AS filled_ok, published >= taken AS ordered FROM trellara_queue();
RESET ROLE;
DROP ROLE regress_trellara_queue_reader;
