package sidecar

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// QueueSlots is the decoder queue's size in slots (TRELLARA_QUEUE_SLOTS in
// ext/trellara.h), each 64 KiB.
const QueueSlots = 16

// Queue is the decoder's shared-memory queue as trellara_queue() (the
// extension's SQL function, version 0.3) reports it: one read under the
// queue's lock.
type Queue struct {
	Slots int32 `json:"slots"`
	// Filled are the slots the decoder has published and the socket worker
	// has not taken yet; at Slots the decoder waits.
	Filled    int64 `json:"filled"`
	Published int64 `json:"published"` // slots published since the decoder's start
	Taken     int64 `json:"taken"`     // slots the socket worker has taken
	// Epoch counts decoder (re)starts since the server started.
	Epoch int64 `json:"decoder_epoch"`
	// AckedLSN is the highest position a sidecar has made durable.
	AckedLSN  string `json:"acked_lsn"`
	SocketPID int32  `json:"socket_pid"` // 0: the socket worker is not running
}

// ErrNoQueueFunction: the source database has no trellara_queue(): the
// extension is not created there (the output plugin works without it), or
// is older than 0.3.
var ErrNoQueueFunction = errors.New("the trellara extension's trellara_queue() is not in this database")

// sqlQueue finds trellara_queue() in the extension's schema and calls it;
// no row when the function is not there.
const sqlQueue = `SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_extension e
  JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
  JOIN pg_catalog.pg_proc p ON p.pronamespace = n.oid AND p.proname = 'trellara_queue' AND p.pronargs = 0
  WHERE e.extname = 'trellara'`

// ReadQueue reads the decoder queue over conn (a connection to the
// database the extension is created in). It returns ErrNoQueueFunction,
// with the fix, when the function is not there.
func ReadQueue(ctx context.Context, conn *pgx.Conn) (Queue, error) {
	var q Queue
	var schema string
	if err := conn.QueryRow(ctx, sqlQueue).Scan(&schema); errors.Is(err, pgx.ErrNoRows) {
		return q, fmt.Errorf("%w; fix: CREATE EXTENSION trellara (or ALTER EXTENSION trellara UPDATE) in this database", ErrNoQueueFunction)
	} else if err != nil {
		return q, fmt.Errorf("sidecar: find trellara_queue(): %w", err)
	}
	err := conn.QueryRow(ctx, `SELECT slots, filled, published, taken, decoder_epoch, acked_lsn::text, socket_pid FROM `+schema+`.trellara_queue()`).
		Scan(&q.Slots, &q.Filled, &q.Published, &q.Taken, &q.Epoch, &q.AckedLSN, &q.SocketPID)
	if err != nil {
		return q, fmt.Errorf("sidecar: %s.trellara_queue(): %w", schema, err)
	}
	return q, nil
}

// String is the queue's status line.
func (q Queue) String() string {
	return fmt.Sprintf("%d of %d slots filled (decoder start %d: %d published, %d taken), sidecar durable through %s",
		q.Filled, q.Slots, q.Epoch, q.Published, q.Taken, q.AckedLSN)
}
