package relay

import (
	"context"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// readDeadline receives the replication stream with a deadline on the
// connection itself instead of a context per message. A context with a
// deadline per ReceiveMessage cost a timer, a context and a watcher
// goroutine registration for every CopyData message: a tenth of the relay's
// CPU on a stream of small transactions. The deadline is set on the
// socket only when it changes, and the run's context is watched once
// (close stops watching): its cancellation moves the read deadline to the
// past, which ends a read in progress as a timeout that receive reports as
// the context's error.
type readDeadline struct {
	conn *pgconn.PgConn
	nc   net.Conn
	set  time.Time
	stop func() bool
}

func newReadDeadline(ctx context.Context, conn *pgconn.PgConn) *readDeadline {
	r := &readDeadline{conn: conn, nc: conn.Conn()}
	r.stop = context.AfterFunc(ctx, func() { _ = r.nc.SetReadDeadline(time.Unix(1, 0)) })
	return r
}

// receive returns the next message, or a pgconn timeout error
// (pgconn.Timeout) when none arrives by deadline, or ctx's error once ctx
// is done.
func (r *readDeadline) receive(ctx context.Context, deadline time.Time) (pgproto3.BackendMessage, error) {
	if !deadline.Equal(r.set) {
		if err := r.nc.SetReadDeadline(deadline); err != nil {
			return nil, err
		}
		r.set = deadline
	}
	// After setting the deadline: a cancellation from here on moves it to
	// the past (the AfterFunc), one before is seen now.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	msg, err := r.conn.ReceiveMessage(context.Background())
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return msg, err
}

// close stops watching the context and clears the read deadline.
func (r *readDeadline) close() {
	r.stop()
	_ = r.nc.SetReadDeadline(time.Time{})
}
