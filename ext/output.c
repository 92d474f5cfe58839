/*-------------------------------------------------------------------------
 *
 * output.c
 *		Trellara's logical decoding output plugin: committed transactions
 *		as compact binary frames (format in trellara.h).
 *
 * The plugin is used two ways: by pg_logical_slot_get_binary_changes()
 * and walsenders like any output plugin, and in-process by the decoder
 * background worker (decoder.c), whose write callback pushes each frame
 * into the shared-memory queue instead of a tuplestore or socket.
 *
 * Options:
 *	 tables			  comma-separated schema-qualified table names; only
 *					  changes of these tables are emitted (default: all).
 *					  Identifiers follow SQL rules: unquoted ones are
 *					  folded to lower case, "Quoted" ones are kept.
 *	 include_messages bool; emit transactional pg_logical_emit_message()
 *					  messages (default false, as pgoutput's "messages").
 *
 * What is deliberately not implemented:
 *	 - streaming of in-progress transactions: every stream_* callback is
 *	   left NULL, so the server never streams to this plugin.  Large
 *	   transactions are spilled to disk by the reorder buffer
 *	   (logical_decoding_work_mem) and delivered whole at commit.
 *	 - two-phase decoding: the prepare callbacks exist only to fail closed.
 *	   On a slot created with two_phase = true a PREPARE TRANSACTION raises
 *	   an error instead of being dropped or passed on half-done.  On an
 *	   ordinary slot prepared transactions are decoded at COMMIT PREPARED
 *	   like any other committed transaction.
 *	 - non-transactional logical messages: they are not part of a
 *	   committed transaction, so they have no place in a frame stream of
 *	   committed transactions; they are skipped.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_class.h"
#include "commands/defrem.h"
#include "libpq/pqformat.h"
#include "mb/pg_wchar.h"
#include "nodes/bitmapset.h"
#include "parser/scansup.h"
#include "replication/logical.h"
#include "replication/output_plugin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"

#include "trellara.h"
#include "trellara_compat.h"

extern PGDLLEXPORT void _PG_output_plugin_init(OutputPluginCallbacks *cb);

/* A schema-qualified name from the "tables" option. */
typedef struct TrellaraTableName
{
	char	   *nspname;
	char	   *relname;
} TrellaraTableName;

/* Per decoding session state, in ctx->context. */
typedef struct TrellaraDecodingData
{
	MemoryContext context;		/* per-callback scratch, reset every time */
	List	   *tables;			/* TrellaraTableName *; NIL = all tables */
	bool		include_messages;
	bool		xact_begun;		/* 'B' already written for this transaction */
} TrellaraDecodingData;

/*
 * Per-relation cache, process-wide (like pgoutput's): whether the relation
 * passes the filter, and in which transaction its 'R' frame was last sent.
 * A relcache invalidation (DDL, including DDL inside the decoded
 * transaction) clears both, so the next change re-checks the filter
 * against the new name and re-sends the relation metadata.
 */
typedef struct TrellaraRelEntry
{
	Oid			relid;			/* hash key */
	uint64		sent_xact;		/* xact_counter value when 'R' was sent */
	bool		filter_valid;
	bool		filter_pass;
} TrellaraRelEntry;

static HTAB *rel_cache = NULL;

/*
 * Counts transactions passed to begin_cb in this process.  Never reset, so
 * a cache entry from an earlier session can never look "sent" in a new
 * transaction.
 */
static uint64 xact_counter = 0;

/* xact_counter of this decoding session's first transaction */
static uint64 session_first_xact = 1;

/*
 * Set by the decoder worker before it starts decoding: 'R' frames once per
 * session instead of once per transaction (see trellara.h).
 */
bool		trellara_relations_once = false;

static void trellara_startup(LogicalDecodingContext *ctx,
							 OutputPluginOptions *opt, bool is_init);
static void trellara_shutdown(LogicalDecodingContext *ctx);
static void trellara_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn);
static void trellara_commit(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
							XLogRecPtr commit_lsn);
static void trellara_change(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
							Relation relation, ReorderBufferChange *change);
static void trellara_truncate(LogicalDecodingContext *ctx,
							  ReorderBufferTXN *txn, int nrelations,
							  Relation relations[], ReorderBufferChange *change);
static void trellara_message(LogicalDecodingContext *ctx,
							 ReorderBufferTXN *txn, XLogRecPtr message_lsn,
							 bool transactional, const char *prefix,
							 Size message_size, const char *message);
static void trellara_begin_prepare(LogicalDecodingContext *ctx,
								   ReorderBufferTXN *txn);
static void trellara_prepare(LogicalDecodingContext *ctx,
							 ReorderBufferTXN *txn, XLogRecPtr prepare_lsn);
static void trellara_commit_prepared(LogicalDecodingContext *ctx,
									 ReorderBufferTXN *txn,
									 XLogRecPtr commit_lsn);
static void trellara_rollback_prepared(LogicalDecodingContext *ctx,
									   ReorderBufferTXN *txn,
									   XLogRecPtr prepare_end_lsn,
									   TimestampTz prepare_time);
static void trellara_stream_prepare(LogicalDecodingContext *ctx,
									ReorderBufferTXN *txn,
									XLogRecPtr prepare_lsn);

void
_PG_output_plugin_init(OutputPluginCallbacks *cb)
{
	cb->startup_cb = trellara_startup;
	cb->begin_cb = trellara_begin;
	cb->change_cb = trellara_change;
	cb->truncate_cb = trellara_truncate;
	cb->commit_cb = trellara_commit;
	cb->message_cb = trellara_message;
	cb->shutdown_cb = trellara_shutdown;

	/* two-phase: present only to fail closed (see file header) */
	cb->begin_prepare_cb = trellara_begin_prepare;
	cb->prepare_cb = trellara_prepare;
	cb->commit_prepared_cb = trellara_commit_prepared;
	cb->rollback_prepared_cb = trellara_rollback_prepared;
	cb->stream_prepare_cb = trellara_stream_prepare;

	/* stream_start_cb etc. stay NULL: the server then never streams to us */
}

/* ---------------------------------------------------------------------
 * Options
 * ---------------------------------------------------------------------
 */

/*
 * Parse one identifier at *pos: "quoted" (with "" escapes) kept verbatim,
 * unquoted folded the way the SQL lexer folds it.
 */
static char *
parse_identifier(const char *s, int *pos)
{
	int			i = *pos;
	int			start;
	StringInfoData buf;

	initStringInfo(&buf);
	if (s[i] == '"')
	{
		i++;
		for (;;)
		{
			if (s[i] == '\0')
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("unterminated quoted identifier in trellara option \"tables\": %s", s)));
			if (s[i] == '"')
			{
				if (s[i + 1] != '"')
					break;
				i++;
			}
			appendStringInfoChar(&buf, s[i]);
			i++;
		}
		i++;					/* closing quote */
		if (buf.len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("empty quoted identifier in trellara option \"tables\": %s", s)));
		*pos = i;
		return buf.data;
	}

	while (s[i] != '\0' && s[i] != '.' && s[i] != ',' && !scanner_isspace(s[i]))
		i++;
	if (i == *pos)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid table list in trellara option \"tables\": %s", s),
				 errhint("Use comma-separated schema-qualified names, e.g. 'public.orders, sales.\"LineItems\"'.")));
	pfree(buf.data);
	start = *pos;
	*pos = i;
	return downcase_truncate_identifier(s + start, i - start, false);
}

static void
skip_space(const char *s, int *pos)
{
	while (s[*pos] != '\0' && scanner_isspace(s[*pos]))
		(*pos)++;
}

/*
 * Parse the "tables" option: name.name [, name.name ...].  The names are
 * matched at decode time against the relation's namespace and name, so a
 * table created after the session started is picked up, and no catalog
 * access is needed here.
 */
static List *
parse_table_list(const char *s)
{
	List	   *result = NIL;
	int			pos = 0;

	skip_space(s, &pos);
	if (s[pos] == '\0')
		return NIL;				/* empty list: no filter */

	for (;;)
	{
		TrellaraTableName *t = palloc(sizeof(TrellaraTableName));

		skip_space(s, &pos);
		t->nspname = parse_identifier(s, &pos);
		skip_space(s, &pos);
		if (s[pos] != '.')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("table \"%s\" in trellara option \"tables\" is not schema-qualified", t->nspname),
					 errhint("Write the schema too, e.g. public.%s.", t->nspname)));
		pos++;
		skip_space(s, &pos);
		t->relname = parse_identifier(s, &pos);
		result = lappend(result, t);

		skip_space(s, &pos);
		if (s[pos] == '\0')
			break;
		if (s[pos] != ',')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid table list in trellara option \"tables\": %s", s),
					 errhint("Use comma-separated schema-qualified names, e.g. 'public.orders, sales.\"LineItems\"'.")));
		pos++;
	}
	return result;
}

static void
parse_options(TrellaraDecodingData *data, List *options)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *elem = lfirst(lc);

		Assert(elem->arg == NULL || IsA(elem->arg, String));

		if (strcmp(elem->defname, "tables") == 0)
		{
			if (elem->arg == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("trellara option \"tables\" needs a value")));
			data->tables = parse_table_list(strVal(elem->arg));
		}
		else if (strcmp(elem->defname, "include_messages") == 0)
		{
			/* a bare option name means true, as in test_decoding */
			if (elem->arg == NULL)
				data->include_messages = true;
			else if (!parse_bool(strVal(elem->arg), &data->include_messages))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("could not parse value \"%s\" for trellara option \"%s\"",
								strVal(elem->arg), elem->defname)));
		}
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("trellara does not know option \"%s\"", elem->defname),
					 errhint("Known options: tables, include_messages.")));
	}
}

/* ---------------------------------------------------------------------
 * Relation cache
 * ---------------------------------------------------------------------
 */

static void
rel_cache_invalidate(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	TrellaraRelEntry *entry;

	if (rel_cache == NULL)
		return;

	if (OidIsValid(relid))
	{
		entry = hash_search(rel_cache, &relid, HASH_FIND, NULL);
		if (entry != NULL)
		{
			entry->sent_xact = 0;
			entry->filter_valid = false;
		}
		return;
	}

	/* InvalidOid: the whole relcache was reset */
	hash_seq_init(&status, rel_cache);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		entry->sent_xact = 0;
		entry->filter_valid = false;
	}
}

static void
rel_cache_init(void)
{
	HASHCTL		hctl;
	HASH_SEQ_STATUS status;
	TrellaraRelEntry *entry;

	if (rel_cache != NULL)
	{
		/* a new session may have another filter: forget old decisions */
		hash_seq_init(&status, rel_cache);
		while ((entry = hash_seq_search(&status)) != NULL)
			entry->filter_valid = false;
		return;
	}

	hctl.keysize = sizeof(Oid);
	hctl.entrysize = sizeof(TrellaraRelEntry);
	hctl.hcxt = CacheMemoryContext;
	rel_cache = hash_create("trellara relation cache", 128, &hctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	/* registered once per process; cannot be unregistered */
	CacheRegisterRelcacheCallback(rel_cache_invalidate, (Datum) 0);
}

static TrellaraRelEntry *
rel_cache_get(Oid relid)
{
	TrellaraRelEntry *entry;
	bool		found;

	entry = hash_search(rel_cache, &relid, HASH_ENTER, &found);
	if (!found)
	{
		entry->sent_xact = 0;
		entry->filter_valid = false;
		entry->filter_pass = false;
	}
	return entry;
}

static bool
relation_wanted(TrellaraDecodingData *data, Relation rel)
{
	TrellaraRelEntry *entry;
	char	   *nspname;
	ListCell   *lc;

	if (data->tables == NIL)
		return true;

	entry = rel_cache_get(RelationGetRelid(rel));
	if (entry->filter_valid)
		return entry->filter_pass;

	nspname = get_namespace_name(RelationGetNamespace(rel));
	entry->filter_pass = false;
	foreach(lc, data->tables)
	{
		TrellaraTableName *t = lfirst(lc);

		if (nspname != NULL &&
			strcmp(t->nspname, nspname) == 0 &&
			strcmp(t->relname, RelationGetRelationName(rel)) == 0)
		{
			entry->filter_pass = true;
			break;
		}
	}
	/*
	 * The probe tables of `trellara semantics` pass any filter: the probe
	 * creates them beside the flow's tables for the length of its run, and
	 * trellara.tables cannot change without a server restart. The flow's
	 * schema policy admits them only outside production.
	 */
	if (!entry->filter_pass &&
		(strcmp(RelationGetRelationName(rel), "trellara_semantics_a") == 0 ||
		 strcmp(RelationGetRelationName(rel), "trellara_semantics_b") == 0))
		entry->filter_pass = true;
	entry->filter_valid = true;
	return entry->filter_pass;
}

/* ---------------------------------------------------------------------
 * Frame writers
 * ---------------------------------------------------------------------
 */

static inline void
frame_start(StringInfo out, char type)
{
	pq_sendbyte(out, TRELLARA_FRAME_VERSION);
	pq_sendbyte(out, (uint8) type);
}

static inline void
send_str(StringInfo out, const char *s, Size len)
{
	if (len > (Size) PG_INT32_MAX)
		elog(ERROR, "trellara frame string of %zu bytes is too long", len);
	pq_sendint32(out, (uint32) len);
	pq_sendbytes(out, s, (int) len);
}

/*
 * A str holding text: names and values in UTF-8 whatever the database
 * encoding, as pgoutput sends them to a UTF-8 client, so both capture paths
 * carry the same bytes.  (SQL_ASCII databases pass bytes through, as the
 * server does for them.)  Message content is bytes and uses send_str.
 */
static void
send_text(StringInfo out, const char *s, Size len)
{
	char	   *utf8;

	if (len > (Size) PG_INT32_MAX)
		elog(ERROR, "trellara frame string of %zu bytes is too long", len);
	utf8 = pg_server_to_any(s, (int) len, PG_UTF8);
	if (utf8 == s)
		send_str(out, s, len);
	else
	{
		send_str(out, utf8, strlen(utf8));
		pfree(utf8);
	}
}

/* PostgreSQL-epoch microseconds to Unix-epoch microseconds. */
static inline int64
unix_micros(TimestampTz t)
{
	return (int64) t +
		((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
}

/* Columns carried in frames: everything but dropped and generated ones. */
static inline bool
column_sent(Form_pg_attribute att)
{
	return !att->attisdropped && att->attgenerated == '\0';
}

static uint16
count_sent_columns(TupleDesc desc)
{
	int			n = 0;

	for (int i = 0; i < desc->natts; i++)
		if (column_sent(TupleDescAttr(desc, i)))
			n++;
	if (n > PG_UINT16_MAX)
		elog(ERROR, "relation has %d columns, more than a frame can carry", n);
	return (uint16) n;
}

static void
write_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn)
{
	OutputPluginPrepareWrite(ctx, false);
	frame_start(ctx->out, TRELLARA_FRAME_BEGIN);
	pq_sendint32(ctx->out, txn->xid);
	pq_sendint64(ctx->out, txn->final_lsn);
	pq_sendint64(ctx->out, unix_micros(TRELLARA_TXN_COMMIT_TIME(txn)));
	OutputPluginWrite(ctx, false);
}

/* The lazily sent 'B': only transactions with output get frames at all. */
static void
ensure_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn)
{
	TrellaraDecodingData *data = ctx->output_plugin_private;

	if (!data->xact_begun)
	{
		write_begin(ctx, txn);
		data->xact_begun = true;
	}
}

/*
 * 'R' frame: the same column set, order, key flags and namespace spelling
 * as pgoutput's Relation message (logicalrep_write_rel), so the consumer
 * derives the same schema fingerprint from either source.
 */
static void
write_relation(LogicalDecodingContext *ctx, Relation rel)
{
	StringInfo	out = ctx->out;
	TupleDesc	desc = RelationGetDescr(rel);
	Oid			nspid = RelationGetNamespace(rel);
	const char *relname = RelationGetRelationName(rel);
	char		replident = rel->rd_rel->relreplident;
	bool		full = (replident == REPLICA_IDENTITY_FULL);
	Bitmapset  *idattrs = NULL;

	if (!full)
		idattrs = RelationGetIdentityKeyBitmap(rel);

	OutputPluginPrepareWrite(ctx, false);
	frame_start(out, TRELLARA_FRAME_RELATION);
	pq_sendint32(out, RelationGetRelid(rel));
	if (nspid == PG_CATALOG_NAMESPACE)
		send_str(out, "", 0);
	else
	{
		char	   *nspname = get_namespace_name(nspid);

		if (nspname == NULL)
			elog(ERROR, "cache lookup failed for namespace %u", nspid);
		send_text(out, nspname, strlen(nspname));
	}
	send_text(out, relname, strlen(relname));
	pq_sendbyte(out, (uint8) replident);
	pq_sendint16(out, count_sent_columns(desc));

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		uint8		flags = 0;

		if (!column_sent(att))
			continue;
		if (full ||
			bms_is_member(att->attnum - FirstLowInvalidHeapAttributeNumber, idattrs))
			flags |= TRELLARA_COLFLAG_KEY;
		pq_sendbyte(out, flags);
		send_text(out, NameStr(att->attname), strlen(NameStr(att->attname)));
		pq_sendint32(out, att->atttypid);
		pq_sendint32(out, (uint32) att->atttypmod);
	}
	OutputPluginWrite(ctx, false);
}

/*
 * Send 'R' unless it was already sent in this transaction (with
 * trellara_relations_once: in this session) and is still valid.
 */
static void
ensure_relation(LogicalDecodingContext *ctx, Relation rel)
{
	TrellaraRelEntry *entry = rel_cache_get(RelationGetRelid(rel));
	bool		sent = trellara_relations_once ?
		entry->sent_xact >= session_first_xact :
		entry->sent_xact == xact_counter;

	if (!sent)
	{
		write_relation(ctx, rel);
		entry->sent_xact = xact_counter;
	}
}

static void
write_tuple(StringInfo out, Relation rel, HeapTuple tuple)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Datum	   *values = palloc(desc->natts * sizeof(Datum));
	bool	   *isnull = palloc(desc->natts * sizeof(bool));

	heap_deform_tuple(tuple, desc, values, isnull);
	pq_sendint16(out, count_sent_columns(desc));

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Oid			typoutput;
		bool		typisvarlena;
		char	   *text;

		if (!column_sent(att))
			continue;

		if (isnull[i])
		{
			pq_sendbyte(out, TRELLARA_COL_NULL);
			continue;
		}

		/*
		 * A TOAST pointer still on disk means the value was not changed by
		 * this UPDATE and was not logged: say so explicitly instead of
		 * fetching it (the historic snapshot may not see it) or sending a
		 * value we do not have.
		 */
		if (att->attlen == -1 &&
			VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(values[i])))
		{
			pq_sendbyte(out, TRELLARA_COL_UNCHANGED);
			continue;
		}

		getTypeOutputInfo(att->atttypid, &typoutput, &typisvarlena);
		text = OidOutputFunctionCall(typoutput, values[i]);
		pq_sendbyte(out, TRELLARA_COL_TEXT);
		send_text(out, text, strlen(text));
	}
}

/* ---------------------------------------------------------------------
 * Callbacks
 * ---------------------------------------------------------------------
 */

static void
trellara_startup(LogicalDecodingContext *ctx, OutputPluginOptions *opt,
				 bool is_init)
{
	TrellaraDecodingData *data;

	/*
	 * _PG_init already refuses a library that was not preloaded; this is
	 * the second line: the shared state exists only if the postmaster ran
	 * our shmem_startup_hook.
	 */
	if (trellara_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("trellara output plugin used on a server that did not preload it"),
				 errhint("Add trellara to shared_preload_libraries and restart the server.")));

	data = palloc0(sizeof(TrellaraDecodingData));
	data->context = AllocSetContextCreate(ctx->context,
										  "trellara change",
										  ALLOCSET_DEFAULT_SIZES);
	data->tables = NIL;
	data->include_messages = false;
	data->xact_begun = false;
	ctx->output_plugin_private = data;

	opt->output_type = OUTPUT_PLUGIN_BINARY_OUTPUT;
	opt->receive_rewrites = false;

	parse_options(data, ctx->output_plugin_options);
	rel_cache_init();
	session_first_xact = xact_counter + 1;
}

static void
trellara_shutdown(LogicalDecodingContext *ctx)
{
	TrellaraDecodingData *data = ctx->output_plugin_private;

	/* ctx->context is deleted right after; this just frees early */
	MemoryContextDelete(data->context);
}

static void
trellara_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn)
{
	TrellaraDecodingData *data = ctx->output_plugin_private;

	/* nothing is written until the first change survives the filter */
	data->xact_begun = false;
	xact_counter++;
}

static void
trellara_commit(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				XLogRecPtr commit_lsn)
{
	TrellaraDecodingData *data = ctx->output_plugin_private;

	if (!data->xact_begun)
		return;					/* empty after filtering: no frames at all */

	OutputPluginPrepareWrite(ctx, true);
	frame_start(ctx->out, TRELLARA_FRAME_COMMIT);
	pq_sendbyte(ctx->out, 0);	/* flags, reserved */
	pq_sendint64(ctx->out, commit_lsn);
	pq_sendint64(ctx->out, txn->end_lsn);
	pq_sendint64(ctx->out, unix_micros(TRELLARA_TXN_COMMIT_TIME(txn)));
	OutputPluginWrite(ctx, true);

	data->xact_begun = false;
}

static void
trellara_change(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				Relation relation, ReorderBufferChange *change)
{
	TrellaraDecodingData *data = ctx->output_plugin_private;
	MemoryContext old;
	HeapTuple	oldtuple = TRELLARA_CHANGE_OLDTUPLE(change);
	HeapTuple	newtuple = TRELLARA_CHANGE_NEWTUPLE(change);
	char		old_kind;

	/* everything below allocates here, including the filter's catalog lookup */
	old = MemoryContextSwitchTo(data->context);

	if (!relation_wanted(data, relation))
	{
		MemoryContextSwitchTo(old);
		MemoryContextReset(data->context);
		return;
	}

	ensure_begin(ctx, txn);
	ensure_relation(ctx, relation);

	old_kind = oldtuple == NULL ? TRELLARA_OLD_NONE :
		relation->rd_rel->relreplident == REPLICA_IDENTITY_FULL ?
		TRELLARA_OLD_FULL : TRELLARA_OLD_KEY;

	OutputPluginPrepareWrite(ctx, true);
	switch (change->action)
	{
		case REORDER_BUFFER_CHANGE_INSERT:
			if (newtuple == NULL)
				elog(ERROR, "trellara: INSERT without a new tuple");
			frame_start(ctx->out, TRELLARA_FRAME_INSERT);
			pq_sendint32(ctx->out, RelationGetRelid(relation));
			write_tuple(ctx->out, relation, newtuple);
			break;
		case REORDER_BUFFER_CHANGE_UPDATE:
			if (newtuple == NULL)
				elog(ERROR, "trellara: UPDATE without a new tuple");
			frame_start(ctx->out, TRELLARA_FRAME_UPDATE);
			pq_sendint32(ctx->out, RelationGetRelid(relation));
			pq_sendbyte(ctx->out, (uint8) old_kind);
			if (oldtuple != NULL)
				write_tuple(ctx->out, relation, oldtuple);
			write_tuple(ctx->out, relation, newtuple);
			break;
		case REORDER_BUFFER_CHANGE_DELETE:
			/*
			 * Without an old tuple (REPLICA IDENTITY NOTHING, or DEFAULT
			 * without a primary key) the delete is still reported, marked
			 * '-': dropping it silently would lose a change.
			 */
			frame_start(ctx->out, TRELLARA_FRAME_DELETE);
			pq_sendint32(ctx->out, RelationGetRelid(relation));
			pq_sendbyte(ctx->out, (uint8) old_kind);
			if (oldtuple != NULL)
				write_tuple(ctx->out, relation, oldtuple);
			break;
		default:
			elog(ERROR, "trellara: unexpected change action %d", (int) change->action);
	}
	OutputPluginWrite(ctx, true);

	MemoryContextSwitchTo(old);
	MemoryContextReset(data->context);
}

static void
trellara_truncate(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				  int nrelations, Relation relations[],
				  ReorderBufferChange *change)
{
	TrellaraDecodingData *data = ctx->output_plugin_private;
	MemoryContext old;
	Oid		   *relids;
	int			nwanted = 0;
	uint8		flags = 0;

	old = MemoryContextSwitchTo(data->context);

	relids = palloc(nrelations * sizeof(Oid));
	for (int i = 0; i < nrelations; i++)
	{
		if (!relation_wanted(data, relations[i]))
			continue;
		relids[nwanted++] = RelationGetRelid(relations[i]);
	}

	if (nwanted > 0)
	{
		ensure_begin(ctx, txn);
		for (int i = 0; i < nrelations; i++)
			if (relation_wanted(data, relations[i]))
				ensure_relation(ctx, relations[i]);

		if (change->data.truncate.cascade)
			flags |= TRELLARA_TRUNC_CASCADE;
		if (change->data.truncate.restart_seqs)
			flags |= TRELLARA_TRUNC_RESTART;

		OutputPluginPrepareWrite(ctx, true);
		frame_start(ctx->out, TRELLARA_FRAME_TRUNCATE);
		pq_sendbyte(ctx->out, flags);
		pq_sendint32(ctx->out, (uint32) nwanted);
		for (int i = 0; i < nwanted; i++)
			pq_sendint32(ctx->out, relids[i]);
		OutputPluginWrite(ctx, true);
	}

	MemoryContextSwitchTo(old);
	MemoryContextReset(data->context);
}

#define TRELLARA_OWN_PREFIX "trellara."

static void
trellara_message(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				 XLogRecPtr message_lsn, bool transactional,
				 const char *prefix, Size message_size, const char *message)
{
	TrellaraDecodingData *data = ctx->output_plugin_private;

	/*
	 * Trellara's own messages (the flow's fence and reseed watermarks, all
	 * prefixed "trellara.") are always forwarded: without them a reseed or
	 * a fence could never complete on this path.  include_messages governs
	 * only other prefixes.
	 */
	if (!transactional)
		return;
	if (!data->include_messages &&
		strncmp(prefix, TRELLARA_OWN_PREFIX, strlen(TRELLARA_OWN_PREFIX)) != 0)
		return;

	ensure_begin(ctx, txn);

	OutputPluginPrepareWrite(ctx, true);
	frame_start(ctx->out, TRELLARA_FRAME_MESSAGE);
	pq_sendint64(ctx->out, message_lsn);
	send_text(ctx->out, prefix, strlen(prefix));
	send_str(ctx->out, message, message_size);
	OutputPluginWrite(ctx, true);
}

/*
 * Two-phase decoding fails closed.  These run only on slots created with
 * two_phase = true (or streams started with the two_phase option): there
 * the server would hand us a transaction at PREPARE time, before anyone
 * knows whether it commits.  Emitting it could publish rows that are later
 * rolled back; skipping it would lose them.  So refuse, loudly.
 */
static void
twophase_refuse(ReorderBufferTXN *txn)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("two-phase commit is not supported by trellara"),
			 errdetail("Transaction %u (gid \"%s\") was handed to the output plugin at PREPARE time.",
					   txn->xid, txn->gid ? txn->gid : ""),
			 errhint("Use a replication slot created with two_phase = false; prepared transactions are then decoded at COMMIT PREPARED.")));
}

static void
trellara_begin_prepare(LogicalDecodingContext *ctx, ReorderBufferTXN *txn)
{
	twophase_refuse(txn);
}

static void
trellara_prepare(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				 XLogRecPtr prepare_lsn)
{
	twophase_refuse(txn);
}

static void
trellara_commit_prepared(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
						 XLogRecPtr commit_lsn)
{
	twophase_refuse(txn);
}

static void
trellara_rollback_prepared(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
						   XLogRecPtr prepare_end_lsn, TimestampTz prepare_time)
{
	twophase_refuse(txn);
}

static void
trellara_stream_prepare(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
						XLogRecPtr prepare_lsn)
{
	twophase_refuse(txn);
}
