//go:build full

package lake_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/lake/lakeread"
	"github.com/trellara/trellara/internal/pgtest"
)

// recordSlot is the test_decoding slot each source gets before the fleet
// starts: the record of every committed change, read once at the end.
const recordSlot = "lakeread_record"

// startRecord creates the test_decoding slot on every source. Call it
// before the fleet and the workload start: the fleet's own slot (and so
// its snapshot point) comes after it, so every change the changelog holds
// as a change is in the record.
func startRecord(t *testing.T, e *fleetEnv) {
	t.Helper()
	for i, c := range e.sources {
		conn := c.Connect(context.Background())
		if _, err := conn.Exec(context.Background(), `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, recordSlot); err != nil {
			t.Fatalf("%s: create the test_decoding slot: %v", e.ids[i], err)
		}
		conn.Close(context.Background())
	}
}

// checkIndependently reads the fleet's changelog with lakeread (no
// iceberg-go code: the SQL catalog's iceberg_tables row, the metadata
// JSON, the Avro manifests, the Parquet files) and checks it against each
// source's test_decoding record and final contents: every committed
// change exactly once, the net state equal to the source
// (lakeread.Check).
//
// It then drops one data file of public__counters from the reader's view
// (its rows taken out of the table read) and requires the same check to fail: a check
// that cannot see a missing file proves nothing. Tried once by hand, also
// red: the committer writing every group twice (lake.Dedup.Take always
// true, so the through marks never skip a re-read group) after the
// SIGKILLs of this test; see docs/LAKE.md, "The independent reader".
func checkIndependently(t *testing.T, e *fleetEnv) {
	t.Helper()
	ctx := context.Background()
	var sources []lakeread.Source
	for i, c := range e.sources {
		conn := c.Connect(ctx)
		rows, err := conn.Query(ctx, `SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_get_changes($1, NULL, NULL,
			'include-xids', '1', 'skip-empty-xacts', '1')`, recordSlot)
		if err != nil {
			t.Fatalf("%s: read the test_decoding record: %v", e.ids[i], err)
		}
		var td []lakeread.TDRow
		for rows.Next() {
			var lsn, data string
			var xid int64
			if err := rows.Scan(&lsn, &xid, &data); err != nil {
				t.Fatal(err)
			}
			l, err := lakeread.ParseLSN(lsn)
			if err != nil {
				t.Fatal(err)
			}
			td = append(td, lakeread.TDRow{LSN: l, Xid: xid, Data: data})
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rec, err := lakeread.RecordFromTestDecoding(td)
		if err != nil {
			t.Fatalf("%s: %v", e.ids[i], err)
		}
		conn.Close(ctx)
		sources = append(sources, lakeread.Source{ID: e.ids[i], Record: rec, Final: map[string]lakeread.State{}})
	}
	db, err := sql.Open("pgx", e.catalogURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var opener lakeread.Opener = lakeread.FileOpener{}
	if e.opener != nil {
		opener = e.opener
	}
	r := &lakeread.Reader{Catalog: lakeread.NewCatalog(db, lakeread.Postgres, e.f.Lake.Catalog.Name), Opener: opener}
	read := func() []*lakeread.Table {
		var tables []*lakeread.Table
		for _, name := range []string{"public__items", "public__counters"} {
			tb, err := r.ReadTable(ctx, e.f.Lake.Namespace, name)
			if err != nil {
				t.Fatal(err)
			}
			tables = append(tables, tb)
		}
		return tables
	}
	started := time.Now()
	tables := read()
	took := time.Since(started)
	for si, c := range e.sources {
		for _, tb := range tables {
			sources[si].Final[tb.SourceTable] = finalState(t, c, tb)
		}
	}
	rep := lakeread.Check(tables, sources)
	if err := rep.Err(); err != nil {
		t.Fatalf("independent reader: %v", err)
	}
	for _, tb := range tables {
		t.Logf("independent reader: %s (read in %v)", tb, took.Round(time.Millisecond))
	}
	for _, tr := range rep.Tables {
		t.Logf("independent reader: %s %s: %d rows (%d snapshot), %d transactions once each, %d inside the snapshot, %d keys equal to the source",
			tr.Table, tr.Source, tr.Rows, tr.SnapshotRows, tr.Txns, tr.Absorbed, tr.Keys)
	}

	// The mutation: one data file out of the reader's view.
	var dropped string
	for _, df := range tables[1].Files {
		for _, row := range tables[1].Rows {
			if row.File == df.Path && row.Op != "snapshot" {
				dropped = df.Path
			}
		}
		if dropped != "" {
			break
		}
	}
	mut := read()
	kept := mut[1].Rows[:0]
	for _, row := range mut[1].Rows {
		if row.File != dropped {
			kept = append(kept, row)
		}
	}
	mut[1].Rows = kept
	mrep := lakeread.Check(mut, sources)
	if mrep.Err() == nil {
		t.Fatalf("independent reader: with data file %s left out, the check still passed", dropped)
	}
	t.Logf("independent reader, mutation (data file %s left out): red as it should be: %d problems, first: %s", dropped, len(mrep.Problems), mrep.Problems[0])
}

// finalState reads source table tb.SourceTable's contents as text, keyed
// as the changelog keys it.
func finalState(t *testing.T, c *pgtest.Cluster, tb *lakeread.Table) lakeread.State {
	t.Helper()
	ctx := context.Background()
	conn := c.Connect(ctx)
	defer conn.Close(ctx)
	var sel []string
	for _, col := range tb.Columns {
		sel = append(sel, fmt.Sprintf(`%q::text`, col))
	}
	schema, name, _ := strings.Cut(tb.SourceTable, ".")
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT %s FROM %q.%q`, strings.Join(sel, ", "), schema, name))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	st := lakeread.State{}
	for rows.Next() {
		vals := make([]*string, len(tb.Columns))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		m := map[string]*string{}
		for i, col := range tb.Columns {
			m[col] = vals[i]
		}
		st[lakeread.KeyOf(m, tb.Keys)] = m
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return st
}
