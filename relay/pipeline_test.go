package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/relay"
)

// gatedTransport holds every PublishBatch (an fsync that takes as long as
// the test wants) until open is closed; entered says one started.
type gatedTransport struct {
	*memTransport
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
}

func (g *gatedTransport) PublishBatch(ctx context.Context, payloads [][]byte) error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.open
	return g.memTransport.PublishBatch(ctx, payloads)
}

func (g *gatedTransport) release() { g.once.Do(func() { close(g.open) }) }

// While a publish is in flight the session goes on receiving, and neither
// its acknowledgeable position (Stats().DurableEnd, which sendStatus sends)
// nor the flush position the server holds passes what is durable: the
// transactions in flight and those received meanwhile are acknowledged
// only once their publish returned.
func TestAcknowledgedNeverPassesAPublishInFlight(t *testing.T) {
	pgtest.Require(t)
	c := pgtest.Start(t, pgtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := c.Connect(ctx)
	c.Exec(t, schemaSQL)
	if _, err := relay.CreateSlot(ctx, replConn(t, c), "inflight"); err != nil {
		t.Fatal(err)
	}
	tr := &gatedTransport{memTransport: &memTransport{}, entered: make(chan struct{}, 1), open: make(chan struct{})}
	t.Cleanup(tr.release)
	var (
		mu     sync.Mutex
		fenced bool
	)
	s, err := relay.NewSession(replConn(t, c), tr, relay.Resume{}, relay.Options{Slot: "inflight", Publication: "pub", SourceID: "src",
		StatusInterval: 20 * time.Millisecond,
		OnFence:        func(tok string, _ uint64) { mu.Lock(); fenced = fenced || tok == "inflight-end"; mu.Unlock() },
		Stop:           func() bool { mu.Lock(); defer mu.Unlock(); return fenced }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	before := currentLSN(t, conn)
	c.Exec(t, `INSERT INTO ledger VALUES (1)`)
	<-tr.entered // the transaction's publish is in flight, and stays so
	c.Exec(t, `INSERT INTO ledger VALUES (2)`, `INSERT INTO ledger VALUES (3)`)
	committed := currentLSN(t, conn)

	// The session sends a standby status update every 20 ms and asks for a
	// reply; wait until the server has seen several sent after the
	// transactions above were committed, with the publish still held.
	var last time.Time
	for seen := 0; seen < 3; {
		flush, reply := walsenderStatus(t, conn, "inflight")
		if !reply.IsZero() && !reply.Equal(last) {
			if !last.IsZero() {
				seen++
			}
			last = reply
		}
		if flush > before {
			t.Fatalf("the server holds flush position %s for the slot while the publish of the transaction after %s is in flight: acknowledged before durable",
				pglogrepl.LSN(flush), pglogrepl.LSN(before))
		}
		if d := s.Stats().DurableEnd; d > before {
			t.Fatalf("acknowledgeable position %s while the publish of the transaction after %s is in flight", pglogrepl.LSN(d), pglogrepl.LSN(before))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(tr.Units()); n != 0 {
		t.Fatalf("%d units durable while the first publish is held", n)
	}

	// Released: everything becomes durable, then acknowledged.
	tr.release()
	if _, err := relay.EmitFence(ctx, conn, "inflight-end"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("relay: %v", err)
	}
	st := s.Stats()
	if st.DurableEnd < committed || st.Published < 4 {
		t.Fatalf("after the release: %+v; want the three transactions and the fence published and acknowledged past %s", st, pglogrepl.LSN(committed))
	}
	if got := s.Acknowledged(); got != st.DurableEnd {
		t.Fatalf("last status sent at %s, want the acknowledgeable %s", envelope.FormatLSN(got), envelope.FormatLSN(st.DurableEnd))
	}
}

func currentLSN(t testing.TB, conn *pgx.Conn) uint64 {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(l)
}

// walsenderStatus is what the server last heard from the slot's session:
// its flush position and when the status update arrived (zero before the
// first).
func walsenderStatus(t *testing.T, conn *pgx.Conn, slot string) (uint64, time.Time) {
	t.Helper()
	var (
		flush *string
		reply *time.Time
	)
	err := conn.QueryRow(context.Background(), `SELECT r.flush_lsn::text, r.reply_time FROM pg_stat_replication r
		JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, slot).Scan(&flush, &reply)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var l pglogrepl.LSN
	if flush != nil {
		if l, err = pglogrepl.ParseLSN(*flush); err != nil {
			t.Fatal(err)
		}
	}
	if reply == nil {
		return uint64(l), time.Time{}
	}
	return uint64(l), *reply
}
