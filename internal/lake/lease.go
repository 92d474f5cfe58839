//go:build full

package lake

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// LeaseTable is the table, in the SQL catalog's own database, where
// committers lease the Iceberg tables they write: one row per table, the
// committer that may commit to it. Iceberg's optimistic commits would let
// two committers write one table (each retrying on the other's
// conflicts, and two of them writing epochs); the lease makes one of them
// the owner and refuses the other by name.
const LeaseTable = "trellara_lake_leases"

// DefaultLeaseTTL is how long a lease lasts without a renewal. The
// committer renews every leaseTTL/3 and before each Iceberg commit.
const DefaultLeaseTTL = 30 * time.Second

// leaseTTL is the TTL of new leases and renewals; tests shorten it.
var leaseTTL = DefaultLeaseTTL

// ErrLeaseHeld: the table is leased to another live committer.
var ErrLeaseHeld = errors.New("the table is leased to another committer")

// ErrLeaseLost: this committer's lease was taken over (it expired while
// the committer was paused or cut off) or removed: the committer stops
// before committing (fencing).
var ErrLeaseLost = errors.New("this committer's lease on the table is lost")

// leaseDialect is every SQL difference between the two catalog databases
// the leases live in, in one place: placeholders and the database's clock
// in Unix milliseconds. The database's clock, not the committers': two
// committers on two machines compare expiries on one clock.
type leaseDialect struct {
	name  string
	now   string // SQL expression: the current time in Unix milliseconds
	param func(n int) string
}

var (
	leasePostgres = leaseDialect{name: CatalogPostgres,
		now:   "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
		param: func(n int) string { return fmt.Sprintf("$%d", n) }}
	leaseSQLite = leaseDialect{name: CatalogSQLite,
		now:   "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
		param: func(n int) string { return fmt.Sprintf("?%d", n) }}
)

// q replaces $1..$9 in query with the dialect's placeholders and NOW with
// its clock.
func (d leaseDialect) q(query string) string {
	query = strings.ReplaceAll(query, "NOW", d.now)
	for n := 9; n >= 1; n-- {
		query = strings.ReplaceAll(query, fmt.Sprintf("$%d", n), d.param(n))
	}
	return query
}

// leases are one committer's leases in one catalog.
type leases struct {
	db      *sql.DB
	d       leaseDialect
	catalog string
	ns      string
	owner   string // lake.committer
	holder  string // this committer instance: owner/host/pid/random
	ttl     time.Duration
	log     *slog.Logger

	mu   sync.Mutex
	held map[string]bool // table name -> leased by this holder
}

func newLeases(l *Lake, log *slog.Logger) (*leases, error) {
	if l.db == nil {
		return nil, nil // rest: refused at config time when sharded
	}
	// The holder is the committer's name on this host, not the process:
	// a committer restarted after a crash takes its own leases back at
	// once instead of waiting out the TTL. A second process of the same
	// committer on the same host cannot bind the same run.listen.
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	ls := &leases{db: l.db, d: l.dialect, catalog: l.sink.Catalog.Name, ns: l.sink.Namespace, owner: l.sink.Committer,
		holder: l.sink.Committer + "@" + host,
		ttl:    leaseTTL, log: log, held: map[string]bool{}}
	if ls.owner == "" {
		ls.owner = "default"
	}
	// Both dialects know CREATE TABLE IF NOT EXISTS, BIGINT and a
	// composite primary key.
	if _, err := l.db.Exec(`CREATE TABLE IF NOT EXISTS ` + LeaseTable + ` (
		catalog_name VARCHAR(255) NOT NULL,
		namespace VARCHAR(255) NOT NULL,
		table_name VARCHAR(255) NOT NULL,
		owner VARCHAR(255) NOT NULL,
		holder_id VARCHAR(512) NOT NULL,
		acquired_at_ms BIGINT NOT NULL,
		renewed_at_ms BIGINT NOT NULL,
		expires_at_ms BIGINT NOT NULL,
		PRIMARY KEY (catalog_name, namespace, table_name))`); err != nil && !leaseTableExists(l.db) {
		// PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe against a
		// concurrent one (a duplicate pg_type row): the loser's error is
		// fine when the table is there now.
		return nil, l.scrub(fmt.Errorf("lake: create the lease table %s in the %s catalog: %w", LeaseTable, l.sink.Catalog.Kind, err))
	}
	return ls, nil
}

func leaseTableExists(db *sql.DB) bool {
	rows, err := db.Query(`SELECT 1 FROM ` + LeaseTable + ` WHERE 1 = 0`)
	if err != nil {
		return false
	}
	_ = rows.Close()
	return true
}

// leaseRow is a lease as read back, with the database's clock.
type leaseRow struct {
	owner, holder              string
	acquired, renewed, expires int64
	now                        int64
}

func (ls *leases) read(ctx context.Context, name string) (leaseRow, bool, error) {
	var r leaseRow
	err := ls.db.QueryRowContext(ctx, ls.d.q(`SELECT owner, holder_id, acquired_at_ms, renewed_at_ms, expires_at_ms, NOW FROM `+LeaseTable+
		` WHERE catalog_name = $1 AND namespace = $2 AND table_name = $3`), ls.catalog, ls.ns, name).
		Scan(&r.owner, &r.holder, &r.acquired, &r.renewed, &r.expires, &r.now)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// Acquire takes (or keeps) the lease on table name for this committer: a
// table nobody holds, held by this holder already, or whose lease expired.
// A table another live holder has is refused with ErrLeaseHeld, naming the
// owner and the fix. It reports whether the lease is new to this holder:
// the caller then re-reads the table's marks (another committer may have
// committed since it last looked).
func (ls *leases) Acquire(ctx context.Context, name string) (bool, error) {
	if ls == nil {
		return false, nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.held[name] {
		return false, nil
	}
	prev, had, err := ls.read(ctx, name)
	if err != nil {
		return false, fmt.Errorf("lake: read the lease of table %s.%s: %w", ls.ns, name, err)
	}
	ttl := ls.ttl.Milliseconds()
	// One statement: insert, or take over a row this holder has or that
	// expired. Two committers racing for one free table both run it; the
	// primary key makes one of them update a row the other's WHERE then
	// refuses, so exactly one gets a row affected.
	res, err := ls.db.ExecContext(ctx, ls.d.q(`INSERT INTO `+LeaseTable+
		` (catalog_name, namespace, table_name, owner, holder_id, acquired_at_ms, renewed_at_ms, expires_at_ms)
		VALUES ($1, $2, $3, $4, $5, NOW, NOW, NOW + $6)
		ON CONFLICT (catalog_name, namespace, table_name) DO UPDATE SET
			owner = excluded.owner, holder_id = excluded.holder_id, acquired_at_ms = excluded.acquired_at_ms,
			renewed_at_ms = excluded.renewed_at_ms, expires_at_ms = excluded.expires_at_ms
		WHERE `+LeaseTable+`.holder_id = excluded.holder_id OR `+LeaseTable+`.expires_at_ms <= excluded.renewed_at_ms`),
		ls.catalog, ls.ns, name, ls.owner, ls.holder, ttl)
	if err != nil {
		return false, fmt.Errorf("lake: lease table %s.%s for committer %q: %w", ls.ns, name, ls.owner, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		cur, ok, rerr := ls.read(ctx, name)
		if rerr != nil || !ok {
			return false, fmt.Errorf("lake: lease table %s.%s for committer %q: not taken, and the lease cannot be read (%v); retrying", ls.ns, name, ls.owner, rerr)
		}
		return false, ls.refusal(name, cur)
	}
	ls.held[name] = true
	switch {
	case had && prev.holder != ls.holder && prev.expires <= prev.now:
		ls.log.Warn("lake: took over an expired lease", "table", ls.ns+"."+name, "committer", ls.owner,
			"previous_committer", prev.owner, "previous_holder", prev.holder, "expired_ago", time.Duration(prev.now-prev.expires)*time.Millisecond)
	default:
		ls.log.Info("lake: leased table", "table", ls.ns+"."+name, "committer", ls.owner, "holder", ls.holder, "ttl", ls.ttl)
	}
	return true, nil
}

// refusal is the error for table name leased by cur: the owner, the
// table, how live the lease is, and the fix.
func (ls *leases) refusal(name string, cur leaseRow) error {
	ms := func(v int64) time.Duration {
		return (time.Duration(v) * time.Millisecond).Round(100 * time.Millisecond)
	}
	fix := fmt.Sprintf("give this committer other tables with lake.tables, or stop %q", cur.owner)
	if cur.owner == ls.owner {
		fix = fmt.Sprintf("another process runs with lake.committer %q: stop it, or give this one its own lake.committer and lake.tables", cur.owner)
	}
	return fmt.Errorf("lake: table %s.%s is leased to committer %q (holder %s, renewed %s ago, expires in %s); %s: %w",
		ls.ns, name, cur.owner, cur.holder, ms(cur.now-cur.renewed), ms(cur.expires-cur.now), fix, ErrLeaseHeld)
}

// Confirm is the fence before a commit to table name: it renews the lease
// only if this holder still has it and it has not expired. A committer
// whose lease lapsed (it was paused past the TTL, another took the table
// over) gets ErrLeaseLost and must not commit.
func (ls *leases) Confirm(ctx context.Context, name string) error {
	if ls == nil {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.confirm(ctx, name)
}

func (ls *leases) confirm(ctx context.Context, name string) error {
	res, err := ls.db.ExecContext(ctx, ls.d.q(`UPDATE `+LeaseTable+` SET renewed_at_ms = NOW, expires_at_ms = NOW + $1
		WHERE catalog_name = $2 AND namespace = $3 AND table_name = $4 AND holder_id = $5 AND expires_at_ms > NOW`),
		ls.ttl.Milliseconds(), ls.catalog, ls.ns, name, ls.holder)
	if err != nil {
		return fmt.Errorf("lake: renew the lease of table %s.%s (committer %q): %w", ls.ns, name, ls.owner, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	delete(ls.held, name)
	why := "its row is gone"
	if cur, ok, _ := ls.read(ctx, name); ok && cur.holder != ls.holder {
		why = fmt.Sprintf("committer %q (holder %s) has it now", cur.owner, cur.holder)
	} else if ok {
		why = fmt.Sprintf("it expired %s ago", (time.Duration(cur.now-cur.expires) * time.Millisecond).Round(100*time.Millisecond))
	}
	return fmt.Errorf("lake: table %s.%s: committer %q (holder %s) no longer holds its lease: %s; not committing: %w",
		ls.ns, name, ls.owner, ls.holder, why, ErrLeaseLost)
}

// Renew is the heartbeat: it confirms every lease this holder has.
func (ls *leases) Renew(ctx context.Context) error {
	if ls == nil {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	names := make([]string, 0, len(ls.held))
	for n := range ls.held {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := ls.confirm(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// Release gives back every lease this holder has (a clean stop), so
// another committer can take the tables at once instead of after the TTL.
func (ls *leases) Release(ctx context.Context) {
	if ls == nil {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for n := range ls.held {
		if _, err := ls.db.ExecContext(ctx, ls.d.q(`DELETE FROM `+LeaseTable+
			` WHERE catalog_name = $1 AND namespace = $2 AND table_name = $3 AND holder_id = $4`),
			ls.catalog, ls.ns, n, ls.holder); err != nil {
			ls.log.Warn("lake: lease not released; it expires by itself", "table", ls.ns+"."+n, "committer", ls.owner, "ttl", ls.ttl, "err", err)
			continue
		}
		ls.log.Info("lake: released lease", "table", ls.ns+"."+n, "committer", ls.owner)
	}
	ls.held = map[string]bool{}
}

// Leases lists the lease rows of the lake's namespace, for reports and
// tests: table name -> owner.
func (l *Lake) Leases(ctx context.Context) (map[string]string, error) {
	if l.db == nil {
		return nil, nil
	}
	rows, err := l.db.QueryContext(ctx, l.dialect.q(`SELECT table_name, owner FROM `+LeaseTable+
		` WHERE catalog_name = $1 AND namespace = $2 AND expires_at_ms > NOW`), l.sink.Catalog.Name, l.sink.Namespace)
	if err != nil {
		return nil, fmt.Errorf("lake: read %s: %w", LeaseTable, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var t, o string
		if err := rows.Scan(&t, &o); err != nil {
			return nil, err
		}
		out[t] = o
	}
	return out, rows.Err()
}

// TTL is the leases' time to live (DefaultLeaseTTL; nil leases: the
// default, for the heartbeat's period).
func (ls *leases) TTL() time.Duration {
	if ls == nil {
		return DefaultLeaseTTL
	}
	return ls.ttl
}
