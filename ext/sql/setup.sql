-- The server preloads trellara (regress.conf); the extension adds only the
-- SQL-visible frame renderer.
CREATE EXTENSION trellara;
SHOW wal_level;
-- already loaded by the postmaster: LOAD is a no-op, not an error
LOAD 'trellara';

-- plugin options are checked
SELECT 'init' FROM pg_create_logical_replication_slot('setup_slot', 'trellara');
SELECT * FROM pg_logical_slot_peek_binary_changes('setup_slot', NULL, NULL, 'nonsense', '1');
SELECT * FROM pg_logical_slot_peek_binary_changes('setup_slot', NULL, NULL, 'include_messages', 'maybe');
-- the plugin writes binary frames, so the text interface refuses it
SELECT * FROM pg_logical_slot_peek_changes('setup_slot', NULL, NULL);
SELECT pg_drop_replication_slot('setup_slot');

-- the renderer bounds-checks every read
SELECT trellara_frame_text('\x'::bytea);
SELECT trellara_frame_text('\x0243'::bytea);
SELECT trellara_frame_text('\x0143000000'::bytea);
SELECT trellara_frame_text('\x01500000000001000000ff'::bytea);
SELECT trellara_frame_text('\x01580000'::bytea);
SELECT trellara_frame_text('\x01490000000100017a'::bytea);
SELECT trellara_frame_text('\x01490000000100017400000005616263'::bytea);
-- well-formed progress frame, redacted and not
SELECT trellara_frame_text('\x01500000000001000000'::bytea);
SELECT trellara_frame_text('\x01500000000001000000'::bytea, true);

-- The renderer is not for everyone: CREATE EXTENSION revokes it from PUBLIC.
SELECT has_function_privilege('public', 'trellara_frame_text(bytea, boolean)', 'EXECUTE');
CREATE ROLE regress_trellara_nobody;
SET ROLE regress_trellara_nobody;
SELECT trellara_frame_text('\x01500000000001000000'::bytea);
RESET ROLE;
DROP ROLE regress_trellara_nobody;

-- Bytes that are not valid UTF-8 (the frame encoding) in a namespace,
-- relation name, column name or message prefix are shown as hex: the
-- function never returns text with an invalid encoding.
SELECT trellara_frame_text('\x015200000001000000016100000001ff6400010000000001fe00000017ffffffff'::bytea, true);
SELECT trellara_frame_text('\x01520000000100000002c328000000016264000101000000016300000017ffffffff'::bytea, true);
SELECT trellara_frame_text('\x014d000000000000000100000002c3280000000161'::bytea, true);
SELECT trellara_frame_text('\x014d00000000000000010000000361006200000001ff'::bytea, true);
-- valid UTF-8 is shown as text
SELECT trellara_frame_text('\x014d000000000000000100000002c3a900000002c3a9'::bytea, true);
