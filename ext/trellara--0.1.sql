/* trellara--0.1.sql */

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
