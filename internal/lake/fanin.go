//go:build full

package lake

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fanin verdicts.
const (
	Converged = "CONVERGED"
	Diverged  = "DIVERGED"
	Behind    = "BEHIND"
)

// FaninTable is one source table's comparison.
type FaninTable struct {
	SourceID string   `json:"source_id"`
	Table    string   `json:"table"`
	Verdict  string   `json:"verdict"`
	Source   Digest   `json:"source"`
	Lake     Digest   `json:"lake"`
	Samples  []string `json:"samples,omitempty"`
}

// FaninSource is one source's comparison.
type FaninSource struct {
	SourceID string `json:"source_id"`
	Verdict  string `json:"verdict"`
	// AtLSN is the source position compared at (the snapshot's WAL insert
	// position); Epoch is the epoch that covers it.
	AtLSN  string       `json:"at_lsn"`
	Epoch  int64        `json:"epoch,omitempty"`
	Reason string       `json:"reason,omitempty"`
	Tables []FaninTable `json:"tables"`
}

// FaninResult is fanin verify's answer.
type FaninResult struct {
	Verdict string        `json:"verdict"`
	Sources []FaninSource `json:"sources"`
}

// FaninVerify compares, per source and table, the changelog's net state
// through a position with the source at that position. For each source it
// reads every published table in one REPEATABLE READ snapshot whose WAL
// insert position S it records, waits up to wait for an epoch that
// includes the source through S (fleet run closes one every
// close_interval), and replays the source's changelog rows with a commit
// LSN before S. Counts, key checksums and row checksums must agree.
//
// It scales with the fleet: the snapshots are taken a few sources at a
// time before any waiting, one wait covers every source (not one epoch
// per source in turn), and each changelog table is read once for all
// sources, not once per source.
func FaninVerify(ctx context.Context, l *Lake, f *Fleet, wait time.Duration) (*FaninResult, error) {
	snaps := make([]*sourceSnap, len(f.Sources))
	errs := make([]error, len(f.Sources))
	sem := make(chan struct{}, faninParallel)
	var wg sync.WaitGroup
	for i, s := range f.Sources {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			snaps[i], errs[i] = snapshotSource(ctx, s)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}

	// The epochs that cover the snapshots: one wait for all.
	deadline := time.Now().Add(wait)
	for {
		eps, err := l.Epochs(ctx)
		if err != nil {
			return nil, err
		}
		waiting := 0
		for _, sn := range snaps {
			if sn.epoch != nil {
				continue
			}
			for i := len(eps) - 1; i >= 0; i-- {
				if se, ok := eps[i].Source(sn.fs.SourceID); ok && se.Included && se.ThroughLSN >= sn.at {
					sn.epoch = &eps[i]
					break
				}
			}
			if sn.epoch == nil {
				waiting++
			}
		}
		if waiting == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}

	// Each changelog table once, its changes split by source.
	type tableChanges struct {
		bySource map[string][]Change
		keys     []string
	}
	read := map[string]*tableChanges{}
	res := &FaninResult{Verdict: Converged}
	for _, sn := range snaps {
		fs := sn.fs
		if sn.epoch == nil {
			fs.Verdict = Behind
			fs.Reason = fmt.Sprintf("no epoch includes source %s through %s yet (waited %s); keep trellara-full fleet run going and run fanin verify again", fs.SourceID, fs.AtLSN, wait)
		} else {
			fs.Epoch = sn.epoch.ID
			fs.Verdict = Converged
			for _, st := range sn.tables {
				name := st.ref.LakeName()
				tc := read[name]
				if tc == nil {
					changes, lakeKeys, err := l.ReadChanges(ctx, name)
					if err != nil {
						return nil, err
					}
					tc = &tableChanges{bySource: map[string][]Change{}, keys: lakeKeys}
					for _, ch := range changes {
						tc.bySource[ch.SourceID] = append(tc.bySource[ch.SourceID], ch)
					}
					read[name] = tc
				}
				var mine []Change
				for _, ch := range tc.bySource[fs.SourceID] {
					if visibleAt(ch, sn.at) {
						mine = append(mine, ch)
					}
				}
				keys := st.keys
				if len(keys) == 0 {
					keys = tc.keys
				}
				src := st.digest
				if src == nil {
					d := NewDigest(keyed(st.rows, keys, st.cols), st.cols)
					src = &d
				}
				ft := FaninTable{SourceID: fs.SourceID, Table: st.ref.String(), Verdict: Converged,
					Source: *src, Lake: NewDigest(NetState(mine, keys, st.cols), st.cols)}
				if !ft.Source.Equal(ft.Lake) {
					ft.Verdict = Diverged
					ft.Samples = ft.Source.Diff(ft.Lake, 5)
					fs.Verdict = Diverged
				}
				fs.Tables = append(fs.Tables, ft)
			}
		}
		res.Sources = append(res.Sources, *fs)
		switch {
		case fs.Verdict == Diverged:
			res.Verdict = Diverged
		case fs.Verdict == Behind && res.Verdict == Converged:
			res.Verdict = Behind
		}
	}
	return res, nil
}

// faninParallel is how many sources fanin verify reads at once.
const faninParallel = 8

// sourceTable is a source table's rows and shape, read in the snapshot.
type sourceTable struct {
	ref  TableRef
	cols []string
	keys []string
	rows map[string]map[string]*string
	// digest is the rows' digest, taken at once (and rows dropped) for a
	// table with a key: fanin verify holds every source's snapshot while
	// it waits, and a digest is far smaller than the rows. A keyless
	// table's rows wait for the lake's key columns.
	digest *Digest
}

// sourceSnap is one source's snapshot: its position, its tables, and the
// epoch found to cover it.
type sourceSnap struct {
	fs     *FaninSource
	at     uint64
	tables []sourceTable
	epoch  *Epoch
}

// snapshotSource reads source s's published tables in one REPEATABLE READ
// snapshot and records its WAL insert position.
func snapshotSource(ctx context.Context, s FleetSource) (*sourceSnap, error) {
	fs := &FaninSource{SourceID: s.ID}
	sec, err := s.Flow.Source.DatabaseURL.Resolve()
	if err != nil {
		return nil, fmt.Errorf("fanin verify: source %s: %w", s.ID, err)
	}
	url := sec.Reveal()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.Connect(cctx, url)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("fanin verify: source %s: connect: %w", s.ID, scrubConn(err, url))
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("fanin verify: source %s: %w", s.ID, scrubConn(err, url))
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The first statement takes the snapshot; its WAL insert position is
	// at or past every commit the snapshot sees.
	var at uint64
	if err := tx.QueryRow(ctx, "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint").Scan(&at); err != nil {
		return nil, fmt.Errorf("fanin verify: source %s: %w", s.ID, scrubConn(err, url))
	}
	fs.AtLSN = fmtLSN(at)
	tables, err := readSourceTables(ctx, tx, s.Flow.Source.Publication)
	if err != nil {
		return nil, fmt.Errorf("fanin verify: source %s: %w", s.ID, scrubConn(err, url))
	}
	for i, st := range tables {
		if len(st.keys) > 0 {
			d := NewDigest(keyed(st.rows, st.keys, st.cols), st.cols)
			tables[i].digest, tables[i].rows = &d, nil
		}
	}
	return &sourceSnap{fs: fs, at: at, tables: tables}, nil
}

// visibleAt reports whether change ch is visible in a source snapshot
// taken at WAL insert position at: a transaction's commit record starts
// before it; the initial snapshot's rows carry the slot's consistent
// point, which may equal it (nothing written since).
func visibleAt(ch Change, at uint64) bool {
	return ch.CommitLSN < at || ch.Op == OpSnapshot && ch.CommitLSN <= at
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// keyed re-keys source rows (read keyed by row number) by their key.
func keyed(rows map[string]map[string]*string, keys, cols []string) map[string]map[string]*string {
	if len(keys) == 0 {
		keys = cols
	}
	out := make(map[string]map[string]*string, len(rows))
	for _, r := range rows {
		out[KeyOf(r, keys)] = r
	}
	return out
}

// readSourceTables reads every table of publication pub: its columns, its
// replica-identity key columns and its rows as text.
func readSourceTables(ctx context.Context, tx pgx.Tx, pub string) ([]sourceTable, error) {
	rows, err := tx.Query(ctx, `SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2`, pub)
	if err != nil {
		return nil, fmt.Errorf("list the tables of publication %s: %w", pub, err)
	}
	var refs []TableRef
	for rows.Next() {
		var r TableRef
		if err := rows.Scan(&r.Schema, &r.Name); err != nil {
			rows.Close()
			return nil, err
		}
		refs = append(refs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []sourceTable
	for _, ref := range refs {
		st := sourceTable{ref: ref, rows: map[string]map[string]*string{}}
		q := quoteIdent(ref.Schema) + "." + quoteIdent(ref.Name)
		crow, err := tx.Query(ctx, `
SELECT a.attname,
       COALESCE(a.attnum = ANY (i.indkey), false)
FROM pg_attribute a
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND (i.indisreplident OR (i.indisprimary AND NOT EXISTS (
       SELECT 1 FROM pg_index r WHERE r.indrelid = a.attrelid AND r.indisreplident)))
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
ORDER BY a.attnum`, q)
		if err != nil {
			return nil, fmt.Errorf("table %s: columns: %w", ref, err)
		}
		for crow.Next() {
			var name string
			var key bool
			if err := crow.Scan(&name, &key); err != nil {
				crow.Close()
				return nil, err
			}
			st.cols = append(st.cols, name)
			if key {
				st.keys = append(st.keys, name)
			}
		}
		crow.Close()
		if err := crow.Err(); err != nil {
			return nil, fmt.Errorf("table %s: columns: %w", ref, err)
		}
		sel := ""
		for i, c := range st.cols {
			if i > 0 {
				sel += ", "
			}
			sel += quoteIdent(c) + "::text"
		}
		drows, err := tx.Query(ctx, "SELECT "+sel+" FROM "+q)
		if err != nil {
			return nil, fmt.Errorf("table %s: read: %w", ref, err)
		}
		n := 0
		for drows.Next() {
			vals := make([]*string, len(st.cols))
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := drows.Scan(ptrs...); err != nil {
				drows.Close()
				return nil, err
			}
			r := make(map[string]*string, len(vals))
			for i, c := range st.cols {
				r[c] = vals[i]
			}
			st.rows[fmt.Sprint(n)] = r
			n++
		}
		drows.Close()
		if err := drows.Err(); err != nil {
			return nil, fmt.Errorf("table %s: read: %w", ref, err)
		}
		out = append(out, st)
	}
	return out, nil
}
