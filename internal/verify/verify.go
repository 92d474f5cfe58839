package verify

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/lsn"
)

// DB is one side of the comparison. *pgx.Conn and *pgxpool.Pool both
// satisfy it. Verify holds at most one transaction on it at a time. To hash
// over several connections (Options.Connections) Verify opens more with
// the DB's own configuration, which a *pgx.Conn offers (see configured);
// any other DB hashes on one.
type DB interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// configured is a DB that can say how to open another session like it:
// *pgx.Conn's Config returns a copy of the configuration it connected
// with (server, credentials, TLS and the pinned startup settings).
type configured interface {
	Config() *pgx.ConnConfig
}

const (
	// minServerVersion: hashtextextended appeared in PostgreSQL 11.
	minServerVersion = 110000
	// typedHashingVersion: hash_record_extended appeared in PostgreSQL 14.
	typedHashingVersion = 140000
	// tidRangeVersion: TID range scans, which parallel hashing's page
	// ranges need to read only their pages, appeared in PostgreSQL 14.
	tidRangeVersion = 140000
	// pollFirst and pollMax shape the backoff while waiting for the target
	// checkpoint: quick for an applier a moment behind, gentle for one
	// minutes behind.
	pollFirst = 20 * time.Millisecond
	pollMax   = time.Second
	// rollbackTimeout bounds closing a snapshot after the caller's context
	// ended, so a caller's connection is not left inside a transaction.
	rollbackTimeout = 5 * time.Second
)

// Verify compares opts.Tables between src and dst and says whether the
// target converged. See the package documentation for the method and the
// watermark rule. A divergence is a Result with Verdict Diverged (Behind
// while the target has not reached the watermark), never an
// error; an error means no verdict could be reached (see errors.go).
func Verify(ctx context.Context, src, dst DB, opts Options) (*Result, error) {
	o, specs, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	v := &verifier{
		o:   o,
		src: newSide("source", src, o.Connections),
		dst: newSide("target", dst, o.Connections),
	}
	var held []TableResult
	for _, s := range specs {
		if h, ok := o.Held[s.src.String()]; ok {
			held = append(held, TableResult{Table: s.src.String(), TargetTable: s.dst.String(), Verdict: Held,
				Reasons: []string{h.Reason}, Recovery: h.Recovery,
				Notes: []string{"not compared: capture no longer publishes this table's rows"}})
			continue
		}
		v.tables = append(v.tables, &tableState{spec: s})
	}
	defer v.closeSides(ctx)
	if len(v.tables) == 0 {
		return withHeld(&Result{FormatVersion: FormatVersion, StartedAt: time.Now().UTC(), Verdict: Converged}, held), nil
	}
	r, err := v.run(ctx)
	if err != nil || r == nil {
		return r, err
	}
	return withHeld(r, held), nil
}

// withHeld adds the held tables to r: a result whose compared tables all
// converged is HELD (with the first held table's recovery); one that
// diverged or is behind stays so.
func withHeld(r *Result, held []TableResult) *Result {
	if len(held) == 0 {
		return r
	}
	r.Tables = append(r.Tables, held...)
	if r.Verdict == Converged {
		r.Verdict, r.Recovery = Held, held[0].Recovery
	}
	return r
}

type verifier struct {
	o         Options
	src, dst  *side
	tables    []*tableState
	sourceLSN uint64        // of the latest source snapshot: the one the verdict comes from
	target    Position      // checkpoint read before the latest target snapshot
	checkedAt time.Time     // when target was read
	waited    time.Duration // spent waiting for the target, all rounds
	hashing   Hashing
	notes     []string
}

// side is one database and its current snapshot: the transaction tx on
// the caller's connection and, for parallel hashing, one transaction on
// each extra connection that adopted tx's snapshot. All of them see
// exactly the same rows.
type side struct {
	role string // "source" or "target"
	db   DB
	tx   pgx.Tx
	// open connects another session to db's database; nil when db cannot.
	open func(context.Context) (*pgx.Conn, error)
	want int // connections to hash on, Options.Connections
	// conns are the extra connections, opened at the first snapshot and
	// kept for every round; workers are their snapshot transactions.
	conns   []*pgx.Conn
	opened  bool
	workers []pgx.Tx
	// snapshot is tx's exported snapshot identifier, when parallel.
	snapshot string
	// adopt, when set, is a snapshot exported elsewhere that the next
	// begin takes instead of a fresh one (Options.SourceSnapshot).
	adopt string
	// note says why fewer than want connections hash, once.
	note     string
	encoding string
	version  int
	// native is the trellara extension's C row hash on this side,
	// qualified, when the session can call it (sqlNative); "" otherwise.
	native string
	// nativeTables counts the tables (over all rounds) hashed with native.
	nativeTables int
	// scanRows and scanTime count the first comparison's full-table scans
	// only (totals, and buckets where totals differ), so rows/s is the
	// speed of hashing a table, not of re-checks or drill-downs.
	scanRows int64
	scanTime time.Duration
}

// tableState is one table through all passes.
type tableState struct {
	spec       tableSpec
	srcShape   *shape
	dstShape   *shape
	reasons    []string // shape problems; non-empty means rows were not hashed
	comparable bool
	keySig     string // basis and key columns the buckets were computed with
	srcPlan    plan
	dstPlan    plan
	srcTotal   bucketStat // the whole table; for incomparable tables, count only
	dstTotal   bucketStat
	split      bool  // totals differed (or a re-check of a split table): buckets computed
	buckets    int64 // B, chosen once
	src, dst   map[int64]bucketStat
	mismatched []int64 // sorted bucket ids
	rechecks   int
	samples    []SampleKey
	notes      []string
	// direct is set on a re-check of a table split the round before: its
	// buckets are computed straight away and its totals summed from them,
	// one scan instead of two.
	direct         bool
	newSrc, newDst map[int64]bucketStat
}

// bucketStat is one bucket on one side: row count and exact hash sum.
type bucketStat struct {
	rows int64
	sum  *big.Int
}

func (a bucketStat) equal(b bucketStat) bool {
	if a.rows != b.rows {
		return false
	}
	if a.sum == nil || b.sum == nil {
		return a.sum == b.sum
	}
	return a.sum.Cmp(b.sum) == 0
}

func (v *verifier) run(ctx context.Context) (*Result, error) {
	started := time.Now()
	if err := v.round(ctx, false); err != nil {
		return nil, err
	}
	if err := v.recheck(ctx); err != nil {
		return nil, err
	}
	// Examples come from the snapshots of the last comparison, so they
	// agree with the buckets reported. A BEHIND table gets them too: they
	// show where the target stands (a stuck applier's missing row), and
	// the table says they may only be waiting to be applied.
	for _, t := range v.tables {
		if t.comparable && len(t.mismatched) > 0 {
			if err := v.drill(ctx, t); err != nil {
				return nil, err
			}
		}
	}
	v.endSnapshots(ctx)
	return v.result(started, v.watermark()), nil
}

// round takes a fresh pair of snapshots and compares every table in them:
// the source snapshot, then its WAL position L (the watermark), then, with
// a TargetCheckpoint hook, a wait until the target checkpoint passes L
// (within what is left of WaitCaughtUp), then the target snapshot. When
// the wait succeeds the pair is at a common watermark: the target snapshot
// holds everything the source snapshot saw.
func (v *verifier) round(ctx context.Context, recheck bool) error {
	v.endSnapshots(ctx)
	lsn, err := v.beginSource(ctx)
	if err != nil {
		return err
	}
	v.sourceLSN = lsn
	if v.o.TargetCheckpoint != nil {
		if err := v.waitTarget(ctx, lsn); err != nil {
			return err
		}
	}
	if err := v.dst.begin(ctx, v.o.ParallelWorkers); err != nil {
		return err
	}
	if v.o.TargetSnapshotTaken != nil {
		v.o.TargetSnapshotTaken(ctx)
	}
	if err := v.dst.attach(ctx, v.o.ParallelWorkers); err != nil {
		return err
	}
	if !recheck {
		if err := v.compareServers(); err != nil {
			return err
		}
	}
	return v.compare(ctx, v.tables, recheck)
}

// watermark describes the last round's pair of snapshots; nil without a
// TargetCheckpoint hook.
func (v *verifier) watermark() *Watermark {
	if v.o.TargetCheckpoint == nil {
		return nil
	}
	return &Watermark{
		SourceLSN:        lsn.LSN(v.sourceLSN),
		TargetCheckpoint: lsn.LSN(v.target.EndLSN),
		Waited:           v.waited,
		CheckedAt:        v.checkedAt.UTC(),
		TargetAppliedAt:  v.target.AppliedAt,
	}
}

// recheck compares again while something differs at a common watermark,
// each round in a fresh pair of snapshots (round). The target snapshot of
// a caught-up round may already hold changes the source snapshot did not
// see, so a difference can be the target being ahead; one that survives a
// round unchanged is real. A round that did not reach its watermark ends
// the checks: the wait budget is spent, and another round would compare
// against the same stale target. Without a TargetCheckpoint hook there is
// nothing to wait for, so nothing is re-checked.
//
// Every round compares every table and every bucket anew: the verdict and
// the watermark come from the last round's one pair of snapshots. Keeping
// an earlier round's numbers for what matched then would answer CONVERGED
// for a table, or a bucket, that differs at the watermark reported.
func (v *verifier) recheck(ctx context.Context) error {
	if v.o.TargetCheckpoint == nil {
		return nil
	}
	for round := 0; round < v.o.RechecksMax; round++ {
		if !v.differs() || v.target.EndLSN < v.sourceLSN {
			return nil
		}
		before := fingerprint(v.tables)
		if err := v.round(ctx, true); err != nil {
			return err
		}
		for _, t := range v.tables {
			t.rechecks++
		}
		if fingerprint(v.tables) == before {
			return nil // an identical picture will not change either
		}
	}
	return nil
}

// differs says whether any table differs in the current snapshots.
func (v *verifier) differs() bool {
	for _, t := range v.tables {
		if !t.comparable || len(t.mismatched) > 0 {
			return true
		}
	}
	return false
}

// fingerprint summarises what differs, to tell whether a round changed it.
func fingerprint(ts []*tableState) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "%s|%v|%q|%d:%v|%d:%v|", t.spec.src, t.comparable, t.reasons, t.srcTotal.rows, t.srcTotal.sum, t.dstTotal.rows, t.dstTotal.sum)
		for _, id := range t.mismatched {
			s, d := t.src[id], t.dst[id]
			fmt.Fprintf(&b, "%d:%d:%v:%d:%v,", id, s.rows, s.sum, d.rows, d.sum)
		}
		b.WriteString(";")
	}
	return b.String()
}

// beginSource opens the source snapshot and then reads the source WAL
// position, so every transaction the snapshot sees committed before it.
func (v *verifier) beginSource(ctx context.Context) (uint64, error) {
	if v.o.SourceSnapshot != nil {
		name, at, done, err := v.o.SourceSnapshot(ctx)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrSourceLSN, err)
		}
		if name != "" {
			v.src.adopt = name
			err := v.src.begin(ctx, v.o.ParallelWorkers)
			done()
			if err != nil {
				return 0, err
			}
			return at, v.src.attach(ctx, v.o.ParallelWorkers)
		}
	}
	if err := v.src.begin(ctx, v.o.ParallelWorkers); err != nil {
		return 0, err
	}
	lsn, err := v.sourceLSNOf(ctx)
	if err != nil {
		return 0, err
	}
	// The other connections adopt the snapshot taken above, so when they
	// join does not matter: every source number comes from that snapshot.
	return lsn, v.src.attach(ctx, v.o.ParallelWorkers)
}

// sourceLSNOf reads the source WAL position with the SourceLSN hook, or
// inside the source snapshot's transaction.
func (v *verifier) sourceLSNOf(ctx context.Context) (uint64, error) {
	if v.o.SourceLSN != nil {
		lsn, err := v.o.SourceLSN(ctx)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrSourceLSN, err)
		}
		return lsn, nil
	}
	var text string
	if err := v.src.tx.QueryRow(ctx, sqlSourceLSN).Scan(&text); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSourceLSN, err)
	}
	pos, err := lsn.Parse(text)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %w", ErrSourceLSN, text, err)
	}
	return uint64(pos), nil
}

// waitTarget polls the target checkpoint with backoff until it reaches lsn
// or the WaitCaughtUp budget (shared by all rounds) is spent, and keeps the
// last position read: the one the round's target snapshot is taken after.
func (v *verifier) waitTarget(ctx context.Context, lsn uint64) error {
	delay := pollFirst
	for {
		pos, err := v.o.TargetCheckpoint(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrTargetCheckpoint, err)
		}
		v.target, v.checkedAt = pos, time.Now()
		if pos.EndLSN >= lsn {
			return nil
		}
		left := v.o.WaitCaughtUp - v.waited
		if left <= 0 {
			return nil
		}
		d := min(delay, left)
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		v.waited += d
		delay = min(2*delay, pollMax)
	}
}

// newSide prepares one side of the comparison, hashing on up to want
// connections.
func newSide(role string, db DB, want int) *side {
	s := &side{role: role, db: db, want: want}
	if c, ok := db.(configured); ok {
		s.open = func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, c.Config()) }
	}
	return s
}

// begin opens a REPEATABLE READ READ ONLY transaction and pins the settings
// that make text output identical on both sides. Its first statement takes
// the snapshot (BEGIN alone does not).
func (s *side) begin(ctx context.Context, workers int) error {
	tx, err := s.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("verify: open %s snapshot: %w", s.role, err)
	}
	s.tx = tx
	if s.adopt != "" {
		name := s.adopt
		s.adopt = ""
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(name)); err != nil {
			return fmt.Errorf("verify: adopt the %s snapshot %s: %w", s.role, name, err)
		}
	}
	enc, ver, native, err := pin(ctx, tx, workers)
	if err != nil {
		return fmt.Errorf("verify: pin %s session settings: %w", s.role, err)
	}
	s.encoding, s.version, s.native = enc, ver, native
	s.snapshot = ""
	if s.parallel() {
		if err := tx.QueryRow(ctx, sqlExportSnapshot).Scan(&s.snapshot); err != nil {
			return fmt.Errorf("verify: export the %s snapshot for its other connections: %w", s.role, err)
		}
	}
	return nil
}

// parallel says whether s hashes over several connections: more than one
// wanted, a way to open them, and TID range scans on the server.
func (s *side) parallel() bool {
	return s.want > 1 && s.open != nil && s.version >= tidRangeVersion
}

// pin runs settingsSQL in tx and returns the server facts it reads: the
// encoding, the version and the C row hash (sqlNative).
func pin(ctx context.Context, tx pgx.Tx, workers int) (string, int, string, error) {
	rows, err := tx.Query(ctx, settingsSQL(workers))
	if err != nil {
		return "", 0, "", err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", 0, "", err
		}
		return "", 0, "", errors.New("no row")
	}
	vals, err := rows.Values()
	if err != nil {
		return "", 0, "", err
	}
	if len(vals) < 3 {
		return "", 0, "", fmt.Errorf("%d columns", len(vals))
	}
	facts := vals[len(vals)-3:]
	enc, ok1 := facts[0].(string)
	ver, ok2 := facts[1].(int32)
	native, ok3 := facts[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return "", 0, "", fmt.Errorf("server facts have unexpected types %T, %T, %T", facts[0], facts[1], facts[2])
	}
	rows.Close()
	return enc, int(ver), native, rows.Err()
}

// attach shares tx's snapshot with s's other connections for parallel
// hashing: begin exported it (pg_export_snapshot) and each connection opens
// a REPEATABLE READ READ ONLY transaction whose first statement is SET
// TRANSACTION SNAPSHOT, then pins the same settings. PostgreSQL then gives
// every one of them exactly tx's view of the rows, so a table hashed in
// ranges over several connections sums to what one connection would have
// read. tx stays open, as the import requires, until the round ends.
// Nothing happens with one connection wanted, or on a server without TID
// range scans. Connections are opened once; if some cannot be, Verify
// hashes on those it has and says so in a note.
func (s *side) attach(ctx context.Context, workers int) error {
	if !s.parallel() {
		return nil
	}
	if !s.opened {
		s.opened = true
		for len(s.conns) < s.want-1 {
			c, err := s.open(ctx)
			if err != nil {
				s.note = fmt.Sprintf("hashed on %d of %d connections to the %s: opening another failed: %v", len(s.conns)+1, s.want, s.role, err)
				break
			}
			s.conns = append(s.conns, c)
		}
	}
	id := s.snapshot
	for i, c := range s.conns {
		tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return fmt.Errorf("verify: open %s snapshot on connection %d: %w", s.role, i+2, err)
		}
		s.workers = append(s.workers, tx)
		if _, err := tx.Exec(ctx, sqlImportSnapshot+quoteLiteral(id)); err != nil {
			return fmt.Errorf("verify: adopt %s snapshot %s on connection %d: %w", s.role, id, i+2, err)
		}
		if _, _, _, err := pin(ctx, tx, workers); err != nil {
			return fmt.Errorf("verify: pin %s session settings on connection %d: %w", s.role, i+2, err)
		}
	}
	return nil
}

// quoteLiteral renders s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// txs lists the side's snapshot transactions, the caller's first.
func (s *side) txs() []pgx.Tx {
	return append([]pgx.Tx{s.tx}, s.workers...)
}

// ranges cuts a table into one range of pages per snapshot transaction
// (the whole table when there is only one, or when it is small).
func (s *side) ranges(sh *shape, minPages int) []tidRange {
	if len(s.workers) == 0 {
		return []tidRange{wholeTable}
	}
	return splitPages(sh.pages, len(s.workers)+1, minPages)
}

// end rolls back the snapshot transactions. It runs even after the
// caller's context ended, briefly, so a caller's connection is not left in
// a transaction.
func (s *side) end(ctx context.Context) {
	if s.tx == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	// Read-only: nothing to lose; a dead connection is the caller's to see.
	for _, tx := range s.workers {
		_ = tx.Rollback(ctx)
	}
	s.workers = nil
	_ = s.tx.Rollback(ctx)
	s.tx = nil
}

// close ends the snapshot and closes the connections Verify opened.
func (s *side) close(ctx context.Context) {
	s.end(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	for _, c := range s.conns {
		_ = c.Close(ctx)
	}
	s.conns = nil
}

func (v *verifier) endSnapshots(ctx context.Context) {
	v.src.end(ctx)
	v.dst.end(ctx)
}

func (v *verifier) closeSides(ctx context.Context) {
	v.src.close(ctx)
	v.dst.close(ctx)
}

// job is one query on one of a side's snapshot transactions.
type job func(ctx context.Context, tx pgx.Tx) error

// run runs jobs on s's snapshot transactions, each transaction taking the
// next job when it is free (a transaction runs one statement at a time).
// The first failure cancels the rest and is the one returned, not the
// others' "context canceled".
func (s *side) run(ctx context.Context, jobs []job) error {
	txs := s.txs()
	n := min(len(txs), len(jobs))
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan job, len(jobs))
	for _, j := range jobs {
		next <- j
	}
	close(next)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				if err := ctx.Err(); err != nil {
					errs[i] = err
					return
				}
				if err := j(ctx, txs[i]); err != nil {
					errs[i] = err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// compareServers refuses pairs whose text forms cannot match and notes
// pairs whose text forms may not.
func (v *verifier) compareServers() error {
	for _, s := range []*side{v.src, v.dst} {
		if s.note != "" {
			v.notes = append(v.notes, s.note)
		}
		if s.version < minServerVersion {
			return fmt.Errorf("%w: %s server is version %d; verify needs PostgreSQL 11 or newer (hashtextextended)", ErrIncomparable, s.role, s.version)
		}
	}
	if v.src.encoding != v.dst.encoding {
		return fmt.Errorf("%w: source server_encoding is %s but target is %s, so equal text hashes differently; create the target database with ENCODING '%s'",
			ErrIncomparable, v.src.encoding, v.dst.encoding, v.src.encoding)
	}
	v.hashing = HashingTyped
	if min(v.src.version, v.dst.version) < typedHashingVersion || v.o.textHashing {
		v.hashing = HashingText
	}
	if sm, dm := v.src.version/10000, v.dst.version/10000; sm != dm {
		v.notes = append(v.notes, fmt.Sprintf("source is PostgreSQL %d and target %d: a type whose text output changed between them (floats before 12) reports as changed", sm, dm))
	}
	return nil
}

// compare reads the shapes of ts on both sides and then hashes their rows,
// both sides at once, in two phases. First each table's total (count and
// hash sum, one aggregate without GROUP BY): a table's total is the sum of
// its buckets', so equal totals settle it, and skipping the hash
// aggregation saves about a third of the time. Only tables whose totals
// differ are then split into buckets, in the same snapshots. On a re-check,
// a table split the round before that still has the same shape and key is
// split straight away, its totals summed from its buckets. Every number a
// table ends with comes from the current pair of snapshots.
func (v *verifier) compare(ctx context.Context, ts []*tableState, recheck bool) error {
	err := both(ctx,
		func(ctx context.Context) error {
			for _, t := range ts {
				sh, err := readShape(ctx, v.src.tx, t.spec.src, len(v.src.workers) > 0, v.nativeOn(v.src))
				if err != nil {
					return &TableError{Table: t.spec.src.String(), Side: "source", Err: err}
				}
				t.srcShape = sh
			}
			return nil
		},
		func(ctx context.Context) error {
			for _, t := range ts {
				sh, err := readShape(ctx, v.dst.tx, t.spec.dst, len(v.dst.workers) > 0, v.nativeOn(v.dst))
				if err != nil {
					return &TableError{Table: t.spec.dst.String(), Side: "target", Err: err}
				}
				t.dstShape = sh
			}
			return nil
		})
	if err != nil {
		return err
	}
	for _, t := range ts {
		if !t.srcShape.exists || (t.srcShape.relkind != "r" && t.srcShape.relkind != "p") {
			return fmt.Errorf("%w: %s (check the table list in %s or the --table flag)", ErrSourceTable, t.spec.src, v.o.ConfigPath)
		}
		wasComparable, wasSplit, oldSig := t.comparable, t.split, t.keySig
		t.reasons = shapeProblems(t.spec, t.srcShape, t.dstShape)
		t.comparable = len(t.reasons) == 0
		t.keySig = fmt.Sprintf("%s%q", t.srcShape.basis, t.srcShape.key)
		t.direct = recheck && wasComparable && wasSplit && t.comparable && oldSig == t.keySig
		t.split = t.direct
		t.src, t.dst, t.mismatched = nil, nil, nil
		if t.comparable {
			t.srcPlan, t.dstPlan = plans(t.spec, t.srcShape, t.dstShape, v.hashing)
			t.srcPlan.native = v.nativeFor(v.src, t.srcShape)
			t.dstPlan.native = v.nativeFor(v.dst, t.dstShape)
			if t.buckets == 0 {
				t.buckets = int64(v.o.Buckets)
				if t.buckets == 0 {
					t.buckets = autoBuckets(t.srcShape.reltuples)
				}
			}
		}
	}
	err = both(ctx,
		func(ctx context.Context) error { return v.totalsSide(ctx, v.src, ts, !recheck) },
		func(ctx context.Context) error { return v.totalsSide(ctx, v.dst, ts, !recheck) })
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.comparable && !t.direct && !t.srcTotal.equal(t.dstTotal) {
			t.split = true
		}
	}
	err = both(ctx,
		func(ctx context.Context) error { return v.bucketsSide(ctx, v.src, ts, !recheck) },
		func(ctx context.Context) error { return v.bucketsSide(ctx, v.dst, ts, !recheck) })
	if err != nil {
		return err
	}
	for _, t := range ts {
		if !t.split {
			continue
		}
		t.src, t.dst = t.newSrc, t.newDst
		t.newSrc, t.newDst = nil, nil
		t.mismatched = mismatchedBuckets(t.src, t.dst)
		t.srcTotal, t.dstTotal = total(t.src), total(t.dst)
	}
	return nil
}

// nativeOn says whether s hashes with the extension's C row hash where a
// table allows it: the side has it, the hashing is typed (the function
// computes the typed row hash only) and Options.SQLRowHash does not
// forbid it. Each side decides alone: the C and SQL paths give the same
// numbers, so a source with the extension and a target without compare as
// two SQL sides would.
func (v *verifier) nativeOn(s *side) bool {
	return s.native != "" && v.hashing == HashingTyped && !v.o.SQLRowHash
}

// nativeFor is the C row hash function for a table of s with shape sh, or
// "" to hash it in SQL. It records which tables used it, for the result.
func (v *verifier) nativeFor(s *side, sh *shape) string {
	if !v.nativeOn(s) || !sh.native {
		return ""
	}
	s.nativeTables++
	return s.native
}

// sideOf picks the fields of t that belong to s.
func (v *verifier) sideOf(s *side, t *tableState) (config.TableName, plan, *shape, *bucketStat, *map[int64]bucketStat) {
	if s == v.src {
		return t.spec.src, t.srcPlan, t.srcShape, &t.srcTotal, &t.newSrc
	}
	return t.spec.dst, t.dstPlan, t.dstShape, &t.dstTotal, &t.newDst
}

// totalsSide runs s's half of the first phase: totals for comparable
// tables, plain counts for the others, each comparable table in ranges
// over s's snapshot transactions (ranges), the ranges' counts and sums
// added up. Each goroutine writes only its own job's part; the parts are
// added to s's fields of the tableStates after all jobs ended.
func (v *verifier) totalsSide(ctx context.Context, s *side, ts []*tableState, timed bool) error {
	type part struct {
		tot *bucketStat
		got bucketStat
	}
	var (
		jobs  []job
		parts []*part
	)
	for _, t := range ts {
		if t.direct {
			continue // summed from its buckets
		}
		tn, p, sh, tot, _ := v.sideOf(s, t)
		wrap := func(err error) error { return &TableError{Table: tn.String(), Side: s.role, Err: err} }
		*tot = bucketStat{sum: new(big.Int)}
		if !t.comparable {
			if sh.exists && (sh.relkind == "r" || sh.relkind == "p") {
				q := countQuery(relation(pgx.Identifier{tn.Schema, tn.Name}.Sanitize(), sh.relkind))
				jobs = append(jobs, func(ctx context.Context, tx pgx.Tx) error {
					if err := tx.QueryRow(ctx, q).Scan(&tot.rows); err != nil {
						return wrap(err)
					}
					return nil
				})
			}
			continue
		}
		for _, rng := range s.ranges(sh, v.o.rangePagesMin) {
			pt := &part{tot: tot, got: bucketStat{sum: new(big.Int)}}
			parts = append(parts, pt)
			jobs = append(jobs, func(ctx context.Context, tx pgx.Tx) error {
				var sum *string
				q, args := p.totalQuery(rng)
				if err := tx.QueryRow(ctx, q, args...).Scan(&pt.got.rows, &sum); err != nil {
					return wrap(err)
				}
				if sum != nil {
					if _, ok := pt.got.sum.SetString(*sum, 10); !ok {
						return wrap(fmt.Errorf("hash sum %q is not an integer", *sum))
					}
				}
				return nil
			})
		}
	}
	start := time.Now()
	if err := s.run(ctx, jobs); err != nil {
		return err
	}
	elapsed := time.Since(start)
	var rows int64
	for _, pt := range parts {
		pt.tot.rows += pt.got.rows
		pt.tot.sum.Add(pt.tot.sum, pt.got.sum)
		rows += pt.got.rows
	}
	if timed && len(parts) > 0 {
		s.scanRows += rows
		s.scanTime += elapsed
	}
	return nil
}

// bucketsSide runs s's half of the second phase for the tables to split,
// each in ranges over s's snapshot transactions, the ranges' buckets added
// up bucket by bucket.
func (v *verifier) bucketsSide(ctx context.Context, s *side, ts []*tableState, timed bool) error {
	type part struct {
		out *map[int64]bucketStat
		got map[int64]bucketStat
	}
	var (
		jobs  []job
		parts []*part
	)
	for _, t := range ts {
		if !t.split {
			continue
		}
		tn, p, sh, _, out := v.sideOf(s, t)
		*out = map[int64]bucketStat{}
		for _, rng := range s.ranges(sh, v.o.rangePagesMin) {
			pt := &part{out: out}
			parts = append(parts, pt)
			jobs = append(jobs, func(ctx context.Context, tx pgx.Tx) (err error) {
				pt.got, _, err = s.bucketsIn(ctx, tx, tn, p, nil, 0, t.buckets, rng)
				return err
			})
		}
	}
	start := time.Now()
	if err := s.run(ctx, jobs); err != nil {
		return err
	}
	elapsed := time.Since(start)
	var rows int64
	for _, pt := range parts {
		for id, st := range pt.got {
			cur := (*pt.out)[id]
			if cur.sum == nil {
				cur.sum = new(big.Int)
			}
			cur.rows += st.rows
			cur.sum.Add(cur.sum, st.sum)
			(*pt.out)[id] = cur
			rows += st.rows
		}
	}
	if timed && len(parts) > 0 {
		s.scanRows += rows
		s.scanTime += elapsed
	}
	return nil
}

// total sums bucket stats.
func total(m map[int64]bucketStat) bucketStat {
	t := bucketStat{sum: new(big.Int)}
	for _, s := range m {
		t.rows += s.rows
		t.sum.Add(t.sum, s.sum)
	}
	return t
}

// buckets runs a bucket query over the whole table in the side's snapshot
// transaction and returns the stats and the rows counted.
func (s *side) buckets(ctx context.Context, tn config.TableName, p plan, filters []level, seed int, mod int64) (map[int64]bucketStat, int64, error) {
	return s.bucketsIn(ctx, s.tx, tn, p, filters, seed, mod, wholeTable)
}

// bucketsIn runs a bucket query over rng in tx, one of s's snapshot
// transactions.
func (s *side) bucketsIn(ctx context.Context, tx pgx.Tx, tn config.TableName, p plan, filters []level, seed int, mod int64, rng tidRange) (map[int64]bucketStat, int64, error) {
	wrap := func(err error) error { return &TableError{Table: tn.String(), Side: s.role, Err: err} }
	q, args := p.bucketQuery(filters, seed, mod, rng)
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, 0, wrap(err)
	}
	defer rows.Close()
	out := map[int64]bucketStat{}
	var total int64
	for rows.Next() {
		var id, n int64
		var sum string
		if err := rows.Scan(&id, &n, &sum); err != nil {
			return nil, 0, wrap(err)
		}
		v, ok := new(big.Int).SetString(sum, 10)
		if !ok {
			return nil, 0, wrap(fmt.Errorf("bucket %d: hash sum %q is not an integer", id, sum))
		}
		out[id] = bucketStat{rows: n, sum: v}
		total += n
	}
	if err := rows.Err(); err != nil {
		return nil, 0, wrap(err)
	}
	return out, total, nil
}

// mismatchedBuckets lists, sorted, the buckets whose count or sum differ;
// a bucket absent on one side has zero rows there.
func mismatchedBuckets(src, dst map[int64]bucketStat) []int64 {
	var out []int64
	for id, s := range src {
		if !s.equal(dst[id]) {
			out = append(out, id)
		}
	}
	for id := range dst {
		if _, ok := src[id]; !ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// both runs a and b concurrently and returns the first real failure: when
// one side fails the other is cancelled, and its "context canceled" is not
// the story.
func both(ctx context.Context, a, b func(context.Context) error) error {
	inner, cancel := context.WithCancel(ctx)
	defer cancel()
	errB := make(chan error, 1)
	go func() {
		err := b(inner)
		if err != nil {
			cancel()
		}
		errB <- err
	}()
	ea := a(inner)
	if ea != nil {
		cancel()
	}
	eb := <-errB
	switch {
	case ea == nil:
		return eb
	case eb == nil:
		return ea
	case ctx.Err() == nil && errors.Is(ea, context.Canceled):
		return eb
	default:
		return ea
	}
}

// result assembles the answer. Every verdict, the tables' and the
// result's, comes from decide over the one watermark.
func (v *verifier) result(started time.Time, wm *Watermark) *Result {
	r := &Result{
		FormatVersion: FormatVersion,
		StartedAt:     started.UTC(),
		Duration:      time.Since(started),
		Watermark:     wm,
		RowHash:       v.hashing,
		Notes:         v.notes,
		native:        [2]int{v.src.nativeTables, v.dst.nativeTables},
	}
	if s := v.src.scanTime.Seconds(); s > 0 {
		r.SourceRowsPerSecond = float64(v.src.scanRows) / s
	}
	if s := v.dst.scanTime.Seconds(); s > 0 {
		r.TargetRowsPerSecond = float64(v.dst.scanRows) / s
	}
	differ := false
	for _, t := range v.tables {
		tr := t.result(wm, v.o.ConfigPath)
		differ = differ || len(tr.Reasons) > 0
		r.Tables = append(r.Tables, tr)
	}
	r.Verdict = decide(wm, differ)
	switch r.Verdict {
	case Diverged:
		r.Recovery = shell.Trellara("repair-plan", v.o.ConfigPath)
	case Behind:
		r.Recovery, r.advice = CatchUpCommand(v.o.ConfigPath), CatchUpAdvice(v.o.ConfigPath)
	}
	return r
}

// result is one table's answer: Reasons says whether and how it differs,
// decide says what that means at the watermark.
func (t *tableState) result(wm *Watermark, configPath string) TableResult {
	tr := TableResult{
		Table:       t.spec.src.String(),
		TargetTable: t.spec.dst.String(),
		KeyBasis:    t.srcShape.basis,
		KeyColumns:  t.srcShape.key,
		Rechecks:    t.rechecks,
		Notes:       t.notes,
		SampleKeys:  t.samples,
	}
	if t.srcShape.basis == BasisWholeRow {
		tr.Notes = append([]string{"no primary key or replica identity index: rows are identified by their whole content, so a changed row shows as one missing and one extra"}, tr.Notes...)
	}
	tr.SourceRows, tr.TargetRows = t.srcTotal.rows, t.dstTotal.rows
	switch {
	case !t.comparable:
		tr.Reasons = t.reasons
	default:
		tr.SourceChecksum, tr.TargetChecksum = checksum(t.srcTotal.sum), checksum(t.dstTotal.sum)
		if !t.split {
			break
		}
		tr.Buckets = t.buckets
		tr.MismatchingBucketCount = len(t.mismatched)
		for i, id := range t.mismatched {
			if i == bucketsListedMax {
				break
			}
			tr.MismatchingBuckets = append(tr.MismatchingBuckets, BucketDiff{Bucket: id, SourceRows: t.src[id].rows, TargetRows: t.dst[id].rows})
		}
		if len(t.mismatched) > 0 {
			tr.Reasons = []string{fmt.Sprintf("rows differ in %d of %d buckets", len(t.mismatched), t.buckets)}
		}
	}
	tr.Verdict = decide(wm, len(tr.Reasons) > 0)
	if tr.Verdict == Behind && len(tr.SampleKeys) > 0 {
		tr.Notes = append(tr.Notes, "the target is behind the watermark: these keys may only be waiting to be applied")
	}
	if tr.Verdict == Diverged {
		tr.Recovery = shell.Trellara("repair-plan", configPath, "--table", tr.Table)
	}
	return tr
}

// checksum is the low 64 bits of a hash sum (two's complement), in hex.
func checksum(sum *big.Int) string {
	low := new(big.Int).And(sum, new(big.Int).SetUint64(^uint64(0)))
	return fmt.Sprintf("%016x", low.Uint64())
}
