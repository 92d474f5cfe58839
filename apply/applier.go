package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// Source yields encoded envelopes in log order. Next blocks until an entry
// is available or ctx is done; offset is the entry's transport offset,
// strictly increasing. The applier copies payload before the next call, so a
// Source may reuse its buffer. The segment log reader has this shape.
type Source interface {
	Next(ctx context.Context) (offset uint64, payload []byte, err error)
}

// Cursor records how far the consumer got. The applier calls Commit with the
// offset of the last unit of a target transaction only after that target
// transaction has committed, so a crash between the two costs a redelivery
// (detected and skipped), never a gap.
type Cursor interface {
	Commit(offset uint64) error
}

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
	// TxnsApplied counts TRANSACTION units applied.
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
}

// Caches and their bounds. Each is cleared when full: a miss costs one
// statement preparation, so forgetting is cheap and memory stays flat.
const (
	planCountMax = 4096
	sqlCacheMax  = 8192
	preparedMax  = 1000
)

// Applier applies one flow's units to a PostgreSQL target.
//
// It owns its connection: nothing else may use the connection while Run is
// in progress, and after Run returns a *TransientError the connection should
// be closed and a new Applier made on a fresh one.
type Applier struct {
	conn *pgx.Conn
	cfg  Config
	log  *slog.Logger
	sql  stateSQL
	lock string // advisory lock key text

	plans    map[uint64]*relPlan
	sqlCache map[string]string
	prepared map[string]struct{}
	keyBuf   []byte
	copyBuf  []byte

	// cp mirrors the target's checkpoint row as of the last commit; the
	// redelivery rule compares against it. Written by Run only; read by
	// Stats and Checkpoint under mu.
	cp       Checkpoint
	progress map[string]*snapshotState
	openQuar map[string]int64 // unit key → id of its open quarantine row

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

// New returns an Applier that applies to conn.
func New(conn *pgx.Conn, cfg Config) (*Applier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Applier{
		conn:     conn,
		cfg:      cfg,
		log:      cfg.Logger.With("flow", cfg.Flow, "source_id", cfg.SourceID),
		sql:      newStateSQL(cfg.Schema),
		lock:     "trellara.apply/" + cfg.Schema + "/" + cfg.Flow + "/" + cfg.SourceID,
		plans:    map[uint64]*relPlan{},
		sqlCache: map[string]string{},
		prepared: map[string]struct{}{},
		progress: map[string]*snapshotState{},
		openQuar: map[string]int64{},
		cp:       Checkpoint{Flow: cfg.Flow, SourceID: cfg.SourceID},
	}, nil
}

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
//
// Errors: *QuarantinedError (a unit could not be applied and was recorded;
// strict mode stops there), *TransientError (reconnect and run again),
// ErrSequence, ErrPartitioned, ErrBusy, ErrWrongSource, or ctx's error.
func (a *Applier) Run(ctx context.Context, src Source, cur Cursor, stop func(Checkpoint) bool) error {
	if !a.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer a.running.Store(false)
	if err := a.start(ctx); err != nil {
		return err
	}
	defer a.unlock(ctx)
	if stop != nil && stop(a.Checkpoint()) {
		return nil
	}
	rctx, cancel := context.WithCancel(ctx)
	rd := a.startReader(rctx, src)
	defer func() {
		cancel()
		<-rd.done
	}()
	for {
		batch, err := rd.next(ctx, a.cfg)
		if err != nil {
			return err
		}
		if err := a.process(ctx, batch, cur); err != nil {
			return err
		}
		if stop != nil && stop(a.Checkpoint()) {
			return nil
		}
	}
}

// start prepares the target and loads the flow's state.
func (a *Applier) start(ctx context.Context) error {
	if err := EnsureSchema(ctx, a.conn, a.cfg.Schema); err != nil {
		return a.targetErr(ctx, 0, err)
	}
	// One applier per flow and target: a session-level advisory lock,
	// released by the server if this process dies.
	var ok bool
	if err := a.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, a.lock).Scan(&ok); err != nil {
		return a.targetErr(ctx, 0, err)
	}
	if !ok {
		return fmt.Errorf("%w (flow %q, source %q, schema %q): stop the other `trellara run` for this flow first",
			ErrBusy, a.cfg.Flow, a.cfg.SourceID, a.cfg.Schema)
	}
	// The cursor moves once COMMIT returns, so COMMIT must mean durable: with
	// synchronous_commit off a target crash could lose a transaction the
	// transport no longer redelivers. 'local' keeps whatever stronger
	// setting (replica acknowledgement) the target already has.
	if _, err := a.conn.Exec(ctx, `SELECT set_config('synchronous_commit', 'local', false)
		WHERE current_setting('synchronous_commit') = 'off'`); err != nil {
		a.unlock(ctx)
		return a.targetErr(ctx, 0, err)
	}
	if err := a.load(ctx); err != nil {
		a.unlock(ctx)
		return a.targetErr(ctx, 0, err)
	}
	// Prepared now, a missing privilege on the Trellara tables shows up
	// before any unit is attempted, and never looks like a data failure.
	for _, q := range []string{a.sql.applyCheckpoint, a.sql.skipCheckpoint, a.sql.upsertProgress, a.sql.markReplayed} {
		if err := a.prepare(ctx, q); err != nil {
			a.unlock(ctx)
			return a.targetErr(ctx, 0, err)
		}
	}
	pending := 0
	for _, s := range a.progress {
		if !s.done {
			pending++
		}
	}
	a.log.Info("apply: starting", "commit_lsn", envelope.FormatLSN(a.cp.CommitLSN), "log_offset", a.cp.Offset,
		"has_offset", a.cp.HasOffset, "snapshots_in_progress", pending, "quarantined_open", len(a.openQuar))
	return nil
}

// load reads the checkpoint, snapshot progress and open quarantine rows.
func (a *Applier) load(ctx context.Context) error {
	f, s := a.cfg.Flow, a.cfg.SourceID
	if _, err := a.conn.Exec(ctx, a.sql.initCheckpoint, f, s); err != nil {
		return err
	}
	cp := Checkpoint{Flow: f, SourceID: s}
	var commit, end string
	var offset *int64
	var at *time.Time
	if err := a.conn.QueryRow(ctx, a.sql.readCheckpoint, f, s).Scan(&commit, &end, &offset, &at,
		&cp.TxnsApplied, &cp.TxnsSkipped, &cp.RowsApplied); err != nil {
		return err
	}
	var err error
	if cp.CommitLSN, err = parseLSN(commit); err != nil {
		return err
	}
	if cp.EndLSN, err = parseLSN(end); err != nil {
		return err
	}
	if offset != nil {
		cp.Offset, cp.HasOffset = uint64(*offset), true
	}
	if at != nil {
		cp.AppliedAt = *at
	}

	progress := map[string]*snapshotState{}
	rows, err := a.conn.Query(ctx, a.sql.readProgress, f, s)
	if err != nil {
		return err
	}
	for rows.Next() {
		var rel string
		var next int64
		var boundary *string
		st := &snapshotState{}
		if err := rows.Scan(&rel, &next, &st.done, &boundary, &st.rows); err != nil {
			rows.Close()
			return err
		}
		st.nextBatch = uint32(next)
		if boundary != nil {
			if st.boundaryLSN, err = parseLSN(*boundary); err != nil {
				rows.Close()
				return err
			}
		}
		progress[rel] = st
	}
	if err := rows.Err(); err != nil {
		return err
	}

	open := map[string]int64{}
	rows, err = a.conn.Query(ctx, a.sql.readOpenQuar, f, s)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		var key string
		if err := rows.Scan(&id, &key); err != nil {
			rows.Close()
			return err
		}
		open[key] = id
	}
	if err := rows.Err(); err != nil {
		return err
	}
	a.mu.Lock()
	a.cp = cp
	a.mu.Unlock()
	a.progress, a.openQuar = progress, open
	return nil
}

func (a *Applier) unlock(ctx context.Context) {
	// The lock must go even when ctx is cancelled, or a reconnecting caller
	// on the same session would find itself busy.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = a.conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, a.lock)
}

// unit is one decoded envelope with its transport position.
type unit struct {
	offset  uint64
	payload []byte
	env     *pb.Envelope
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

// reader moves units from the Source into a bounded queue so that a batch
// can take what is already available without blocking.
type reader struct {
	ch   chan item
	held *item // taken from ch but belonging to the next batch
	done chan struct{}
}

type item struct {
	u   *unit
	err error
}

func (a *Applier) startReader(ctx context.Context, src Source) *reader {
	r := &reader{ch: make(chan item, a.cfg.MaxBatchTxns), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			offset, payload, err := src.Next(ctx)
			var it item
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				it.err = fmt.Errorf("apply: flow %q (source %q): read the transport: %w", a.cfg.Flow, a.cfg.SourceID, err)
			} else {
				it.u, it.err = a.decode(offset, payload)
			}
			select {
			case r.ch <- it:
			case <-ctx.Done():
				return
			}
			if it.err != nil {
				return
			}
		}
	}()
	return r
}

// decode verifies and decodes one transport entry.
func (a *Applier) decode(offset uint64, payload []byte) (*unit, error) {
	payload = bytes.Clone(payload)
	env, err := envelope.Decode(payload)
	if err != nil {
		return nil, fmt.Errorf("apply: flow %q (source %q): entry at log offset %d is not a valid envelope; "+
			"the transport copy is damaged and applying past it would leave a gap (repair the log or reseed the flow): %w",
			a.cfg.Flow, a.cfg.SourceID, offset, err)
	}
	if env.SourceId != a.cfg.SourceID {
		return nil, fmt.Errorf("%w: entry at log offset %d (commit LSN %s) is from source %q, this flow applies source %q",
			ErrWrongSource, offset, envelope.FormatLSN(env.CommitLsn), env.SourceId, a.cfg.SourceID)
	}
	if env.Boundary.Kind == pb.UnitKind_UNIT_KIND_CHUNK {
		return nil, fmt.Errorf("%w (flow %q, log offset %d, commit LSN %s)", ErrPartitioned, a.cfg.Flow, offset, envelope.FormatLSN(env.CommitLsn))
	}
	return &unit{offset: offset, payload: payload, env: env}, nil
}

// next returns the next batch: one snapshot unit, or consecutive
// transactions within the limits, taking only what is already queued after
// the first.
func (r *reader) next(ctx context.Context, cfg Config) ([]*unit, error) {
	var first item
	if r.held != nil {
		first, r.held = *r.held, nil
	} else {
		select {
		case first = <-r.ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("apply: flow %q stopped: %w", cfg.Flow, ctx.Err())
		}
	}
	if first.err != nil {
		return nil, first.err
	}
	batch := []*unit{first.u}
	if first.u.kind() != pb.UnitKind_UNIT_KIND_TRANSACTION {
		return batch, nil
	}
	rows, size := len(first.u.env.Rows), len(first.u.payload)
	for len(batch) < cfg.MaxBatchTxns {
		var it item
		select {
		case it = <-r.ch:
		default:
			return batch, nil
		}
		if it.err != nil || it.u.kind() != pb.UnitKind_UNIT_KIND_TRANSACTION ||
			rows+len(it.u.env.Rows) > cfg.MaxBatchRows || size+len(it.u.payload) > cfg.MaxBatchBytes {
			r.held = &it
			return batch, nil
		}
		batch = append(batch, it.u)
		rows += len(it.u.env.Rows)
		size += len(it.u.payload)
	}
	return batch, nil
}

func (a *Applier) process(ctx context.Context, batch []*unit, cur Cursor) error {
	switch batch[0].kind() {
	case pb.UnitKind_UNIT_KIND_SNAPSHOT:
		return a.processSnapshot(ctx, batch[0], cur)
	case pb.UnitKind_UNIT_KIND_SNAPSHOT_END:
		return a.processSnapshotEnd(ctx, batch[0], cur)
	default:
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
	f, err := a.tryTxns(ctx, units, cur)
	if err != nil || f == nil {
		return err
	}
	if len(units) == 1 {
		return a.quarantine(ctx, units[0], f)
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

// stmtMeta describes one queued statement, to attribute its result.
type stmtMeta struct {
	unit      int // index in the units being applied; -1 for state statements
	plan      *relPlan
	row       *pb.Row
	relation  string
	expectOne bool // UPDATE/DELETE: must match exactly one row
	returnsAt bool // the checkpoint statement: RETURNING applied_at
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
		if u.env.CommitLsn <= last {
			skip[i] = true
			nskip++
			continue
		}
		last, lastApplied = u.env.CommitLsn, u
		napply++
	}
	lastOffset := units[len(units)-1].offset

	a.trimPrepared(ctx)
	tx, err := a.conn.Begin(ctx)
	if err != nil {
		return nil, a.targetErr(ctx, units[0].env.CommitLsn, err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op after Commit

	for _, q := range []string{a.sql.applyCheckpoint, a.sql.skipCheckpoint, a.sql.markReplayed} {
		if err := a.prepare(ctx, q); err != nil {
			return nil, a.targetErr(ctx, units[0].env.CommitLsn, err)
		}
	}
	pl := &pipeline{a: a, tx: tx, units: units}
	rows, msgs := 0, 0
	var replayed []string
	for i, u := range units {
		if skip[i] {
			continue
		}
		n, m, f, err := a.queueTxn(ctx, pl, i, u)
		if f != nil || err != nil {
			return f, err
		}
		rows += n
		msgs += m
		if _, ok := a.openQuar[u.key()]; ok {
			replayed = append(replayed, u.key())
		}
	}
	state := stmtMeta{unit: -1, returnsAt: true}
	var f *failure
	if napply > 0 {
		f, err = pl.queue(ctx, state, a.sql.applyCheckpoint, a.cfg.Flow, a.cfg.SourceID, formatLSN(lastApplied.env.CommitLsn),
			formatLSN(lastApplied.env.EndLsn), int64(lastOffset), int64(napply), int64(nskip), int64(rows))
	} else {
		f, err = pl.queue(ctx, state, a.sql.skipCheckpoint, a.cfg.Flow, a.cfg.SourceID, int64(nskip))
	}
	for _, k := range replayed {
		if f != nil || err != nil {
			break
		}
		f, err = pl.queue(ctx, stmtMeta{unit: -1}, a.sql.markReplayed, a.openQuar[k])
	}
	if f == nil && err == nil {
		f, err = pl.flush(ctx)
	}
	if f != nil || err != nil {
		return f, err
	}
	at := pl.at
	if err := tx.Commit(ctx); err != nil {
		return a.commitErr(ctx, units, err)
	}

	a.mu.Lock()
	if napply > 0 {
		a.cp.CommitLSN, a.cp.EndLSN = lastApplied.env.CommitLsn, lastApplied.env.EndLsn
		a.cp.Offset, a.cp.HasOffset = lastOffset, true
		if at != nil {
			a.cp.AppliedAt = *at
		}
	}
	a.cp.TxnsApplied += int64(napply)
	a.cp.TxnsSkipped += int64(nskip)
	a.cp.RowsApplied += int64(rows)
	a.stats.TxnsApplied += int64(napply)
	a.stats.TxnsSkipped += int64(nskip)
	a.stats.RowsApplied += int64(rows)
	a.stats.MessagesIgnored += int64(msgs)
	a.stats.TargetTxns++
	a.mu.Unlock()
	for _, k := range replayed {
		delete(a.openQuar, k)
	}
	return nil, a.commitCursor(cur, lastOffset)
}

// queueTxn queues the statements of one source transaction. It returns the
// number of data rows and of ignored messages.
func (a *Applier) queueTxn(ctx context.Context, pl *pipeline, ui int, u *unit) (int, int, *failure, error) {
	env := u.env
	rows, msgs := 0, 0
	for i := 0; i < len(env.Rows); i++ {
		r := env.Rows[i]
		switch r.Op {
		case pb.Op_OP_MESSAGE:
			msgs++
			continue
		case pb.Op_OP_TRUNCATE:
			// Relations truncated together must stay together: a table
			// referenced by a foreign key can only be truncated in the same
			// statement as the tables referencing it.
			var names, targets []string
			j := i
			for ; j < len(env.Rows) && env.Rows[j].Op == pb.Op_OP_TRUNCATE && env.Rows[j].TruncateFlags == r.TruncateFlags; j++ {
				p := a.plan(env.Relations[env.Rows[j].RelationIndex])
				names = append(names, p.source)
				targets = append(targets, p.target)
			}
			sql := "TRUNCATE TABLE " + strings.Join(targets, ", ")
			if r.TruncateFlags&truncateRestartIdentity != 0 {
				sql += " RESTART IDENTITY"
			}
			if r.TruncateFlags&truncateCascade != 0 {
				sql += " CASCADE"
			}
			rel := strings.Join(names, ", ")
			if err := a.prepare(ctx, sql); err != nil {
				f, err := a.stmtErr(ctx, u, ui, rel, err)
				return 0, 0, f, err
			}
			if f, err := pl.queue(ctx, stmtMeta{unit: ui, relation: rel}, sql); f != nil || err != nil {
				return 0, 0, f, err
			}
			i = j - 1
			continue
		}
		rel := env.Relations[r.RelationIndex]
		p := a.plan(rel)
		var sql string
		var args []any
		switch r.Op {
		case pb.Op_OP_INSERT:
			sql = p.insertSQL
			args = make([]any, len(r.NewTuple))
			for j, v := range r.NewTuple {
				args[j] = textArg(v)
			}
		case pb.Op_OP_UPDATE, pb.Op_OP_DELETE:
			var err error
			sql, args, err = a.rowStmt(ctx, p, rel, r)
			var ue *unitError
			if errors.As(err, &ue) {
				return 0, 0, &failure{unit: ui, relation: p.source, err: err}, nil
			}
			if err != nil {
				f, err := a.stmtErr(ctx, u, ui, p.source, err)
				return 0, 0, f, err
			}
		default:
			return 0, 0, &failure{unit: ui, relation: p.source, err: &unitError{fmt.Sprintf("row %d has unknown op %s", i, r.Op)}}, nil
		}
		if err := a.prepare(ctx, sql); err != nil {
			f, err := a.stmtErr(ctx, u, ui, p.source, err)
			return 0, 0, f, err
		}
		m := stmtMeta{unit: ui, plan: p, row: r, relation: p.source, expectOne: r.Op != pb.Op_OP_INSERT}
		if f, err := pl.queue(ctx, m, sql, args...); f != nil || err != nil {
			return 0, 0, f, err
		}
		rows++
	}
	return rows, msgs, nil, nil
}

// TRUNCATE option bits (Row.truncate_flags).
const (
	truncateCascade         = 1
	truncateRestartIdentity = 2
)

// prepare makes sql a named prepared statement on first use. Preparing
// ahead, rather than letting the batch describe it, ties a failure such as a
// missing table or column to the relation that caused it.
func (a *Applier) prepare(ctx context.Context, sql string) error {
	if _, ok := a.prepared[sql]; ok {
		return nil
	}
	if _, err := a.conn.Prepare(ctx, sql, sql); err != nil {
		return err
	}
	a.prepared[sql] = struct{}{}
	return nil
}

// trimPrepared bounds the server-side prepared statements (one per distinct
// statement shape). Called between target transactions.
func (a *Applier) trimPrepared(ctx context.Context) {
	if len(a.prepared) < preparedMax {
		return
	}
	// pgx forgets its side even when the server call fails; ours must too.
	_ = a.conn.DeallocateAll(ctx)
	clear(a.prepared)
}

// pipelineStmtsMax bounds the statements sent in one pipeline round trip.
// A source transaction larger than this is sent in several round trips
// inside the same target transaction, so the client's buffers stay bounded
// and the server never has to hold back results while the client is still
// writing.
const pipelineStmtsMax = 2048

// pipeline accumulates the statements of one target transaction and sends
// them in round trips of at most pipelineStmtsMax.
type pipeline struct {
	a     *Applier
	tx    pgx.Tx
	units []*unit
	b     pgx.Batch
	metas []stmtMeta
	at    *time.Time // applied_at returned by the checkpoint statement
}

func (pl *pipeline) queue(ctx context.Context, m stmtMeta, sql string, args ...any) (*failure, error) {
	pl.b.Queue(sql, args...)
	pl.metas = append(pl.metas, m)
	if len(pl.metas) >= pipelineStmtsMax {
		return pl.flush(ctx)
	}
	return nil, nil
}

// flush sends what is queued and checks the results.
func (pl *pipeline) flush(ctx context.Context) (*failure, error) {
	if len(pl.metas) == 0 {
		return nil, nil
	}
	at, f, err := pl.a.runBatch(ctx, pl.tx, &pl.b, pl.metas, pl.units)
	if at != nil {
		pl.at = at
	}
	pl.b = pgx.Batch{}
	pl.metas = pl.metas[:0]
	return f, err
}

// runBatch sends b and checks each result. It returns the checkpoint's
// applied_at.
func (a *Applier) runBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch, metas []stmtMeta, units []*unit) (*time.Time, *failure, error) {
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	var at *time.Time
	for _, m := range metas {
		if m.returnsAt {
			if err := br.QueryRow().Scan(&at); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return nil, nil, fmt.Errorf("apply: flow %q (source %q): the checkpoint row in %s.checkpoints disappeared while applying; "+
						"something else is writing the Trellara schema", a.cfg.Flow, a.cfg.SourceID, a.cfg.Schema)
				}
				return nil, nil, a.targetErr(ctx, units[0].env.CommitLsn, err)
			}
			continue
		}
		tag, err := br.Exec()
		if err != nil {
			if m.unit < 0 {
				return nil, nil, a.targetErr(ctx, units[0].env.CommitLsn, err)
			}
			f, err := a.stmtErr(ctx, units[m.unit], m.unit, m.relation, err)
			return nil, f, err
		}
		if m.expectOne && tag.RowsAffected() != 1 {
			op := "UPDATE"
			if m.row.Op == pb.Op_OP_DELETE {
				op = "DELETE"
			}
			return nil, &failure{unit: m.unit, relation: m.relation, err: &divergenceError{
				op: op, matched: tag.RowsAffected(), key: describeKey(m.plan, m.row)}}, nil
		}
	}
	if err := br.Close(); err != nil {
		return nil, nil, a.targetErr(ctx, units[0].env.CommitLsn, err)
	}
	return at, nil, nil
}

// stmtErr turns an error from a unit's statement into a failure (the data
// was refused) or an error (anything else).
func (a *Applier) stmtErr(ctx context.Context, u *unit, ui int, relation string, err error) (*failure, error) {
	if ctx.Err() != nil || classify(err) != classApply {
		return nil, a.targetErr(ctx, u.env.CommitLsn, err)
	}
	return &failure{unit: ui, relation: relation, err: err, sqlstate: sqlState(err)}, nil
}

// commitErr classifies a failed COMMIT. A deferred constraint is refused
// data that no single statement can be blamed for.
func (a *Applier) commitErr(ctx context.Context, units []*unit, err error) (*failure, error) {
	if ctx.Err() != nil || classify(err) != classApply {
		return nil, a.targetErr(ctx, units[0].env.CommitLsn, err)
	}
	f := &failure{unit: -1, err: err, sqlstate: sqlState(err)}
	if len(units) == 1 {
		f.unit = 0
	}
	return f, nil
}

// targetErr wraps an error that is not about a unit's data.
func (a *Applier) targetErr(ctx context.Context, commitLSN uint64, err error) error {
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

func (a *Applier) commitCursor(cur Cursor, offset uint64) error {
	if cur == nil {
		return nil
	}
	if err := cur.Commit(offset); err != nil {
		return fmt.Errorf("apply: flow %q: commit transport cursor at offset %d (the target already holds these units; "+
			"after a restart they are redelivered and skipped): %w", a.cfg.Flow, offset, err)
	}
	return nil
}

// quarantine records a refused unit in its own target transaction (the
// unit's own transaction was rolled back) and returns the error that stops
// the flow.
func (a *Applier) quarantine(ctx context.Context, u *unit, f *failure) error {
	qe := &QuarantinedError{
		Flow: a.cfg.Flow, SourceID: a.cfg.SourceID, CommitLSN: u.env.CommitLsn, Unit: u.kindName(),
		Relation: f.relation, SQLState: f.sqlstate, ConfigPath: a.cfg.ConfigPath, Err: f.err,
	}
	var commitTime *time.Time
	if us := u.env.CommitTimeUnixMicros; us != 0 {
		t := time.UnixMicro(us).UTC()
		commitTime = &t
	}
	err := a.conn.QueryRow(ctx, a.sql.recordQuarantine, a.cfg.Flow, a.cfg.SourceID, u.key(), u.kindName(),
		formatLSN(u.env.CommitLsn), formatLSN(u.env.EndLsn), commitTime, int64(u.offset), f.relation,
		f.err.Error(), f.sqlstate, u.payload).Scan(&qe.ID)
	if err != nil {
		// Not recorded: the unit was not applied either, so a retry meets
		// the same failure and records it then.
		return a.targetErr(ctx, u.env.CommitLsn, fmt.Errorf("record quarantine (%v): %w", qe, err))
	}
	a.openQuar[u.key()] = qe.ID
	a.mu.Lock()
	a.stats.Quarantined++
	a.mu.Unlock()
	return qe
}
