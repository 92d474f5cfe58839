package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/hoptrace"
	"github.com/trellara/trellara/internal/mutation"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/transport"
)

// Source yields encoded envelopes in log order. Next blocks until an entry
// is available or ctx is done; offset is the entry's transport offset,
// strictly increasing. The applier copies payload before the next call, so a
// Source may reuse its buffer. The segment log reader has this shape.
type Source = transport.Reader

// Rewinder is a Source that can go back to an earlier offset; the local
// segment log's cursor reader is one (transport.CursorReader). Run uses it
// on start to put the target's checkpoint above the transport cursor
// (resume): a target that lost commits the cursor has already passed is
// given them again from the transport. Offsets of a flow's transport start
// at 0.
type Rewinder = transport.Rewinder

// Cursor records how far the consumer got. The applier calls Commit with the
// offset of the last unit of a target transaction only after that target
// transaction has committed, so a crash between the two costs a redelivery
// (detected and skipped), never a gap.
type Cursor = transport.Cursor

// Checkpoint mirrors the flow's checkpoint row on the target.
type Checkpoint struct {
	Flow     string
	SourceID string
	// CommitLSN and EndLSN are those of the last source transaction applied;
	// every source transaction with a commit LSN at or below CommitLSN is in
	// the target. Snapshot batches do not move them.
	CommitLSN uint64
	EndLSN    uint64
	// Offset is the transport offset of the last unit applied; HasOffset is
	// false until one has been.
	Offset    uint64
	HasOffset bool
	// AppliedAt is the target's clock at the last applying transaction.
	AppliedAt time.Time
	// Totals over the flow's lifetime on this target.
	TxnsApplied int64
	TxnsSkipped int64
	RowsApplied int64
}

// Stats are this Applier's counters since New, plus its latest checkpoint.
type Stats struct {
	Checkpoint Checkpoint
	// TxnsApplied counts source transactions applied: TRANSACTION units
	// and complete CHUNK sequences.
	TxnsApplied int64
	// TxnsSkipped counts redelivered units of any kind that were skipped.
	TxnsSkipped int64
	// RowsApplied counts inserted, updated and deleted rows, snapshot rows
	// included.
	RowsApplied int64
	// MessagesIgnored counts logical decoding messages: they carry no table
	// data for a Postgres target.
	MessagesIgnored int64
	SnapshotBatches int64
	Quarantined     int64
	// TargetTxns counts committed target transactions; TxnsApplied divided
	// by it is the achieved batching.
	TargetTxns int64
	// ChunkedTxns counts source transactions applied from CHUNK
	// sequences (also counted in TxnsApplied).
	ChunkedTxns int64
	// DDLBarriers counts DDL barrier units applied: target DDL committed
	// with the first transaction of the new shape.
	DDLBarriers int64
	// FoldedTxns counts source transactions the PostgreSQL target wrote
	// with folded, set-based statements (compact.go) and committed.
	FoldedTxns int64
	// FoldsRefused counts folded batches the PostgreSQL target refused
	// (a row missing or already there, a foreign key between tables of the
	// batch that per-table statements cannot order); each was applied again
	// one transaction at a time, row by row.
	FoldsRefused int64
}

// Caches and their bounds. Each is cleared when full: a miss costs one
// statement preparation, so forgetting is cheap and memory stays flat.
const (
	planCountMax = 4096
	sqlCacheMax  = 8192
	preparedMax  = 1000
)

// Applier applies one flow's units to a target: PostgreSQL (New) or any
// Target (NewWithTarget). It holds the decision logic — redelivery,
// batching, chunk sequencing, quarantine, checkpoint and cursor order —
// and the Target carries it out.
//
// With New it owns its connection: nothing else may use the connection
// while Run is in progress, and after Run returns a *TransientError the
// connection should be closed and a new Applier made on a fresh one.
type Applier struct {
	t   Target
	pg  *pgTarget // nil for other targets
	cfg Config
	log *slog.Logger

	// cp mirrors the target's checkpoint row as of the last commit; the
	// redelivery rule compares against it. Written by Run only; read by
	// Stats and Checkpoint under mu.
	cp       Checkpoint
	progress map[string]*snapshotState
	openQuar map[string]int64 // unit key → id of its open quarantine row
	// broken holds the protections removed for the simulator's mutation
	// tests (NewWithTarget with a mutation.Carrier); empty otherwise.
	broken mutation.Set

	// cursorAt is the last offset committed to the Cursor (cursorSet).
	cursorAt  uint64
	cursorSet bool
	// flush holds the commits of an asynchronously committing target
	// that the cursor waits to see flushed (durable.go).
	flush flushCursor
	// cw commits Run's cursor on a goroutine of its own (durable.go);
	// nil outside Run.
	cw *cursorWriter

	// Step's source and the unit it read but left for the next Step.
	stepSrc  PollSource
	stepHeld *item

	// held is the next batch of transactions, taken from prefeed while
	// the target executed the batch before (prefold); the next batch
	// applied is this one. prefeed is set only while a batch of
	// transactions is applied: a chunk sequence reads its later chunks
	// from the feed, and nothing may be taken ahead of them.
	held    []*unit
	prefeed feed
	// hold is the verify hold being applied up to (hold.go), nil outside
	// one.
	hold *activeHold

	running atomic.Bool
	mu      sync.Mutex
	stats   Stats
}

// snapshotState mirrors one snapshot_progress row.
type snapshotState struct {
	nextBatch   uint32
	done        bool
	boundaryLSN uint64
	rows        int64
}

// New returns an Applier that applies to the PostgreSQL target conn.
func New(conn *pgx.Conn, cfg Config) (*Applier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	pg := newPGTarget(conn, cfg)
	a := newEngine(pg, cfg)
	a.pg = pg
	pg.whileSent = a.prefold
	if cfg.SynchronousCommit == SyncCommitOff {
		a.flush.fr = pg
	}
	return a, nil
}

// NewWithTarget returns an Applier that applies to t. The deterministic
// simulator uses it to run this decision logic against a simulated
// database; Status is not available on such an Applier.
func NewWithTarget(t Target, cfg Config) (*Applier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := newEngine(t, cfg.withDefaults())
	if fr, ok := t.(FlushReporter); ok {
		a.flush.fr = fr
	}
	return a, nil
}

func newEngine(t Target, cfg Config) *Applier {
	a := &Applier{
		t:        t,
		cfg:      cfg,
		log:      cfg.Logger.With("flow", cfg.Flow, "source_id", cfg.SourceID),
		progress: map[string]*snapshotState{},
		openQuar: map[string]int64{},
		cp:       Checkpoint{Flow: cfg.Flow, SourceID: cfg.SourceID},
	}
	if c, ok := t.(mutation.Carrier); ok {
		a.broken = c.ApplierMutations()
	}
	return a
}

// mutated reports whether the protection m is removed (mutation tests).
func (a *Applier) mutated(m mutation.Set) bool { return a.broken.Has(m) }

// Checkpoint returns the checkpoint as of the last target commit.
func (a *Applier) Checkpoint() Checkpoint {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cp
}

// Stats returns the counters; safe to call while Run is in progress.
func (a *Applier) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Checkpoint = a.cp
	if a.pg != nil {
		s.FoldedTxns, s.FoldsRefused = a.pg.foldedTxns.Load(), a.pg.foldsRefused.Load()
	}
	return s
}

// Run reads units from src and applies them until stop returns true for the
// checkpoint after a commit (stop is also asked once before anything is
// read; nil means never), ctx is done, or an error stops the flow.
//
// Batching: consecutive TRANSACTION units that are already available are
// applied together in one target transaction, up to the Config limits.
// Run never waits to fill a batch: a reader goroutine keeps a bounded
// read-ahead queue (MaxBatchTxns units) filled from src, and a batch takes
// what the queue holds when the previous batch commits. SNAPSHOT and
// SNAPSHOT_END units are applied in target transactions of their own.
// A CHUNK sequence (one large source transaction) is applied as one target
// transaction of its own, chunk by chunk, holding one chunk in memory at a
// time (chunk.go).
//
// Resume: when src is a Rewinder, Run first compares the target's
// checkpoint with the transport cursor (resume).
//
// Errors: *QuarantinedError (a unit could not be applied and was recorded;
// strict mode stops there), *TransientError (reconnect and run again),
// *CheckpointBehindError, ErrSequence, ErrPartitioned, ErrBusy,
// ErrWrongSource, or ctx's error.
func (a *Applier) Run(ctx context.Context, src Source, cur Cursor, stop func(Checkpoint) bool) error {
	if err := a.Open(ctx); err != nil {
		return err
	}
	defer a.Close(ctx)
	if rw, ok := src.(Rewinder); ok {
		if err := a.resume(rw); err != nil {
			return err
		}
	}
	if stop != nil && stop(a.Checkpoint()) {
		return nil
	}
	if cur == nil {
		return a.run(ctx, src, cur, stop)
	}
	// A cursor that cannot be committed stops the flow, as it did when
	// the applying goroutine committed it: the writer cancels the loop,
	// which may be waiting for units, and Run returns the cursor's error.
	lctx, stopLoop := context.WithCancelCause(ctx)
	defer stopLoop(nil)
	a.cw = a.startCursorWriter(cur, stopLoop)
	err := a.run(lctx, src, cur, stop)
	w := a.cw
	a.cw = nil
	if cerr := w.close(); cerr != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(lctx), cerr) && errors.Is(err, context.Canceled) {
			return cerr // the loop stopped because the cursor failed
		}
		return errors.Join(err, cerr)
	}
	return err
}

// run is Run's loop, with Run's cursor writer started.
func (a *Applier) run(ctx context.Context, src Source, cur Cursor, stop func(Checkpoint) bool) error {
	rctx, cancel := context.WithCancel(ctx)
	rd := a.startReader(rctx, src)
	a.held = nil
	defer func() {
		cancel()
		<-rd.done
		a.held = nil // read ahead with the reader's queue: the transport gives it again
	}()
	for {
		batch := a.held
		a.held = nil
		if batch == nil {
			if err := a.settleIdle(ctx, rd, cur); err != nil {
				return a.settleExit(ctx, cur, err)
			}
			var err error
			if batch, err = nextBatch(ctx, rd, a.cfg); err != nil {
				return a.settleExit(ctx, cur, err)
			}
		}
		batch = a.holdCut(ctx, batch)
		holdAfter := batchHold(batch) // read now: process may release the batch's units
		err := a.process(ctx, rd, batch, cur)
		batch = nil
		if err != nil {
			return a.settleExit(ctx, cur, err)
		}
		if stop != nil && stop(a.Checkpoint()) {
			return a.settleExit(ctx, cur, nil)
		}
		a.holdAt(ctx, holdAfter)
	}
}

// Open starts the applier on its target (schema, the flow's lock, the
// recorded state) for a driver that calls Step. Run calls it itself.
func (a *Applier) Open(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	st, err := a.t.Start(ctx)
	if err != nil {
		a.running.Store(false)
		if errors.Is(err, ErrBusy) {
			return err
		}
		return a.targetErr(ctx, 0, err)
	}
	progress := map[string]*snapshotState{}
	pending := 0
	for rel, p := range st.Snapshots {
		progress[rel] = &snapshotState{nextBatch: p.NextBatch, done: p.Done, boundaryLSN: p.BoundaryLSN, rows: p.Rows}
		if !p.Done {
			pending++
		}
	}
	open := st.OpenQuarantine
	if open == nil {
		open = map[string]int64{}
	}
	cp := st.Checkpoint
	cp.Flow, cp.SourceID = a.cfg.Flow, a.cfg.SourceID
	a.mu.Lock()
	a.cp = cp
	a.mu.Unlock()
	a.progress, a.openQuar = progress, open
	a.log.Info("apply: starting", "commit_lsn", envelope.FormatLSN(a.cp.CommitLSN), "log_offset", a.cp.Offset,
		"has_offset", a.cp.HasOffset, "snapshots_in_progress", pending, "quarantined_open", len(a.openQuar))
	return nil
}

// resume puts the target's checkpoint, not the transport cursor, in charge
// of where applying starts. The checkpoint is the truth: it commits with
// the data. The cursor is only a hint that moves after the commit, so
// normally it is at or behind the checkpoint's next offset, and what lies
// between is redelivered and skipped. A cursor AHEAD of it means the target
// lost commits the cursor had already passed (restored from a backup,
// failed over to an asynchronous standby); reading on from the cursor
// would leave those transactions out for good. resume rewinds the
// transport to the offset after the checkpoint's unit, so each lost
// transaction is applied again exactly once (everything the target still
// holds is below that offset), or, when the transport no longer holds that
// offset, refuses with *CheckpointBehindError.
func (a *Applier) resume(rw Rewinder) error {
	cp := a.Checkpoint()
	var need uint64 // the first offset the target does not hold
	if cp.HasOffset {
		need = cp.Offset + 1
	}
	at := rw.Position()
	if need >= at {
		return nil
	}
	if oldest := rw.Oldest(); need < oldest {
		return &CheckpointBehindError{Flow: a.cfg.Flow, SourceID: a.cfg.SourceID, CommitLSN: cp.CommitLSN,
			Offset: cp.Offset, HasOffset: cp.HasOffset, Cursor: at, Oldest: oldest, ConfigPath: a.cfg.ConfigPath}
	}
	a.log.Warn("apply: the target's checkpoint is behind the transport cursor: the target lost commits "+
		"(restored from a backup or failed over to an asynchronous standby); applying them again from the transport",
		"commit_lsn", envelope.FormatLSN(cp.CommitLSN), "has_offset", cp.HasOffset, "log_offset", cp.Offset,
		"cursor", at, "rewind_to", need)
	if err := rw.Rewind(need); err != nil {
		return fmt.Errorf("apply: flow %q (source %q): rewind the transport from offset %d to %d, after the target's checkpoint: %w",
			a.cfg.Flow, a.cfg.SourceID, at, need, err)
	}
	return nil
}

// Close releases what Open took.
func (a *Applier) Close(ctx context.Context) {
	a.t.Stop(ctx)
	a.running.Store(false)
}

// Step applies the next batch from src (one target transaction, or one
// whole chunk sequence) for a driver that owns the schedule, such as the
// deterministic simulator: it never waits. It reports false when src has
// nothing to apply now, including a chunk sequence not yet complete in
// src (its partial copy is rolled back and src is sought back to its
// first chunk). Errors are those of Run.
func (a *Applier) Step(ctx context.Context, src PollSource, cur Cursor) (bool, error) {
	f := &pollFeed{a: a, src: src}
	var batch []*unit
	if a.stepSrc == src {
		f.held = a.stepHeld
		batch = a.held
	}
	a.stepSrc, a.stepHeld, a.held = src, nil, nil
	if batch == nil {
		var err error
		batch, err = nextBatch(ctx, f, a.cfg)
		if errors.Is(err, errIdle) {
			if len(a.flush.pending) > 0 {
				return false, a.pollFlushed(ctx, cur)
			}
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	err := a.process(ctx, f, batch, cur)
	if errors.Is(err, errIdle) {
		return false, src.Seek(batch[0].offset)
	}
	// A batch ends at the first unit that does not fit; that unit starts
	// the next one.
	a.stepHeld = f.held
	return err == nil, err
}

// unit is one decoded envelope with its transport position.
type unit struct {
	offset  uint64
	payload []byte
	env     *pb.Envelope
	// bytes is unitBytes, counted against the read-ahead bound.
	bytes int
	// done, for a CHUNK unit, holds the reader back until the chunk has
	// been applied (release), so at most one chunk of a large
	// transaction is in memory.
	done chan struct{}
}

// release lets the reader fetch the entry after a CHUNK unit. Idempotent.
func (u *unit) release() {
	if u.done != nil {
		close(u.done)
		u.done = nil
	}
}

func (u *unit) kind() pb.UnitKind { return u.env.GetBoundary().GetKind() }

// kindName is the unit kind as stored in quarantine.unit.
func (u *unit) kindName() string {
	switch u.kind() {
	case pb.UnitKind_UNIT_KIND_SNAPSHOT:
		return "snapshot"
	case pb.UnitKind_UNIT_KIND_SNAPSHOT_END:
		return "snapshot_end"
	default:
		return "transaction"
	}
}

// key identifies the unit across redeliveries (quarantine.unit_key).
func (u *unit) key() string {
	b := u.env.GetBoundary()
	switch u.kind() {
	case pb.UnitKind_UNIT_KIND_SNAPSHOT:
		return fmt.Sprintf("snapshot/%s/%d", b.GetSnapshotRelation(), b.GetChunkIndex())
	case pb.UnitKind_UNIT_KIND_SNAPSHOT_END:
		return "snapshot_end/" + b.GetSnapshotRelation()
	default:
		return "transaction/" + envelope.FormatLSN(u.env.GetCommitLsn())
	}
}

// feed is where batches come from: the reader goroutine (Run) or a
// PollSource (Step).
type feed interface {
	// one returns the next item, waiting for it; a poll feed with nothing
	// available returns errIdle instead.
	one(ctx context.Context) item
	// ready returns the next item only if it is available without waiting.
	ready() (item, bool)
	// unread pushes it back: the next one or ready returns it.
	unread(it item)
}

// errIdle: a poll feed has nothing available now.
var errIdle = errors.New("apply: nothing available")

type item struct {
	u   *unit
	err error
}

// reader moves units from the Source into a bounded queue so that a batch
// can take what is already available without blocking. The queue is
// bounded twice: by MaxBatchTxns units (the channel) and by the decoded
// bytes of the queued units (queued: readAheadBytes), so read-ahead memory
// does not grow with the size of the transactions waiting in the
// transport. One unit larger than the byte bound is still queued, alone.
// Reading and decoding run on the reader's goroutine, overlapping the
// apply of the batch before.
type reader struct {
	cfg  Config
	ch   chan item
	held *item // taken from ch but belonging to the next batch
	done chan struct{}

	mu     sync.Mutex
	queued int           // envelope bytes of the units in ch
	space  chan struct{} // signalled when units leave ch
}

func (a *Applier) startReader(ctx context.Context, src Source) *reader {
	r := &reader{cfg: a.cfg, ch: make(chan item, a.cfg.MaxBatchTxns), done: make(chan struct{}), space: make(chan struct{}, 1)}
	go func() {
		defer close(r.done)
		var dec decoder
		for {
			offset, payload, err := src.Next(ctx)
			var it item
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				it.err = fmt.Errorf("apply: flow %q (source %q): read the transport: %w", a.cfg.Flow, a.cfg.SourceID, err)
			} else {
				it.u, it.err = a.decode(&dec, offset, payload)
				if it.err == nil && hoptrace.On() {
					hoptrace.Stamp(hoptrace.Read, it.u.env.CommitLsn)
				}
			}
			var wait chan struct{}
			if it.err == nil && it.u.kind() == pb.UnitKind_UNIT_KIND_CHUNK {
				wait = make(chan struct{})
				it.u.done = wait
			}
			if !r.reserve(ctx, it) {
				return
			}
			select {
			case r.ch <- it:
			case <-ctx.Done():
				return
			}
			if it.err != nil {
				return
			}
			if wait != nil {
				// A chunk can be as large as the relay's chunk bound: read
				// the next entry only once this one has been applied.
				select {
				case <-wait:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return r
}

// readAheadBytesMax bounds the read-ahead in decoded bytes (unitBytes),
// whatever MaxBatchBytes allows a batch: a decoded envelope of narrow rows
// is several times its wire size, and a read-ahead of MaxBatchBytes (32
// MiB) of such envelopes held more than the soft memory limit the process
// runs under (internal/flow/memory.go), making the collector run
// continuously. At this bound a backlog of small transactions still
// fills a batch of MaxBatchTxns (a TPC-B transaction decodes to ~2 KiB).
const readAheadBytesMax = 8 << 20

// Decoded sizes of the envelope's parts, for unitBytes.
const (
	rowBytes   = int(unsafe.Sizeof(pb.Row{})) + 8   // the Row and its pointer
	valueBytes = int(unsafe.Sizeof(pb.Value{})) + 8 // the Value and its pointer
)

// unitBytes is the memory a decoded unit holds: its payload (which the
// values' bytes alias, envelope.Decoder) and its rows and values.
func unitBytes(u *unit) int {
	n := len(u.payload) + len(u.env.Rows)*rowBytes
	for _, r := range u.env.Rows {
		n += (len(r.NewTuple) + len(r.OldTuple)) * valueBytes
	}
	return n
}

// itemBytes is what an item counts against the read-ahead byte bound.
func itemBytes(it item) int {
	if it.u == nil {
		return 0
	}
	return it.u.bytes
}

// readAheadBytes is the read-ahead bound: MaxBatchBytes, at most
// readAheadBytesMax.
func (r *reader) readAheadBytes() int { return min(r.cfg.MaxBatchBytes, readAheadBytesMax) }

// reserve waits until it fits the read-ahead byte bound (or the queue is
// empty) and counts it as queued; false when ctx is done.
func (r *reader) reserve(ctx context.Context, it item) bool {
	n := itemBytes(it)
	for {
		r.mu.Lock()
		if r.queued == 0 || r.queued+n <= r.readAheadBytes() {
			r.queued += n
			r.mu.Unlock()
			return true
		}
		r.mu.Unlock()
		select {
		case <-r.space:
		case <-ctx.Done():
			return false
		}
	}
}

// taken uncounts an item received from ch and wakes a waiting reserve.
func (r *reader) taken(it item) item {
	r.mu.Lock()
	r.queued -= itemBytes(it)
	r.mu.Unlock()
	select {
	case r.space <- struct{}{}:
	default:
	}
	return it
}

func (r *reader) one(ctx context.Context) item {
	if r.held != nil {
		it := *r.held
		r.held = nil
		return it
	}
	select {
	case it := <-r.ch:
		return r.taken(it)
	case <-ctx.Done():
		return item{err: fmt.Errorf("apply: flow %q stopped: %w", r.cfg.Flow, ctx.Err())}
	}
}

func (r *reader) ready() (item, bool) {
	if r.held != nil {
		it := *r.held
		r.held = nil
		return it, true
	}
	select {
	case it := <-r.ch:
		return r.taken(it), true
	default:
		return item{}, false
	}
}

func (r *reader) unread(it item) { r.held = &it }

// wait reports whether an item is available within d (or ctx is done,
// for the next call of one to report); the item stays queued.
func (r *reader) wait(ctx context.Context, d time.Duration) bool {
	if r.held != nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case it := <-r.ch:
		r.taken(it)
		r.held = &it
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return true
	}
}

// next returns the next batch (nextBatch).
func (r *reader) next(ctx context.Context, cfg Config) ([]*unit, error) {
	return nextBatch(ctx, r, cfg)
}

// pollFeed reads a PollSource for Step.
type pollFeed struct {
	a    *Applier
	src  PollSource
	held *item
	dec  decoder
}

func (f *pollFeed) one(ctx context.Context) item {
	if it, ok := f.ready(); ok {
		return it
	}
	if err := ctx.Err(); err != nil {
		return item{err: fmt.Errorf("apply: flow %q stopped: %w", f.a.cfg.Flow, err)}
	}
	return item{err: errIdle}
}

func (f *pollFeed) ready() (item, bool) {
	if f.held != nil {
		it := *f.held
		f.held = nil
		return it, true
	}
	offset, payload, ok, err := f.src.Poll(context.Background())
	if err != nil {
		return item{err: fmt.Errorf("apply: flow %q (source %q): read the transport: %w", f.a.cfg.Flow, f.a.cfg.SourceID, err)}, true
	}
	if !ok {
		return item{}, false
	}
	u, err := f.a.decode(&f.dec, offset, payload)
	return item{u: u, err: err}, true
}

func (f *pollFeed) unread(it item) { f.held = &it }

// decoder is a decoding goroutine's state: its envelope.Decoder and the
// block that the units' payload copies are carved from.
type decoder struct {
	envelope.Decoder
	block []byte
}

// payloadBlockBytes is the size of one payload block.
const payloadBlockBytes = 64 << 10

// copyPayload returns a copy of p that nothing else will write: small
// payloads are copied into a shared block (one allocation for many
// units), a larger one gets its own. A block is never reused — it is
// dropped when full and the collector frees it once no unit referencing
// it is live — so a unit's payload, which its values alias, stays
// unchanged however many units are read after it, and a retained unit
// pins at most one block.
func (d *decoder) copyPayload(p []byte) []byte {
	if len(p) > payloadBlockBytes/4 {
		return bytes.Clone(p)
	}
	if len(p) > cap(d.block)-len(d.block) {
		d.block = make([]byte, 0, payloadBlockBytes)
	}
	start := len(d.block)
	d.block = append(d.block, p...)
	return d.block[start:len(d.block):len(d.block)]
}

// decode verifies and decodes one transport entry with dec, the decoding
// goroutine's own decoder. The unit owns its copy of the payload: the
// envelope's values alias it, and its relations are shared with the
// envelopes dec decoded before (read-only, as everything in apply treats
// a decoded envelope).
func (a *Applier) decode(dec *decoder, offset uint64, payload []byte) (*unit, error) {
	payload = dec.copyPayload(payload)
	env, err := dec.Decode(payload)
	if err != nil {
		return nil, fmt.Errorf("apply: flow %q (source %q): entry at log offset %d is not a valid envelope; "+
			"the transport copy is damaged and applying past it would leave a gap (restore the log from a backup, or %s): %w",
			a.cfg.Flow, a.cfg.SourceID, offset, shell.Resnapshot(a.cfg.ConfigPath), err)
	}
	if env.SourceId != a.cfg.SourceID {
		return nil, fmt.Errorf("%w: entry at log offset %d (commit LSN %s) is from source %q, this flow applies source %q",
			ErrWrongSource, offset, envelope.FormatLSN(env.CommitLsn), env.SourceId, a.cfg.SourceID)
	}
	if b := env.Boundary; b.Kind == pb.UnitKind_UNIT_KIND_CHUNK && b.Partition != 0 {
		// Strict mode's chunks are the consecutive parts of one large
		// transaction, all in partition 0; another partition means a
		// partitioned writer, whose chunks interleave with other
		// transactions and need a manifest barrier.
		return nil, fmt.Errorf("%w (flow %q, log offset %d, commit LSN %s, partition %d)",
			ErrPartitioned, a.cfg.Flow, offset, envelope.FormatLSN(env.CommitLsn), b.Partition)
	}
	u := &unit{offset: offset, payload: payload, env: env}
	u.bytes = unitBytes(u)
	return u, nil
}

// nextBatch returns the next batch: one snapshot unit, the first chunk of a
// sequence, or consecutive transactions within the limits, taking only
// what is already available after the first.
func nextBatch(ctx context.Context, f feed, cfg Config) ([]*unit, error) {
	first := f.one(ctx)
	if first.err != nil {
		return nil, first.err
	}
	switch first.u.kind() {
	case pb.UnitKind_UNIT_KIND_TRANSACTION:
		return fillBatch(f, cfg, first.u), nil
	case pb.UnitKind_UNIT_KIND_SNAPSHOT:
		return fillSnapshots(f, cfg, first.u), nil
	}
	return []*unit{first.u}, nil
}

// fillSnapshots is a run of snapshot batches from first: the batches of
// the same relation that follow it in number, ready after it, within the
// limits. processSnapshot applies them as one target transaction.
func fillSnapshots(f feed, cfg Config, first *unit) []*unit {
	return fillRun(f, cfg, first, func([]*unit) bool { return true }, func(last, next *unit) bool {
		lb, nb := last.env.Boundary, next.env.Boundary
		return next.kind() == pb.UnitKind_UNIT_KIND_SNAPSHOT && nb.SnapshotRelation == lb.SnapshotRelation && nb.ChunkIndex == lb.ChunkIndex+1
	})
}

// fillRun is first and the units ready after it that join it: while
// open(run) holds, the next unit is taken if follows(last, next) and the
// run stays within the limits (MaxBatchRows, MaxBatchBytes); the first
// that does not join is left for the next batch.
func fillRun(f feed, cfg Config, first *unit, open func(run []*unit) bool, follows func(last, next *unit) bool) []*unit {
	run := []*unit{first}
	rows, size := len(first.env.Rows), len(first.payload)
	for open(run) {
		it, ok := f.ready()
		if !ok {
			return run
		}
		if it.err != nil || !follows(run[len(run)-1], it.u) ||
			rows+len(it.u.env.Rows) > cfg.MaxBatchRows || size+len(it.u.payload) > cfg.MaxBatchBytes {
			f.unread(it)
			return run
		}
		run = append(run, it.u)
		rows += len(it.u.env.Rows)
		size += len(it.u.payload)
	}
	return run
}

// readyBatch is nextBatch without waiting, for transactions only: nil
// unless a TRANSACTION unit is ready.
func readyBatch(f feed, cfg Config) []*unit {
	it, ok := f.ready()
	if !ok {
		return nil
	}
	if it.err != nil || it.u.kind() != pb.UnitKind_UNIT_KIND_TRANSACTION {
		f.unread(it)
		return nil
	}
	return fillBatch(f, cfg, it.u)
}

// fillBatch is a batch of transactions from first: the transactions
// ready after it, within the limits. A verify hold's fence ends its batch:
// the applier commits up to it and holds there (hold.go).
func fillBatch(f feed, cfg Config, first *unit) []*unit {
	return fillRun(f, cfg, first, func(run []*unit) bool {
		return len(run) < cfg.MaxBatchTxns && holdID(run[len(run)-1].env) == ""
	}, func(_, next *unit) bool { return next.kind() == pb.UnitKind_UNIT_KIND_TRANSACTION })
}

// prefold runs while the target executes a pipeline of the batch being
// applied (pgTarget.whileSent): it takes the next batch if it is already
// read (held) and folds it into its set-based statements now, so the
// target does not wait for that work between the two batches. What it
// builds is a guess: the batch's transactions past the checkpoint as it
// will be, folded with the plans and types known now. Flush uses it only
// for exactly those envelopes under the same plans (takePrefolded), and
// folds anew otherwise (a redelivery, an isolated failure, a DDL
// barrier, a reseed).
func (a *Applier) prefold() {
	if a.prefeed == nil || a.held != nil {
		return
	}
	batch := readyBatch(a.prefeed, a.cfg)
	if batch == nil {
		return
	}
	a.held = batch
	last := a.cp.CommitLSN
	envs := make([]*pb.Envelope, 0, len(batch))
	for _, u := range batch {
		if carriesDDLEvents(u.env) || isHandoff(u.env) {
			return // processTxns splits the batch there
		}
		if u.env.CommitLsn <= last {
			continue
		}
		last = u.env.CommitLsn
		envs = append(envs, u.env)
	}
	if len(envs) >= compactMinUnits {
		a.pg.prefoldEnvs(envs)
	}
}

func (a *Applier) process(ctx context.Context, f feed, batch []*unit, cur Cursor) error {
	switch batch[0].kind() {
	case pb.UnitKind_UNIT_KIND_CHUNK:
		return a.processChunks(ctx, f, batch[0], cur)
	case pb.UnitKind_UNIT_KIND_SNAPSHOT:
		return a.processSnapshot(ctx, batch, cur)
	case pb.UnitKind_UNIT_KIND_SNAPSHOT_END:
		return a.processSnapshotEnd(ctx, batch[0], cur)
	default:
		if a.pg != nil && a.pg.prefoldOn {
			a.prefeed = f
			defer func() { a.prefeed = nil }()
		}
		return a.processTxns(ctx, batch, cur)
	}
}

// failure is a unit that the target refused: its data cannot be applied as
// it is. unit indexes the slice being applied; -1 when the failure cannot be
// attributed (a deferred constraint failing at COMMIT).
type failure struct {
	unit     int
	relation string
	err      error
	sqlstate string
}

// processTxns applies consecutive TRANSACTION units, as one target
// transaction when they all succeed. When one fails, the ones before it are
// committed on their own and the failing one is isolated and quarantined;
// nothing after it is applied.
func (a *Applier) processTxns(ctx context.Context, units []*unit, cur Cursor) error {
	// A DDL barrier starts a target transaction: every transaction before
	// it commits first, then the target DDL and the transactions from the
	// barrier on commit together.
	// A reseed handoff (reseed.go) swaps a target table: it commits alone.
	for i, u := range units {
		if i > 0 && (carriesDDLEvents(u.env) || isHandoff(u.env)) {
			if err := a.processTxns(ctx, units[:i], cur); err != nil {
				return err
			}
			return a.processTxns(ctx, units[i:], cur)
		}
		if i == 0 && len(units) > 1 && isHandoff(u.env) {
			if err := a.processTxns(ctx, units[:1], cur); err != nil {
				return err
			}
			return a.processTxns(ctx, units[1:], cur)
		}
	}
	f, err := a.tryTxns(ctx, units, cur)
	if err != nil || f == nil {
		return err
	}
	if len(units) == 1 {
		return a.quarantine(ctx, units[0], f, cur)
	}
	a.log.Info("apply: a transaction in the batch failed; isolating it", "batch_txns", len(units),
		"first_commit_lsn", envelope.FormatLSN(units[0].env.CommitLsn), "error", f.err)
	if f.unit > 0 {
		// The statements identify the failing transaction: the prefix
		// before it is good and commits as one batch.
		if err := a.processTxns(ctx, units[:f.unit], cur); err != nil {
			return err
		}
		return a.processTxns(ctx, units[f.unit:], cur)
	}
	// The first transaction failed, or the failure surfaced only at COMMIT:
	// one at a time until the failing one is found.
	for i := range units {
		if err := a.processTxns(ctx, units[i:i+1], cur); err != nil {
			return err
		}
	}
	return nil
}

// tryTxns runs one target transaction for units. It returns a failure when
// the target refused a unit's data (nothing committed), an error for
// anything else, and (nil, nil) once the transaction and the cursor have
// committed.
func (a *Applier) tryTxns(ctx context.Context, units []*unit, cur Cursor) (*failure, error) {
	// Redelivery: a transaction at or below the checkpoint (or below one
	// earlier in this batch) is already in the target.
	skip := make([]bool, len(units))
	last := a.cp.CommitLSN
	var lastApplied *unit
	napply, nskip := 0, 0
	for i, u := range units {
		if u.env.CommitLsn <= last && !a.mutated(mutation.SkipDedupe) {
			skip[i] = true
			nskip++
			continue
		}
		last, lastApplied = u.env.CommitLsn, u
		napply++
	}
	lsn := units[0].env.CommitLsn
	if hoptrace.On() {
		for _, u := range units {
			hoptrace.Stamp(hoptrace.Applying, u.env.CommitLsn)
		}
	}
	tx, err := a.t.Begin(ctx)
	if err != nil {
		return nil, a.targetErr(ctx, lsn, err)
	}
	defer tx.Rollback(ctx) // no-op after Commit

	rows, msgs := 0, 0
	var applied []*unit
	for i, u := range units {
		if skip[i] {
			continue
		}
		n, m, err := tx.Apply(ctx, i, u.env)
		if err != nil {
			return a.asFailure(ctx, lsn, err)
		}
		rows += n
		msgs += m
		applied = append(applied, u)
	}
	up := CheckpointUpdate{TxnsSkipped: int64(nskip)}
	if napply > 0 {
		up = CheckpointUpdate{MovesPosition: true, MovesLSN: true, CommitLSN: lastApplied.env.CommitLsn, EndLSN: lastApplied.env.EndLsn,
			Offset: units[len(units)-1].offset, TxnsApplied: int64(napply), TxnsSkipped: int64(nskip), RowsApplied: int64(rows)}
	}
	return a.commit(ctx, tx, txnCommit{units: units, applied: applied, checkpoint: up, messages: msgs}, cur)
}

// targetErr wraps an error that is not about a unit's data.
func (a *Applier) targetErr(ctx context.Context, commitLSN uint64, err error) error {
	var fe *finalError
	if errors.As(err, &fe) {
		return fe.err
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("apply: flow %q stopped: %w", a.cfg.Flow, cerr)
	}
	switch classify(err) {
	case classTransient:
		return &TransientError{Flow: a.cfg.Flow, SourceID: a.cfg.SourceID, CommitLSN: commitLSN, Err: err}
	default:
		at := ""
		if commitLSN != 0 {
			at = " at commit LSN " + envelope.FormatLSN(commitLSN)
		}
		return fmt.Errorf("apply: flow %q (source %q)%s: the target refused an operation that does not depend on the data "+
			"(check the applier role's privileges and the server log): %w", a.cfg.Flow, a.cfg.SourceID, at, err)
	}
}

// quarantine records a refused unit in its own target transaction (the
// unit's own transaction was rolled back) and returns the error that stops
// the flow.
func (a *Applier) quarantine(ctx context.Context, u *unit, f *failure, cur Cursor) error {
	if a.mutated(mutation.DropRefused) {
		return a.dropRefused(ctx, u, cur)
	}
	qe := &QuarantinedError{
		Flow: a.cfg.Flow, SourceID: a.cfg.SourceID, CommitLSN: u.env.CommitLsn, Unit: u.kindName(),
		Relation: f.relation, SQLState: f.sqlstate, ConfigPath: a.cfg.ConfigPath, Err: f.err,
	}
	q := QuarantineRecord{Flow: a.cfg.Flow, SourceID: a.cfg.SourceID, Key: u.key(), Unit: u.kindName(),
		CommitLSN: u.env.CommitLsn, EndLSN: u.env.EndLsn, Offset: u.offset, Relation: f.relation,
		Error: f.err.Error(), SQLState: f.sqlstate, Envelope: u.payload}
	if us := u.env.CommitTimeUnixMicros; us != 0 {
		t := time.UnixMicro(us).UTC()
		q.CommitTime = &t
	}
	id, err := a.t.Quarantine(ctx, q)
	if err != nil {
		// Not recorded: the unit was not applied either, so a retry meets
		// the same failure and records it then.
		return a.targetErr(ctx, u.env.CommitLsn, fmt.Errorf("record quarantine (%v): %w", qe, err))
	}
	qe.ID = id
	a.openQuar[u.key()] = id
	a.mu.Lock()
	a.stats.Quarantined++
	a.mu.Unlock()
	return qe
}

// dropRefused is mutation.DropRefused: the refused unit is passed over as
// if it had been applied.
func (a *Applier) dropRefused(ctx context.Context, u *unit, cur Cursor) error {
	tx, err := a.t.Begin(ctx)
	if err != nil {
		return a.targetErr(ctx, u.env.CommitLsn, err)
	}
	defer tx.Rollback(ctx)
	f, err := a.commit(ctx, tx, txnCommit{units: []*unit{u}, checkpoint: CheckpointUpdate{MovesPosition: true, MovesLSN: true,
		CommitLSN: u.env.CommitLsn, EndLSN: u.env.EndLsn, Offset: u.offset}}, cur)
	if f != nil {
		return a.targetErr(ctx, u.env.CommitLsn, f.err)
	}
	return err
}

// plan and rowStmt are the PostgreSQL target's statement builders, reached
// through the Applier for the statement tests.
func (a *Applier) plan(rel *pb.Relation) *relPlan { return a.pg.plan(rel) }

func (a *Applier) rowStmt(ctx context.Context, p *relPlan, rel *pb.Relation, r *pb.Row) (string, []any, error) {
	return a.pg.rowStmt(ctx, p, rel, r)
}
