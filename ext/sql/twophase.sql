-- Two-phase decoding fails closed: on a slot created with two_phase = true
-- a prepared transaction raises an error instead of being emitted before
-- its outcome is known, or dropped.  On an ordinary slot it is decoded at
-- COMMIT PREPARED like any committed transaction.
\set VERBOSITY terse
CREATE TABLE tp (id int PRIMARY KEY);
SELECT 'init' FROM pg_create_logical_replication_slot('tp_plain', 'trellara');
SELECT 'init' FROM pg_create_logical_replication_slot('tp_twophase', 'trellara', false, true);
SELECT slot_name, two_phase FROM pg_replication_slots WHERE slot_name LIKE 'tp_%' ORDER BY 1;

BEGIN;
INSERT INTO tp VALUES (1);
PREPARE TRANSACTION 'tp1';

SELECT trellara_frame_text(data, true) FROM pg_logical_slot_get_binary_changes('tp_twophase', NULL, NULL);
-- not yet committed: nothing on the ordinary slot
SELECT trellara_frame_text(data, true) FROM pg_logical_slot_get_binary_changes('tp_plain', NULL, NULL);

COMMIT PREPARED 'tp1';

SELECT trellara_frame_text(data, true) FROM pg_logical_slot_get_binary_changes('tp_plain', NULL, NULL);
-- the two-phase slot stays stuck at the PREPARE: it never moves past it silently
SELECT trellara_frame_text(data, true) FROM pg_logical_slot_get_binary_changes('tp_twophase', NULL, NULL);

-- rolled back prepared transactions are nothing on the ordinary slot
BEGIN;
INSERT INTO tp VALUES (2);
PREPARE TRANSACTION 'tp2';
ROLLBACK PREPARED 'tp2';
SELECT trellara_frame_text(data, true) FROM pg_logical_slot_get_binary_changes('tp_plain', NULL, NULL);

SELECT pg_drop_replication_slot('tp_plain');
SELECT pg_drop_replication_slot('tp_twophase');
DROP TABLE tp;
