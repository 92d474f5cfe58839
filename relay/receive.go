package relay

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// bufferedOnly is a read deadline already past. The runtime does not try
// the socket once a deadline has passed, so a receive with it returns only a
// message pgconn has already buffered, or a timeout: the receive would
// block. The context watch and wake use it too.
var bufferedOnly = time.Unix(1, 0)

// errWoken is what receive returns when wake ended it (or would have).
var errWoken = errors.New("relay: receive woken by the publisher")

// readDeadline receives the replication stream with a deadline on the
// connection itself instead of a context per message. A context with a
// deadline per ReceiveMessage cost a timer, a context and a watcher
// goroutine registration for every CopyData message: a tenth of the relay's
// CPU on a stream of small transactions. The deadline is set on the
// socket only when it changes, and the run's context is watched once
// (close stops watching): its cancellation moves the read deadline to the
// past, which ends a read in progress as a timeout that receive reports as
// the context's error. wake does the same from the publishing goroutine.
type readDeadline struct {
	conn  *pgconn.PgConn
	nc    net.Conn
	set   time.Time
	stop  func() bool
	woken atomic.Bool
}

func newReadDeadline(ctx context.Context, conn *pgconn.PgConn) *readDeadline {
	r := &readDeadline{conn: conn, nc: conn.Conn()}
	r.stop = context.AfterFunc(ctx, func() { _ = r.nc.SetReadDeadline(bufferedOnly) })
	return r
}

// receive returns the next message, or a timeout error (wrapping
// os.ErrDeadlineExceeded) when none arrives by deadline, or errWoken after
// wake, or ctx's error once ctx is done.
func (r *readDeadline) receive(ctx context.Context, deadline time.Time) (pgproto3.BackendMessage, error) {
	if !deadline.Equal(r.set) {
		if err := r.nc.SetReadDeadline(deadline); err != nil {
			return nil, err
		}
		r.set = deadline
	}
	// After setting the deadline: a cancellation or wake from here on moves
	// it to the past, one before is seen now.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.woken.Swap(false) {
		r.set = time.Time{}
		return nil, errWoken
	}
	msg, err := r.conn.ReceiveMessage(context.Background())
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// The socket's deadline may be a wake's, not r.set: set it again
		// on the next receive.
		r.set = time.Time{}
		if r.woken.Swap(false) {
			return nil, errWoken
		}
	}
	return msg, err
}

// wake ends a receive in progress, or the next one, with errWoken. It may
// be called from any goroutine.
func (r *readDeadline) wake() {
	r.woken.Store(true)
	_ = r.nc.SetReadDeadline(bufferedOnly)
}

// close stops watching the context and clears the read deadline.
func (r *readDeadline) close() {
	r.stop()
	_ = r.nc.SetReadDeadline(time.Time{})
}
