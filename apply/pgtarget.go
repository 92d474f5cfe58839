package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/schemachange"
)

// pgTarget is the PostgreSQL Target: it owns one connection and turns the
// applier's decisions into SQL. Statements are prepared once per shape and
// pipelined (pgx.Batch) in round trips of at most pipelineStmtsMax.
type pgTarget struct {
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
	types    map[*relPlan][]string // target column types, for set-based statements

	// Folding counters (Stats.FoldedTxns, FoldsRefused), read by Stats
	// while Run writes them.
	foldedTxns, foldsRefused atomic.Int64

	// reseeds are the active reseeds of the flow on this target, as of
	// the last commit (reseed.go).
	reseeds reseedSet

	// whileSent, when set, runs each time a pipeline has been sent and
	// before its results are read: the Applier folds the next batch there
	// (Applier.prefold), while the target executes this one. prefoldOn
	// enables it; pre is what it built, for the next Flush (compact_pg.go),
	// and resetPrepared drops it with the plans it was built from.
	whileSent func()
	prefoldOn bool
	pre       *prefolded
	// prefoldsUsed counts the batches written from pre.
	prefoldsUsed atomic.Int64
}

var _ Target = (*pgTarget)(nil)

func newPGTarget(conn *pgx.Conn, cfg Config) *pgTarget {
	return &pgTarget{
		conn:      conn,
		cfg:       cfg,
		log:       cfg.Logger,
		sql:       newStateSQL(cfg.Schema),
		lock:      "trellara.apply/" + cfg.Schema + "/" + cfg.Flow + "/" + cfg.SourceID,
		plans:     map[uint64]*relPlan{},
		sqlCache:  map[string]string{},
		prepared:  map[string]struct{}{},
		prefoldOn: true,
	}
}

// Start implements Target: schema, the flow's advisory lock, durable
// commits, the flow's state.
func (t *pgTarget) Start(ctx context.Context) (State, error) {
	if err := EnsureSchema(ctx, t.conn, t.cfg.Schema); err != nil {
		return State{}, err
	}
	// One applier per flow and target: a session-level advisory lock,
	// released by the server if this process dies.
	var ok bool
	if err := t.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, t.lock).Scan(&ok); err != nil {
		return State{}, err
	}
	if !ok {
		return State{}, &finalError{fmt.Errorf("%w (flow %q, source %q, schema %q): stop the other `trellara run` for this flow first",
			ErrBusy, t.cfg.Flow, t.cfg.SourceID, t.cfg.Schema)}
	}
	// The session's own commits (quarantine records, Sync) are durable:
	// synchronous_commit off is raised to 'local', which keeps whatever
	// stronger setting (replica acknowledgement) the target already has.
	// The applying transactions set it off for themselves when
	// Config.SynchronousCommit is off (Begin), and the applier then moves
	// the cursor only over what the target has flushed (durable.go).
	if _, err := t.conn.Exec(ctx, `SELECT set_config('synchronous_commit', 'local', false)
		WHERE current_setting('synchronous_commit') = 'off'`); err != nil {
		t.Stop(ctx)
		return State{}, err
	}
	st, err := t.load(ctx)
	if err != nil {
		t.Stop(ctx)
		return State{}, err
	}
	if t.reseeds, err = t.loadReseeds(ctx); err != nil {
		t.Stop(ctx)
		return State{}, err
	}
	// Prepared now, a missing privilege on the Trellara tables shows up
	// before any unit is attempted, and never looks like a data failure.
	for _, q := range []string{t.sql.applyCheckpoint, t.sql.skipCheckpoint, t.sql.upsertProgress, t.sql.markReplayed} {
		if err := t.prepare(ctx, q); err != nil {
			t.Stop(ctx)
			return State{}, err
		}
	}
	return st, nil
}

// load reads the checkpoint, snapshot progress and open quarantine rows.
func (t *pgTarget) load(ctx context.Context) (State, error) {
	f, s := t.cfg.Flow, t.cfg.SourceID
	if _, err := t.conn.Exec(ctx, t.sql.initCheckpoint, f, s); err != nil {
		return State{}, err
	}
	cp := Checkpoint{Flow: f, SourceID: s}
	var commit, end string
	var offset *int64
	var at *time.Time
	if err := t.conn.QueryRow(ctx, t.sql.readCheckpoint, f, s).Scan(&commit, &end, &offset, &at,
		&cp.TxnsApplied, &cp.TxnsSkipped, &cp.RowsApplied); err != nil {
		return State{}, err
	}
	var err error
	if cp.CommitLSN, err = parseLSN(commit); err != nil {
		return State{}, err
	}
	if cp.EndLSN, err = parseLSN(end); err != nil {
		return State{}, err
	}
	if offset != nil {
		cp.Offset, cp.HasOffset = uint64(*offset), true
	}
	if at != nil {
		cp.AppliedAt = *at
	}

	st := State{Checkpoint: cp, Snapshots: map[string]SnapshotProgress{}, OpenQuarantine: map[string]int64{}}
	rows, err := t.conn.Query(ctx, t.sql.readProgress, f, s)
	if err != nil {
		return State{}, err
	}
	for rows.Next() {
		var p SnapshotProgress
		var next int64
		var boundary *string
		if err := rows.Scan(&p.Relation, &next, &p.Done, &boundary, &p.Rows); err != nil {
			rows.Close()
			return State{}, err
		}
		p.NextBatch = uint32(next)
		if boundary != nil {
			if p.BoundaryLSN, err = parseLSN(*boundary); err != nil {
				rows.Close()
				return State{}, err
			}
		}
		st.Snapshots[p.Relation] = p
	}
	if err := rows.Err(); err != nil {
		return State{}, err
	}

	rows, err = t.conn.Query(ctx, t.sql.readOpenQuar, f, s)
	if err != nil {
		return State{}, err
	}
	for rows.Next() {
		var id int64
		var key string
		if err := rows.Scan(&id, &key); err != nil {
			rows.Close()
			return State{}, err
		}
		st.OpenQuarantine[key] = id
	}
	return st, rows.Err()
}

// Stop implements Target: releases the flow's advisory lock.
func (t *pgTarget) Stop(ctx context.Context) {
	// The lock must go even when ctx is cancelled, or a reconnecting caller
	// on the same session would find itself busy.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = t.conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, t.lock)
}

// Quarantine implements Target.
func (t *pgTarget) Quarantine(ctx context.Context, q QuarantineRecord) (int64, error) {
	var id int64
	err := t.conn.QueryRow(ctx, t.sql.recordQuarantine, q.Flow, q.SourceID, q.Key, q.Unit,
		lsn.Format(q.CommitLSN), lsn.Format(q.EndLSN), q.CommitTime, int64(q.Offset), q.Relation,
		q.Error, q.SQLState, q.Envelope).Scan(&id)
	return id, err
}

// CountSkipped implements Target: one statement, so it commits atomically
// on its own.
func (t *pgTarget) CountSkipped(ctx context.Context, n int64) error {
	_, err := t.conn.Exec(ctx, t.sql.skipCheckpoint, t.cfg.Flow, t.cfg.SourceID, n)
	return err
}

// Begin implements Target.
func (t *pgTarget) Begin(ctx context.Context) (TargetTx, error) {
	t.trimPrepared(ctx)
	for _, q := range []string{t.sql.applyCheckpoint, t.sql.skipCheckpoint, t.sql.upsertProgress, t.sql.markReplayed, sqlAsyncCommit, sqlGenericPlans} {
		if err := t.prepare(ctx, q); err != nil {
			return nil, err
		}
	}
	x := &pgTx{t: t, tx: &lazyTx{conn: t.conn}, rs: t.reseeds}
	if t.cfg.SynchronousCommit == SyncCommitOff {
		// Sent with the transaction's first round trip.
		if err := x.queue(ctx, stmtMeta{unit: -1}, sqlAsyncCommit); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// lazyTx is the target transaction on the connection. Its BEGIN costs no
// round trip of its own: it goes at the head of the transaction's first
// pipeline (runBatch), or, when a statement is sent outside the pipeline
// first (DDL, COPY, reseed bookkeeping), ahead of that statement. Either
// way nothing of the transaction reaches the server before its BEGIN, so
// a refusal rolls back everything of it, data and checkpoint together.
type lazyTx struct {
	conn  *pgx.Conn
	begun bool // BEGIN has been sent
	ended bool // COMMIT or ROLLBACK has been sent
}

var _ DB = (*lazyTx)(nil)

// begin sends BEGIN on its own if it has not been sent yet.
func (l *lazyTx) begin(ctx context.Context) error {
	if l.begun {
		return nil
	}
	l.begun = true
	_, err := l.conn.Exec(ctx, "begin")
	return err
}

// Exec runs sql in the transaction.
func (l *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := l.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return l.conn.Exec(ctx, sql, args...)
}

// Query runs sql in the transaction.
func (l *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := l.begin(ctx); err != nil {
		return nil, err
	}
	return l.conn.Query(ctx, sql, args...)
}

// QueryRow runs sql in the transaction.
func (l *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := l.begin(ctx); err != nil {
		return errRow{err}
	}
	return l.conn.QueryRow(ctx, sql, args...)
}

// errRow is a pgx.Row that failed before its query was sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// sendBatch sends b in the transaction, headed by BEGIN when it has not
// been sent yet; began reports that it was (its result comes first).
func (l *lazyTx) sendBatch(ctx context.Context, b *pgx.Batch) (br pgx.BatchResults, began bool) {
	if !l.begun {
		l.begun, began = true, true
		b.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: "begin"}}, b.QueuedQueries...)
	}
	return l.conn.SendBatch(ctx, b), began
}

// commit ends the transaction with COMMIT, as pgx.Tx.Commit does: a
// transaction the server had already failed answers ROLLBACK, which is
// pgx.ErrTxCommitRollback.
func (l *lazyTx) commit(ctx context.Context) error {
	if l.ended {
		return pgx.ErrTxClosed
	}
	if !l.begun {
		l.ended = true
		return nil // nothing was sent
	}
	l.ended = true
	tag, err := l.conn.Exec(ctx, "commit")
	if err != nil {
		if l.conn.PgConn().TxStatus() != 'I' {
			_ = l.conn.Close(ctx) // the connection's state is unknown
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// rollback ends the transaction with ROLLBACK; a no-op after commit or
// when nothing was sent. As with pgx.Tx.Rollback, a failed ROLLBACK
// closes the connection: its state is unknown.
func (l *lazyTx) rollback(ctx context.Context) {
	if l.ended || !l.begun {
		l.ended = true
		return
	}
	l.ended = true
	if _, err := l.conn.Exec(ctx, "rollback"); err != nil {
		_ = l.conn.Close(ctx)
	}
}

// sqlAsyncCommit makes the current target transaction commit
// asynchronously (SET LOCAL synchronous_commit = off, as a statement
// that can be prepared and pipelined).
const sqlAsyncCommit = `SELECT pg_catalog.set_config('synchronous_commit', 'off', true)`

// sqlGenericPlans makes the current target transaction plan its prepared
// statements generically (SET LOCAL plan_cache_mode = force_generic_plan).
// A folded batch's set-based statements need it: a custom plan sees the
// array parameters' length, and for a thousand keys against a large table
// it costs a hash join over a sequential scan of the whole table above a
// thousand index lookups, and picks it (on the first five executions of
// each statement, before the plan cache settles on the generic plan, and
// on every execution after the statements are re-prepared). The generic
// plan, not knowing the length, looks the keys up through the index, and
// is planned once, not at every execution.
const sqlGenericPlans = `SELECT pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true)`

// sqlWALPositions reads the target's WAL insert and flush positions.
const sqlWALPositions = `SELECT (pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8,
	(pg_catalog.pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::int8`

// WALPositions implements FlushReporter.
func (t *pgTarget) WALPositions(ctx context.Context) (insert, flushed uint64, err error) {
	var i, f int64
	if err := t.conn.QueryRow(ctx, sqlWALPositions).Scan(&i, &f); err != nil {
		return 0, 0, err
	}
	return uint64(i), uint64(f), nil
}

// Sync implements FlushReporter: one synchronous write (adding nothing to
// the checkpoint's skipped count) in the session, whose commits are
// durable, flushes the WAL up to its commit record and so every commit
// before it.
func (t *pgTarget) Sync(ctx context.Context) error {
	return t.CountSkipped(ctx, 0)
}

// prepare makes sql a named prepared statement on first use. Preparing
// ahead, rather than letting the batch describe it, ties a failure such as a
// missing table or column to the relation that caused it.
func (t *pgTarget) prepare(ctx context.Context, sql string) error {
	if _, ok := t.prepared[sql]; ok {
		return nil
	}
	if _, err := t.conn.Prepare(ctx, sql, sql); err != nil {
		return err
	}
	t.prepared[sql] = struct{}{}
	return nil
}

// trimPrepared bounds the server-side prepared statements (one per distinct
// statement shape). Called between target transactions.
func (t *pgTarget) trimPrepared(ctx context.Context) {
	if len(t.prepared) < preparedMax {
		return
	}
	// pgx forgets its side even when the server call fails; ours must too.
	_ = t.conn.DeallocateAll(ctx)
	clear(t.prepared)
}

// refusal turns an error from a unit's statement into a *Refusal (the data
// was refused) or leaves it as it is (anything else).
func (t *pgTarget) refusal(ctx context.Context, unit int, relation string, err error) error {
	if ctx.Err() != nil || classify(err) != classApply {
		return err
	}
	return &Refusal{Unit: unit, Relation: relation, SQLState: sqlState(err), Err: err}
}

// pgTx is one target transaction on the pgTarget's connection.
type pgTx struct {
	t     *pgTarget
	tx    *lazyTx
	b     pgx.Batch
	metas []stmtMeta
	at    *time.Time // applied_at returned by the checkpoint statement
	// deferred TRANSACTION units, folded together at Flush (compact.go).
	deferred []deferredUnit
	// folded counts the units written folded, for Stats at commit.
	folded int
	// rs are the active reseeds as of this transaction (reseed.go);
	// rsOwned once the transaction changed its own copy.
	rs      reseedSet
	rsOwned bool
	// barrierIDs are the DDL barriers this transaction recorded
	// (barriers.go); their commit_at is stamped just before COMMIT.
	barrierIDs []string
	// genericPlans once sqlGenericPlans is queued in this transaction.
	genericPlans bool
}

// stmtMeta describes one queued statement, to attribute its result.
type stmtMeta struct {
	unit      int // the unit number given to Apply; -1 for state statements
	plan      *relPlan
	row       *pb.Row
	relation  string
	expectOne bool // UPDATE/DELETE: must match exactly one row
	returnsAt bool // the checkpoint statement: RETURNING applied_at
	// Set-based statements of a folded batch (unit netUnit): how many rows
	// the statement must affect, and its verb for the message.
	expectRows int64
	op         string
}

// Apply implements TargetTx. Whole-transaction units are deferred so a
// batch of them can be folded into set-based statements at Flush; their
// row counts are known now.
func (x *pgTx) Apply(ctx context.Context, ui int, env *pb.Envelope) (int, int, error) {
	if carriesDDLEvents(env) {
		if err := x.applyBarrier(ctx, ui, env); err != nil {
			return 0, 0, err
		}
	}
	if env.GetBoundary().GetKind() == pb.UnitKind_UNIT_KIND_TRANSACTION {
		rows, msgs := 0, 0
		for _, r := range env.Rows {
			switch r.Op {
			case pb.Op_OP_MESSAGE:
				msgs++
			case pb.Op_OP_INSERT, pb.Op_OP_UPDATE, pb.Op_OP_DELETE:
				rows++
			}
		}
		x.deferred = append(x.deferred, deferredUnit{ui: ui, env: env})
		return rows, msgs, nil
	}
	if err := x.applyDeferred(ctx); err != nil {
		return 0, 0, err
	}
	rows, msgs, err := x.applyRows(ctx, ui, env)
	if err != nil {
		return 0, 0, err
	}
	return rows, msgs, x.reseedPass(ctx, ui, env)
}

// applyBarrier runs the target DDL of a DDL barrier unit in this
// transaction, after everything queued before it and before the unit's
// rows, so the change and the first rows of the new shape commit together.
// The statements are idempotent (schemachange.Statement): a barrier the
// relay emits again after a crash changes nothing.
func (x *pgTx) applyBarrier(ctx context.Context, ui int, env *pb.Envelope) error {
	if err := x.Flush(ctx); err != nil {
		return err
	}
	t := x.t
	if err := x.recordBarriers(ctx, env); err != nil {
		return err
	}
	for _, d := range env.DdlEvents {
		if d.Kind == envelope.ReseedKind {
			// A blocked change a reseed took over: no target DDL; from
			// here on the reseed's shadow table takes the relation's rows.
			rel := d.Relation
			if err := x.activateReseed(ctx, env, func(st ReseedState) bool { return st.Relation == rel }); err != nil {
				return err
			}
			if !x.replacing(rel) {
				// Its reseed already handed off (the table is in its new
				// shape), or has not reached this target: its begin
				// watermark activates it.
				t.log.Info("apply: a reseed takeover barrier with no reseed copying here", "relation", rel,
					"commit_lsn", envelope.FormatLSN(env.CommitLsn), "resume", shell.Trellara("reseed", t.cfg.ConfigPath, "--table", rel))
			}
			continue
		}
		if d.Kind == envelope.AddTableKind {
			if err := x.createTable(ctx, ui, env, d); err != nil {
				return err
			}
			continue
		}
		if d.Column == "" {
			continue
		}
		var rel *pb.Relation
		for _, r := range env.Relations {
			if relationName(r) == d.Relation {
				rel = r
			}
		}
		if rel == nil {
			return fmt.Errorf("apply: DDL barrier at commit LSN %s: %s of %s names no relation of the unit",
				envelope.FormatLSN(env.CommitLsn), d.Kind, d.Relation)
		}
		p := t.plan(rel)
		stmt := schemachange.Statement(p.target, schemachange.Kind(d.Kind), d.OldColumn, d.Column, d.ColumnType)
		if stmt == "" {
			return fmt.Errorf("apply: DDL barrier at commit LSN %s: %s of %s.%s is not a change Trellara applies; see %s",
				envelope.FormatLSN(env.CommitLsn), d.Kind, d.Relation, d.Column, shell.Trellara("schema ddl-plan", t.cfg.ConfigPath))
		}
		if _, err := x.tx.Exec(ctx, stmt); err != nil {
			return t.refusal(ctx, ui, p.source, err)
		}
	}
	// Statements prepared before the change have the old column types as
	// parameter types: prepare again.
	return t.resetPrepared(ctx)
}

// resetPrepared forgets every prepared statement and plan after the
// target's tables changed under them (a DDL barrier, a reseed handoff)
// and prepares the state statements again.
func (t *pgTarget) resetPrepared(ctx context.Context) error {
	if err := t.conn.DeallocateAll(ctx); err != nil {
		return err
	}
	clear(t.prepared)
	clear(t.plans)
	clear(t.types)
	t.pre = nil
	for _, q := range []string{t.sql.applyCheckpoint, t.sql.skipCheckpoint, t.sql.upsertProgress, t.sql.markReplayed} {
		if err := t.prepare(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// applyRows writes env's changes one statement per row.
func (x *pgTx) applyRows(ctx context.Context, ui int, env *pb.Envelope) (int, int, error) {
	t := x.t
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
				if x.replacing(relationName(env.Relations[env.Rows[j].RelationIndex])) {
					continue
				}
				p := t.plan(env.Relations[env.Rows[j].RelationIndex])
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
			if len(targets) == 0 {
				i = j - 1
				continue
			}
			if err := t.prepare(ctx, sql); err != nil {
				return 0, 0, t.refusal(ctx, ui, rel, err)
			}
			if err := x.queue(ctx, stmtMeta{unit: ui, relation: rel}, sql); err != nil {
				return 0, 0, err
			}
			i = j - 1
			continue
		}
		rel := env.Relations[r.RelationIndex]
		if x.replacing(relationName(rel)) {
			rows++ // written to the reseed's shadow table (reseedPass)
			continue
		}
		p := t.plan(rel)
		var sql string
		var args []any
		switch r.Op {
		case pb.Op_OP_INSERT:
			// A run of inserts of one table is one COPY: the same rows,
			// input functions and row triggers (as native logical
			// replication's apply, COPY fires no rules and no
			// statement-level triggers per row).
			if n := insertRun(env, i); n > 0 {
				if err := x.copyIn(ctx, ui, p, env.Rows[i:i+n], p.source); err != nil {
					return 0, 0, err
				}
				rows += n
				i += n - 1
				continue
			}
			sql = p.insertSQL
			args = make([]any, len(r.NewTuple))
			for j, v := range r.NewTuple {
				args[j] = textArg(v)
			}
		case pb.Op_OP_UPDATE, pb.Op_OP_DELETE:
			var err error
			sql, args, err = t.rowStmt(ctx, p, rel, r)
			var ue *unitError
			if errors.As(err, &ue) {
				return 0, 0, &Refusal{Unit: ui, Relation: p.source, Err: err}
			}
			if err != nil {
				return 0, 0, t.refusal(ctx, ui, p.source, err)
			}
		default:
			return 0, 0, &Refusal{Unit: ui, Relation: p.source, Err: &unitError{fmt.Sprintf("row %d has unknown op %s", i, r.Op)}}
		}
		if err := t.prepare(ctx, sql); err != nil {
			return 0, 0, t.refusal(ctx, ui, p.source, err)
		}
		m := stmtMeta{unit: ui, plan: p, row: r, relation: p.source, expectOne: r.Op != pb.Op_OP_INSERT}
		if err := x.queue(ctx, m, sql, args...); err != nil {
			return 0, 0, err
		}
		rows++
	}
	return rows, msgs, nil
}

// TRUNCATE option bits (Row.truncate_flags).
const (
	truncateCascade         = 1
	truncateRestartIdentity = 2
)

// Copy implements TargetTx with COPY in text format.
func (x *pgTx) Copy(ctx context.Context, ui int, env *pb.Envelope) error {
	if len(env.Rows) == 0 {
		return nil
	}
	return x.copyIn(ctx, ui, x.t.plan(env.Relations[env.Rows[0].RelationIndex]), env.Rows, env.Boundary.GetSnapshotRelation())
}

// copyIn inserts rows (inserts of p's relation, of unit ui) with one
// COPY, after the statements queued before them.
func (x *pgTx) copyIn(ctx context.Context, ui int, p *relPlan, rows []*pb.Row, relation string) error {
	t := x.t
	if err := x.Flush(ctx); err != nil {
		return err
	}
	buf := t.copyBuf[:0]
	for _, r := range rows {
		buf = appendCopyRow(buf, r.NewTuple)
	}
	if cap(buf) <= copyBufKeepMax {
		t.copyBuf = buf
	}
	if err := x.tx.begin(ctx); err != nil {
		return err
	}
	if _, err := t.conn.PgConn().CopyFrom(ctx, bytes.NewReader(buf), p.copySQL); err != nil {
		return t.refusal(ctx, ui, relation, err)
	}
	return nil
}

// copyRunMin is the shortest run of inserts applyRows writes with COPY
// rather than one INSERT each: below it the COPY's own round trip costs
// more than the statements it replaces.
const copyRunMin = 32

// insertRun is the length of the run of inserts of one relation starting
// at row i of env, or 0 when it is shorter than copyRunMin.
func insertRun(env *pb.Envelope, i int) int {
	r := env.Rows[i]
	j := i + 1
	for j < len(env.Rows) && env.Rows[j].Op == pb.Op_OP_INSERT && env.Rows[j].RelationIndex == r.RelationIndex {
		j++
	}
	if j-i < copyRunMin {
		return 0
	}
	return j - i
}

// copyBufKeepMax bounds the COPY buffer kept between batches; a larger one
// is used once and left to the garbage collector.
const copyBufKeepMax = 8 << 20

// SetProgress implements TargetTx.
func (x *pgTx) SetProgress(ctx context.Context, p SnapshotProgress) error {
	var boundary any
	if p.Done {
		boundary = lsn.Format(p.BoundaryLSN)
	}
	return x.queue(ctx, stmtMeta{unit: -1}, x.t.sql.upsertProgress, x.t.cfg.Flow, x.t.cfg.SourceID, p.Relation,
		int64(p.NextBatch), p.Done, boundary, p.Rows)
}

// SetCheckpoint implements TargetTx.
func (x *pgTx) SetCheckpoint(ctx context.Context, u CheckpointUpdate) error {
	t := x.t
	m := stmtMeta{unit: -1, returnsAt: true}
	if !u.MovesPosition {
		return x.queue(ctx, m, t.sql.skipCheckpoint, t.cfg.Flow, t.cfg.SourceID, u.TxnsSkipped)
	}
	var commit, end any
	if u.MovesLSN {
		commit, end = lsn.Format(u.CommitLSN), lsn.Format(u.EndLSN)
	}
	return x.queue(ctx, m, t.sql.applyCheckpoint, t.cfg.Flow, t.cfg.SourceID, commit, end,
		int64(u.Offset), u.TxnsApplied, u.TxnsSkipped, u.RowsApplied)
}

// MarkReplayed implements TargetTx.
func (x *pgTx) MarkReplayed(ctx context.Context, id int64) error {
	return x.queue(ctx, stmtMeta{unit: -1}, x.t.sql.markReplayed, id)
}

// Commit implements TargetTx.
func (x *pgTx) Commit(ctx context.Context) (time.Time, error) {
	if err := x.Flush(ctx); err != nil {
		return time.Time{}, err
	}
	if err := x.commitBarriers(ctx); err != nil {
		return time.Time{}, err
	}
	if err := x.tx.commit(ctx); err != nil {
		// A deferred constraint is refused data that no single statement
		// can be blamed for.
		return time.Time{}, x.t.refusal(ctx, -1, "", err)
	}
	x.t.foldedTxns.Add(int64(x.folded))
	if x.rsOwned {
		x.t.reseeds = x.rs
	}
	if x.at != nil {
		return *x.at, nil
	}
	return time.Time{}, nil
}

// Rollback implements TargetTx.
func (x *pgTx) Rollback(ctx context.Context) { x.tx.rollback(ctx) }

// pipelineStmtsMax bounds the statements sent in one pipeline round trip.
// A source transaction larger than this is sent in several round trips
// inside the same target transaction, so the client's buffers stay bounded
// and the server never has to hold back results while the client is still
// writing.
const pipelineStmtsMax = 2048

func (x *pgTx) queue(ctx context.Context, m stmtMeta, sql string, args ...any) error {
	x.b.Queue(sql, args...)
	x.metas = append(x.metas, m)
	if len(x.metas) >= pipelineStmtsMax {
		return x.Flush(ctx)
	}
	return nil
}

// Flush implements TargetTx: sends what is queued and checks each result.
func (x *pgTx) Flush(ctx context.Context) error {
	if len(x.deferred) > 0 {
		if err := x.applyDeferred(ctx); err != nil {
			return err
		}
	}
	if len(x.metas) == 0 {
		return nil
	}
	err := x.runBatch(ctx)
	x.b = pgx.Batch{}
	// Reused, but not holding on to the rows just sent.
	clear(x.metas)
	x.metas = x.metas[:0]
	return err
}

func (x *pgTx) runBatch(ctx context.Context) error {
	t := x.t
	br, began := x.tx.sendBatch(ctx, &x.b)
	defer br.Close()
	if t.whileSent != nil {
		t.whileSent()
	}
	if began {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	for _, m := range x.metas {
		if m.returnsAt {
			var at *time.Time
			if err := br.QueryRow().Scan(&at); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return &finalError{fmt.Errorf("apply: flow %q (source %q): the checkpoint row in %s.checkpoints disappeared while applying; "+
						"something else is writing the Trellara schema", t.cfg.Flow, t.cfg.SourceID, t.cfg.Schema)}
				}
				return err
			}
			if at != nil {
				x.at = at
			}
			continue
		}
		tag, err := br.Exec()
		if m.unit == netUnit {
			// A folded batch: the failing transaction is unknown; the
			// applier retries the batch one transaction at a time.
			if err == nil && tag.RowsAffected() != m.expectRows {
				err = &Refusal{Unit: -1, Relation: m.relation, Err: &unitError{fmt.Sprintf(
					"a folded %s on %s affected %d rows, not %d: the target differs from the source", m.op, m.relation, tag.RowsAffected(), m.expectRows)}}
			} else if err != nil {
				err = t.refusal(ctx, -1, m.relation, err)
			}
			if err != nil {
				var r *Refusal
				if errors.As(err, &r) {
					t.foldsRefused.Add(1)
				}
				return err
			}
			continue
		}
		if err != nil {
			if m.unit < 0 {
				return err
			}
			return t.refusal(ctx, m.unit, m.relation, err)
		}
		if m.expectOne && tag.RowsAffected() != 1 {
			op := "UPDATE"
			if m.row.Op == pb.Op_OP_DELETE {
				op = "DELETE"
			}
			return &Refusal{Unit: m.unit, Relation: m.relation, Err: &divergenceError{
				op: op, matched: tag.RowsAffected(), key: describeKey(m.plan, m.row)}}
		}
	}
	return br.Close()
}
