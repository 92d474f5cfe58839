/*-------------------------------------------------------------------------
 *
 * trellara.h
 *		Trellara extension: frame format, shared-memory queue and the
 *		declarations shared by the output plugin and the workers.
 *
 * FRAME FORMAT (version 1) -- part of the wire contract; do not change
 * without bumping TRELLARA_FRAME_VERSION.  docs/EXTENSION.md repeats this
 * with examples.
 *
 * One frame is one output-plugin write: one logical message.  All integers
 * are big-endian (network order, as in pgoutput).  A "str" is a u32 byte
 * length followed by that many bytes, no terminator.  Every frame starts
 *
 *   +---------+---------+------------------
 *   | u8 ver  | u8 type | body (by type)
 *   +---------+---------+------------------
 *     0x01      'B','R','I','U','D','T','M','C','P'
 *
 *  'B' begin     u32 xid | u64 final_lsn (commit record) | i64 commit_time
 *  'R' relation  u32 relid | str namespace | str name | u8 replident
 *                | u16 ncols | ncols x { u8 flags | str name | u32 type_oid
 *                | i32 typmod }        flags bit 0 = part of replica identity
 *  'I' insert    u32 relid | tuple(new)
 *  'U' update    u32 relid | u8 old_kind | [tuple(old)] | tuple(new)
 *  'D' delete    u32 relid | u8 old_kind | [tuple(old)]
 *                old_kind: 'K' identity key columns (others null),
 *                          'O' full old row (REPLICA IDENTITY FULL),
 *                          '-' none (no tuple follows)
 *  'T' truncate  u8 flags | u32 nrels | nrels x u32 relid
 *                flags bit 0 = CASCADE, bit 1 = RESTART IDENTITY
 *  'M' message   u64 lsn | str prefix | str content   (transactional only)
 *  'C' commit    u8 flags (0) | u64 commit_lsn | u64 end_lsn | i64 commit_time
 *  'P' progress  u64 lsn   (background worker only; see decoder.c)
 *
 *  tuple:        u16 ncols | ncols x { u8 kind [ | str text ] }
 *                kind 'n' NULL, 'u' unchanged TOAST value (not sent),
 *                't' followed by the value in the type's text output form
 *
 * Text (names, values, message prefixes) is UTF-8 whatever the database
 * encoding; message content is bytes as emitted.
 *
 * Times are microseconds since 1970-01-01 UTC.  Columns are the relation's
 * attributes in attnum order, skipping dropped and generated ones -- the
 * same set, order, key flags and namespace spelling ("" for pg_catalog) as
 * pgoutput's Relation message, so a consumer computes the same schema
 * fingerprint from either source.  Through the SQL functions, a 'R' frame
 * precedes the first change of every relation in every transaction (and
 * again after a schema change inside the transaction), so each transaction
 * is self-describing and a consumer can start at any transaction boundary.
 * The decoder worker sends it once per decoding session instead, before
 * the relation's first change and again after any schema change (as
 * pgoutput does): its stream is always read from the session's start,
 * because a sidecar that was sent anything and goes away restarts the
 * decoder (sockserver.c).  Transactions with no change left after
 * filtering produce no frames at all.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TRELLARA_H
#define TRELLARA_H

#include "access/xlogdefs.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

/* Frame format version: first byte of every frame. */
#define TRELLARA_FRAME_VERSION		1

#define TRELLARA_FRAME_BEGIN		'B'
#define TRELLARA_FRAME_RELATION		'R'
#define TRELLARA_FRAME_INSERT		'I'
#define TRELLARA_FRAME_UPDATE		'U'
#define TRELLARA_FRAME_DELETE		'D'
#define TRELLARA_FRAME_TRUNCATE		'T'
#define TRELLARA_FRAME_MESSAGE		'M'
#define TRELLARA_FRAME_COMMIT		'C'
#define TRELLARA_FRAME_PROGRESS		'P'

#define TRELLARA_OLD_KEY			'K'
#define TRELLARA_OLD_FULL			'O'
#define TRELLARA_OLD_NONE			'-'

#define TRELLARA_COL_NULL			'n'
#define TRELLARA_COL_UNCHANGED		'u'
#define TRELLARA_COL_TEXT			't'

#define TRELLARA_COLFLAG_KEY		0x01
#define TRELLARA_TRUNC_CASCADE		0x01
#define TRELLARA_TRUNC_RESTART		0x02

/*
 * Shared-memory queue between the decoder worker (single producer) and
 * the socket worker (single consumer).  Fixed size: 16 slots.
 *
 * A slot holds a run of whole socket messages, already in the wire form
 * the socket worker sends ('F' u8 flags u32 len payload, see sockserver.c),
 * so the socket worker writes slots to the socket as they are: many frames
 * per lock round trip, per wake-up and per send().  Frames are packed into
 * the producer's open slot until the next one does not fit; a frame larger
 * than TRELLARA_QUEUE_SLOT_BYTES is split into chunks of that size, one
 * per slot, all but the last carrying TRELLARA_CHUNK_MORE.  When the queue
 * is full the decoder waits on its latch: frames are never dropped and the
 * queue never grows.
 *
 * Every commit and progress frame in a slot is an ack point: the byte
 * offset just past it and the LSN a sidecar may acknowledge once those
 * bytes are written to it.  A slot is published early when its ack points
 * are used up.
 */
#define TRELLARA_QUEUE_SLOTS		16
#define TRELLARA_QUEUE_SLOT_BYTES	(64 * 1024)		/* largest chunk payload */
#define TRELLARA_FRAME_HEADER_BYTES	6	/* 'F' u8 flags u32 len */
#define TRELLARA_SLOT_DATA_BYTES	(TRELLARA_FRAME_HEADER_BYTES + TRELLARA_QUEUE_SLOT_BYTES)
#define TRELLARA_SLOT_ACKS			512
#define TRELLARA_CHUNK_MORE			0x01

typedef struct TrellaraAckPoint
{
	uint32		end;			/* offset in data[] just past the frame */
	XLogRecPtr	lsn;			/* what a sidecar may ack once it has it */
} TrellaraAckPoint;

typedef struct TrellaraQueueSlot
{
	uint32		len;			/* bytes of whole messages in data[] */
	uint32		nacks;			/* ack points used */
	TrellaraAckPoint acks[TRELLARA_SLOT_ACKS];
	char		data[TRELLARA_SLOT_DATA_BYTES];
} TrellaraQueueSlot;

typedef struct TrellaraShared
{
	LWLock	   *lock;			/* protects every field below but data[] */

	/*
	 * head and tail count slots ever published and ever taken; head - tail
	 * is the fill level.  The single producer fills slots[head % N] outside
	 * the lock (once head - tail < N) and then advances head under it (the lock orders the copy
	 * before the index update); no one else touches that slot meanwhile.
	 * The consumer copies slots[tail % N] under the lock, because a
	 * restarting decoder resets head and tail and rewrites slot 0, and the
	 * copy must never be torn by that.
	 */
	uint64		head;
	uint64		tail;
	uint64		epoch;			/* bumped by each decoder (re)start */

	/*
	 * Set by the socket worker when a sidecar disconnects: frames it was
	 * sent but never made durable are gone, so the decoder must restart
	 * from the slot's confirmed position (see decoder.c).
	 */
	bool		reset_requested;

	XLogRecPtr	acked_lsn;		/* highest durable ack from the sidecar */

	pid_t		decoder_pid;
	pid_t		socket_pid;
	Latch	   *decoder_latch;	/* set when a full queue frees or an ack lands */
	Latch	   *socket_latch;	/* set when the queue stops being empty */

	TrellaraQueueSlot slots[TRELLARA_QUEUE_SLOTS];
} TrellaraShared;

/* output.c: 'R' once per decoding session, not per transaction */
extern bool trellara_relations_once;

/* trellara.c */
extern TrellaraShared *trellara_shared;
extern char *trellara_database;
extern char *trellara_slot_name;
extern char *trellara_tables;
extern char *trellara_socket_path;
extern int	trellara_queue_wait_timeout_ms;
extern bool trellara_include_messages;

/* decoder.c, sockserver.c: background worker entry points */
extern PGDLLEXPORT void trellara_decoder_main(Datum main_arg);
extern PGDLLEXPORT void trellara_socket_main(Datum main_arg);

#endif							/* TRELLARA_H */
