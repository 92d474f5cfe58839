-- Frames carry text as UTF-8 whatever the database encoding (as pgoutput
-- sends it to a UTF-8 client), so both capture paths write the same bytes.
-- This file stays ASCII: non-ASCII text is built with convert_from.
CREATE DATABASE regress_trellara_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c regress_trellara_latin1
SET client_encoding = 'UTF8';
CREATE EXTENSION trellara;
DO $$ BEGIN
	EXECUTE format('CREATE TABLE enc (id int PRIMARY KEY, %I text)', 'caf' || convert_from('\xc3a9', 'UTF8'));
END $$;
SELECT 'init' FROM pg_create_logical_replication_slot('encoding_slot', 'trellara');
INSERT INTO enc VALUES (1, convert_from('\xc3a9', 'UTF8'));

-- the relation frame's column name and the insert frame's value are the
-- UTF-8 bytes (str length 5 "caf" c3 a9; 't', length 2, c3 a9), not the
-- database's LATIN1 ones (e9)
SELECT chr(get_byte(data, 1)) AS frame,
	position('\x00000005636166c3a9'::bytea IN data) > 0 AS utf8_name,
	position('\x00000004636166e9'::bytea IN data) > 0 AS latin1_name,
	position('\x7400000002c3a9'::bytea IN data) > 0 AS utf8_value,
	position('\x7400000001e9'::bytea IN data) > 0 AS latin1_value
FROM pg_logical_slot_peek_binary_changes('encoding_slot', NULL, NULL)
WHERE chr(get_byte(data, 1)) IN ('R', 'I');

-- rendered in a LATIN1 database: non-ASCII frame text is shown as hex
SELECT trellara_frame_text(data, true)
FROM pg_logical_slot_get_binary_changes('encoding_slot', NULL, NULL)
WHERE chr(get_byte(data, 1)) IN ('R', 'I');

SELECT pg_drop_replication_slot('encoding_slot');
\c contrib_regression
DROP DATABASE regress_trellara_latin1;
