-- Transactional logical messages are frames when include_messages is on (Trellara's own "trellara." prefixes always);
-- non-transactional ones never are (they belong to no committed transaction).
CREATE TABLE m (id int PRIMARY KEY);
SELECT 'init' FROM pg_create_logical_replication_slot('messages_slot', 'trellara');

BEGIN;
INSERT INTO m VALUES (1);
SELECT 'msg' FROM pg_logical_emit_message(true, 'trellara-test', 'hello');
COMMIT;
SELECT 'msg' FROM pg_logical_emit_message(false, 'trellara-test', 'not transactional');
SELECT 'msg' FROM pg_logical_emit_message(true, 'trellara-test', 'alone in its transaction');
SELECT 'msg' FROM pg_logical_emit_message(true, 'bin', '\x00ff'::bytea);
-- Trellara's own prefixes (fence, reseed) are forwarded even with include_messages off
SELECT 'msg' FROM pg_logical_emit_message(true, 'trellara.reseed', 'watermark');
SELECT 'msg' FROM pg_logical_emit_message(true, 'trellara.fence', 'fence');

SELECT trellara_frame_text(data, true) FROM pg_logical_slot_peek_binary_changes('messages_slot', NULL, NULL);
SELECT trellara_frame_text(data, true) FROM pg_logical_slot_peek_binary_changes('messages_slot', NULL, NULL, 'include_messages', 'true');

-- the message frame's lsn is the lsn column of its row
SELECT bool_and(substring(trellara_frame_text(data) from 'lsn=(\S+)')::pg_lsn = lsn)
FROM pg_logical_slot_get_binary_changes('messages_slot', NULL, NULL, 'include_messages', 'on')
WHERE trellara_frame_text(data, true) LIKE 'MESSAGE%';

SELECT pg_drop_replication_slot('messages_slot');
DROP TABLE m;
