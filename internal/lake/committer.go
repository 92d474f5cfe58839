//go:build full

package lake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/segmentlog"
)

// Committer is the only writer of the tables it leases (lease.go: every
// table it owns, lake.tables or all, and _trellara_epochs when it owns
// every table): it reads every source's stream
// (a local log through the consumer package, one cursor per log,
// Fleet.CommitterCursor; or a Kafka topic through consumer/kafkaconsumer, in
// the consumer group Fleet.KafkaGroup),
// batches the changes per changelog table across sources, writes each
// table's batch in one Iceberg commit together with the table's
// per-source dedup marks, then moves the cursors; and it closes epochs.
//
// Order, and what a crash at each point leaves:
//  1. table commits (rows + marks, atomic per table): a crash between two
//     tables leaves the cursors behind; the restart re-reads the units and
//     Dedup skips what the first table already has.
//  2. cursor (or consumer-group offset) commits: a crash before them
//     re-reads, and dedup skips. They are hints for where to start
//     reading; the position of record is the marks in the tables.
//  3. the epoch record, written only after the data it claims: a crash
//     before it leaves no epoch, never an epoch ahead of the data.
type Committer struct {
	lake  *Lake
	fleet *Fleet
	log   *slog.Logger
	// Probe asks a source where it is; ProbeSource is the default.
	Probe func(ctx context.Context, s FleetSource, wait time.Duration) Probe

	dedup *Dedup
	// leases are this committer's table leases (lease.go): taken before
	// its first commit on a table, confirmed before every commit.
	leases  *leases
	sources map[string]*sourceReader
	tables  map[string]*table.Table
	prev    map[string]SourceEpoch
	lastIn  map[string]time.Time

	mu    sync.Mutex
	stats CommitterStats
}

// CommitterStats are the committer's counters, for health and metrics.
type CommitterStats struct {
	Commits   int64
	Rows      map[string]int64 // per source
	LastEpoch Epoch
}

// sourceReader is one source's stream as the committer reads it.
type sourceReader struct {
	src    FleetSource
	stream sourceStream
	// held are the units of a group not complete yet (read, not written).
	held []consumer.Unit
	// done is the last unit of the last complete group taken into the
	// batch: the cursor moves past it after the batch commits.
	done        *consumer.Unit
	quarantined string
	pastRetain  bool
	openErr     error
	// behind says why the last drain did not reach the durable end (a
	// broker not answering, a read that timed out); "" when it did. A
	// source behind is not caught up at an epoch.
	behind string
	// reopen: the stream failed with an error it may not recover from in
	// place; it is closed after the batch's commits and opened again,
	// from its committed position (dedup skips what is re-read).
	reopen bool
}

// NewCommitter opens the committer over lake l. It reads every changelog
// table's dedup marks and the last epoch.
func NewCommitter(ctx context.Context, l *Lake, f *Fleet, log *slog.Logger) (*Committer, error) {
	c := &Committer{lake: l, fleet: f, log: log, Probe: ProbeSource, dedup: NewDedup(),
		sources: map[string]*sourceReader{}, tables: map[string]*table.Table{},
		prev: map[string]SourceEpoch{}, lastIn: map[string]time.Time{}}
	c.stats.Rows = map[string]int64{}
	ls, err := newLeases(l, log)
	if err != nil {
		return nil, err
	}
	c.leases = ls
	names, err := l.ChangelogTables(ctx)
	if err != nil {
		return nil, err
	}
	// Lease what this committer will write before reading the marks: a
	// mark read before the lease could be older than the last owner's
	// last commit. A table another live committer holds refuses the start.
	owned := names[:0:0]
	for _, n := range names {
		if c.ownsLake(n) {
			owned = append(owned, n)
		}
	}
	if l.sink.EpochWriter() {
		owned = append(owned, EpochsTable)
	}
	for _, n := range owned {
		if _, err := c.leases.Acquire(ctx, n); err != nil {
			c.leases.Release(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	log.Info("lake: committer", "committer", l.sink.Committer, "tables", tablesText(l.sink.Tables),
		"writes_epochs", l.sink.EpochWriter(), "cursor", f.CommitterCursor(), "leased", owned)
	for _, n := range names {
		t, err := l.load(ctx, n)
		if err != nil {
			return nil, err
		}
		if t != nil {
			throughMarks(t, n, c.dedup)
			c.tables[n] = t
		}
	}
	eps, err := l.Epochs(ctx)
	if err != nil {
		return nil, err
	}
	if len(eps) > 0 {
		last := eps[len(eps)-1]
		c.stats.LastEpoch = last
		for _, s := range last.Sources {
			c.prev[s.SourceID] = s
			if s.Included {
				c.lastIn[s.SourceID] = last.ClosedAt
			}
		}
	}
	for _, s := range f.Sources {
		c.sources[s.ID] = &sourceReader{src: s}
	}
	return c, nil
}

// tablesText is lake.tables for logs: "all" when unset.
func tablesText(ts []TableRef) string {
	if ts == nil {
		return "all"
	}
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	return strings.Join(out, ",")
}

// ownsLake reports whether changelog table name (a LakeName) is this
// committer's.
func (c *Committer) ownsLake(name string) bool {
	if c.lake.sink.Tables == nil {
		return true
	}
	for _, t := range c.lake.sink.Tables {
		if t.LakeName() == name {
			return true
		}
	}
	return false
}

// lease takes the lease on changelog table name before the committer's
// first commit on it. A lease new to this committer re-reads the
// table's marks: its previous owner may have committed since this
// committer started, and dedup must skip what that one wrote.
func (c *Committer) lease(ctx context.Context, name string) error {
	fresh, err := c.leases.Acquire(ctx, name)
	if err != nil || !fresh {
		return err
	}
	t, err := c.lake.load(ctx, name)
	if err != nil {
		return err
	}
	if t != nil {
		throughMarks(t, name, c.dedup)
		c.tables[name] = t
	}
	return nil
}

// leaseError carries a lease refusal out of takeGroup: it stops the
// step (and this life of the committer), it does not quarantine the
// source.
type leaseError struct{ err error }

func (e *leaseError) Error() string { return e.err.Error() }
func (e *leaseError) Unwrap() error { return e.err }

// Close releases the source logs and the leases (a clean stop: another
// committer may take the tables at once).
func (c *Committer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.leases.Release(ctx)
	for _, r := range c.sources {
		if r.stream != nil {
			_ = r.stream.Close()
			r.stream = nil
		}
	}
}

// Stats returns a copy of the counters.
func (c *Committer) Stats() CommitterStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Rows = map[string]int64{}
	for k, v := range c.stats.Rows {
		s.Rows[k] = v
	}
	return s
}

// batch is what one commit writes: per changelog table, the changes and
// the per-source marks.
type batch struct {
	tables map[string]*TableChanges
	marks  map[string]map[string]uint64
	rows   map[string]int64
}

func newBatch() *batch {
	return &batch{tables: map[string]*TableChanges{}, marks: map[string]map[string]uint64{}, rows: map[string]int64{}}
}

func (b *batch) add(src string, lsn uint64, tc TableChanges) {
	name := tc.Table.LakeName()
	cur := b.tables[name]
	if cur == nil {
		cur = &TableChanges{Table: tc.Table, Keys: tc.Keys}
		b.tables[name] = cur
	}
	for _, col := range tc.Columns {
		found := false
		for _, have := range cur.Columns {
			if have == col {
				found = true
				break
			}
		}
		if !found {
			cur.Columns = append(cur.Columns, col)
		}
	}
	cur.Changes = append(cur.Changes, tc.Changes...)
	if b.marks[name] == nil {
		b.marks[name] = map[string]uint64{}
	}
	if lsn > b.marks[name][src] {
		b.marks[name][src] = lsn
	}
	b.rows[src] += int64(len(tc.Changes))
}

// open opens source r's stream for the committer, once the relay has
// created it (the log directory, the topic).
func (c *Committer) open(ctx context.Context, r *sourceReader) bool {
	if r.stream != nil {
		return true
	}
	s, err := openStream(ctx, r.src, c.fleet, c.log)
	if err != nil {
		if r.openErr == nil || r.openErr.Error() != err.Error() {
			c.log.Info("lake: source stream not readable yet", "source", r.src.ID, "err", err)
		}
		r.openErr, r.behind = err, "its stream is not readable: "+err.Error()
		return false
	}
	r.stream, r.openErr = s, nil
	return true
}

// drain reads source r's stream up to its durable end now into b: complete
// groups go into the batch (those dedup has not seen), an incomplete one
// stays held. The end is read when drain starts: called after an epoch's
// probes, it covers every transaction the probes saw confirmed.
func (c *Committer) drain(ctx context.Context, r *sourceReader, b *batch) error {
	if r.quarantined != "" || r.pastRetain || r.reopen || !c.open(ctx, r) {
		return nil
	}
	// A source stays behind over many steps while a broker is down: log
	// when it falls behind, not at every step.
	wasBehind := r.behind != ""
	r.behind = ""
	end, err := r.stream.Durable(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.behind = fmt.Sprintf("the durable end of its %s is unknown: %v", r.stream.Where(), err)
		if !wasBehind {
			c.log.Warn("lake: source behind: cannot read where its stream ends", "source", r.src.ID, "stream", r.stream.Where(), "err", err)
		}
		return nil
	}
	if wasBehind {
		c.log.Info("lake: source readable again", "source", r.src.ID, "stream", r.stream.Where(), "end", end)
	}
	// A read below the durable end does not wait for the relay; a broker
	// that stops answering makes this source behind, not the loop stall.
	dctx, cancel := context.WithTimeout(ctx, drainWait)
	defer cancel()
	for r.stream.Offset() < end {
		at := r.stream.Offset()
		u, err := r.stream.Next(dctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var pr *segmentlog.PastRetentionError
			var de *consumer.DecodeError
			switch {
			case errors.Is(err, consumer.ErrPastRetention) || errors.As(err, &pr):
				r.pastRetain = true
				c.log.Error("lake: source past retention: the committer's position is behind its stream's retention; the source needs a reseed",
					"source", r.src.ID, "stream", r.stream.Where(), "offset", at, "err", err)
				return nil
			case errors.Is(err, consumer.ErrGap) || errors.Is(err, consumer.ErrCorrupt) || errors.As(err, &de):
				r.quarantined = fmt.Sprintf("%s, read from offset %d: %v", r.stream.Where(), at, err)
				c.log.Error("lake: source quarantined: its stream has a unit missing or invalid", "source", r.src.ID,
					"stream", r.stream.Where(), "offset", at, "err", err)
				return nil
			case dctx.Err() != nil:
				r.behind = fmt.Sprintf("its %s was not read to its durable end %d within %s (at %d)", r.stream.Where(), end, drainWait, at)
				c.log.Warn("lake: source behind: its stream was not read to its durable end in time", "source", r.src.ID,
					"stream", r.stream.Where(), "offset", at, "end", end, "wait", drainWait)
				return nil
			case r.src.Kafka() != nil:
				// A broker error: the source lags, and its consumer is
				// opened again after this batch's commits.
				r.behind, r.reopen = fmt.Sprintf("its %s failed at offset %d: %v", r.stream.Where(), at, err), true
				c.log.Warn("lake: source behind: reading its topic failed; reopening it after this batch", "source", r.src.ID,
					"stream", r.stream.Where(), "offset", at, "err", err)
				return nil
			}
			return fmt.Errorf("lake: source %s: %s offset %d: %w", r.src.ID, r.stream.Where(), at, err)
		}
		r.held = append(r.held, u)
		if !EndsGroup(u.Envelope) {
			continue
		}
		if err := c.takeGroup(ctx, r, b); err != nil {
			var le *leaseError
			if errors.As(err, &le) {
				return le.err
			}
			r.quarantined = err.Error()
			c.log.Error("lake: source quarantined: a transaction cannot be written to the changelog", "source", r.src.ID, "err", err)
			return nil
		}
	}
	return nil
}

// takeGroup moves r's held group into b, table by table, skipping tables
// that already have the group's commit LSN.
func (c *Committer) takeGroup(ctx context.Context, r *sourceReader, b *batch) error {
	var lsn uint64
	per := map[string]*TableChanges{}
	var order []string
	for _, u := range r.held {
		if u.Envelope.SourceId != "" && u.Envelope.SourceId != r.src.ID {
			return fmt.Errorf("%s offset %d (commit LSN %s) carries source id %q, the flow's is %q",
				r.stream.Where(), u.Offset, fmtLSN(u.Envelope.CommitLsn), u.Envelope.SourceId, r.src.ID)
		}
		lsn = max(lsn, u.Envelope.CommitLsn)
		tcs, err := Changes(u.Envelope)
		if err != nil {
			return err
		}
		for _, tc := range tcs {
			for i := range tc.Changes {
				tc.Changes[i].SourceID = r.src.ID
			}
			n := tc.Table.LakeName()
			if cur := per[n]; cur != nil {
				cur.Changes = append(cur.Changes, tc.Changes...)
				continue
			}
			tcCopy := tc
			per[n] = &tcCopy
			order = append(order, n)
		}
	}
	for _, n := range order {
		if !c.lake.sink.Owns(per[n].Table) {
			continue // another committer's table (lake.tables)
		}
		if err := c.lease(ctx, n); err != nil {
			return &leaseError{err}
		}
		if c.dedup.Accept(n, r.src.ID, lsn) {
			b.add(r.src.ID, lsn, *per[n])
		}
	}
	last := r.held[len(r.held)-1]
	r.done, r.held = &last, nil
	return nil
}

// Step drains every source and writes what it read: one Iceberg commit per
// changelog table, then the cursors. A failed commit returns an error; the
// caller starts a new Committer (the in-memory marks may be ahead of the
// tables).
func (c *Committer) Step(ctx context.Context) error {
	// Every step renews the leases, with or without rows to commit: a
	// committer that is live keeps its tables, one resumed after a pause
	// past the TTL learns here that it lost them.
	if err := c.leases.Renew(ctx); err != nil {
		return err
	}
	b := newBatch()
	for _, id := range c.fleet.SourceIDs() {
		if err := c.drain(ctx, c.sources[id], b); err != nil {
			return err
		}
	}
	return c.flush(ctx, b)
}

func (c *Committer) flush(ctx context.Context, b *batch) error {
	names := make([]string, 0, len(b.tables))
	for n := range b.tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		tc := b.tables[n]
		// The fence: a committer whose lease lapsed (paused past its TTL,
		// taken over) stops here, before any commit on the table (a
		// schema change is a commit too).
		if err := c.leases.Confirm(ctx, n); err != nil {
			return err
		}
		t, err := c.lake.changelogTable(ctx, *tc)
		if err != nil {
			return err
		}
		if failpoint("before-table-commit") {
			return errors.New("failpoint")
		}
		nt, err := c.lake.appendChanges(ctx, t, tc.Changes, b.marks[n])
		if err != nil {
			return err
		}
		c.tables[n] = nt
		if failpoint("after-table-commit") {
			return errors.New("failpoint")
		}
		c.mu.Lock()
		c.stats.Commits++
		c.mu.Unlock()
		c.log.Debug("lake: committed", "table", n, "rows", len(tc.Changes))
	}
	for _, id := range c.fleet.SourceIDs() {
		r := c.sources[id]
		if r.done != nil {
			err := r.stream.Commit(*r.done)
			switch {
			case err != nil && r.src.Kafka() != nil:
				// The group offset is a hint: the next commit moves it,
				// and a restart before then re-reads what dedup skips.
				c.log.Warn("lake: source: the consumer-group offset was not committed; the next batch commits it",
					"source", id, "stream", r.stream.Where(), "offset", r.done.Offset, "group", c.fleet.KafkaGroup(), "err", err)
			case err != nil:
				return fmt.Errorf("lake: source %s: %s offset %d: %w", id, r.stream.Where(), r.done.Offset, err)
			}
			r.done = nil
		}
		if r.reopen {
			// The units held are read again from the committed position.
			_ = r.stream.Close()
			r.stream, r.held, r.reopen = nil, nil, false
		}
	}
	c.mu.Lock()
	for s, n := range b.rows {
		c.stats.Rows[s] += n
	}
	c.mu.Unlock()
	return nil
}

// Probe is what a source says when an epoch closes.
type Probe struct {
	Reachable bool
	WALPos    uint64
	// Confirmed: the slot's confirmed_flush_lsn reached WALPos within the
	// wait: the relay has every transaction before WALPos durable.
	Confirmed bool
	SlotLost  bool
	Err       string
}

// ProbePosition is the WAL position an epoch probe waits for: the insert
// position, made flushed. The walsender decodes only flushed WAL, and WAL
// that no commit flushes (heap pruning by a read-only transaction, for
// one) can stay unflushed until the next commit or the background
// writer's snapshot record, about 15 s later: a probe at an unflushed
// position waits for nothing and reports an idle source lagging. The
// flush position itself is no target: it can fall inside a record, which
// the walsender cannot decode, so the slot is never confirmed there. When
// the flush is behind, the probe commits an empty transaction with an xid
// (synchronous_commit local): the WAL writer flushes its commit record,
// and every record before it, within 3 × wal_writer_delay.
func ProbePosition(ctx context.Context, conn *pgx.Conn) (uint64, error) {
	var ins, fl uint64
	if err := conn.QueryRow(ctx, "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint, (pg_current_wal_flush_lsn() - '0/0')::bigint").Scan(&ins, &fl); err != nil {
		return 0, fmt.Errorf("probe: read the WAL insert and flush positions: %w", err)
	}
	if fl >= ins {
		return ins, nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("probe: flush WAL through %s: %w", fmtLSN(ins), err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = local"); err != nil {
		return 0, fmt.Errorf("probe: flush WAL through %s: %w", fmtLSN(ins), err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		return 0, fmt.Errorf("probe: flush WAL through %s: %w", fmtLSN(ins), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("probe: flush WAL through %s: commit: %w", fmtLSN(ins), err)
	}
	// A commit that wrote no WAL but its own record is flushed by the WAL
	// writer (within 3 × wal_writer_delay), not by the committer.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := conn.QueryRow(ctx, "SELECT (pg_current_wal_flush_lsn() - '0/0')::bigint").Scan(&fl); err != nil {
			return 0, fmt.Errorf("probe: read the WAL flush position (insert at %s): %w", fmtLSN(ins), err)
		}
		if fl >= ins || time.Now().After(deadline) {
			return ins, nil
		}
		select {
		case <-ctx.Done():
			return ins, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ProbeSource reads the source's WAL position (ProbePosition) and waits up to wait
// for the flow's slot to be confirmed at or past it.
func ProbeSource(ctx context.Context, s FleetSource, wait time.Duration) Probe {
	sec, err := s.Flow.Source.DatabaseURL.Resolve()
	if err != nil {
		return Probe{Err: err.Error()}
	}
	url := sec.Reveal()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return Probe{Err: scrubText(err, url)}
	}
	defer conn.Close(context.Background())
	w, err := ProbePosition(cctx, conn)
	if err != nil {
		return Probe{Err: scrubText(err, url)}
	}
	p := Probe{Reachable: true, WALPos: w}
	deadline := time.Now().Add(wait)
	for {
		var confirmed *int64
		var status *string
		err := conn.QueryRow(ctx, `SELECT (confirmed_flush_lsn - '0/0')::bigint, wal_status FROM pg_replication_slots WHERE slot_name = $1`,
			s.Flow.Source.Slot).Scan(&confirmed, &status)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			p.SlotLost, p.Err = true, fmt.Sprintf("slot %s does not exist", s.Flow.Source.Slot)
			return p
		case err != nil:
			p.Reachable, p.Err = false, scrubText(err, url)
			return p
		case status != nil && *status == "lost":
			p.SlotLost, p.Err = true, fmt.Sprintf("slot %s lost its WAL (wal_status lost)", s.Flow.Source.Slot)
			return p
		case confirmed != nil && uint64(*confirmed) >= w:
			p.Confirmed = true
			return p
		}
		if time.Now().After(deadline) {
			return p
		}
		select {
		case <-ctx.Done():
			return p
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PendingEpoch is an epoch whose probes are out. The committer keeps
// committing rows while it is pending: a source that lags (its relay is
// reconnecting, its slot is not confirmed) holds back only the epoch
// record, for up to min(max_lag, 15 s), never the other sources' rows.
type PendingEpoch struct {
	ids    []string
	wait   time.Duration
	probes []Probe
	done   chan struct{}
}

// Done is closed when every source has answered its probe (or the probe's
// wait or ctx ran out); FinishEpoch may be called then.
func (p *PendingEpoch) Done() <-chan struct{} { return p.done }

// StartEpoch sends every source its probe, each in its own goroutine, and
// returns at once. The probes touch nothing of the committer's but Probe
// and the fleet's configuration, so Step may run while they are out.
func (c *Committer) StartEpoch(ctx context.Context) *PendingEpoch {
	ids := c.fleet.SourceIDs()
	p := &PendingEpoch{ids: ids, wait: min(c.fleet.Epochs.MaxLag, 15*time.Second),
		probes: make([]Probe, len(ids)), done: make(chan struct{})}
	srcs := make([]FleetSource, len(ids))
	for i, id := range ids {
		srcs[i] = c.sources[id].src
	}
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.probes[i] = c.Probe(ctx, srcs[i], p.wait)
		}()
	}
	go func() {
		wg.Wait()
		close(p.done)
	}()
	return p
}

// CloseEpoch is StartEpoch, the wait for its probes, and FinishEpoch: for
// a caller that has nothing to commit meanwhile. The fleet's commit loop
// does not call it (it keeps committing while the probes are out).
func (c *Committer) CloseEpoch(ctx context.Context) (Epoch, error) {
	p := c.StartEpoch(ctx)
	<-p.Done()
	return c.FinishEpoch(ctx, p)
}

// FinishEpoch commits what the source logs hold and then writes the epoch
// record of pending epoch pe, after the data it claims. Call it once per
// StartEpoch; it waits for pe.Done first.
func (c *Committer) FinishEpoch(ctx context.Context, pe *PendingEpoch) (Epoch, error) {
	<-pe.done
	if !c.lake.sink.EpochWriter() {
		return Epoch{}, fmt.Errorf("lake: committer %q owns lake.tables %s, not every table: only a committer that owns every table writes epoch records (docs/LAKE.md)",
			c.lake.sink.Committer, tablesText(c.lake.sink.Tables))
	}
	ids, probes, wait := pe.ids, pe.probes, pe.wait
	// Every confirmation is in: the logs now hold every transaction before
	// each confirmed WALPos. Commit them before anything claims them.
	if err := c.Step(ctx); err != nil {
		return Epoch{}, err
	}
	if failpoint("before-epoch") {
		return Epoch{}, errors.New("failpoint")
	}
	now := time.Now()
	lines := make([]SourceEpoch, len(ids))
	for i, id := range ids {
		r, p := c.sources[id], probes[i]
		// Caught up: confirmed, the log readable, nothing held back and
		// no quarantine.
		caught := p.Confirmed && r.stream != nil && r.behind == "" && len(r.held) == 0 && r.quarantined == "" && !r.pastRetain
		lines[i] = Decide(Observation{SourceID: id, Reachable: p.Reachable, WALPos: p.WALPos, CaughtUp: caught,
			SlotLost: p.SlotLost || r.pastRetain, Quarantined: r.quarantined != "", Prev: c.prev[id],
			LastIncluded: c.lastIn[id], Err: p.Err}, now, c.fleet.Epochs.MaxLag)
		if p.Reachable && !p.Confirmed && lines[i].Lagging {
			lines[i].Reason += fmt.Sprintf("; the slot was not confirmed at %s within %s", fmtLSN(p.WALPos), wait)
		}
		switch {
		case r.quarantined != "":
			lines[i].Reason += ": " + r.quarantined
		case r.pastRetain && !p.SlotLost && r.stream != nil:
			// The slot is fine: the stream dropped what the committer had
			// not read yet.
			lines[i].Reason = fmt.Sprintf("past retention: the committer's position on its %s is older than the stream holds "+
				"(retention removed units it had not committed); the source needs a reseed (a new slot and a re-snapshot)", r.stream.Where())
		case p.Confirmed && r.behind != "" && lines[i].Lagging:
			lines[i].Reason += "; " + r.behind
		}
	}
	// Only the committer that owns every table writes epochs, and it
	// fences on the epochs table's lease as on any other.
	if err := c.leases.Confirm(ctx, EpochsTable); err != nil {
		return Epoch{}, err
	}
	e, err := c.lake.WriteEpoch(ctx, now, lines)
	if err != nil {
		return Epoch{}, err
	}
	for _, s := range e.Sources {
		c.prev[s.SourceID] = s
		if s.Included && !s.Lagging {
			c.lastIn[s.SourceID] = now
		}
	}
	c.mu.Lock()
	c.stats.LastEpoch = e
	c.mu.Unlock()
	c.log.Info("lake: epoch closed", "epoch", e.ID, "status", e.Status, "missing", e.Missing())
	return e, nil
}
