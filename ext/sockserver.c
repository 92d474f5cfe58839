/*-------------------------------------------------------------------------
 *
 * sockserver.c
 *		The socket background worker: serves queue frames to one sidecar
 *		over a mode-0600 Unix socket and relays its durable acks.
 *
 * SOCKET PROTOCOL (version 1) -- part of the wire contract; do not change
 * without bumping TRELLARA_PROTOCOL_VERSION.  Big-endian integers.
 * docs/EXTENSION.md has the same with a client walkthrough.
 *
 *   sidecar -> server
 *     'H' "TRLA" u16 protocol_version                     hello, 7 bytes, first
 *     'A' u64 lsn                                         ack, 9 bytes
 *   server -> sidecar
 *     'H' "TRLA" u16 protocol_version u8 frame_version
 *         u32 server_version_num u64 system_identifier
 *         u64 slot_confirmed_lsn                          hello reply, 28 bytes
 *     'F' u8 flags u32 len  len bytes                     frame chunk
 *         flags bit 0: MORE, the frame continues in the next 'F'
 *     'K' u64 ackable_lsn i64 server_time                 keepalive, 17 bytes
 *     'E' u16 len  len bytes                              error; then close
 *
 * Messages are never interleaved: an 'E' raised while another message is
 * partly written follows that message once it is complete (or, if the
 * client stops reading, the connection is closed without it).
 *
 * A frame is the concatenation of consecutive 'F' payloads up to one
 * without MORE.  An ack names the end LSN of a 'C' (commit) frame or the
 * LSN of a 'P' (progress) frame the sidecar has made durable, together
 * with everything before it.  Acks must not decrease and must not exceed
 * the highest such LSN already delivered; a violation is a protocol error.
 *
 * Security: the socket is created with umask 077 and chmod 0600, so only
 * the server's OS user can connect at all; the peer's uid is verified with
 * getpeereid() (SO_PEERCRED) on top, and any other uid is refused.
 *
 * One sidecar at a time; a second connection gets an 'E' and is closed.
 * When a sidecar goes away after being sent anything, frames may have been
 * lost with it, so the worker asks the decoder to restart from the slot's
 * confirmed position (see decoder.c) and streams to the next sidecar only
 * from the decoder's new epoch.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "replication/slot.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "trellara.h"
#include "trellara_compat.h"

#define TRELLARA_PROTOCOL_VERSION	1
#define PROTOCOL_MAGIC				"TRLA"

#define MSG_HELLO					'H'
#define MSG_ACK						'A'
#define MSG_FRAME					'F'
#define MSG_KEEPALIVE				'K'
#define MSG_ERROR					'E'

#define HELLO_LEN					7
#define ACK_LEN						9

/* A sidecar must say hello this soon after connecting. */
#define HELLO_TIMEOUT_MS			10000
/* Keepalive after this long without sending anything. */
#define KEEPALIVE_INTERVAL_MS		10000
/* Longest sleep, so state changes are noticed even without a latch. */
#define MAX_SLEEP_MS				1000

typedef enum ClientState
{
	CLIENT_NONE,
	CLIENT_AWAIT_HELLO,
	CLIENT_STREAMING,
	CLIENT_CLOSING				/* error queued; close once it is sent */
} ClientState;

static volatile sig_atomic_t got_sigterm = false;
static volatile sig_atomic_t got_sighup = false;

static uint32 wait_event_socket;

static char socket_path[sizeof(((struct sockaddr_un *) NULL)->sun_path)];
static pgsocket listen_fd = PGINVALID_SOCKET;

/* the one connected sidecar */
static pgsocket client_fd = PGINVALID_SOCKET;
static ClientState client_state = CLIENT_NONE;
static TimestampTz client_deadline;
static bool client_sent_chunks;	/* any 'F' written to this sidecar */
static XLogRecPtr client_last_ack;
static XLogRecPtr delivered_lsn;	/* highest ack_lsn fully written */
static uint64 stream_epoch;			/* decoder epoch the stream belongs to */

static char inbuf[16];
static int	inlen;

/*
 * What is being sent: one control message, or up to TAKE_SLOTS queue slots
 * of frame messages (written with as few send() calls as the socket
 * allows).  out_acks are the ack points of those frames, offsets into
 * outbuf: each is delivered once outpos passes it.
 */
#define TAKE_SLOTS					4
static char outbuf[TAKE_SLOTS * TRELLARA_SLOT_DATA_BYTES];
static int	outlen;
static int	outpos;
static TrellaraAckPoint out_acks[TAKE_SLOTS * TRELLARA_SLOT_ACKS];
static int	out_nacks;
static int	out_next_ack;		/* first ack point not yet delivered */
static TimestampTz last_send_time;

/*
 * An 'E' waiting for the message in flight to be finished: the stream is
 * a sequence of whole messages, so an error never overwrites a partly sent
 * one (its remaining bytes would be taken from the 'E' and complete the
 * frame with foreign bytes).
 */
#define ERROR_TEXT_MAX				1024
static char errbuf[3 + ERROR_TEXT_MAX];
static int	errlen;

static void
socket_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

static void
socket_sighup(SIGNAL_ARGS)
{
	int			save_errno = errno;

	got_sighup = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

static void
put_u16(char *p, uint16 v)
{
	p[0] = (char) (v >> 8);
	p[1] = (char) v;
}

static void
put_u32(char *p, uint32 v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (char) (v >> (24 - 8 * i));
}

static void
put_u64(char *p, uint64 v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (char) (v >> (56 - 8 * i));
}

static uint64
get_u64(const char *p)
{
	uint64		v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | (unsigned char) p[i];
	return v;
}

/*
 * Ask the decoder to replay from the slot's confirmed position: the
 * sidecar that just left may have taken unacknowledged frames with it.
 */
static void
request_decoder_reset(void)
{
	Latch	   *decoder_latch;

	LWLockAcquire(trellara_shared->lock, LW_EXCLUSIVE);
	trellara_shared->reset_requested = true;
	decoder_latch = trellara_shared->decoder_latch;
	LWLockRelease(trellara_shared->lock);
	if (decoder_latch != NULL)
		SetLatch(decoder_latch);
}

static void
close_client(const char *why)
{
	if (client_fd == PGINVALID_SOCKET)
		return;

	ereport(LOG,
			(errmsg("trellara sidecar disconnected: %s", why),
			 errdetail("Last acknowledged position %X/%X.", LSN_FORMAT_ARGS(client_last_ack))));
	closesocket(client_fd);
	client_fd = PGINVALID_SOCKET;
	client_state = CLIENT_NONE;
	outlen = outpos = 0;
	out_nacks = out_next_ack = 0;
	errlen = 0;
	inlen = 0;
	if (client_sent_chunks)
		request_decoder_reset();
	client_sent_chunks = false;
}

static void
socket_detach(int code, Datum arg)
{
	if (client_fd != PGINVALID_SOCKET)
		close_client("socket worker exiting");

	LWLockAcquire(trellara_shared->lock, LW_EXCLUSIVE);
	if (trellara_shared->socket_pid == MyProcPid)
	{
		trellara_shared->socket_pid = 0;
		trellara_shared->socket_latch = NULL;
	}
	LWLockRelease(trellara_shared->lock);

	/* only unlink what we created: another server may own a same-named file */
	if (listen_fd != PGINVALID_SOCKET)
	{
		closesocket(listen_fd);
		unlink(socket_path);
	}
}

/* Move the pending 'E' into outbuf: only when no message is in flight. */
static void
start_error_message(void)
{
	Assert(outlen == 0 || outpos == 0);
	memcpy(outbuf, errbuf, errlen);
	outlen = errlen;
	outpos = 0;
	out_nacks = out_next_ack = 0;
	errlen = 0;
}

/*
 * Queue an error message for the client and close once it is sent.  A
 * message partly written to the socket is finished first (flush_out then
 * sends the 'E'); one not started yet is dropped, as is everything after
 * it: the client is going away, and the decoder replays from the slot's
 * confirmed position for the next one.  If the client does not read the
 * rest within the deadline, the connection is closed without the 'E',
 * which is still a clean end of the stream at a message boundary or a
 * truncated one -- never a spliced one.
 */
static void
client_error(const char *msg)
{
	size_t		len = Min(strlen(msg), (size_t) ERROR_TEXT_MAX);

	if (client_state == CLIENT_CLOSING)
		return;					/* the first error is the one reported */
	errbuf[0] = MSG_ERROR;
	put_u16(errbuf + 1, (uint16) len);
	memcpy(errbuf + 3, msg, len);
	errlen = 3 + (int) len;
	if (outpos == 0 || outpos >= outlen)
		start_error_message();
	client_state = CLIENT_CLOSING;
	client_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
}

/*
 * Refuse a connection we will never serve, making sure the client can read
 * why: send the 'E', half-close, then consume what the client sends (its
 * hello) until it closes or REFUSE_LINGER_MS pass.  Closing at once with
 * the hello unread would reset the connection and could discard the 'E'
 * before the client reads it.  Refusals are rare (a second sidecar, a
 * foreign uid), so this short blocking wait is acceptable.
 */
#define REFUSE_LINGER_MS			200

static void
refuse(pgsocket fd, const char *msg)
{
	char		buf[256];
	size_t		len = Min(strlen(msg), sizeof(buf) - 3);
	struct timeval tv = {0, REFUSE_LINGER_MS * 1000};

	buf[0] = MSG_ERROR;
	put_u16(buf + 1, (uint16) len);
	memcpy(buf + 3, msg, len);
	(void) send(fd, buf, 3 + len, MSG_NOSIGNAL | MSG_DONTWAIT);
	(void) shutdown(fd, SHUT_WR);
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0)
	{
		TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), REFUSE_LINGER_MS);

		while (GetCurrentTimestamp() < until &&
			   recv(fd, buf, sizeof(buf), 0) > 0)
			;
	}
	closesocket(fd);
}

static XLogRecPtr
slot_confirmed_lsn(void)
{
	ReplicationSlot *slot;
	XLogRecPtr	lsn = InvalidXLogRecPtr;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(trellara_slot_name, false);
	if (slot != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		lsn = slot->data.confirmed_flush;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(ReplicationSlotControlLock);
	return lsn;
}

static void
queue_hello_reply(void)
{
	outbuf[0] = MSG_HELLO;
	memcpy(outbuf + 1, PROTOCOL_MAGIC, 4);
	put_u16(outbuf + 5, TRELLARA_PROTOCOL_VERSION);
	outbuf[7] = TRELLARA_FRAME_VERSION;
	put_u32(outbuf + 8, (uint32) PG_VERSION_NUM);
	put_u64(outbuf + 12, GetSystemIdentifier());
	put_u64(outbuf + 20, slot_confirmed_lsn());
	outlen = 28;
	outpos = 0;
	out_nacks = out_next_ack = 0;
}

static void
queue_keepalive(void)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		unix_us = (int64) now +
		((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);

	outbuf[0] = MSG_KEEPALIVE;
	put_u64(outbuf + 1, delivered_lsn);
	put_u64(outbuf + 9, (uint64) unix_us);
	outlen = 17;
	outpos = 0;
	out_nacks = out_next_ack = 0;
}

/*
 * Take the queued slots (up to TAKE_SLOTS) of the epoch we are streaming
 * into outbuf: they already hold 'F' messages.  The copy is made under the
 * lock: a restarting decoder resets the indexes and rewrites slots, and
 * must not tear it.  The decoder is woken only if the queue was full: it
 * waits for space only then.
 */
static bool
take_chunks(void)
{
	int			taken = 0;
	bool		was_full = false;
	Latch	   *decoder_latch = NULL;

	Assert(outlen == 0);
	outpos = 0;
	out_nacks = out_next_ack = 0;
	LWLockAcquire(trellara_shared->lock, LW_EXCLUSIVE);
	if (trellara_shared->epoch == stream_epoch &&
		!trellara_shared->reset_requested)
	{
		was_full = (trellara_shared->head - trellara_shared->tail >= TRELLARA_QUEUE_SLOTS);
		while (taken < TAKE_SLOTS && trellara_shared->head != trellara_shared->tail)
		{
			TrellaraQueueSlot *slot =
				&trellara_shared->slots[trellara_shared->tail % TRELLARA_QUEUE_SLOTS];

			if (slot->len > TRELLARA_SLOT_DATA_BYTES || slot->nacks > TRELLARA_SLOT_ACKS)
				elog(ERROR, "trellara: queue slot holds %u bytes and %u ack points",
					 slot->len, slot->nacks);
			memcpy(outbuf + outlen, slot->data, slot->len);
			for (uint32 i = 0; i < slot->nacks; i++)
			{
				out_acks[out_nacks].end = outlen + slot->acks[i].end;
				out_acks[out_nacks].lsn = slot->acks[i].lsn;
				out_nacks++;
			}
			outlen += (int) slot->len;
			trellara_shared->tail++;
			taken++;
		}
		decoder_latch = trellara_shared->decoder_latch;
	}
	LWLockRelease(trellara_shared->lock);

	if (taken == 0)
		return false;
	if (was_full && decoder_latch != NULL)
		SetLatch(decoder_latch);	/* a slot is free */
	client_sent_chunks = true;
	return true;
}

/* Every ack point in outbuf the client has been sent in full is delivered. */
static void
advance_delivered(void)
{
	while (out_next_ack < out_nacks && out_acks[out_next_ack].end <= (uint32) outpos)
	{
		if (out_acks[out_next_ack].lsn > delivered_lsn)
			delivered_lsn = out_acks[out_next_ack].lsn;
		out_next_ack++;
	}
}

/*
 * Write as much of outbuf as the socket takes; false if the client is gone.
 * When closing, the 'E' follows the message that was in flight.
 */
static bool
flush_out(void)
{
	for (;;)
	{
		while (outpos < outlen)
		{
			ssize_t		n = send(client_fd, outbuf + outpos, outlen - outpos,
								 MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n < 0)
			{
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return true;
				close_client(strerror(errno));
				return false;
			}
			outpos += (int) n;
			advance_delivered();
			last_send_time = GetCurrentTimestamp();
		}

		if (outlen == 0)
			return true;
		outlen = outpos = 0;
		out_nacks = out_next_ack = 0;
		if (client_state != CLIENT_CLOSING)
			return true;
		if (errlen == 0)
		{
			close_client("protocol error or refusal sent");
			return false;
		}
		start_error_message();	/* the message in flight is complete */
	}
}

static void
handle_ack(XLogRecPtr lsn)
{
	Latch	   *decoder_latch;

	if (lsn < client_last_ack || lsn > delivered_lsn)
	{
		ereport(LOG,
				(errmsg("trellara sidecar sent an invalid acknowledgement %X/%X",
						LSN_FORMAT_ARGS(lsn)),
				 errdetail("Acknowledgements must not go backwards (last %X/%X) or beyond what was delivered (%X/%X).",
						   LSN_FORMAT_ARGS(client_last_ack), LSN_FORMAT_ARGS(delivered_lsn))));
		client_error("invalid acknowledgement: LSN went backwards or beyond what was delivered");
		return;
	}
	client_last_ack = lsn;

	LWLockAcquire(trellara_shared->lock, LW_EXCLUSIVE);
	if (lsn > trellara_shared->acked_lsn)
		trellara_shared->acked_lsn = lsn;
	decoder_latch = trellara_shared->decoder_latch;
	LWLockRelease(trellara_shared->lock);
	if (decoder_latch != NULL)
		SetLatch(decoder_latch);
}

/* Read and act on whatever the sidecar sent; false if it is gone. */
static bool
read_client(void)
{
	for (;;)
	{
		ssize_t		n = recv(client_fd, inbuf + inlen, sizeof(inbuf) - inlen, MSG_DONTWAIT);

		if (n == 0)
		{
			close_client("connection closed by sidecar");
			return false;
		}
		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return true;
			close_client(strerror(errno));
			return false;
		}
		inlen += (int) n;

		/* parse complete messages; a partial one waits for more bytes */
		while (inlen > 0 && client_state != CLIENT_CLOSING)
		{
			int			need;

			if (inbuf[0] == MSG_HELLO)
				need = HELLO_LEN;
			else if (inbuf[0] == MSG_ACK)
				need = ACK_LEN;
			else
			{
				client_error("unknown message type");
				break;
			}
			if (inlen < need)
				break;

			if (inbuf[0] == MSG_HELLO)
			{
				uint16		version = ((unsigned char) inbuf[5] << 8) | (unsigned char) inbuf[6];

				if (client_state != CLIENT_AWAIT_HELLO)
					client_error("unexpected hello");
				else if (memcmp(inbuf + 1, PROTOCOL_MAGIC, 4) != 0)
					client_error("bad magic: not a trellara sidecar");
				else if (version != TRELLARA_PROTOCOL_VERSION)
					client_error("unsupported protocol version; this server speaks version 1");
				else
				{
					client_state = CLIENT_STREAMING;
					queue_hello_reply();
					ereport(LOG, (errmsg("trellara sidecar connected")));
				}
			}
			else
			{
				if (client_state != CLIENT_STREAMING)
					client_error("acknowledgement before hello");
				else
					handle_ack((XLogRecPtr) get_u64(inbuf + 1));
			}
			memmove(inbuf, inbuf + need, inlen - need);
			inlen -= need;
		}
		if (client_state == CLIENT_CLOSING)
			return true;
	}
}

static void
accept_client(void)
{
	pgsocket	fd;
	uid_t		uid;
	gid_t		gid;

	fd = accept(listen_fd, NULL, NULL);
	if (fd == PGINVALID_SOCKET)
	{
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			ereport(LOG,
					(errcode_for_socket_access(),
					 errmsg("trellara could not accept a sidecar connection: %m")));
		return;
	}

	if (getpeereid(fd, &uid, &gid) != 0)
	{
		ereport(LOG,
				(errcode_for_socket_access(),
				 errmsg("trellara could not get the sidecar's credentials: %m")));
		closesocket(fd);
		return;
	}
	if (uid != geteuid())
	{
		ereport(LOG,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("trellara refused a sidecar connection from uid %u", (unsigned) uid),
				 errdetail("Only the server's own user (uid %u) may connect.", (unsigned) geteuid())));
		refuse(fd, "peer uid does not match the server's uid");
		return;
	}
	if (client_fd != PGINVALID_SOCKET)
	{
		ereport(LOG,
				(errmsg("trellara refused a second sidecar connection"),
				 errdetail("One sidecar at a time is served.")));
		refuse(fd, "another sidecar is connected");
		return;
	}

	if (!pg_set_noblock(fd))
	{
		closesocket(fd);
		return;
	}
	client_fd = fd;
	client_state = CLIENT_AWAIT_HELLO;
	client_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), HELLO_TIMEOUT_MS);
	client_sent_chunks = false;
	client_last_ack = InvalidXLogRecPtr;
	delivered_lsn = InvalidXLogRecPtr;
	inlen = 0;
	outlen = outpos = 0;
	errlen = 0;
	last_send_time = GetCurrentTimestamp();
}

static void
open_listen_socket(void)
{
	struct sockaddr_un addr;
	struct stat st;
	mode_t		old_umask;
	const char *path;

	path = (trellara_socket_path != NULL && trellara_socket_path[0] != '\0') ?
		trellara_socket_path : psprintf("%s/trellara.sock", DataDir);
	if (strlen(path) >= sizeof(addr.sun_path))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trellara socket path \"%s\" is too long (at most %zu bytes)",
						path, sizeof(addr.sun_path) - 1),
				 errhint("Set trellara.socket_path to a shorter path.")));
	snprintf(socket_path, sizeof(socket_path), "%s", path);

	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path);

	/*
	 * A leftover socket file (crash, kill -9) is removed, but only if it is
	 * a socket nobody listens on: never delete another file or steal the
	 * socket of a running server.
	 */
	if (lstat(socket_path, &st) == 0)
	{
		pgsocket	probe;

		if (!S_ISSOCK(st.st_mode))
			ereport(ERROR,
					(errmsg("trellara socket path \"%s\" exists and is not a socket", socket_path),
					 errhint("Remove the file or set trellara.socket_path elsewhere.")));
		probe = socket(AF_UNIX, SOCK_STREAM, 0);
		if (probe != PGINVALID_SOCKET &&
			connect(probe, (struct sockaddr *) &addr, sizeof(addr)) == 0)
		{
			closesocket(probe);
			ereport(ERROR,
					(errmsg("trellara socket \"%s\" is in use by another process", socket_path),
					 errhint("Set trellara.socket_path to a path no other server uses.")));
		}
		if (probe != PGINVALID_SOCKET)
			closesocket(probe);
		if (unlink(socket_path) != 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not remove stale trellara socket \"%s\": %m", socket_path)));
	}

	listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (listen_fd == PGINVALID_SOCKET)
		ereport(ERROR,
				(errcode_for_socket_access(),
				 errmsg("could not create trellara socket: %m")));

	/* no window in which the socket exists with looser permissions */
	old_umask = umask(S_IRWXG | S_IRWXO);
	if (bind(listen_fd, (struct sockaddr *) &addr, sizeof(addr)) != 0)
	{
		int			save_errno = errno;

		umask(old_umask);
		closesocket(listen_fd);
		listen_fd = PGINVALID_SOCKET;
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_socket_access(),
				 errmsg("could not bind trellara socket \"%s\": %m", socket_path)));
	}
	umask(old_umask);

	if (chmod(socket_path, S_IRUSR | S_IWUSR) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not set mode 0600 on trellara socket \"%s\": %m", socket_path)));

	if (listen(listen_fd, 4) != 0)
		ereport(ERROR,
				(errcode_for_socket_access(),
				 errmsg("could not listen on trellara socket \"%s\": %m", socket_path)));
	if (!pg_set_noblock(listen_fd))
		ereport(ERROR,
				(errcode_for_socket_access(),
				 errmsg("could not make trellara socket non-blocking: %m")));

	ereport(LOG,
			(errmsg("trellara socket server listening on \"%s\"", socket_path)));
}

static WaitEventSet *
build_wait_set(int *client_pos)
{
	WaitEventSet *set = TRELLARA_CREATE_WAIT_EVENT_SET(4);

	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(set, WL_SOCKET_READABLE, listen_fd, NULL, NULL);
	*client_pos = -1;
	if (client_fd != PGINVALID_SOCKET)
		*client_pos = AddWaitEventToSet(set, WL_SOCKET_READABLE, client_fd, NULL, NULL);
	return set;
}

void
trellara_socket_main(Datum main_arg)
{
	WaitEventSet *set;
	int			client_pos;
	pgsocket	set_client_fd;

	pqsignal(SIGTERM, socket_sigterm);
	pqsignal(SIGHUP, socket_sighup);
	BackgroundWorkerUnblockSignals();

	if (trellara_shared == NULL)
		elog(ERROR, "trellara: shared memory not initialised in the socket worker");
	wait_event_socket = trellara_wait_event("TrellaraSocket");

	LWLockAcquire(trellara_shared->lock, LW_EXCLUSIVE);
	trellara_shared->socket_pid = MyProcPid;
	trellara_shared->socket_latch = MyLatch;
	stream_epoch = trellara_shared->epoch;
	LWLockRelease(trellara_shared->lock);
	before_shmem_exit(socket_detach, (Datum) 0);

	open_listen_socket();

	set = build_wait_set(&client_pos);
	set_client_fd = client_fd;

	for (;;)
	{
		WaitEvent	events[4];
		int			nevents;
		long		timeout = MAX_SLEEP_MS;
		uint64		epoch;
		bool		reset_pending;
		TimestampTz now;

		if (got_sigterm)
		{
			ereport(LOG, (errmsg("trellara socket server stopping on request")));
			proc_exit(1);
		}
		if (got_sighup)
		{
			got_sighup = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/*
		 * A new decoder epoch means the queue was reset and decoding
		 * rewound: a sidecar that was sent part of the old stream (possibly
		 * half of a chunked frame) cannot continue it; it reconnects and is
		 * served from the new epoch.  One that was sent nothing yet (it
		 * connected while the reset was pending) just starts there.
		 */
		LWLockAcquire(trellara_shared->lock, LW_SHARED);
		epoch = trellara_shared->epoch;
		reset_pending = trellara_shared->reset_requested;
		LWLockRelease(trellara_shared->lock);
		if (epoch != stream_epoch)
		{
			if (client_fd != PGINVALID_SOCKET && client_sent_chunks &&
				client_state != CLIENT_CLOSING)
			{
				client_sent_chunks = false;	/* the decoder already rewound */
				client_error("decoder restarted; reconnect to resume from the slot's confirmed position");
			}
			stream_epoch = epoch;
		}

		/* move data: finish the current message, then take the next one */
		if (client_fd != PGINVALID_SOCKET)
		{
			if (outlen > 0)
				(void) flush_out();
			while (client_fd != PGINVALID_SOCKET && outlen == 0 &&
				   client_state == CLIENT_STREAMING && !reset_pending &&
				   take_chunks())
			{
				if (!flush_out() || outlen > 0)
					break;
			}
		}

		now = GetCurrentTimestamp();
		if (client_fd != PGINVALID_SOCKET)
		{
			if (client_state == CLIENT_AWAIT_HELLO || client_state == CLIENT_CLOSING)
			{
				if (now >= client_deadline)
					close_client(client_state == CLIENT_AWAIT_HELLO ?
								 "no hello within 10 s" : "error message not read in time");
				else
					timeout = Min(timeout, (long) ((client_deadline - now) / 1000) + 1);
			}
			else if (outlen == 0 &&
					 TimestampDifferenceExceeds(last_send_time, now, KEEPALIVE_INTERVAL_MS))
			{
				queue_keepalive();
				(void) flush_out();
			}
		}

		if (set_client_fd != client_fd)
		{
			FreeWaitEventSet(set);
			set = build_wait_set(&client_pos);
			set_client_fd = client_fd;
		}
		if (client_pos >= 0)
			ModifyWaitEvent(set, client_pos,
							WL_SOCKET_READABLE | (outlen > 0 ? WL_SOCKET_WRITEABLE : 0),
							NULL);

		nevents = WaitEventSetWait(set, timeout, events, lengthof(events),
								   wait_event_socket);
		for (int i = 0; i < nevents; i++)
		{
			WaitEvent  *ev = &events[i];

			if (ev->events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			else if (ev->fd == listen_fd && (ev->events & WL_SOCKET_READABLE))
				accept_client();
			else if (ev->fd == client_fd && client_fd != PGINVALID_SOCKET &&
					 (ev->events & WL_SOCKET_READABLE))
				(void) read_client();
			/* writeable: handled at the top of the loop */
		}
	}
}
