package relay

import (
	"context"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// PaceReads makes the connections cfg opens read the replication stream
// in large pieces while the stream is busy (pacedConn). Call it on the
// replication connection's config before connecting; NewSession works
// with or without it.
//
// Why: the walsender sends each pgoutput message with its own send()
// as long as the socket takes it, and a client that keeps up reads each
// one with its own read(). On a catch-up of TPC-B transactions (six
// messages each) a relay faster than the walsender then cost both sides
// a system call per message and the reader's wake-up besides: the
// walsender's CPU doubled and the drain took longer than with a slower
// relay (docs/EVIDENCE.md). Waiting a moment before reading again lets
// the socket fill, so the walsender's sends find it full and batch in
// its output buffer, and one read takes many messages.
func PaceReads(cfg *pgconn.Config) {
	dial := cfg.DialFunc
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newPacedConn(nc), nil
	}
}

// The pacing. A read that returns at once (the data was already there:
// the reader did not wait) is quick. A run of paceAfter quick reads in a
// row means the reader is behind a stream that arrives in pieces faster
// than it is read: from then on, a quick read of less than paceFull bytes
// makes the next read wait paceWait first. A read that had to wait for
// data ends the run. A stream that keeps up (each transaction read as it
// commits, its few messages in a few reads) never reaches paceAfter, so
// pacing adds nothing to its latency.
const (
	// paceBuffer is the most one read takes from the socket.
	paceBuffer = 256 << 10
	// paceAfter quick reads in a row start the pacing.
	paceAfter = 8
	// paceFull: a read of at least this much found a large backlog
	// already; the next read does not wait.
	paceFull = 16 << 10
	// paceQuick: a read that returns within this did not wait for data.
	paceQuick = 50 * time.Microsecond
	// paceWait is the wait before a read after a quick, small one. At the
	// walsender's catch-up rate (tens of MB/s) it lets several kilobytes
	// gather; it bounds the delay pacing adds to any message.
	paceWait = 200 * time.Microsecond
)

// pacedConn reads its connection through a buffer of its own, waiting
// paceWait before a read that follows a quick, small one in a run of
// quick reads. Everything else
// (writes, deadlines, Close) is the connection's own. A read deadline set
// in the past (relay's receive uses one to return only what is buffered)
// ends the socket read as before; what pacedConn holds is served first.
type pacedConn struct {
	net.Conn
	buf   []byte
	r, w  int  // buf[r:w] is read from the socket and not yet returned
	quick int  // socket reads in a row that did not wait for data
	wait  bool // the next socket read waits paceWait first

	now   func() time.Time    // time.Now; tests replace both
	sleep func(time.Duration) // time.Sleep
}

func newPacedConn(nc net.Conn) *pacedConn {
	return &pacedConn{Conn: nc, buf: make([]byte, paceBuffer), now: time.Now, sleep: time.Sleep}
}

func (c *pacedConn) Read(p []byte) (int, error) {
	if c.r == c.w {
		if c.wait {
			c.sleep(paceWait)
		}
		start := c.now()
		n, err := c.Conn.Read(c.buf)
		if n > 0 && c.now().Sub(start) < paceQuick {
			c.quick++
		} else {
			c.quick = 0
		}
		c.wait = c.quick >= paceAfter && n < paceFull
		c.r, c.w = 0, n
		if n == 0 {
			return 0, err
		}
	}
	n := copy(p, c.buf[c.r:c.w])
	c.r += n
	return n, nil
}

// Connect opens a replication connection to connString (which must ask
// for replication=database) with PaceReads, as `trellara run` opens its
// own.
func Connect(ctx context.Context, connString string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	PaceReads(cfg)
	return pgconn.ConnectConfig(ctx, cfg)
}
