package apply

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/trellara/trellara/internal/mutation"
)

// FlushReporter is a Target whose Commit can return before the transaction
// is durable: the PostgreSQL target with synchronous_commit off. For such
// a target the applier moves the transport cursor, and with it the log's
// retention, only over units whose target transaction the target reports
// flushed. A Target that does not implement it commits durably, and the
// cursor follows each COMMIT.
type FlushReporter interface {
	// WALPositions returns the target's WAL insert position and the
	// position up to which its WAL is durable (flushed), in that order.
	WALPositions(ctx context.Context) (insert, flushed uint64, err error)
	// Sync makes every transaction committed so far durable.
	Sync(ctx context.Context) error
}

// How often the flush-aware cursor asks the target how far its WAL is
// flushed, and how many commits it holds at most before it makes them
// durable itself (Sync).
const (
	// flushPollCommits: a poll after this many commits since the last.
	flushPollCommits = 64
	// flushPollInterval: a poll after a commit when the last poll is
	// older than this.
	flushPollInterval = 50 * time.Millisecond
	// flushIdlePoll: while nothing waits to be applied, the interval of
	// the polls that let the cursor catch up with the target's WAL
	// writer (which flushes asynchronous commits within three times
	// wal_writer_delay, 200 ms by default).
	flushIdlePoll = 20 * time.Millisecond
	// pendingMax bounds the commits awaiting their flush; at the bound
	// the applier calls Sync.
	pendingMax = 4096
)

// pendingCommit is a committed target transaction not yet known durable.
type pendingCommit struct {
	// offset is the transport offset of its last unit.
	offset uint64
	// lsn, once set, is a target WAL position at or past the end of its
	// commit record: the insert position read after the commit returned.
	// Zero until the first poll after the commit.
	lsn uint64
}

// flushCursor is the applier's flush-aware cursor state.
type flushCursor struct {
	fr       FlushReporter // nil: every commit is durable when it returns
	pending  []pendingCommit
	polled   time.Time
	sincePol int
}

// advance is the last step of commit: the target transaction holding units
// up to offset has committed. With a durable commit the cursor moves now.
// With an asynchronous one the commit joins the pending list, and the
// cursor moves over it once the target has flushed it (pollFlushed).
//
// Why this is enough: a target crash loses the unflushed commits and,
// because the checkpoint row commits in the same transaction, the
// checkpoint goes back with them. The cursor never passed them, so on
// restart resume finds the cursor at or behind the recovered checkpoint
// and the lost units are read again and applied once. A crash of this
// process leaves the cursor behind the checkpoint, which then decides
// what is skipped, as with synchronous commits.
func (a *Applier) advance(ctx context.Context, cur Cursor, offset uint64) error {
	fc := &a.flush
	if fc.fr == nil || a.mutated(mutation.CursorBeforeFlush) {
		return a.commitCursor(cur, offset)
	}
	fc.pending = append(fc.pending, pendingCommit{offset: offset})
	fc.sincePol++
	switch {
	case len(fc.pending) >= pendingMax:
		return a.syncFlushed(ctx, cur)
	case fc.sincePol >= flushPollCommits || time.Since(fc.polled) >= flushPollInterval:
		return a.pollFlushed(ctx, cur)
	}
	return nil
}

// pollFlushed reads the target's WAL positions and moves the cursor over
// the pending commits they prove flushed.
//
// A commit's own WAL position is not read: pg_current_wal_lsn() inside
// the transaction is before the commit record, so a flush past it proves
// nothing about the commit. Instead every poll reads the insert position,
// which, read after a commit returned, is at or past the end of that
// commit's record; the commits pending at a poll take that position as
// their bound. A later poll whose flush position reaches the bound proves
// them durable, and so does the same poll when its flush position has
// already reached its insert position (nothing unflushed at all).
func (a *Applier) pollFlushed(ctx context.Context, cur Cursor) error {
	fc := &a.flush
	fctx, cancel := flushContext(ctx)
	insert, flushed, err := fc.fr.WALPositions(fctx)
	cancel()
	if err != nil {
		return a.targetErr(ctx, 0, fmt.Errorf("read the target's WAL flush position: %w", err))
	}
	fc.polled, fc.sincePol = time.Now(), 0
	n := 0 // pending commits proven durable, a prefix
	for i := range fc.pending {
		p := &fc.pending[i]
		if p.lsn == 0 {
			p.lsn = insert
		}
		if n == i && p.lsn <= flushed {
			n = i + 1
		}
	}
	return a.release(cur, n)
}

// syncFlushed makes every commit so far durable (FlushReporter.Sync) and
// moves the cursor over all of them.
func (a *Applier) syncFlushed(ctx context.Context, cur Cursor) error {
	fc := &a.flush
	if len(fc.pending) == 0 {
		return nil
	}
	fctx, cancel := flushContext(ctx)
	err := fc.fr.Sync(fctx)
	cancel()
	if err != nil {
		return a.targetErr(ctx, 0, fmt.Errorf("flush the target's WAL for %d asynchronous commits: %w", len(fc.pending), err))
	}
	fc.polled, fc.sincePol = time.Now(), 0
	return a.release(cur, len(fc.pending))
}

// release moves the cursor to the last of the first n pending commits and
// drops them from the list.
func (a *Applier) release(cur Cursor, n int) error {
	fc := &a.flush
	if n == 0 {
		return nil
	}
	offset := fc.pending[n-1].offset
	fc.pending = fc.pending[:copy(fc.pending, fc.pending[n:])]
	return a.commitCursor(cur, offset)
}

// settleIdle runs while nothing is waiting to be applied: it polls the
// target until every pending commit is flushed (the WAL writer gets there
// on its own), or until a unit arrives. It never waits for a unit longer
// than flushIdlePoll.
func (a *Applier) settleIdle(ctx context.Context, rd *reader, cur Cursor) error {
	for len(a.flush.pending) > 0 && !rd.wait(ctx, flushIdlePoll) {
		if err := a.pollFlushed(ctx, cur); err != nil {
			return err
		}
	}
	return nil
}

// settleExit runs when Run is about to return err (nil: stopped): the
// commits still pending are made durable and the cursor moved over them,
// so a stopped applier leaves the cursor where the target is. After a
// transient error the target is gone or unusable and nothing is tried;
// the pending units are then redelivered and skipped, or, if the target
// lost them, applied again (resume). A cancelled ctx still gets a short
// attempt: no flush poll is ever interrupted (flushContext), so the
// connection is idle then unless a target transaction was.
func (a *Applier) settleExit(ctx context.Context, cur Cursor, err error) error {
	if a.flush.fr == nil || len(a.flush.pending) == 0 || IsTransient(err) {
		return err
	}
	serr := a.syncFlushed(context.WithoutCancel(ctx), cur)
	if err == nil {
		return serr
	}
	if serr != nil {
		a.log.Warn("apply: the cursor stays behind the last asynchronous commits; after a restart they are redelivered and skipped",
			"pending", len(a.flush.pending), "error", serr)
	}
	return err
}

// settleExitTimeout bounds settleExit's Sync, and every flush poll.
const settleExitTimeout = 5 * time.Second

// flushContext is the context of a flush poll or Sync: ctx without its
// cancellation, bounded by settleExitTimeout. A stop that lands while the
// query runs must not interrupt it: pgx closes a connection whose query's
// context ends, and settleExit, which runs next, could then not make the
// pending commits durable, leaving the cursor behind the target.
func flushContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleExitTimeout)
}

// cursorWriter commits Run's transport cursor on a goroutine of its own,
// so that the applying goroutine does not wait for the cursor to be
// durable (the local log writes its cursor file with a file and a
// directory fsync) before it starts the next target transaction.
//
// It is handed only offsets the cursor may move to (commitCursor, called
// once the target holds the units durably: advance), in increasing order,
// and commits the newest one it holds, one commit at a time. The cursor
// therefore lags behind the applier, never ahead of it: a crash in
// between redelivers units the checkpoint recognises and skips, as a
// crash between COMMIT and the cursor always did. close waits for the
// last offset handed over, so Run returns with the cursor where it put it.
type cursorWriter struct {
	a    *Applier
	cur  Cursor
	fail func(error)   // stops Run's loop with the failed commit's error
	wake chan struct{} // an offset is waiting (capacity 1)
	quit chan struct{} // closed by close
	done chan struct{} // closed when the goroutine has returned

	mu   sync.Mutex
	next uint64 // the newest offset handed over and not yet committed
	has  bool
	err  error // the first failed commit; the writer stops there
}

// startCursorWriter starts Run's cursor writer for cur.
func (a *Applier) startCursorWriter(cur Cursor, fail func(error)) *cursorWriter {
	w := &cursorWriter{a: a, cur: cur, fail: fail, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *cursorWriter) loop() {
	defer close(w.done)
	for {
		select {
		case <-w.wake:
		case <-w.quit:
			w.commitNext()
			return
		}
		if !w.commitNext() {
			return
		}
	}
}

// commitNext commits the offset waiting, if any; false once a commit
// failed.
func (w *cursorWriter) commitNext() bool {
	w.mu.Lock()
	offset, has := w.next, w.has
	w.has = false
	failed := w.err != nil
	w.mu.Unlock()
	if failed {
		return false
	}
	if !has {
		return true
	}
	if err := w.cur.Commit(offset); err != nil {
		w.mu.Lock()
		err = w.a.cursorErr(offset, err)
		w.err = err
		w.mu.Unlock()
		w.fail(err)
		return false
	}
	return true
}

// post hands offset over to be committed. It returns the error of an
// earlier commit that failed: the flow stops on it, as it would have
// had the commit run on the applying goroutine.
func (w *cursorWriter) post(offset uint64) error {
	w.mu.Lock()
	err := w.err
	if err == nil {
		w.next, w.has = offset, true
	}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

// close commits the last offset handed over, stops the goroutine and
// returns the error of a failed commit, if any.
func (w *cursorWriter) close() error {
	close(w.quit)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
