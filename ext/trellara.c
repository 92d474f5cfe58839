/*-------------------------------------------------------------------------
 *
 * trellara.c
 *		Module entry: preload check, GUCs, shared memory, worker registration.
 *
 * trellara.so holds three things: the output plugin (output.c), two
 * background workers (decoder.c, sockserver.c) and a SQL-callable frame
 * renderer (frametext.c).  All of them depend on state set up here while
 * the postmaster processes shared_preload_libraries, so the library
 * refuses to load any other way.
 *
 * Why the check is just process_shared_preload_libraries_in_progress: a
 * library loaded by the postmaster is inherited, already initialised, by
 * every forked backend and walsender; when such a process later looks up
 * "trellara" as an output plugin or for trellara_frame_text(), the dynamic
 * loader finds it already loaded and _PG_init does not run again.  (On
 * EXEC_BACKEND builds the preload is replayed in every child with the flag
 * set.)  So _PG_init running with the flag clear means exactly "this server
 * did not preload trellara".  The output plugin's startup callback checks
 * a second, independent witness: the shared-memory struct that only the
 * preload's shmem_startup_hook creates.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"

#include "trellara.h"
#include "trellara_compat.h"

TRELLARA_MODULE_MAGIC;

extern PGDLLEXPORT void _PG_init(void);

/* Seconds before the postmaster restarts a worker that exited non-zero. */
#define TRELLARA_RESTART_SECS	2

TrellaraShared *trellara_shared = NULL;

/* GUCs */
char	   *trellara_database = NULL;
char	   *trellara_slot_name = NULL;
char	   *trellara_tables = NULL;
char	   *trellara_socket_path = NULL;
int			trellara_queue_wait_timeout_ms = 10000;
bool		trellara_include_messages = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void trellara_shmem_request(void);
static void trellara_shmem_startup(void);
static void define_gucs(void);
static void register_workers(void);

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("trellara must be loaded via shared_preload_libraries"),
				 errhint("Add trellara to shared_preload_libraries in postgresql.conf and restart the server.")));

	define_gucs();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = trellara_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = trellara_shmem_startup;

	/* without a database the plugin still works via SQL and walsenders */
	if (trellara_database != NULL && trellara_database[0] != '\0')
		register_workers();
}

static void
define_gucs(void)
{
	DefineCustomStringVariable("trellara.database",
							   "Database whose changes the trellara background worker decodes.",
							   "Empty (the default) starts no worker; the output plugin stays usable.",
							   &trellara_database,
							   "",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("trellara.slot_name",
							   "Logical replication slot the trellara worker owns.",
							   "Created with plugin trellara if missing.",
							   &trellara_slot_name,
							   "trellara",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("trellara.tables",
							   "Tables the trellara worker captures (comma-separated schema.table).",
							   "Empty (the default) captures every table.",
							   &trellara_tables,
							   "",
							   PGC_POSTMASTER,
							   GUC_LIST_INPUT,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("trellara.socket_path",
							   "Unix socket the trellara sidecar connects to.",
							   "Empty (the default) means trellara.sock in the data directory.",
							   &trellara_socket_path,
							   "",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("trellara.queue_wait_timeout",
							"Longest single wait of the decoder for queue space before it re-checks state and logs.",
							"The decoder never drops or buffers frames: it waits again after each timeout.",
							&trellara_queue_wait_timeout_ms,
							10000,
							10,
							3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("trellara.include_messages",
							 "Whether the trellara worker forwards transactional logical messages.",
							 NULL,
							 &trellara_include_messages,
							 false,
							 PGC_POSTMASTER,
							 0,
							 NULL, NULL, NULL);

	MarkGUCPrefixReserved("trellara");
}

static void
register_workers(void)
{
	BackgroundWorker worker;

	/*
	 * Two workers, not one: the decoder holds a database connection, the
	 * slot and a decoding context, and blocks when the queue is full; the
	 * socket server holds no database state and blocks only on the socket.
	 * A slow or dying sidecar therefore never stalls catalog access, and a
	 * decoder restart never drops the socket.  Both restart after
	 * TRELLARA_RESTART_SECS if they exit non-zero (see docs/EXTENSION.md).
	 */
	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = TRELLARA_RESTART_SECS;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "trellara");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "trellara_decoder_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "trellara decoder");
	snprintf(worker.bgw_type, BGW_MAXLEN, "trellara decoder");
	RegisterBackgroundWorker(&worker);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = TRELLARA_RESTART_SECS;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "trellara");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "trellara_socket_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "trellara socket server");
	snprintf(worker.bgw_type, BGW_MAXLEN, "trellara socket server");
	RegisterBackgroundWorker(&worker);
}

static void
trellara_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	RequestAddinShmemSpace(MAXALIGN(sizeof(TrellaraShared)));
	RequestNamedLWLockTranche("trellara", 1);
}

static void
trellara_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	trellara_shared = ShmemInitStruct("trellara", sizeof(TrellaraShared), &found);
	if (!found)
	{
		/* slots' data need no initialisation: only [tail, head) is read */
		memset(trellara_shared, 0, offsetof(TrellaraShared, slots));
		trellara_shared->lock = &(GetNamedLWLockTranche("trellara"))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}
