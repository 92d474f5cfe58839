package check

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/config"
)

// Querier is the part of *pgx.Conn that Inspect uses. It must be a session
// opened read-only (see Connect).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Options tune an inspection. The zero value is usable.
type Options struct {
	// SampleWindow is how long WAL generation is sampled (pg_current_wal_lsn
	// twice). Default 1s; the other reads run inside the window.
	SampleWindow time.Duration
	// MaxTables bounds the per-table listing. Default 2000.
	MaxTables int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Tables are the tables a flow's configuration names (trellara check
	// --config): each must exist on the source, or the report has a
	// critical finding naming it.
	Tables []config.TableName
	// Scope, when set, grades one flow: its Tables and its slot only
	// (scope.go). Everything else on the server is counted, never listed.
	Scope *Scope
}

const (
	defaultSampleWindow = time.Second
	defaultMaxTables    = 2000
	// minVersionNum is the oldest server graded: pgoutput arrived in 10.
	minVersionNum = 100000
)

// inspector carries one inspection's state.
type inspector struct {
	ctx  context.Context
	q    Querier
	opts Options
	r    *Report

	settings map[string]Setting
	provider string // first detected provider id, "" if self-hosted
	roles    map[string]bool
	slotCols map[string]bool
	walStart LSN
	haveLSN  bool

	pubNames map[string]bool // publications by name (tables reads them before slots)

	pluginValue  *string // output_plugin_libraries; nil when the build lacks it
	pluginHidden bool    // the role may not read it
	walSenders   int     // rows in pg_stat_replication

	charBytes      int64 // longest character of the database encoding, in bytes
	toastThreshold int64 // TOAST_TUPLE_THRESHOLD for this server's block size
}

// Inspect grades the source behind q. It returns an error only when the
// server cannot be read at all (or the session is not read-only); anything
// narrower becomes a Note.
func Inspect(ctx context.Context, q Querier, opts Options) (*Report, error) {
	if opts.SampleWindow <= 0 {
		opts.SampleWindow = defaultSampleWindow
	}
	if opts.MaxTables <= 0 {
		opts.MaxTables = defaultMaxTables
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	start := opts.Now()
	in := &inspector{ctx: ctx, q: q, opts: opts, r: &Report{
		SchemaVersion: SchemaVersion,
		GeneratedAt:   start.UTC().Truncate(time.Second),
		Tables:        []Table{},
		Slots:         []Slot{},
		Settings:      []Setting{},
	}}
	if sc := opts.Scope; sc != nil {
		in.r.Scope = &ScopeReport{Flow: sc.Flow, Slot: sc.Slot, Publication: sc.Publication}
	}
	for _, id := range sectionOrder {
		in.r.section(id)
	}
	if err := in.server(); err != nil {
		return nil, err
	}
	if in.r.Server.VersionNum < minVersionNum {
		return nil, fmt.Errorf("%w: PostgreSQL %s has no pgoutput logical decoding; upgrade to 10 or later (15+ recommended)",
			ErrUnsupported, in.r.Server.Version)
	}
	// The WAL sample brackets the other reads, so a 1s window costs little
	// more than 1s in total.
	sampleStart := time.Now()
	if err := in.walSampleStart(); err != nil {
		return nil, err
	}
	steps := []func() error{in.settingsRead, in.privileges, in.tables, in.configured, in.slots, in.conflicts}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if rest := opts.SampleWindow - time.Since(sampleStart); rest > 0 {
		t := time.NewTimer(rest)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("check: WAL sample: %w", ctx.Err())
		case <-t.C:
		}
	}
	if err := in.walSampleEnd(time.Since(sampleStart)); err != nil {
		return nil, err
	}
	in.settingsRules()
	in.walRules()
	in.scopeNote()
	in.r.finish()
	in.r.Elapsed = JSONSeconds(opts.Now().Sub(start))
	return in.r, nil
}

// optional runs a read whose failure degrades to a note. It returns false
// when the read was skipped.
func (in *inspector) optional(what string, fn func() error) (bool, error) {
	err := fn()
	if err == nil {
		return true, nil
	}
	if reason, ok := degradable(err); ok {
		in.r.note("%s: %s", what, reason)
		return false, nil
	}
	return false, &QueryError{What: what, Err: err}
}

// exists reports whether a catalog relation exists, e.g. a view added in a
// newer major.
func (in *inspector) exists(rel string) (bool, error) {
	var ok bool
	err := in.q.QueryRow(in.ctx, "SELECT to_regclass($1) IS NOT NULL", rel).Scan(&ok)
	if err != nil {
		return false, &QueryError{What: "to_regclass(" + rel + ")", Err: err}
	}
	return ok, nil
}

// columns lists the columns of a catalog view, so version-dependent ones are
// read only where they exist.
func (in *inspector) columns(rel string) (map[string]bool, error) {
	rows, err := in.q.Query(in.ctx, `SELECT attname::text FROM pg_catalog.pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, rel)
	if err != nil {
		return nil, &QueryError{What: "columns of " + rel, Err: err}
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, &QueryError{What: "columns of " + rel, Err: err}
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}
