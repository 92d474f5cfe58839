/*-------------------------------------------------------------------------
 *
 * trellara_compat.h
 *		Every PostgreSQL major-version difference Trellara's extension cares
 *		about, in one place.
 *
 * The rest of ext/ is written against the macros and inline functions
 * below and never tests PG_VERSION_NUM itself, so supporting a new major
 * release means reading this file, not grepping the tree.
 *
 * Supported: 15, 16, 17, 18.  Built and regression-tested here on 15;
 * 17 and 18 are build-checked against Debian's server headers when they
 * are available (see docs/EXTENSION.md); 16 headers are not obtainable on
 * the project's machines, so 16 is covered by the same code paths as 15
 * and 17 but has never been compiled.
 *
 * Runtime differences (not compile-time) are noted here too, so a reader
 * finds them in one place:
 *
 *  - output_plugin_libraries: newer minor releases (Debian 15.19+, 17.12+,
 *    18.6+) refuse output plugins not listed in this setting.  It cannot be
 *    detected from headers (it appeared in minor releases), so the decoder
 *    worker looks it up at run time with GetConfigOption(..., missing_ok)
 *    and explains the exact ALTER SYSTEM when trellara is not listed.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TRELLARA_COMPAT_H
#define TRELLARA_COMPAT_H

#include "postgres.h"

#include "replication/reorderbuffer.h"
#include "replication/slot.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#if PG_VERSION_NUM < 150000
#error "trellara requires PostgreSQL 15 or later (shmem_request_hook, xact_time)"
#endif

/*
 * verifyhash.c adds 64-bit row hashes into exact per-bucket sums in 128-bit
 * integers; every platform PostgreSQL packages are built for has them.
 */
#ifndef HAVE_INT128
#error "trellara needs a 128-bit integer type (verifyhash.c's exact hash sums)"
#endif

/*
 * Module magic.  18 can record a name and version that pg_get_loaded_modules()
 * shows; older releases only have the plain form.
 */
#if PG_VERSION_NUM >= 180000
#define TRELLARA_MODULE_MAGIC PG_MODULE_MAGIC_EXT(.name = "trellara", .version = "0.2")
#else
#define TRELLARA_MODULE_MAGIC PG_MODULE_MAGIC
#endif

/*
 * Tuples in a reorder-buffer change.  17 removed ReorderBufferTupleBuf and
 * stores a plain HeapTuple; before that the HeapTupleData is embedded in the
 * buffer.  Both macros yield a HeapTuple, or NULL when the tuple is absent.
 */
#if PG_VERSION_NUM >= 170000
#define TRELLARA_CHANGE_OLDTUPLE(change) ((change)->data.tp.oldtuple)
#define TRELLARA_CHANGE_NEWTUPLE(change) ((change)->data.tp.newtuple)
#else
#define TRELLARA_CHANGE_OLDTUPLE(change) \
	((change)->data.tp.oldtuple ? &(change)->data.tp.oldtuple->tuple : NULL)
#define TRELLARA_CHANGE_NEWTUPLE(change) \
	((change)->data.tp.newtuple ? &(change)->data.tp.newtuple->tuple : NULL)
#endif

/* Commit timestamp of a decoded transaction (a union member since 15). */
#define TRELLARA_TXN_COMMIT_TIME(txn) ((txn)->xact_time.commit_time)

/*
 * Wait events.  17 added named custom wait events, which make a waiting
 * worker readable in pg_stat_activity ("TrellaraQueueFull" instead of
 * "Extension").  Earlier releases only have the generic PG_WAIT_EXTENSION.
 * The id is looked up once per process and cached by the caller.
 */
static inline uint32
trellara_wait_event(const char *name)
{
#if PG_VERSION_NUM >= 170000
	return WaitEventExtensionNew(name);
#else
	(void) name;
	return PG_WAIT_EXTENSION;
#endif
}

/*
 * Wait event sets: 17 replaced the memory-context argument with a resource
 * owner (NULL = owned by the process, freed explicitly).
 */
#if PG_VERSION_NUM >= 170000
#define TRELLARA_CREATE_WAIT_EVENT_SET(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define TRELLARA_CREATE_WAIT_EVENT_SET(nevents) \
	CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

/*
 * Acquiring a replication slot: 18 added error_if_invalid.  We want the
 * error (an invalidated slot cannot be decoded and must not be silently
 * skipped), so pass true there.
 */
#if PG_VERSION_NUM >= 180000
#define TRELLARA_SLOT_ACQUIRE(name, nowait) ReplicationSlotAcquire((name), (nowait), true)
#else
#define TRELLARA_SLOT_ACQUIRE(name, nowait) ReplicationSlotAcquire((name), (nowait))
#endif

#endif							/* TRELLARA_COMPAT_H */
