/* trellara--0.3.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION trellara" to load this file. \quit

-- Renders one binary frame of the trellara output plugin as readable text.
-- redact => true leaves out xids, LSNs, times and OIDs (stable test output).
CREATE FUNCTION trellara_frame_text(frame bytea, redact boolean DEFAULT false)
RETURNS text
AS 'MODULE_PATHNAME', 'trellara_frame_text'
LANGUAGE C STRICT STABLE PARALLEL SAFE;

COMMENT ON FUNCTION trellara_frame_text(bytea, boolean) IS
'Render a trellara output-plugin frame as text; redact hides run-dependent values';

-- A debugging aid that parses arbitrary input in C: not for every role.
-- Superusers, and roles they GRANT EXECUTE to, may call it.
REVOKE EXECUTE ON FUNCTION trellara_frame_text(bytea, boolean) FROM PUBLIC;

-- verify's per-bucket row counts and row-hash sums over a page range of a
-- table, computed in C, bit-identical to verify's SQL expressions (see
-- ext/verifyhash.c and docs/VERIFY.md).  It reads only what the caller may
-- SELECT, under the caller's snapshot; it refuses tables whose row-level
-- security applies to the caller.
CREATE FUNCTION trellara_verify_buckets(
	rel regclass, columns text[], column_modes text,
	key_columns text[], key_modes text,
	seed int8, buckets int8, first_page int8, end_page int8,
	OUT bucket int8, OUT row_count int8, OUT hash_sum text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'trellara_verify_buckets'
LANGUAGE C STRICT STABLE;

COMMENT ON FUNCTION trellara_verify_buckets(regclass, text[], text, text[], text, int8, int8, int8, int8) IS
'trellara verify: per-bucket row counts and row-hash sums of a table''s page range, in C';

-- The decoder's shared-memory queue as one row (ext/queuestats.c), for
-- `trellara status`: slots in all, slots filled now (published by the
-- decoder, not yet taken by the socket worker), slots published and taken
-- since the decoder's latest start, decoder starts, the highest position a
-- sidecar made durable, and the socket worker's pid (0: not running).
-- Like pg_replication_slots, readable by every role.
CREATE FUNCTION trellara_queue(
	OUT slots int4, OUT filled int8, OUT published int8, OUT taken int8,
	OUT decoder_epoch int8, OUT acked_lsn pg_lsn, OUT socket_pid int4)
RETURNS record
AS 'MODULE_PATHNAME', 'trellara_queue'
LANGUAGE C STRICT VOLATILE;

COMMENT ON FUNCTION trellara_queue() IS
'trellara status: the decoder''s shared-memory queue (fill, published and taken slots, decoder starts, the sidecar''s durable position)';
