/*-------------------------------------------------------------------------
 *
 * queuestats.c
 *		trellara_queue(): the decoder's shared-memory queue as one row,
 *		read under the queue's lock, for `trellara status`.
 *
 * head and tail count the slots published and taken since the decoder's
 * latest start (a restart resets both), so head - tail is the fill level;
 * epoch counts decoder starts.  Nothing here writes shared memory.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "storage/lwlock.h"
#include "utils/pg_lsn.h"

#include "trellara.h"
#include "trellara_compat.h"

PG_FUNCTION_INFO_V1(trellara_queue);

Datum
trellara_queue(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[7];
	bool		nulls[7] = {0};
	uint64		head;
	uint64		tail;
	uint64		epoch;
	XLogRecPtr	acked;
	pid_t		socket_pid;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("trellara_queue() must be called where a row is accepted")));
	if (trellara_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("trellara must be loaded via shared_preload_libraries")));

	LWLockAcquire(trellara_shared->lock, LW_SHARED);
	head = trellara_shared->head;
	tail = trellara_shared->tail;
	epoch = trellara_shared->epoch;
	acked = trellara_shared->acked_lsn;
	socket_pid = trellara_shared->socket_pid;
	LWLockRelease(trellara_shared->lock);

	values[0] = Int32GetDatum(TRELLARA_QUEUE_SLOTS);
	values[1] = Int64GetDatum((int64) (head - tail));
	values[2] = Int64GetDatum((int64) head);
	values[3] = Int64GetDatum((int64) tail);
	values[4] = Int64GetDatum((int64) epoch);
	values[5] = LSNGetDatum(acked);
	values[6] = Int32GetDatum((int32) socket_pid);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
