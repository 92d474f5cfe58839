package relay_test

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/relay"
)

// TestRunStopsOnCancelWhileIdle: the session reads with a deadline on the
// socket, not a context per message, so a cancelled context must still
// end a read that is waiting for a server that sends nothing (no
// keepalives: wal_sender_timeout 0, and the walsender stopped; the next
// status update an hour away).
func TestRunStopsOnCancelWhileIdle(t *testing.T) {
	pgtest.Require(t)
	c := pgtest.Start(t, pgtest.Options{Settings: map[string]string{"wal_sender_timeout": "0"}})
	c.Exec(t, schemaSQL)
	ctx := context.Background()
	if _, err := relay.CreateSlot(ctx, replConn(t, c), "idle"); err != nil {
		t.Fatal(err)
	}
	tr := &memTransport{}
	res, err := relay.ResumeFrom(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	s, err := relay.NewSession(replConn(t, c), tr, res, relay.Options{Slot: "idle", Publication: "pub", SourceID: "src",
		StatusInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	// Streaming and idle: the slot is active and nothing is written.
	conn := c.Connect(ctx)
	for {
		si, err := relay.LookupSlot(ctx, conn, "idle")
		if err != nil {
			t.Fatal(err)
		}
		if si.Active {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Stop the walsender so that nothing the server sends can end the
	// read: only the cancellation can.
	var pid int
	if err := conn.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'idle'`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the walsender %d: %v", pid, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	cancel()
	// A hang guard, not a timing claim: without the cancellation the
	// read would wait for the hour-long status interval.
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after its context was cancelled while the server was idle")
	}
}

// countingAcks is an AckStore that counts its durable writes.
type countingAcks struct {
	capture.MemoryAcks
	records atomic.Int64
}

func (a *countingAcks) Record(lsn uint64) error {
	a.records.Add(1)
	return a.MemoryAcks.Record(lsn)
}

// TestIdleAcksAtMostOncePerInterval: an idle session on a source whose
// WAL grows outside the publication gets a keepalive each time the
// walsender catches up, and may acknowledge the server's position, which
// no unit backs, only after recording it durably (Options.Acks). It does
// so at most once per idleAckEvery (a second), not once per keepalive,
// and it does move the slot. Mutation: acknowledge at every idle
// keepalive → dozens of durable writes in the same time, red.
func TestIdleAcksAtMostOncePerInterval(t *testing.T) {
	pgtest.Require(t)
	c := pgtest.Start(t, pgtest.Options{})
	c.Exec(t, schemaSQL, `CREATE TABLE outside (n int)`)
	ctx := context.Background()
	if _, err := relay.CreateSlot(ctx, replConn(t, c), "idleacks"); err != nil {
		t.Fatal(err)
	}
	conn := c.Connect(ctx)
	start, err := relay.LookupSlot(ctx, conn, "idleacks")
	if err != nil {
		t.Fatal(err)
	}
	tr := &memTransport{}
	res, err := relay.ResumeFrom(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	acks := &countingAcks{}
	s, err := relay.NewSession(replConn(t, c), tr, res, relay.Options{Slot: "idleacks", Publication: "pub", SourceID: "src",
		StatusInterval: 10 * time.Millisecond, Acks: acks})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	// Commits outside the publication for 1.5 s, a few milliseconds apart.
	began := time.Now()
	commits := 0
	for time.Since(began) < 1500*time.Millisecond {
		if _, err := conn.Exec(ctx, `INSERT INTO outside VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		commits++
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(began)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	n := acks.records.Load()
	limit := int64(elapsed/time.Second) + 2 // the first at once, then one a second, one more in flight
	t.Logf("%d commits outside the publication in %s; %d durable acknowledgement writes", commits, elapsed.Round(time.Millisecond), n)
	if n > limit {
		t.Errorf("%d durable acknowledgement writes in %s, want at most %d: an idle keepalive acknowledged more than once a second", n, elapsed, limit)
	}
	si, err := relay.LookupSlot(ctx, conn, "idleacks")
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || si.ConfirmedFlush <= start.ConfirmedFlush {
		t.Errorf("the idle session never moved the slot (confirmed %s, created at %s; %d writes)",
			envelope.FormatLSN(si.ConfirmedFlush), envelope.FormatLSN(start.ConfirmedFlush), n)
	}
}
