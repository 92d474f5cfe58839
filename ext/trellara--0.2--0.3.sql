/* trellara--0.2--0.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION trellara UPDATE TO '0.3'" to load this file. \quit

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
