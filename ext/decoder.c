/*-------------------------------------------------------------------------
 *
 * decoder.c
 *		The decoder background worker: owns the trellara logical slot,
 *		decodes WAL in-process with the trellara output plugin, and pushes
 *		every frame into the bounded shared-memory queue.
 *
 * The decoding loop is the one pg_logical_slot_get_changes() runs
 * (CreateDecodingContext, then XLogReadRecord + LogicalDecodingProcessRecord
 * from the slot's restart_lsn), with a write callback that copies each
 * frame into the queue instead of a tuplestore.  Frames are packed into
 * queue slots, published when a slot is full and after every batch of
 * records, so a quiet stream is not held back; frames bigger than a slot
 * are split into chunks (trellara.h).  A full queue is backpressure: the
 * worker waits on its latch (trellara.queue_wait_timeout at a time, then
 * re-checks and logs) and never drops a frame or grows the queue.
 *
 * Acknowledgements: the socket worker stores the sidecar's durable ack in
 * shared memory and sets our latch; we pass it to
 * LogicalConfirmReceivedLocation.  Nothing else ever moves the slot, so
 * the slot's confirmed position only advances past transactions the
 * sidecar made durable.
 *
 * Restarts: if the sidecar disconnects, frames it received but did not
 * acknowledge are lost with it, and the queue may hold frames after them.
 * The socket worker then sets reset_requested; we exit with status 1 and
 * the postmaster restarts us (bgw_restart_time), which clears the queue and
 * decodes again from the slot's confirmed position.  The sidecar drops the
 * transactions it already has (by end LSN).  The same replay happens after
 * a crash or a server restart.
 *
 * Progress frames: a slot whose changes are all filtered out would never
 * get an ack and would hold WAL forever.  So when the worker has decoded
 * everything flushed and the queue is empty, it pushes a 'P' frame with its
 * read position: every transaction committed before that point has already
 * been queued, so acknowledging it is safe.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogutils.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "replication/decode.h"
#include "replication/logical.h"
#include "replication/slot.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "trellara.h"
#include "trellara_compat.h"

/* How often to look for newly flushed WAL when idle (no latch tells us). */
#define WAL_POLL_MS					10
/* Records decoded between checks of signals, acks and resets. */
#define DECODE_BATCH_RECORDS		1000
/* Minimum spacing of progress frames. */
#define PROGRESS_INTERVAL_MS		1000

static volatile sig_atomic_t got_sigterm = false;
static volatile sig_atomic_t got_sighup = false;

static uint32 wait_event_queue_full;
static uint32 wait_event_wal;

static XLogRecPtr last_confirmed = InvalidXLogRecPtr;
static XLogRecPtr last_ack_pushed = InvalidXLogRecPtr;
static TimestampTz last_progress_time = 0;

static void
decoder_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

static void
decoder_sighup(SIGNAL_ARGS)
{
	int			save_errno = errno;

	got_sighup = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

static void
decoder_detach(int code, Datum arg)
{
	LWLockAcquire(trellara_shared->lock, LW_EXCLUSIVE);
	if (trellara_shared->decoder_pid == MyProcPid)
	{
		trellara_shared->decoder_pid = 0;
		trellara_shared->decoder_latch = NULL;
	}
	LWLockRelease(trellara_shared->lock);
}

/* Move the slot to the sidecar's latest durable ack, if it moved. */
static void
confirm_acked(XLogRecPtr acked)
{
	if (MyReplicationSlot == NULL || acked <= last_confirmed)
		return;

	LogicalConfirmReceivedLocation(acked);

	/*
	 * LogicalConfirmReceivedLocation only writes the slot to disk when
	 * restart_lsn or catalog_xmin move.  Mark it dirty so a clean shutdown's
	 * checkpoint saves confirmed_flush too, and a restart replays less.
	 */
	ReplicationSlotMarkDirty();
	last_confirmed = acked;
}

/*
 * Signals, configuration reloads, resets and acks: called between batches
 * of records and while waiting for queue space, including from inside the
 * output plugin's callbacks (the walsender confirms positions from the
 * same place).
 */
static void
decoder_check_state(void)
{
	bool		reset;
	XLogRecPtr	acked;

	if (got_sigterm)
	{
		/*
		 * Exit status 1 so that pg_terminate_backend() restarts the worker;
		 * at server shutdown the postmaster does not restart anything.
		 */
		ereport(LOG,
				(errmsg("trellara decoder stopping on request"),
				 errdetail("The slot stays at %X/%X; decoding resumes from there.",
						   LSN_FORMAT_ARGS(last_confirmed))));
		proc_exit(1);
	}

	if (got_sighup)
	{
		got_sighup = false;
		ProcessConfigFile(PGC_SIGHUP);
	}

	LWLockAcquire(trellara_shared->lock, LW_SHARED);
	reset = trellara_shared->reset_requested;
	acked = trellara_shared->acked_lsn;
	LWLockRelease(trellara_shared->lock);

	confirm_acked(acked);

	if (reset)
	{
		ereport(LOG,
				(errmsg("trellara decoder restarting after the sidecar disconnected"),
				 errdetail("Decoding resumes from the slot's confirmed position %X/%X; the sidecar skips what it already has.",
						   LSN_FORMAT_ARGS(last_confirmed))));
		proc_exit(1);
	}
}

/* Wait until the queue has a free slot; returns the head index to fill. */
static uint64
wait_for_space(void)
{
	TimestampTz stall_start = 0;
	bool		stall_logged = false;

	for (;;)
	{
		uint64		head;
		uint64		tail;
		int			rc;

		decoder_check_state();

		LWLockAcquire(trellara_shared->lock, LW_SHARED);
		head = trellara_shared->head;
		tail = trellara_shared->tail;
		LWLockRelease(trellara_shared->lock);

		if (head - tail < TRELLARA_QUEUE_SLOTS)
		{
			if (stall_logged)
				ereport(LOG,
						(errmsg("trellara queue draining again after %ld ms",
								(long) ((GetCurrentTimestamp() - stall_start) / 1000))));
			return head;
		}

		if (stall_start == 0)
			stall_start = GetCurrentTimestamp();

		rc = WaitLatch(MyLatch,
					   WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   trellara_queue_wait_timeout_ms,
					   wait_event_queue_full);
		ResetLatch(MyLatch);

		/* once per stall: this is state, not an error, and may last hours */
		if ((rc & WL_TIMEOUT) && !stall_logged)
		{
			ereport(LOG,
					(errmsg("trellara queue full for %d ms: no sidecar is draining it",
							trellara_queue_wait_timeout_ms),
					 errdetail("Decoding is paused; nothing is dropped. The slot retains WAL from its restart position.")));
			stall_logged = true;
		}
	}
}

/*
 * The producer's open slot: slots[open_head % N], reserved by
 * wait_for_space and filled with whole messages until the next one does
 * not fit (or its ack points run out), then published by queue_flush.
 */
static TrellaraQueueSlot *open_slot = NULL;
static uint64 open_head;

/*
 * Publish the open slot, if any.  The socket worker is woken only when the
 * queue goes from empty to non-empty: otherwise it has slots still to take
 * and looks for more before it sleeps.
 */
static void
queue_flush(void)
{
	bool		was_empty;
	Latch	   *socket_latch;

	if (open_slot == NULL)
		return;
	Assert(open_slot->len > 0);

	LWLockAcquire(trellara_shared->lock, LW_EXCLUSIVE);
	Assert(trellara_shared->head == open_head);
	was_empty = (trellara_shared->head == trellara_shared->tail);
	trellara_shared->head = open_head + 1;
	socket_latch = trellara_shared->socket_latch;
	LWLockRelease(trellara_shared->lock);

	open_slot = NULL;
	if (was_empty && socket_latch != NULL)
		SetLatch(socket_latch);
}

/*
 * Append one message ('F' header and payload) to the open slot, opening
 * one if needed; the caller has made sure it fits.  ack_lsn, if valid,
 * becomes an ack point just past the message.
 */
static void
queue_append(uint8 flags, const char *data, Size len, XLogRecPtr ack_lsn)
{
	char	   *p;

	if (open_slot == NULL)
	{
		open_head = wait_for_space();
		open_slot = &trellara_shared->slots[open_head % TRELLARA_QUEUE_SLOTS];
		open_slot->len = 0;
		open_slot->nacks = 0;
	}
	Assert(open_slot->len + TRELLARA_FRAME_HEADER_BYTES + len <= TRELLARA_SLOT_DATA_BYTES);

	/* the slot is ours until head is advanced: filled outside the lock */
	p = open_slot->data + open_slot->len;
	p[0] = 'F';
	p[1] = (char) flags;
	for (int i = 0; i < 4; i++)
		p[2 + i] = (char) ((uint32) len >> (24 - 8 * i));
	memcpy(p + TRELLARA_FRAME_HEADER_BYTES, data, len);
	open_slot->len += TRELLARA_FRAME_HEADER_BYTES + (uint32) len;
	if (!XLogRecPtrIsInvalid(ack_lsn))
	{
		Assert(open_slot->nacks < TRELLARA_SLOT_ACKS);
		open_slot->acks[open_slot->nacks].end = open_slot->len;
		open_slot->acks[open_slot->nacks].lsn = ack_lsn;
		open_slot->nacks++;
	}
}

/*
 * Queue one frame.  Frames that fit a slot are packed into the open one
 * (publishing it first when the frame does not fit or its ack points are
 * used up); a larger frame is split into slot-sized chunks, one per slot.
 * ack_lsn is recorded for commit and progress frames: it is what the
 * socket worker lets the sidecar acknowledge once the frame is sent.
 */
static void
queue_push(const char *data, Size len, XLogRecPtr ack_lsn)
{
	Assert(len > 0);
	if (len <= TRELLARA_QUEUE_SLOT_BYTES)
	{
		if (open_slot != NULL &&
			(open_slot->len + TRELLARA_FRAME_HEADER_BYTES + len > TRELLARA_SLOT_DATA_BYTES ||
			 (!XLogRecPtrIsInvalid(ack_lsn) && open_slot->nacks == TRELLARA_SLOT_ACKS)))
			queue_flush();
		queue_append(0, data, len, ack_lsn);
	}
	else
	{
		Size		off = 0;

		while (off < len)
		{
			Size		n = Min(len - off, (Size) TRELLARA_QUEUE_SLOT_BYTES);
			bool		more = (off + n < len);

			queue_flush();
			queue_append(more ? TRELLARA_CHUNK_MORE : 0, data + off, n,
						 more ? InvalidXLogRecPtr : ack_lsn);
			off += n;
		}
	}
	if (!XLogRecPtrIsInvalid(ack_lsn))
		last_ack_pushed = ack_lsn;
}

static void
decoder_prepare_write(LogicalDecodingContext *ctx, XLogRecPtr lsn,
					  TransactionId xid, bool last_write)
{
	resetStringInfo(ctx->out);
}

static void
decoder_write(LogicalDecodingContext *ctx, XLogRecPtr lsn,
			  TransactionId xid, bool last_write)
{
	XLogRecPtr	ack_lsn = InvalidXLogRecPtr;

	if (ctx->out->len < 2)
		elog(ERROR, "trellara: output plugin wrote a %d-byte frame", ctx->out->len);

	/* for commit writes the server sets lsn to the transaction's end_lsn */
	if (ctx->out->data[1] == TRELLARA_FRAME_COMMIT)
		ack_lsn = lsn;

	queue_push(ctx->out->data, ctx->out->len, ack_lsn);
}

static void
maybe_push_progress(LogicalDecodingContext *ctx)
{
	XLogRecPtr	pos = ctx->reader->EndRecPtr;
	TimestampTz now;
	bool		empty;
	char		frame[10];

	if (pos <= last_ack_pushed || pos <= last_confirmed)
		return;
	now = GetCurrentTimestamp();
	if (!TimestampDifferenceExceeds(last_progress_time, now, PROGRESS_INTERVAL_MS))
		return;

	LWLockAcquire(trellara_shared->lock, LW_SHARED);
	empty = (trellara_shared->head == trellara_shared->tail);
	LWLockRelease(trellara_shared->lock);
	if (!empty)
		return;

	frame[0] = TRELLARA_FRAME_VERSION;
	frame[1] = TRELLARA_FRAME_PROGRESS;
	for (int i = 0; i < 8; i++)
		frame[2 + i] = (char) ((uint64) pos >> (56 - 8 * i));
	queue_push(frame, sizeof(frame), pos);
	queue_flush();
	last_progress_time = now;
}

/*
 * On builds that have output_plugin_libraries, say exactly how to allow
 * trellara instead of letting slot creation fail with the server's error.
 */
static void
check_output_plugin_libraries(void)
{
	const char *value = GetConfigOption("output_plugin_libraries", true, false);
	char	   *copy;
	List	   *names;
	ListCell   *lc;

	if (value == NULL)
		return;					/* this build has no such setting */

	copy = pstrdup(value);
	if (!SplitIdentifierString(copy, ',', &names))
		return;					/* let the server report its own syntax */
	foreach(lc, names)
	{
		const char *name = lfirst(lc);
		const char *base = strrchr(name, '/');

		if (strcmp(base ? base + 1 : name, "trellara") == 0)
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("output_plugin_libraries does not allow trellara (currently '%s')", value),
			 errhint("Run ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding', 'trellara'; then SELECT pg_reload_conf(); (keep any other plugins you use in the list).")));
}

/* Create the slot if it is missing; refuse one that is not ours. */
static void
ensure_slot(void)
{
	ReplicationSlot *slot;
	bool		found = false;
	NameData	plugin;
	Oid			database = InvalidOid;
	bool		two_phase = false;
	bool		logical = false;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(trellara_slot_name, false);
	if (slot != NULL)
	{
		found = true;
		SpinLockAcquire(&slot->mutex);
		plugin = slot->data.plugin;
		database = slot->data.database;
		two_phase = slot->data.two_phase;
		logical = SlotIsLogical(slot);
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(ReplicationSlotControlLock);

	if (found)
	{
		if (!logical || strcmp(NameStr(plugin), "trellara") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("replication slot \"%s\" exists but does not use output plugin trellara",
							trellara_slot_name),
					 errhint("Set trellara.slot_name to another name, or drop the slot with SELECT pg_drop_replication_slot('%s').",
							 trellara_slot_name)));
		if (database != MyDatabaseId)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("replication slot \"%s\" belongs to another database than trellara.database \"%s\"",
							trellara_slot_name, trellara_database),
					 errhint("Set trellara.slot_name to a slot of database \"%s\", or drop the slot.",
							 trellara_database)));
		if (two_phase)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("replication slot \"%s\" was created with two_phase = true, which trellara does not support",
							trellara_slot_name),
					 errhint("Drop it; the worker re-creates it without two_phase.")));
		return;
	}

	check_output_plugin_libraries();

	/*
	 * Through SQL rather than the slot internals: the function's contract
	 * is the same on every supported major, the internals are not.
	 */
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "trellara: SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "creating trellara replication slot");
	if (SPI_execute(psprintf("SELECT pg_create_logical_replication_slot(%s, 'trellara')",
							 quote_literal_cstr(trellara_slot_name)),
					false, 1) != SPI_OK_SELECT)
		elog(ERROR, "trellara: creating replication slot \"%s\" returned no row",
			 trellara_slot_name);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);

	ereport(LOG,
			(errmsg("trellara created logical replication slot \"%s\"", trellara_slot_name)));
}

/*
 * The output settings values are rendered with (typoutput), pinned as
 * PostgreSQL's own subscriber pins them, plus every other setting that
 * changes the text of a value.  Without this the worker inherits the
 * database's defaults (ALTER DATABASE ... SET datestyle = 'SQL, DMY'), and
 * the consumer would read 2024-01-02 as 2024-02-01, lose float digits or
 * shift times.  PGC_S_OVERRIDE outranks the database, role and file
 * sources, so neither those nor a reload can change them afterwards.  The
 * Go side pins the same output settings on every connection
 * (internal/pgsession): both capture paths must write identical text.
 * The settings there that only affect input (xmloption, array_nulls,
 * standard_conforming_strings) do not matter here, and client_encoding is
 * replaced by output.c sending UTF-8.
 */
static const struct
{
	const char *name;
	const char *value;
}			pinned_output_settings[] =
{
	{"DateStyle", "ISO, YMD"},
	{"IntervalStyle", "postgres"},
	{"extra_float_digits", "3"},
	{"TimeZone", "UTC"},
	{"bytea_output", "hex"},
	{"lc_monetary", "C"},
};

static void
pin_output_settings(void)
{
	for (int i = 0; i < lengthof(pinned_output_settings); i++)
		SetConfigOption(pinned_output_settings[i].name, pinned_output_settings[i].value,
						PGC_SUSET, PGC_S_OVERRIDE);
}

static List *
plugin_options(void)
{
	List	   *options = NIL;

	if (trellara_tables != NULL && trellara_tables[0] != '\0')
		options = lappend(options,
						  makeDefElem("tables", (Node *) makeString(pstrdup(trellara_tables)), -1));
	options = lappend(options,
					  makeDefElem("include_messages",
								  (Node *) makeString(trellara_include_messages ? "true" : "false"), -1));
	return options;
}

void
trellara_decoder_main(Datum main_arg)
{
	LogicalDecodingContext *ctx;
	Latch	   *socket_latch;
	MemoryContext loop_context;

	pqsignal(SIGTERM, decoder_sigterm);
	pqsignal(SIGHUP, decoder_sighup);
	BackgroundWorkerUnblockSignals();

	if (trellara_shared == NULL)
		elog(ERROR, "trellara: shared memory not initialised in the decoder worker");

	wait_event_queue_full = trellara_wait_event("TrellaraQueueFull");
	wait_event_wal = trellara_wait_event("TrellaraWaitWAL");

	BackgroundWorkerInitializeConnection(trellara_database, NULL, 0);
	pin_output_settings();

	/*
	 * A fresh start: whatever is in the queue belongs to a previous decoder
	 * whose position we are about to rewind to the slot's confirmed one.
	 */
	LWLockAcquire(trellara_shared->lock, LW_EXCLUSIVE);
	trellara_shared->head = 0;
	trellara_shared->tail = 0;
	trellara_shared->epoch++;
	trellara_shared->reset_requested = false;
	trellara_shared->acked_lsn = InvalidXLogRecPtr;
	trellara_shared->decoder_pid = MyProcPid;
	trellara_shared->decoder_latch = MyLatch;
	socket_latch = trellara_shared->socket_latch;
	LWLockRelease(trellara_shared->lock);
	before_shmem_exit(decoder_detach, (Datum) 0);
	if (socket_latch != NULL)
		SetLatch(socket_latch);

	CheckLogicalDecodingRequirements();
	ensure_slot();

	TRELLARA_SLOT_ACQUIRE(trellara_slot_name, true);

	/* the decoding context lives as long as the worker */
	loop_context = AllocSetContextCreate(TopMemoryContext, "trellara decoder",
										 ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(loop_context);

	/* a sidecar always reads this session's stream from its start */
	trellara_relations_once = true;
	ctx = CreateDecodingContext(InvalidXLogRecPtr, plugin_options(), false,
								XL_ROUTINE(.page_read = read_local_xlog_page,
										   .segment_open = wal_segment_open,
										   .segment_close = wal_segment_close),
								decoder_prepare_write, decoder_write, NULL);
	last_confirmed = MyReplicationSlot->data.confirmed_flush;

	ereport(LOG,
			(errmsg("trellara decoder started on slot \"%s\" in database \"%s\"",
					trellara_slot_name, trellara_database),
			 errdetail("Delivering transactions committed after %X/%X.",
					   LSN_FORMAT_ARGS(last_confirmed))));

	/* everything committed after confirmed_flush is reassembled from here */
	XLogBeginRead(ctx->reader, MyReplicationSlot->data.restart_lsn);
	InvalidateSystemCaches();

	for (;;)
	{
		XLogRecPtr	flush;
		int			nrecords = 0;

		decoder_check_state();

		/*
		 * Only read what is flushed: read_local_xlog_page would otherwise
		 * sleep inside the reader, deaf to our signals.
		 */
		flush = GetFlushRecPtr(NULL);
		while (ctx->reader->EndRecPtr < flush && nrecords < DECODE_BATCH_RECORDS)
		{
			XLogRecord *record;
			char	   *errm = NULL;

			record = XLogReadRecord(ctx->reader, &errm);
			if (errm)
				elog(ERROR, "trellara: could not read WAL for logical decoding: %s", errm);
			if (record != NULL)
				LogicalDecodingProcessRecord(ctx, ctx->reader);
			nrecords++;
		}

		/* what this batch decoded goes out now, however little it is */
		queue_flush();

		if (nrecords == 0)
		{
			maybe_push_progress(ctx);
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 WAL_POLL_MS,
							 wait_event_wal);
			ResetLatch(MyLatch);
		}
	}
}
