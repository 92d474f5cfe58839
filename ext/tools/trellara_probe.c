/*
 * trellara_probe.c
 *		Minimal sidecar for the trellara socket protocol, for tests and as a
 *		reference for real clients.  Plain C, no PostgreSQL headers.
 *
 *	 trellara_probe SOCKET [--ack] [--commits N] [--seconds S] [--bad-version]
 *					[--values] [--bad-ack-mid-message]
 *
 * Connects, says hello, reassembles frames from 'F' chunks and prints one
 * line per frame (type, length, and the LSN a 'C' or 'P' frame makes
 * acknowledgeable).  With --ack it acknowledges each such LSN right after
 * receiving it, as a sidecar does once the transaction is durable.  Stops
 * after N commit frames or S seconds (default 10) of total run time.
 * --values also prints each column value of 'I' frames ("value N=text").
 *
 * --bad-ack-mid-message tests the server's error path: it stops reading
 * until the server is blocked in the middle of a message (it peeks at the
 * unread bytes to know; it reads whole messages to move the server on),
 * sends an acknowledgement the server must refuse, and then checks only
 * the message framing of what follows: a correct server finishes the
 * message in flight and then sends its 'E' (or closes), never an 'E'
 * spliced into a half-sent message.
 *
 * Exit status: 0 ok, 2 the server sent an error, 1 anything else.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int	fd;

static uint64_t
be64(const unsigned char *p)
{
	uint64_t	v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

static uint32_t
be32(const unsigned char *p)
{
	return ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16) | ((uint32_t) p[2] << 8) | p[3];
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* read exactly n bytes or fail; deadline in now_s() terms */
static int
read_full(unsigned char *buf, size_t n, double deadline)
{
	size_t		got = 0;

	while (got < n)
	{
		struct pollfd pfd = {fd, POLLIN, 0};
		int			ms = (int) ((deadline - now_s()) * 1000);
		ssize_t		r;

		if (ms <= 0)
			return -2;			/* timeout */
		if (poll(&pfd, 1, ms) <= 0)
			continue;
		r = read(fd, buf + got, n - got);
		if (r == 0)
			return -1;			/* EOF */
		if (r < 0)
		{
			if (errno == EINTR)
				continue;
			return -1;
		}
		got += (size_t) r;
	}
	return 0;
}

/* false on error: the server may have closed after sending an 'E' */
static int
write_full(const unsigned char *buf, size_t n)
{
	while (n > 0)
	{
		ssize_t		w = write(fd, buf, n);

		if (w < 0)
		{
			if (errno == EINTR)
				continue;
			return 0;
		}
		buf += w;
		n -= (size_t) w;
	}
	return 1;
}

static void
send_ack(uint64_t lsn)
{
	unsigned char m[9];

	m[0] = 'A';
	for (int i = 0; i < 8; i++)
		m[1 + i] = (unsigned char) (lsn >> (56 - 8 * i));
	if (!write_full(m, sizeof(m)))
		printf("ack write failed: %s\n", strerror(errno));
}

/* print the text values of an 'I' frame: u32 relid | u16 ncols | columns */
static void
print_insert_values(const unsigned char *f, size_t len)
{
	size_t		pos = 2 + 4;
	unsigned	ncols;

	if (len < pos + 2)
		return;
	ncols = (f[pos] << 8) | f[pos + 1];
	pos += 2;
	for (unsigned i = 0; i < ncols && pos < len; i++)
	{
		unsigned char kind = f[pos++];
		uint32_t	n;

		if (kind != 't')
		{
			printf("value %u=<%c>\n", i, kind);
			continue;
		}
		if (pos + 4 > len)
			return;
		n = be32(f + pos);
		pos += 4;
		if (pos + n > len)
			return;
		printf("value %u=%.*s\n", i, (int) n, (const char *) f + pos);
		pos += n;
	}
}

/*
 * Length of the server message starting at p (avail bytes known), or 0 when
 * its header is not complete yet.
 */
static size_t
message_len(const unsigned char *p, size_t avail)
{
	switch (p[0])
	{
		case 'H':
			return 28;
		case 'K':
			return 17;
		case 'F':
			return avail < 6 ? 0 : 6 + (size_t) be32(p + 2);
		case 'E':
			return avail < 3 ? 0 : 3 + (size_t) ((p[1] << 8) | p[2]);
		default:
			return 1;			/* unknown: framing is already broken */
	}
}

/*
 * Wait until the server stops writing (the unread byte count is stable),
 * then report whether the unread bytes end inside a message.  *first_len is
 * set to the length of the first unread message (0 if unknown).
 */
static int
server_blocked_mid_message(double deadline, size_t *first_len)
{
	static unsigned char peek[4 << 20];
	int			last = -1;
	int			avail = 0;
	size_t		pos = 0;
	ssize_t		n;

	*first_len = 0;
	for (;;)
	{
		struct timespec ts = {0, 100 * 1000 * 1000};

		if (now_s() > deadline)
			return 0;
		nanosleep(&ts, NULL);
		if (ioctl(fd, FIONREAD, &avail) != 0)
			return 0;
		if (avail > 0 && avail == last)
			break;
		last = avail;
	}
	n = recv(fd, peek, sizeof(peek), MSG_PEEK | MSG_DONTWAIT);
	if (n <= 0)
		return 0;
	while (pos < (size_t) n)
	{
		size_t		len = message_len(peek + pos, (size_t) n - pos);

		if (pos == 0)
			*first_len = len;
		if (len == 0 || pos + len > (size_t) n)
			return 1;			/* the unread bytes end inside this message */
		pos += len;
	}
	return 0;
}

/* --bad-ack-mid-message, after the hello reply (see the header comment) */
static int
bad_ack_mid_message(double deadline)
{
	unsigned char buf[1 << 16];
	size_t		first_len;
	int			mid = 0;

	for (int attempt = 0; attempt < 200 && !mid; attempt++)
	{
		mid = server_blocked_mid_message(deadline, &first_len);
		if (!mid)
		{
			/* consume one whole message so the server writes on */
			size_t		left = first_len;

			if (left == 0)
			{
				printf("server sent nothing to block on\n");
				return 1;
			}
			while (left > 0)
			{
				size_t		k = left < sizeof(buf) ? left : sizeof(buf);

				if (read_full(buf, k, deadline) != 0)
				{
					printf("eof while draining\n");
					return 1;
				}
				left -= k;
			}
		}
	}
	if (!mid)
	{
		printf("the server never blocked in the middle of a message\n");
		return 1;
	}
	printf("server blocked mid-message; sending an invalid acknowledgement\n");
	fflush(stdout);
	send_ack(UINT64_MAX);

	/* from here on only the framing is checked */
	for (;;)
	{
		unsigned char type;
		unsigned char h[5];
		size_t		left;

		if (read_full(&type, 1, deadline) != 0)
		{
			/* a close between messages is acceptable */
			printf("closed at a message boundary\n");
			return 0;
		}
		switch (type)
		{
			case 'F':
				if (read_full(h, 5, deadline) != 0)
				{
					printf("eof inside a message\n");
					return 1;
				}
				left = be32(h + 1);
				if (left > 65536)
				{
					printf("chunk too long: %zu (framing broken)\n", left);
					return 1;
				}
				if (read_full(buf, left, deadline) != 0)
				{
					printf("eof inside a message\n");
					return 1;
				}
				break;
			case 'K':
				if (read_full(buf, 16, deadline) != 0)
				{
					printf("eof inside a message\n");
					return 1;
				}
				break;
			case 'E':
				{
					char		msg[1100];
					unsigned	len;

					if (read_full(h, 2, deadline) != 0)
					{
						printf("eof inside a message\n");
						return 1;
					}
					len = (h[0] << 8) | h[1];
					if (len >= sizeof(msg) || read_full((unsigned char *) msg, len, deadline) != 0)
					{
						printf("eof inside a message\n");
						return 1;
					}
					msg[len] = '\0';
					printf("error: %s\n", msg);
					return 2;
				}
			default:
				printf("unknown message type 0x%02x (framing broken)\n", type);
				return 1;
		}
	}
}

int
main(int argc, char **argv)
{
	struct sockaddr_un addr;
	int			ack = 0;
	long		commits_max = -1;
	double		seconds = 10;
	int			bad_version = 0;
	int			values = 0;
	int			bad_ack_mid = 0;
	unsigned char hello[7] = {'H', 'T', 'R', 'L', 'A', 0, 1};
	unsigned char *frame = NULL;
	size_t		frame_len = 0;
	long		commits = 0;
	double		deadline;
	int			rc;

	if (argc < 2)
	{
		fprintf(stderr, "usage: %s SOCKET [--ack] [--commits N] [--seconds S] [--bad-version] [--values] [--bad-ack-mid-message]\n", argv[0]);
		return 1;
	}
	for (int i = 2; i < argc; i++)
	{
		if (strcmp(argv[i], "--ack") == 0)
			ack = 1;
		else if (strcmp(argv[i], "--commits") == 0 && i + 1 < argc)
			commits_max = atol(argv[++i]);
		else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (strcmp(argv[i], "--bad-version") == 0)
			bad_version = 1;
		else if (strcmp(argv[i], "--values") == 0)
			values = 1;
		else if (strcmp(argv[i], "--bad-ack-mid-message") == 0)
			bad_ack_mid = 1;
		else
		{
			fprintf(stderr, "unknown argument %s\n", argv[i]);
			return 1;
		}
	}
	deadline = now_s() + seconds;
	signal(SIGPIPE, SIG_IGN);

	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	if (strlen(argv[1]) >= sizeof(addr.sun_path))
	{
		fprintf(stderr, "socket path too long\n");
		return 1;
	}
	strcpy(addr.sun_path, argv[1]);
	if (connect(fd, (struct sockaddr *) &addr, sizeof(addr)) != 0)
	{
		printf("connect failed: %s\n", strerror(errno));
		return 1;
	}
	if (bad_version)
		hello[6] = 99;
	/* a refused client still reads the server's 'E', so go on reading */
	if (!write_full(hello, sizeof(hello)))
		printf("hello write failed: %s\n", strerror(errno));

	for (;;)
	{
		unsigned char type;

		if (commits_max >= 0 && commits >= commits_max)
			break;
		rc = read_full(&type, 1, deadline);
		if (rc == -2)
			break;
		if (rc != 0)
		{
			printf("eof\n");
			return 1;
		}
		switch (type)
		{
			case 'H':
				{
					unsigned char b[27];

					if (read_full(b, sizeof(b), deadline) != 0)
						return 1;
					if (memcmp(b, "TRLA", 4) != 0)
					{
						printf("bad magic\n");
						return 1;
					}
					printf("hello protocol=%u frame_version=%u server_version=%u confirmed=%X/%X\n",
						   (b[4] << 8) | b[5], b[6], be32(b + 7),
						   (uint32_t) (be64(b + 19) >> 32), (uint32_t) be64(b + 19));
					if (bad_ack_mid)
					{
						fflush(stdout);
						return bad_ack_mid_message(deadline);
					}
					break;
				}
			case 'F':
				{
					unsigned char h[5];
					uint32_t	len;

					if (read_full(h, sizeof(h), deadline) != 0)
						return 1;
					len = be32(h + 1);
					if (len > 65536)
					{
						printf("chunk too long: %u\n", len);
						return 1;
					}
					frame = realloc(frame, frame_len + len);
					if (read_full(frame + frame_len, len, deadline) != 0)
						return 1;
					frame_len += len;
					if (h[0] & 1)
						break;	/* MORE: keep assembling */
					if (frame_len < 2 || frame[0] != 1)
					{
						printf("bad frame\n");
						return 1;
					}
					if (frame[1] == 'C' && frame_len == 27)
					{
						uint64_t	end = be64(frame + 11);

						printf("frame C len=%zu end_lsn=%X/%X\n", frame_len,
							   (uint32_t) (end >> 32), (uint32_t) end);
						commits++;
						if (ack)
							send_ack(end);
					}
					else if (frame[1] == 'P' && frame_len == 10)
					{
						uint64_t	lsn = be64(frame + 2);

						printf("frame P len=10 lsn=%X/%X\n", (uint32_t) (lsn >> 32), (uint32_t) lsn);
						if (ack)
							send_ack(lsn);
					}
					else
					{
						printf("frame %c len=%zu\n", frame[1], frame_len);
						if (values && frame[1] == 'I')
							print_insert_values(frame, frame_len);
					}
					fflush(stdout);
					frame_len = 0;
					break;
				}
			case 'K':
				{
					unsigned char b[16];

					if (read_full(b, sizeof(b), deadline) != 0)
						return 1;
					printf("keepalive ackable=%X/%X\n", (uint32_t) (be64(b) >> 32), (uint32_t) be64(b));
					break;
				}
			case 'E':
				{
					unsigned char h[2];
					char		msg[1100];
					unsigned	len;

					if (read_full(h, 2, deadline) != 0)
						return 1;
					len = (h[0] << 8) | h[1];
					if (len >= sizeof(msg) || read_full((unsigned char *) msg, len, deadline) != 0)
						return 1;
					msg[len] = '\0';
					printf("error: %s\n", msg);
					return 2;
				}
			default:
				printf("unknown message type 0x%02x\n", type);
				return 1;
		}
	}
	printf("done commits=%ld\n", commits);
	return 0;
}
