/*-------------------------------------------------------------------------
 *
 * frametext.c
 *		trellara_frame_text(frame bytea, redact bool): one frame as text.
 *
 * Exists so that regression tests (and people at a psql prompt) can read
 * the binary frames the output plugin produces.  With redact = true every
 * value that changes from run to run (xids, LSNs, times, OIDs) is left out,
 * which is what makes the regression expected output stable; relations are
 * always shown by their current name.
 *
 * Like every Trellara decoder it bounds-checks each read and reports a
 * malformed frame as an error, never reading past the input.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "trellara.h"
#include "trellara_compat.h"

PG_FUNCTION_INFO_V1(trellara_frame_text);

/* Values longer than this are shown abbreviated, with their length. */
#define VALUE_SHOW_BYTES_MAX	40

typedef struct FrameReader
{
	const unsigned char *data;
	uint32		len;
	uint32		pos;
} FrameReader;

static void
need(FrameReader *r, uint32 n, const char *what)
{
	if (n > r->len - r->pos)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("truncated trellara frame: %s needs %u bytes at offset %u, frame has %u",
						what, n, r->pos, r->len)));
}

static uint8
get_u8(FrameReader *r, const char *what)
{
	need(r, 1, what);
	return r->data[r->pos++];
}

static uint16
get_u16(FrameReader *r, const char *what)
{
	uint16		v;

	need(r, 2, what);
	v = ((uint16) r->data[r->pos] << 8) | r->data[r->pos + 1];
	r->pos += 2;
	return v;
}

static uint32
get_u32(FrameReader *r, const char *what)
{
	uint32		v = 0;

	need(r, 4, what);
	for (int i = 0; i < 4; i++)
		v = (v << 8) | r->data[r->pos + i];
	r->pos += 4;
	return v;
}

static uint64
get_u64(FrameReader *r, const char *what)
{
	uint64		v = 0;

	need(r, 8, what);
	for (int i = 0; i < 8; i++)
		v = (v << 8) | r->data[r->pos + i];
	r->pos += 8;
	return v;
}

/* A str: returns a pointer into the frame, not terminated. */
static const char *
get_str(FrameReader *r, uint32 *len, const char *what)
{
	const char *s;

	*len = get_u32(r, what);
	need(r, *len, what);
	s = (const char *) r->data + r->pos;
	r->pos += *len;
	return s;
}

/*
 * Whether a frame string can be returned as text: frames carry text as
 * UTF-8, so it must be valid UTF-8 (pg_verify_mbstr also refuses NUL), and
 * in a database with another encoding it is shown as text only when it is
 * plain ASCII.  Anything else is shown as hex: this function must never
 * return text that is invalid in the database encoding.
 */
static bool
text_showable(const char *s, uint32 len)
{
	if (!pg_verify_mbstr(PG_UTF8, s, (int) len, true))
		return false;
	if (GetDatabaseEncoding() == PG_UTF8)
		return true;
	for (uint32 i = 0; i < len; i++)
		if (IS_HIGHBIT_SET(s[i]))
			return false;
	return true;
}

static void
append_hex(StringInfo out, const char *s, uint32 len)
{
	appendStringInfoString(out, "\\x");
	for (uint32 i = 0; i < len && i < VALUE_SHOW_BYTES_MAX; i++)
		appendStringInfo(out, "%02x", (unsigned char) s[i]);
	if (len > VALUE_SHOW_BYTES_MAX)
		appendStringInfo(out, "...(%u bytes)", len);
}

/* A name (namespace, relation, column) from the frame, quoted as needed. */
static void
append_name(StringInfo out, FrameReader *r, const char *what)
{
	uint32		len;
	const char *s = get_str(r, &len, what);

	if (text_showable(s, len))
		appendStringInfoString(out, quote_identifier(pnstrdup(s, len)));
	else
		append_hex(out, s, len);
}

static void
append_lsn(StringInfo out, const char *label, uint64 lsn)
{
	appendStringInfo(out, " %s=%X/%X", label, (uint32) (lsn >> 32), (uint32) lsn);
}

static void
append_time(StringInfo out, const char *label, int64 unix_us)
{
	TimestampTz t = (TimestampTz) unix_us -
		((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);

	appendStringInfo(out, " %s=%s", label, timestamptz_to_str(t));
}

/*
 * A value as a SQL-style literal; long ones abbreviated on a character
 * boundary.  Bytes that cannot be returned as text (text_showable) are
 * shown as a hex blob.
 */
static void
append_value(StringInfo out, const char *s, uint32 len)
{
	uint32		shown = len;

	if (!text_showable(s, len))
	{
		append_hex(out, s, len);
		return;
	}

	if (len > VALUE_SHOW_BYTES_MAX)
		shown = pg_mbcliplen(s, (int) len, VALUE_SHOW_BYTES_MAX);

	appendStringInfoChar(out, '\'');
	for (uint32 i = 0; i < shown; i++)
	{
		if (s[i] == '\'')
			appendStringInfoChar(out, '\'');
		appendStringInfoChar(out, s[i]);
	}
	appendStringInfoChar(out, '\'');
	if (shown < len)
		appendStringInfo(out, "...(%u bytes)", len);
}

static void
append_relname(StringInfo out, Oid relid, bool redact)
{
	char	   *relname = get_rel_name(relid);
	char	   *nspname = relname ? get_namespace_name(get_rel_namespace(relid)) : NULL;

	if (relname != NULL && nspname != NULL)
		appendStringInfo(out, " %s", quote_qualified_identifier(nspname, relname));
	else
		appendStringInfoString(out, " <dropped relation>");
	if (!redact)
		appendStringInfo(out, "[%u]", relid);
}

static void
append_tuple(StringInfo out, FrameReader *r, const char *label)
{
	uint16		ncols = get_u16(r, "tuple column count");

	appendStringInfo(out, " %s=(", label);
	for (uint16 i = 0; i < ncols; i++)
	{
		uint8		kind = get_u8(r, "column kind");

		if (i > 0)
			appendStringInfoString(out, ", ");
		switch (kind)
		{
			case TRELLARA_COL_NULL:
				appendStringInfoString(out, "null");
				break;
			case TRELLARA_COL_UNCHANGED:
				appendStringInfoString(out, "unchanged-toast");
				break;
			case TRELLARA_COL_TEXT:
				{
					uint32		len;
					const char *s = get_str(r, &len, "column value");

					append_value(out, s, len);
					break;
				}
			default:
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
						 errmsg("unknown column kind 0x%02x in trellara frame at offset %u",
								kind, r->pos - 1)));
		}
	}
	appendStringInfoChar(out, ')');
}

static void
render_relation(StringInfo out, FrameReader *r, bool redact)
{
	uint32		relid = get_u32(r, "relid");
	uint8		replident;
	uint16		ncols;

	appendStringInfoString(out, "RELATION ");
	append_name(out, r, "namespace");
	appendStringInfoChar(out, '.');
	append_name(out, r, "relation name");
	replident = get_u8(r, "replica identity");
	ncols = get_u16(r, "column count");
	if (!redact)
		appendStringInfo(out, "[%u]", relid);
	appendStringInfo(out, " identity=%c (", replident);
	for (uint16 i = 0; i < ncols; i++)
	{
		uint8		flags = get_u8(r, "column flags");
		Oid			typid;
		int32		typmod;

		if (i > 0)
			appendStringInfoString(out, ", ");
		append_name(out, r, "column name");
		typid = get_u32(r, "type oid");
		typmod = (int32) get_u32(r, "type modifier");
		appendStringInfo(out, " %s", format_type_with_typemod(typid, typmod));
		if (flags & TRELLARA_COLFLAG_KEY)
			appendStringInfoString(out, " key");
	}
	appendStringInfoChar(out, ')');
}

static void
render_old(StringInfo out, FrameReader *r)
{
	uint8		old_kind = get_u8(r, "old tuple kind");

	switch (old_kind)
	{
		case TRELLARA_OLD_KEY:
			append_tuple(out, r, "old-key");
			break;
		case TRELLARA_OLD_FULL:
			append_tuple(out, r, "old");
			break;
		case TRELLARA_OLD_NONE:
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
					 errmsg("unknown old tuple kind 0x%02x in trellara frame", old_kind)));
	}
}

Datum
trellara_frame_text(PG_FUNCTION_ARGS)
{
	bytea	   *frame = PG_GETARG_BYTEA_PP(0);
	bool		redact = PG_GETARG_BOOL(1);
	FrameReader r;
	StringInfoData out;
	uint8		version;
	uint8		type;

	r.data = (const unsigned char *) VARDATA_ANY(frame);
	r.len = VARSIZE_ANY_EXHDR(frame);
	r.pos = 0;
	initStringInfo(&out);

	version = get_u8(&r, "version");
	if (version != TRELLARA_FRAME_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("unsupported trellara frame version %u (this build reads version %u)",
						version, TRELLARA_FRAME_VERSION)));
	type = get_u8(&r, "type");

	switch (type)
	{
		case TRELLARA_FRAME_BEGIN:
			{
				uint32		xid = get_u32(&r, "xid");
				uint64		final_lsn = get_u64(&r, "final lsn");
				int64		t = (int64) get_u64(&r, "commit time");

				appendStringInfoString(&out, "BEGIN");
				if (!redact)
				{
					appendStringInfo(&out, " xid=%u", xid);
					append_lsn(&out, "final_lsn", final_lsn);
					append_time(&out, "commit_time", t);
				}
				break;
			}
		case TRELLARA_FRAME_RELATION:
			render_relation(&out, &r, redact);
			break;
		case TRELLARA_FRAME_INSERT:
			appendStringInfoString(&out, "INSERT");
			append_relname(&out, get_u32(&r, "relid"), redact);
			append_tuple(&out, &r, "new");
			break;
		case TRELLARA_FRAME_UPDATE:
			appendStringInfoString(&out, "UPDATE");
			append_relname(&out, get_u32(&r, "relid"), redact);
			render_old(&out, &r);
			append_tuple(&out, &r, "new");
			break;
		case TRELLARA_FRAME_DELETE:
			appendStringInfoString(&out, "DELETE");
			append_relname(&out, get_u32(&r, "relid"), redact);
			render_old(&out, &r);
			break;
		case TRELLARA_FRAME_TRUNCATE:
			{
				uint8		flags = get_u8(&r, "truncate flags");
				uint32		nrels = get_u32(&r, "relation count");

				appendStringInfoString(&out, "TRUNCATE");
				if (flags & TRELLARA_TRUNC_CASCADE)
					appendStringInfoString(&out, " cascade");
				if (flags & TRELLARA_TRUNC_RESTART)
					appendStringInfoString(&out, " restart-identity");
				for (uint32 i = 0; i < nrels; i++)
				{
					if (i > 0)
						appendStringInfoChar(&out, ',');
					append_relname(&out, get_u32(&r, "truncated relid"), redact);
				}
				break;
			}
		case TRELLARA_FRAME_MESSAGE:
			{
				uint64		lsn = get_u64(&r, "message lsn");
				uint32		plen;
				const char *prefix = get_str(&r, &plen, "message prefix");
				uint32		len;
				const char *content = get_str(&r, &len, "message content");

				appendStringInfoString(&out, "MESSAGE");
				if (!redact)
					append_lsn(&out, "lsn", lsn);
				appendStringInfoString(&out, " prefix=");
				append_value(&out, prefix, plen);
				appendStringInfoString(&out, " content=");
				append_value(&out, content, len);
				break;
			}
		case TRELLARA_FRAME_COMMIT:
			{
				uint8		flags = get_u8(&r, "commit flags");
				uint64		commit_lsn = get_u64(&r, "commit lsn");
				uint64		end_lsn = get_u64(&r, "end lsn");
				int64		t = (int64) get_u64(&r, "commit time");

				appendStringInfoString(&out, "COMMIT");
				if (flags != 0)
					appendStringInfo(&out, " flags=0x%02x", flags);
				if (!redact)
				{
					append_lsn(&out, "commit_lsn", commit_lsn);
					append_lsn(&out, "end_lsn", end_lsn);
					append_time(&out, "commit_time", t);
				}
				break;
			}
		case TRELLARA_FRAME_PROGRESS:
			{
				uint64		lsn = get_u64(&r, "progress lsn");

				appendStringInfoString(&out, "PROGRESS");
				if (!redact)
					append_lsn(&out, "lsn", lsn);
				break;
			}
		default:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
					 errmsg("unknown trellara frame type 0x%02x", type)));
	}

	if (r.pos != r.len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("trellara frame of type '%c' has %u trailing bytes",
						type, r.len - r.pos)));

	PG_RETURN_TEXT_P(cstring_to_text_with_len(out.data, out.len));
}
