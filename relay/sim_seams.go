package relay

import "context"

// Seams for drivers other than Run — the deterministic simulator
// (internal/sim) — which run a Session made with a nil connection: the
// driver hands the session the CopyData messages a server would send,
// decides when Run's idle flushes happen, and reads the acknowledgeable
// position (Stats().DurableEnd) where Run would send a standby status
// update. Everything between — decoding, assembly, spill, chunking, skip
// on resume, publish, advance — is the code Run uses.

// HandleCopyData processes one CopyData message of the replication stream:
// XLogData ('w') or a primary keepalive ('k'). A keepalive must not request
// a reply: a session without a connection cannot send one.
func (s *Session) HandleCopyData(ctx context.Context, data []byte) error {
	return s.handleCopyData(ctx, data)
}

// Flush publishes the assembled units durably and only then advances the
// acknowledgeable position, as Run does when the server has nothing more
// buffered. A session without a connection waits for every publish it
// starts (here and where HandleCopyData fills a batch), so the driver sees
// each one finished, or failed, when the call returns.
func (s *Session) Flush(ctx context.Context) error { return s.flush(ctx) }

// Close waits for the publish in flight, ends the publishing goroutine and
// discards open transactions and their spill files, as Run does when it
// returns.
func (s *Session) Close() {
	s.pl.Close()
	s.asm.Close()
}
