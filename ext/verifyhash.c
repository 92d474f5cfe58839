/*-------------------------------------------------------------------------
 *
 * verifyhash.c
 *		trellara_verify_buckets(): verify's per-bucket row counts and row-hash
 *		sums, computed in C over a table's heap.
 *
 * `trellara verify` (package internal/verify) hashes every row of a table in
 * SQL:
 *
 *	 row hash  hashint8extended(hash_record_extended(ROW(e1, ..., en), 0), 0)
 *	 key hash  the key column's hash with seed S (one key column),
 *			   hash_record_extended(ROW(k1, ..., km), S) (several), or
 *			   hashint8extended(<record hash of the row>, S) (no key)
 *	 bucket    (key hash & 9223372036854775807) % B
 *	 result    per bucket: count(*), sum(row hash) (exact)
 *
 * where each column enters in one of three modes chosen by the caller:
 *
 *	 'v'  the value itself, hashed by its type's extended hash function
 *		  under the column's collation
 *	 'c'  the value itself under COLLATE "C" (text, varchar, name: bytewise)
 *	 't'  its text form, col::text COLLATE "C" (the cast PostgreSQL would
 *		  apply: a cast function, binary relabelling or the output function)
 *
 * This function computes exactly those numbers, bit for bit, without the
 * executor: it scans the heap (heap_getnext over the block range of
 * verify's ctid condition; a table of another access method through its
 * slots and a TID range scan), deforms each tuple once, hashes each column
 * with the type's cached extended hash function
 * (the typcache entry hash_record_extended itself uses), combines them as
 * hash_record_extended does (h = 31h + hi, a NULL contributing 0), mixes
 * with hashint8extended and adds into per-bucket 128-bit sums.  The caller
 * chooses the modes, so the rule for which type enters how lives in one
 * place (internal/verify); this file only executes it.
 *
 * For the common types the hash (or the text) is computed here without
 * fmgr, as the function PostgreSQL would call computes it (VhKind): the
 * integer, date and time types, oid, bool, "char", uuid, bytea, name,
 * text, varchar and bpchar under a deterministic collation, bpchar's and
 * the floats' text, and numeric's text, rendered from its stored digits
 * (vh_numeric_text) as numeric_out renders it.
 * ext/sql/verifyhash.sql checks equality against the SQL expressions on
 * every kind of column and on each direct kind's edge values.
 *
 * Semantics the SQL path has and this one keeps: the active snapshot (the
 * caller's REPEATABLE READ snapshot), SELECT privilege (on the table, or on
 * every column used), ONLY for a plain table and every leaf partition for a
 * partitioned one, the same page range on each partition.  It refuses a
 * table whose row-level security applies to the caller and a partition that
 * is not a plain table (a foreign table): verify hashes those in SQL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "common/shortest_dec.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "parser/parse_coerce.h"
#include "port/pg_bitutils.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/typcache.h"
#include "utils/uuid.h"

#include "trellara_compat.h"

PG_FUNCTION_INFO_V1(trellara_verify_buckets);

/* The block rows' text forms and detoasted values are allocated in. */
#define VH_ROW_MEMORY	(256 * 1024)

/* Bucket counts above this are refused: the sums are held in memory. */
#define VH_BUCKETS_MAX	(1 << 20)

/*
 * How an input's value becomes its hash.  VH_FMGR, VH_CAST and VH_OUTPUT
 * call, through fmgr, the function SQL would: the type's extended hash
 * function (modes 'v', 'c'), its cast function to text or its output
 * function (mode 't'); that works for every type.  The others compute the
 * same number without fmgr, each as the function it replaces does (named
 * below); they are chosen by that function's OID, not by the type, so a
 * type whose hash or text comes from elsewhere keeps the fmgr call.
 */
typedef enum VhKind
{
	VH_FMGR,					/* the type's extended hash function */
	VH_CAST,					/* hash of the cast function's text */
	VH_INT2,					/* hashint2extended */
	VH_INT4,					/* hashint4extended (int4, date) */
	VH_INT8,					/* hashint8extended, timestamp_hash_extended,
								 * time_hash_extended */
	VH_OID,						/* hashoidextended */
	VH_CHAR,					/* hashcharextended (bool, "char") */
	VH_NAME,					/* hashnameextended */
	VH_UUID,					/* uuid_hash_extended */
	VH_BYTES,					/* the varlena's bytes: hashvarlenaextended,
								 * hashtextextended under a deterministic
								 * collation, text relabelled to text */
	VH_BPCHAR,					/* the bytes without trailing spaces:
								 * hashbpcharextended under a deterministic
								 * collation, and bpchar::text (rtrim1) */
	VH_FLOAT4,					/* float4out's text (extra_float_digits > 0) */
	VH_FLOAT8,					/* float8out's text (extra_float_digits > 0) */
	VH_NUMERIC,					/* numeric_out's text (vh_numeric_text) */
	VH_OUTPUT					/* hash of the output function's text */
} VhKind;

/* One hashed input: a column of the row, or of the key. */
typedef struct VhInput
{
	const char *name;
	char		mode;			/* 'v', 'c' or 't' */
	/* resolved per relation (partitions may number columns differently) */
	AttrNumber	attnum;
	Oid			typid;
	int16		typlen;
	Oid			collation;		/* 'v': the column's; else C */
	VhKind		kind;
	FmgrInfo   *hash;			/* VH_FMGR: the type's extended hash */
	FmgrInfo	cast;			/* VH_CAST, VH_OUTPUT: cast or output
								 * function */
	int			castargs;		/* VH_CAST: the cast function's arity */
	int			same_as;		/* key input equal to row input i, or -1 */
} VhInput;

typedef struct VhState
{
	int			ncols;
	VhInput    *cols;
	int			nkeys;			/* 0: the key is the whole row */
	VhInput    *keys;
	int64		seed;
	int64		buckets;
	int64	   *counts;
	int128	   *sums;
	int			maxattnum;
	MemoryContext rowcxt;
} VhState;

/* Hash of bytes: hash_any_extended, as every string type's hash uses. */
static inline uint64
vh_bytes(const char *p, int len, int64 seed)
{
	return DatumGetUInt64(hash_any_extended((const unsigned char *) p, len, (uint64) seed));
}

/*
 * Hash of a 32-bit value: hash_uint32_extended, as hashint4extended.  It is
 * computed here, inline, as common/hashfn.c's hash_bytes_uint32_extended
 * computes it (Bob Jenkins' lookup3: the state seeded with the key's length,
 * the seed mixed in, then the final mix), because the call cost a tenth of
 * a row: every integer, date and time column and each row's final mix is
 * one.  The function is part of hash indexes' on-disk format and does not
 * change between major versions; ext/sql/verifyhash.sql compares it with
 * PostgreSQL's on every integer kind, at seed 0 and at a seed.
 */
#define VH_ROT(x, k) pg_rotate_left32((x), (k))
/* one of lookup3's mix steps: x -= z; x ^= rot(z, r); z += y */
#define VH_MIX_STEP(x, y, z, r) ((x) -= (z), (x) ^= VH_ROT((z), (r)), (z) += (y))
/* one of lookup3's final steps: x ^= y; x -= rot(y, r) */
#define VH_FINAL_STEP(x, y, r) ((x) ^= (y), (x) -= VH_ROT((y), (r)))

static inline uint64
vh_uint32(uint32 k, int64 seed)
{
	uint32		a,
				b,
				c;

	a = b = c = 0x9e3779b9 + (uint32) sizeof(uint32) + 3923095;
	if (seed != 0)
	{
		a += (uint32) ((uint64) seed >> 32);
		b += (uint32) seed;
		/* lookup3's mix(a, b, c) */
		VH_MIX_STEP(a, b, c, 4);
		VH_MIX_STEP(b, c, a, 6);
		VH_MIX_STEP(c, a, b, 8);
		VH_MIX_STEP(a, b, c, 16);
		VH_MIX_STEP(b, c, a, 19);
		VH_MIX_STEP(c, a, b, 4);
	}
	a += k;
	/* lookup3's final(a, b, c) */
	VH_FINAL_STEP(c, b, 14);
	VH_FINAL_STEP(a, c, 11);
	VH_FINAL_STEP(b, a, 25);
	VH_FINAL_STEP(c, b, 16);
	VH_FINAL_STEP(a, c, 4);
	VH_FINAL_STEP(b, a, 14);
	VH_FINAL_STEP(c, b, 24);
	return ((uint64) b << 32) | c;
}

/*
 * hashint8extended: an int8 folded into 32 bits, so that it hashes like an
 * int4 or int2 of equal value.  Also the row hash's final mix.
 */
static inline uint64
vh_int8(int64 val, int64 seed)
{
	uint32		lohalf = (uint32) val;
	uint32		hihalf = (uint32) (val >> 32);

	lohalf ^= (val >= 0) ? hihalf : ~hihalf;
	return vh_uint32(lohalf, seed);
}

/*
 * Hash of a bpchar's bytes without its trailing spaces, as hashbpcharextended
 * (bcTruelen) and the cast to text (rtrim1) strip them.  A byte 0x20 is
 * always a whole character in a server encoding, so bytes are characters
 * here.
 */
static inline uint64
vh_bpchar(Datum value, int64 seed)
{
	struct varlena *v = PG_DETOAST_DATUM_PACKED(value);
	const char *p = VARDATA_ANY(v);
	int			len = VARSIZE_ANY_EXHDR(v);

	while (len > 0 && p[len - 1] == ' ')
		len--;
	return vh_bytes(p, len, seed);
}

/*
 * Hash of the output function's text (mode 't' through in->cast, the type's
 * output function).
 */
static uint64
vh_output(VhInput *in, Datum value, int64 seed)
{
	/*
	 * A short inline varlena (1-byte header, what most small
	 * values are on disk) is handed over with a 4-byte header in
	 * a stack buffer: the output function would otherwise
	 * detoast it into a palloc'd copy first.  (A TOAST pointer
	 * has a 1-byte header too: VARATT_IS_SHORT holds for it.)
	 */
	union
	{
		int32		align;
		char		data[VARHDRSZ + VARATT_SHORT_MAX];
	}			buf;
	char	   *s;

	if (in->typlen == -1 && VARATT_IS_SHORT(DatumGetPointer(value)) &&
		!VARATT_IS_EXTERNAL(DatumGetPointer(value)))
	{
		Size		len = VARSIZE_SHORT(DatumGetPointer(value)) - VARHDRSZ_SHORT;

		SET_VARSIZE(buf.data, len + VARHDRSZ);
		memcpy(VARDATA(buf.data), VARDATA_SHORT(DatumGetPointer(value)), len);
		value = PointerGetDatum(buf.data);
	}
	s = OutputFunctionCall(&in->cast, value);
	return vh_bytes(s, strlen(s), seed);
}

/* The longest numeric text vh_numeric_text renders; longer goes to numeric_out. */
#define VH_NUMERIC_TEXT_MAX	256

/* Stored digit i of a numeric (0 outside them); the digits are unaligned. */
static inline int
vh_numeric_digit(const char *digits, int ndigits, int i)
{
	int16		dig;

	if (i < 0 || i >= ndigits)
		return 0;
	memcpy(&dig, digits + i * sizeof(int16), sizeof(dig));
	return dig;
}

/*
 * numeric_out's text of a numeric, rendered into buf from the stored value
 * without numeric_out's detoasted copy, its NumericVar and its palloc'd
 * string; the length, or -1 for a value this does not render (stored out of
 * line or compressed, or text longer than VH_NUMERIC_TEXT_MAX), which the
 * caller hands to numeric_out.
 *
 * The stored form (the same in every supported major version): a 16-bit
 * header, then base-10000 digits (int16), most significant first, with no
 * leading or trailing zero digit.  The header's top bits say which form:
 *
 *	 11.. ....  special: 1100 NaN, 1101 +Infinity, 1111 -Infinity
 *	 10s. ....  short: s the sign, then 6 bits of display scale and a 7-bit
 *				two's-complement weight (its top bit the weight's sign)
 *	 0s.. ....  long: s the sign (01 negative), 14 bits of display scale;
 *				an int16 weight follows the header
 *
 * The weight is the position of the first digit in base-10000 places (0:
 * units); the display scale the number of decimal places printed.  The text
 * is numeric_out's: a '-' for a negative value, the integer part without
 * leading zeros ("0" when there is none), then, for a display scale above
 * zero, '.' and exactly that many decimals (the digits past the stored ones
 * are zeros; a stored value has no digits past its scale).
 */
static int
vh_numeric_text(Datum value, char *buf)
{
	struct varlena *v = (struct varlena *) DatumGetPointer(value);
	const char *p;
	int			len;
	uint16		hdr;
	bool		neg;
	int			dscale;
	int			weight;
	const char *digits;
	int			ndigits;
	char	   *cp = buf;
	int			d;

	if (VARATT_IS_EXTERNAL(v) || VARATT_IS_COMPRESSED(v))
		return -1;
	p = VARDATA_ANY(v);
	len = VARSIZE_ANY_EXHDR(v);
	if (len < (int) sizeof(uint16))
		return -1;
	memcpy(&hdr, p, sizeof(hdr));	/* a short varlena's data is unaligned */
	if ((hdr & 0xC000) == 0xC000)
	{
		const char *t;

		switch (hdr & 0xF000)
		{
			case 0xC000:
				t = "NaN";
				break;
			case 0xD000:
				t = "Infinity";
				break;
			case 0xF000:
				t = "-Infinity";
				break;
			default:
				return -1;
		}
		len = strlen(t);
		memcpy(buf, t, len);
		return len;
	}
	if (hdr & 0x8000)
	{
		neg = (hdr & 0x2000) != 0;
		dscale = (hdr & 0x1F80) >> 7;
		weight = (hdr & 0x0040) ? (int) (hdr & 0x003F) - 64 : (int) (hdr & 0x003F);
		digits = p + sizeof(uint16);
		ndigits = (len - (int) sizeof(uint16)) / (int) sizeof(int16);
	}
	else
	{
		int16		w;

		if (len < (int) (sizeof(uint16) + sizeof(int16)))
			return -1;
		neg = (hdr & 0xC000) == 0x4000;
		dscale = hdr & 0x3FFF;
		memcpy(&w, p + sizeof(uint16), sizeof(w));
		weight = w;
		digits = p + sizeof(uint16) + sizeof(int16);
		ndigits = (len - (int) (sizeof(uint16) + sizeof(int16))) / (int) sizeof(int16);
	}
	/* sign, integer part, point, decimals, and up to 3 written past them */
	if (1 + (weight >= 0 ? (weight + 1) * 4 : 1) + 1 + dscale + 3 > VH_NUMERIC_TEXT_MAX)
		return -1;

#define VH_DIGIT(i) vh_numeric_digit(digits, ndigits, (i))
	if (neg)
		*cp++ = '-';
	if (weight < 0)
	{
		d = weight + 1;
		*cp++ = '0';
	}
	else
	{
		for (d = 0; d <= weight; d++)
		{
			int			dig = VH_DIGIT(d);

			if (d == 0)
			{
				/* the first group without its leading zeros */
				if (dig >= 1000)
					*cp++ = '0' + dig / 1000;
				if (dig >= 100)
					*cp++ = '0' + dig / 100 % 10;
				if (dig >= 10)
					*cp++ = '0' + dig / 10 % 10;
				*cp++ = '0' + dig % 10;
				continue;
			}
			cp[0] = '0' + dig / 1000;
			cp[1] = '0' + dig / 100 % 10;
			cp[2] = '0' + dig / 10 % 10;
			cp[3] = '0' + dig % 10;
			cp += 4;
		}
	}
	if (dscale > 0)
	{
		char	   *end;
		int			i;

		*cp++ = '.';
		end = cp + dscale;
		for (i = 0; i < dscale; d++, i += 4)
		{
			int			dig = VH_DIGIT(d);

			cp[0] = '0' + dig / 1000;
			cp[1] = '0' + dig / 100 % 10;
			cp[2] = '0' + dig / 10 % 10;
			cp[3] = '0' + dig % 10;
			cp += 4;
		}
		cp = end;
	}
#undef VH_DIGIT
	return cp - buf;
}

/*
 * A non-NULL input's hash with seed, for every kind; vh_hash takes the
 * common ones inline and calls this for the rest.  Out of line, so that its
 * stack buffers and calls do not weigh on the per-column fast path.
 */
static pg_noinline uint64
vh_hash_other(VhInput *in, Datum value, int64 seed)
{
	switch (in->kind)
	{
		case VH_NAME:
			{
				const char *key = NameStr(*DatumGetName(value));

				return vh_bytes(key, strlen(key), seed);
			}
		case VH_UUID:
			return vh_bytes((const char *) DatumGetUUIDP(value)->data, UUID_LEN, seed);
		case VH_BYTES:
			{
				struct varlena *v = PG_DETOAST_DATUM_PACKED(value);

				return vh_bytes(VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v), seed);
			}
		case VH_BPCHAR:
			return vh_bpchar(value, seed);
		case VH_FLOAT4:
		case VH_FLOAT8:
			/* float4out / float8out, without their palloc and strlen */
			if (extra_float_digits > 0)
			{
				char		buf[DOUBLE_SHORTEST_DECIMAL_LEN];
				int			n;

				StaticAssertStmt(DOUBLE_SHORTEST_DECIMAL_LEN >= FLOAT_SHORTEST_DECIMAL_LEN,
								 "float8 text is the longer");
				if (in->kind == VH_FLOAT4)
					n = float_to_shortest_decimal_bufn(DatumGetFloat4(value), buf);
				else
					n = double_to_shortest_decimal_bufn(DatumGetFloat8(value), buf);
				return vh_bytes(buf, n, seed);
			}
			/* else as any output function */
			return vh_output(in, value, seed);
		case VH_NUMERIC:
			{
				char		buf[VH_NUMERIC_TEXT_MAX];
				int			n = vh_numeric_text(value, buf);

				if (n >= 0)
					return vh_bytes(buf, n, seed);
			}
			/* stored out of line or compressed, or a long text */
			return vh_output(in, value, seed);
		case VH_OUTPUT:
			return vh_output(in, value, seed);
		case VH_CAST:
			{
				Datum		d;
				text	   *t;

				/* as build_coercion_expression calls it for ::text */
				if (in->castargs == 1)
					d = FunctionCall1(&in->cast, value);
				else if (in->castargs == 2)
					d = FunctionCall2(&in->cast, value, Int32GetDatum(-1));
				else
					d = FunctionCall3(&in->cast, value, Int32GetDatum(-1),
									  BoolGetDatum(true));
				t = DatumGetTextPP(d);
				return vh_bytes(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), seed);
			}
		case VH_INT2:
		case VH_INT4:
		case VH_INT8:
		case VH_OID:
		case VH_CHAR:
			/* vh_hash hashes these inline; their fmgr hash is the same */
		case VH_FMGR:
			break;
	}
	return DatumGetUInt64(FunctionCall2Coll(in->hash, in->collation, value,
											Int64GetDatum(seed)));
}

/*
 * One input's hash with seed; a NULL enters hash_record_extended as 0.
 * The integer kinds and an inline, uncompressed varlena's bytes are hashed
 * here; everything else in vh_hash_other.
 */
static inline uint64
vh_hash(VhInput *in, Datum value, bool isnull, int64 seed)
{
	if (isnull)
		return 0;
	switch (in->kind)
	{
		case VH_INT2:
			return vh_uint32((int32) DatumGetInt16(value), seed);
		case VH_INT4:
			return vh_uint32(DatumGetInt32(value), seed);
		case VH_INT8:
			return vh_int8(DatumGetInt64(value), seed);
		case VH_OID:
			return vh_uint32((uint32) DatumGetObjectId(value), seed);
		case VH_CHAR:
			return vh_uint32((int32) DatumGetChar(value), seed);
		case VH_BYTES:
			{
				Pointer		p = DatumGetPointer(value);

				/* what PG_DETOAST_DATUM_PACKED would hand back unchanged */
				if (VARATT_IS_SHORT(p) && !VARATT_IS_EXTERNAL(p))
					return vh_bytes(VARDATA_SHORT(p), VARSIZE_SHORT(p) - VARHDRSZ_SHORT, seed);
				if (!VARATT_IS_EXTENDED(p))
					return vh_bytes(VARDATA(p), VARSIZE(p) - VARHDRSZ, seed);
			}
			break;
		default:
			break;
	}
	return vh_hash_other(in, value, seed);
}

/*
 * The direct kind for a type whose extended hash function is fn under
 * collation coll, or VH_FMGR.  The string hashes hash bytes only under a
 * deterministic collation (else a sort key).
 */
static VhKind
vh_hash_kind(Oid fn, Oid coll)
{
	switch (fn)
	{
		case F_HASHINT2EXTENDED:
			return VH_INT2;
		case F_HASHINT4EXTENDED:
			return VH_INT4;
		case F_HASHINT8EXTENDED:
		case F_TIMESTAMP_HASH_EXTENDED:
		case F_TIME_HASH_EXTENDED:
			return VH_INT8;
		case F_HASHOIDEXTENDED:
			return VH_OID;
		case F_HASHCHAREXTENDED:
			return VH_CHAR;
		case F_HASHNAMEEXTENDED:
			return VH_NAME;
		case F_UUID_HASH_EXTENDED:
			return VH_UUID;
		case F_HASHVARLENAEXTENDED:
			return VH_BYTES;
		case F_HASHTEXTEXTENDED:
			if (OidIsValid(coll) && get_collation_isdeterministic(coll))
				return VH_BYTES;
			break;
		case F_HASHBPCHAREXTENDED:
			if (OidIsValid(coll) && get_collation_isdeterministic(coll))
				return VH_BPCHAR;
			break;
	}
	return VH_FMGR;
}

/* Reads a text[] argument into C strings. */
static int
vh_names(ArrayType *arr, const char *what, char ***out)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional text array", what)));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	*out = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain NULL", what)));
		(*out)[i] = TextDatumGetCString(elems[i]);
	}
	return n;
}

/* Builds the inputs from names and a mode string of the same length. */
static VhInput *
vh_inputs(char **names, int n, text *modes, const char *what)
{
	VhInput    *in = palloc0(sizeof(VhInput) * Max(n, 1));
	char	   *m = text_to_cstring(modes);

	if ((int) strlen(m) != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s modes \"%s\" name %d columns, but %d columns are given",
						what, m, (int) strlen(m), n)));
	for (int i = 0; i < n; i++)
	{
		if (m[i] != 'v' && m[i] != 'c' && m[i] != 't')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s mode '%c' of column \"%s\" is not one of v, c, t",
							what, m[i], names[i])));
		in[i].name = names[i];
		in[i].mode = m[i];
		in[i].same_as = -1;
	}
	return in;
}

/* Resolves one input against relation rel (by name, as SQL would). */
static void
vh_resolve(VhInput *in, Relation rel, MemoryContext cxt)
{
	Oid			relid = RelationGetRelid(rel);
	TupleDesc	desc = RelationGetDescr(rel);
	Form_pg_attribute att;

	in->attnum = get_attnum(relid, in->name);
	if (in->attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						in->name, RelationGetRelationName(rel))));
	att = TupleDescAttr(desc, in->attnum - 1);
	in->typid = att->atttypid;
	in->typlen = att->attlen;
	in->collation = in->mode == 'v' ? att->attcollation : C_COLLATION_OID;
	if (in->mode != 't')
	{
		TypeCacheEntry *tc = lookup_type_cache(in->typid, TYPECACHE_HASH_EXTENDED_PROC_FINFO);

		if (!OidIsValid(tc->hash_extended_proc_finfo.fn_oid))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("could not identify an extended hash function for type %s",
							format_type_be(in->typid))));
		in->hash = &tc->hash_extended_proc_finfo;
		in->kind = vh_hash_kind(tc->hash_extended_proc_finfo.fn_oid, in->collation);
		return;
	}
	{
		Oid			func = InvalidOid;

		switch (find_coercion_pathway(TEXTOID, in->typid, COERCION_EXPLICIT, &func))
		{
			case COERCION_PATH_RELABELTYPE:
				in->kind = VH_BYTES;
				break;
			case COERCION_PATH_FUNC:
				if (func == F_TEXT_BPCHAR)
				{
					in->kind = VH_BPCHAR;
					break;
				}
				in->kind = VH_CAST;
				fmgr_info_cxt(func, &in->cast, cxt);
				in->castargs = get_func_nargs(func);
				if (in->castargs < 1 || in->castargs > 3)
					elog(ERROR, "cast function %u from %s to text takes %d arguments",
						 func, format_type_be(in->typid), in->castargs);
				break;
			case COERCION_PATH_COERCEVIAIO:
				{
					Oid			out;
					bool		varlena;

					getTypeOutputInfo(in->typid, &out, &varlena);
					in->kind = out == F_FLOAT4OUT ? VH_FLOAT4
						: out == F_FLOAT8OUT ? VH_FLOAT8
						: out == F_NUMERIC_OUT ? VH_NUMERIC : VH_OUTPUT;
					fmgr_info_cxt(out, &in->cast, cxt);
				}
				break;
			default:
				ereport(ERROR,
						(errcode(ERRCODE_CANNOT_COERCE),
						 errmsg("cannot cast type %s to text",
								format_type_be(in->typid))));
		}
	}
}

/*
 * Adds one row, its attribute values (by attnum - 1) and nulls, into its
 * bucket; colhash is scratch for one hash per column.
 */
static inline void
vh_row(VhState *st, Datum *values, bool *isnull, uint64 *colhash)
{
	uint64		rec = 0;
	int64		row;
	int64		b = 0;

	for (int i = 0; i < st->ncols; i++)
	{
		VhInput    *c = &st->cols[i];

		colhash[i] = vh_hash(c, values[c->attnum - 1], isnull[c->attnum - 1], 0);
		/* hash_record_extended's combination (as hash_array_extended) */
		rec = (rec << 5) - rec + colhash[i];
	}
	row = (int64) vh_int8((int64) rec, 0);
	if (st->buckets > 1)
	{
		int64		key;

		if (st->nkeys == 0)
			key = (int64) vh_int8((int64) rec, st->seed);
		else
		{
			uint64		k = 0;

			for (int i = 0; i < st->nkeys; i++)
			{
				VhInput    *c = &st->keys[i];
				uint64		h = c->same_as >= 0 ? colhash[c->same_as]
					: vh_hash(c, values[c->attnum - 1], isnull[c->attnum - 1], st->seed);

				/* one key column: k = h, as its own hash in SQL */
				k = (k << 5) - k + h;
			}
			key = (int64) k;
		}
		b = (key & PG_INT64_MAX) % st->buckets;
	}
	st->counts[b]++;
	st->sums[b] += row;
	/*
	 * Text forms and detoasted values are freed in batches, once the
	 * context's one block is full (it then holds a second): resetting after
	 * every row cost a tenth of the time.  A row's values are never kept
	 * past the row, so this bounds the memory at two blocks plus one row's
	 * values.
	 */
	if (st->rowcxt->mem_allocated > VH_ROW_MEMORY)
		MemoryContextReset(st->rowcxt);
}

/*
 * Scans a heap relation's pages [lo, hi) (hi < 0: to the end) with the heap
 * access method's own tuple-at-a-time interface: heap_getnext hands back
 * the tuple in the scan's pinned page, where a slot would take a pin of its
 * own per tuple (a tenth of the time).  A page range is a block range of
 * the same scan (heap_setscanlimits), so it reads what the TID range scan
 * over (lo,0)..(hi-1,max) reads.
 */
static void
vh_scan_heap(VhState *st, Relation rel, Snapshot snap, bool range, int64 lo, int64 hi)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Datum	   *values = palloc(sizeof(Datum) * Max(desc->natts, 1));
	bool	   *isnull = palloc(sizeof(bool) * Max(desc->natts, 1));
	uint64	   *colhash = palloc(sizeof(uint64) * Max(st->ncols, 1));
	/* a synchronised scan may start mid-table: only for the whole table */
	TableScanDesc scan = table_beginscan_strat(rel, snap, 0, NULL, true, !range);
	HeapTuple	tup;

	if (range)
	{
		BlockNumber nblocks = ((HeapScanDesc) scan)->rs_nblocks;
		BlockNumber end = (hi < 0 || hi > (int64) nblocks) ? nblocks : (BlockNumber) hi;

		if ((int64) end <= lo)
		{
			table_endscan(scan);
			return;
		}
		heap_setscanlimits(scan, (BlockNumber) lo, end - (BlockNumber) lo);
	}
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		MemoryContext outer;

		CHECK_FOR_INTERRUPTS();
		/* every attribute: missing ones (added later) as their default */
		heap_deform_tuple(tup, desc, values, isnull);
		outer = MemoryContextSwitchTo(st->rowcxt);
		vh_row(st, values, isnull, colhash);
		MemoryContextSwitchTo(outer);
	}
	table_endscan(scan);
	MemoryContextReset(st->rowcxt);
	pfree(values);
	pfree(isnull);
	pfree(colhash);
}

/* Scans one relation's pages [lo, hi) (hi < 0: to the end). */
static void
vh_scan(VhState *st, Relation rel, int64 lo, int64 hi)
{
	Snapshot	snap = GetActiveSnapshot();
	TupleTableSlot *slot;
	TableScanDesc scan;
	bool		range = lo > 0 || hi >= 0;
	uint64	   *colhash;

	if (hi >= 0 && hi <= lo)
		return;
	st->maxattnum = 0;
	for (int i = 0; i < st->ncols; i++)
	{
		vh_resolve(&st->cols[i], rel, CurrentMemoryContext);
		st->maxattnum = Max(st->maxattnum, st->cols[i].attnum);
	}
	for (int i = 0; i < st->nkeys; i++)
	{
		vh_resolve(&st->keys[i], rel, CurrentMemoryContext);
		st->maxattnum = Max(st->maxattnum, st->keys[i].attnum);
		st->keys[i].same_as = -1;
		/* at seed 0 a key column hashed like its row column hashes the same */
		for (int j = 0; st->seed == 0 && j < st->ncols; j++)
			if (st->cols[j].attnum == st->keys[i].attnum && st->cols[j].mode == st->keys[i].mode)
			{
				st->keys[i].same_as = j;
				break;
			}
	}

	if (rel->rd_tableam == GetHeapamTableAmRoutine())
	{
		vh_scan_heap(st, rel, snap, range, lo, hi);
		return;
	}

	/* another table access method: through its slots */
	if (range && rel->rd_tableam->scan_set_tidrange == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the access method of relation \"%s\" has no TID range scans",
						RelationGetRelationName(rel)),
				 errhint("Hash it in SQL.")));
	slot = table_slot_create(rel, NULL);
	if (range)
	{
		ItemPointerData mintid,
					maxtid;

		ItemPointerSet(&mintid, (BlockNumber) lo, 0);
		if (hi >= 0)
			ItemPointerSet(&maxtid, (BlockNumber) (hi - 1), PG_UINT16_MAX);
		else
			ItemPointerSet(&maxtid, MaxBlockNumber, PG_UINT16_MAX);
		scan = table_beginscan_tidrange(rel, snap, &mintid, &maxtid);
	}
	else
		scan = table_beginscan(rel, snap, 0, NULL);

	colhash = palloc(sizeof(uint64) * Max(st->ncols, 1));
	for (;;)
	{
		bool		more;
		MemoryContext outer;

		CHECK_FOR_INTERRUPTS();
		more = range ? table_scan_getnextslot_tidrange(scan, ForwardScanDirection, slot)
			: table_scan_getnextslot(scan, ForwardScanDirection, slot);
		if (!more)
			break;
		slot_getsomeattrs(slot, st->maxattnum);
		outer = MemoryContextSwitchTo(st->rowcxt);
		vh_row(st, slot->tts_values, slot->tts_isnull, colhash);
		MemoryContextSwitchTo(outer);
	}
	pfree(colhash);
	MemoryContextReset(st->rowcxt);
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
}

/* Checks what SELECT would: privilege on the table or on every column used. */
static void
vh_check_access(VhState *st, Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	AclResult	ac = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT);

	if (ac != ACLCHECK_OK)
	{
		for (int i = 0; i < st->ncols + st->nkeys; i++)
		{
			VhInput    *in = i < st->ncols ? &st->cols[i] : &st->keys[i - st->ncols];
			AttrNumber	a = get_attnum(relid, in->name);

			if (a <= 0 || pg_attribute_aclcheck(relid, a, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
				aclcheck_error(ac, OBJECT_TABLE, RelationGetRelationName(rel));
		}
	}
	if (check_enable_rls(relid, InvalidOid, false) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("row-level security applies to relation \"%s\" for this role",
						RelationGetRelationName(rel)),
				 errhint("Hash it in SQL, where its policies apply.")));
}

/* Decimal text of a 128-bit sum (numeric's text of sum(int8)). */
static text *
vh_int128_text(int128 v)
{
	char		buf[48];
	char	   *p = buf + sizeof(buf);
	uint128		u = v < 0 ? -(uint128) v : (uint128) v;

	*--p = '\0';
	do
	{
		*--p = '0' + (int) (u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		*--p = '-';
	return cstring_to_text(p);
}

/*
 * trellara_verify_buckets(rel regclass, columns text[], column_modes text,
 *		key_columns text[], key_modes text, seed int8, buckets int8,
 *		first_page int8, end_page int8)
 *	RETURNS TABLE (bucket int8, row_count int8, hash_sum text)
 *
 * One row per non-empty bucket, as verify's GROUP BY.  end_page < 0 means
 * to the end of the table; key_columns empty means the key is the row.
 */
Datum
trellara_verify_buckets(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext cxt,
				old;
	VhState		st;
	char	  **colnames;
	char	  **keynames;
	int64		lo = PG_GETARG_INT64(7);
	int64		hi = PG_GETARG_INT64(8);
	Relation	rel;

	memset(&st, 0, sizeof(st));
	st.seed = PG_GETARG_INT64(5);
	st.buckets = PG_GETARG_INT64(6);
	if (st.buckets < 1 || st.buckets > VH_BUCKETS_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("buckets is " INT64_FORMAT ", allowed 1..%d", st.buckets, VH_BUCKETS_MAX)));
	if (lo < 0 || lo > MaxBlockNumber || hi > (int64) MaxBlockNumber + 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("page range [" INT64_FORMAT ", " INT64_FORMAT ") is out of range", lo, hi)));

	InitMaterializedSRF(fcinfo, 0);

	cxt = AllocSetContextCreate(CurrentMemoryContext, "trellara verify",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);
	/* one fixed block, kept across resets: no malloc churn per batch */
	st.rowcxt = AllocSetContextCreate(cxt, "trellara verify row",
									  VH_ROW_MEMORY, VH_ROW_MEMORY, VH_ROW_MEMORY);
	st.ncols = vh_names(PG_GETARG_ARRAYTYPE_P(1), "columns", &colnames);
	st.cols = vh_inputs(colnames, st.ncols, PG_GETARG_TEXT_PP(2), "column");
	st.nkeys = vh_names(PG_GETARG_ARRAYTYPE_P(3), "key_columns", &keynames);
	st.keys = vh_inputs(keynames, st.nkeys, PG_GETARG_TEXT_PP(4), "key");
	st.counts = palloc0(sizeof(int64) * st.buckets);
	st.sums = palloc0(sizeof(int128) * st.buckets);

	rel = table_open(relid, AccessShareLock);
	vh_check_access(&st, rel);
	switch (rel->rd_rel->relkind)
	{
		case RELKIND_RELATION:
			vh_scan(&st, rel, lo, hi);
			break;
		case RELKIND_PARTITIONED_TABLE:
			{
				List	   *all = find_all_inheritors(relid, AccessShareLock, NULL);
				ListCell   *lc;

				foreach(lc, all)
				{
					Oid			child = lfirst_oid(lc);
					char		kind = get_rel_relkind(child);
					Relation	part;

					if (kind == RELKIND_PARTITIONED_TABLE)
						continue;
					if (kind != RELKIND_RELATION)
						ereport(ERROR,
								(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
								 errmsg("partition \"%s\" of \"%s\" is not a plain table",
										get_rel_name(child), RelationGetRelationName(rel)),
								 errhint("Hash it in SQL.")));
					part = table_open(child, NoLock);
					vh_scan(&st, part, lo, hi);
					table_close(part, NoLock);
				}
			}
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("\"%s\" is not a table", RelationGetRelationName(rel))));
	}
	table_close(rel, NoLock);

	MemoryContextSwitchTo(old);
	for (int64 b = 0; b < st.buckets; b++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		if (st.counts[b] == 0)
			continue;
		values[0] = Int64GetDatum(b);
		values[1] = Int64GetDatum(st.counts[b]);
		values[2] = PointerGetDatum(vh_int128_text(st.sums[b]));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	MemoryContextDelete(cxt);
	return (Datum) 0;
}
