package relay_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

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
