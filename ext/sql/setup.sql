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
