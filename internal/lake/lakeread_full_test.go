//go:build full

package lake

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/lake/lakeread"
	"github.com/trellara/trellara/internal/pgtest"
)

// TestIndependentReaderRoundTrip: what the committer's writer (iceberg-go)
// commits, lakeread (hamba/avro, parquet-go, no iceberg-go code) reads
// back row for row, on a SQLite and on a PostgreSQL catalog: three
// commits from two sources, a column added between them (null in the
// older files), NULLs, an old key, an empty string.
func TestIndependentReaderRoundTrip(t *testing.T) {
	kinds := []string{CatalogSQLite, CatalogPostgres}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			sink := Sink{Catalog: Catalog{Kind: kind, Name: "rt"}, Warehouse: "file://" + filepath.Join(dir, "wh"), Namespace: "ns"}
			driver, dialect, dsn := "sqlite", lakeread.SQLite, "file:"+filepath.Join(dir, "catalog.db")
			if kind == CatalogPostgres {
				pgtest.Require(t)
				c := pgtest.Start(t, pgtest.Options{})
				driver, dialect, dsn = "pgx", lakeread.Postgres, c.URL("postgres")
				sink.Catalog.URI = config.InlineRef(dsn)
			} else {
				sink.Catalog.URI = config.InlineRef(filepath.Join(dir, "catalog.db"))
			}
			ctx := context.Background()
			l, err := Open(ctx, sink)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			v := func(s string) *string { return &s }
			commits := []TableChanges{
				{Columns: []string{"id", "v"}, Changes: []Change{
					{SourceID: "a", CommitLSN: 100, Op: OpSnapshot, Cols: map[string]*string{"id": v("1"), "v": nil}},
					{SourceID: "a", CommitLSN: 100, Seq: 1, Op: OpSnapshot, Cols: map[string]*string{"id": v("2"), "v": v("")}}}},
				{Columns: []string{"id", "v"}, Changes: []Change{
					{SourceID: "b", CommitLSN: 1 << 40, Xid: 4000000000, Seq: 0, CommitTime: 1796285499835000, Op: OpInsert, Cols: map[string]*string{"id": v("7"), "v": v("it's \"x\"")}}}},
				{Columns: []string{"id", "v", "w"}, Changes: []Change{
					{SourceID: "a", CommitLSN: 200, Xid: 9, Seq: 0, Op: OpUpdate, OldKey: `["1"]`, Cols: map[string]*string{"id": v("10"), "v": v("x"), "w": v("new")}},
					{SourceID: "a", CommitLSN: 200, Xid: 9, Seq: 1, Op: OpDelete, Cols: map[string]*string{"id": v("2")}}}},
			}
			for _, tc := range commits {
				tc.Table, tc.Keys = TableRef{"public", "t"}, []string{"id"}
				tb, err := l.changelogTable(ctx, tc)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.appendChanges(ctx, tb, tc.Changes, map[string]uint64{tc.Changes[0].SourceID: tc.Changes[0].CommitLSN + 1}); err != nil {
					t.Fatal(err)
				}
			}
			want, _, err := l.ReadChanges(ctx, "public__t")
			if err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			r := &lakeread.Reader{Catalog: lakeread.NewCatalog(db, dialect, "rt"), Opener: lakeread.FileOpener{}}
			names, err := r.Tables(ctx, "ns")
			if err != nil || strings.Join(names, ",") != "public__t" {
				t.Fatalf("tables %v, %v", names, err)
			}
			got, err := r.ReadTable(ctx, "ns", "public__t")
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Files) != 3 || len(got.Manifests) != 3 || got.SnapshotID == 0 || strings.Join(got.Keys, ",") != "id" ||
				strings.Join(got.Columns, ",") != "id,v,w" || got.SourceTable != "public.t" {
				t.Fatalf("table %s: files %d manifests %d keys %v columns %v source %q", got, len(got.Files), len(got.Manifests), got.Keys, got.Columns, got.SourceTable)
			}
			if a, b := renderChanges(want), renderRows(got.Rows); a != b {
				t.Fatalf("iceberg-go read:\n%s\nlakeread read:\n%s", a, b)
			}
			if d := lakeread.Duplicates(got); len(d) != 0 {
				t.Fatal(d)
			}
			if _, err := r.ReadTable(ctx, "ns", "nope"); err == nil || !strings.Contains(err.Error(), "no such table") {
				t.Fatalf("a missing table: %v", err)
			}
		})
	}
}

func strOr(s *string) string {
	if s == nil {
		return "NULL"
	}
	return fmt.Sprintf("%q", *s)
}

func renderChanges(cs []Change) string {
	var out []string
	for _, c := range cs {
		old := "NULL"
		if c.OldKey != "" {
			old = fmt.Sprintf("%q", c.OldKey)
		}
		out = append(out, fmt.Sprintf("%s %d %d %d %d %s %s id=%s v=%s w=%s", c.SourceID, c.CommitLSN, c.Xid, c.Seq, c.CommitTime, c.Op, old,
			strOr(c.Cols["id"]), strOr(c.Cols["v"]), strOr(c.Cols["w"])))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func renderRows(rs []lakeread.Row) string {
	var out []string
	for _, c := range rs {
		out = append(out, fmt.Sprintf("%s %d %d %d %d %s %s id=%s v=%s w=%s", c.SourceID, c.CommitLSN, c.Xid, c.Seq, c.CommitTime, c.Op, strOr(c.OldKey),
			strOr(c.Cols["id"]), strOr(c.Cols["v"]), strOr(c.Cols["w"])))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestDevLakeReadExitsOnADuplicate: trellara-full dev lake-read reads a
// fleet's namespace with lakeread; clean, it prints NO DUPLICATES and
// exits 0; after a commit that writes a change again (what the committer
// would do with dedup off), it names the change, both files, and exits 1.
func TestDevLakeReadExitsOnADuplicate(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(t.TempDir(), "trellara-full")
	if b, err := exec.Command("go", "build", "-tags", "full", "-o", bin, "github.com/trellara/trellara/cmd/trellara-full").CombinedOutput(); err != nil {
		t.Fatalf("build trellara-full: %v\n%s", err, b)
	}
	writeFlow(t, dir, "a", "127.0.0.1:9401", "127.0.0.1:9402")
	fy := filepath.Join(dir, "fleet.yml")
	body := "version: 1\nfleet: f\nsources:\n  - config: a.yml\nlake:\n  catalog: {kind: sql-sqlite, uri: lake/c.db}\n  warehouse: file://lake/wh\n  namespace: ns\n"
	if err := os.WriteFile(fy, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := LoadFleet(fy)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Lake.CreateLocalDirs(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := Open(ctx, f.Lake)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	v := func(s string) *string { return &s }
	tc := TableChanges{Table: TableRef{"public", "t"}, Columns: []string{"id"}, Keys: []string{"id"}, Changes: []Change{
		{SourceID: "a", CommitLSN: 100, Op: OpSnapshot, Cols: map[string]*string{"id": v("1")}},
		{SourceID: "a", CommitLSN: 200, Xid: 5, Seq: 0, Op: OpInsert, Cols: map[string]*string{"id": v("2")}}}}
	commit := func(chs []Change) {
		tb, err := l.changelogTable(ctx, tc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.appendChanges(ctx, tb, chs, map[string]uint64{"a": 200}); err != nil {
			t.Fatal(err)
		}
	}
	run := func() (string, int) {
		cmd := exec.Command(bin, "dev", "lake-read", "--config", fy)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String() + errb.String(), code
	}
	commit(tc.Changes)
	if out, code := run(); code != 0 || !strings.Contains(out, "ns.public__t: snapshot ") || !strings.Contains(out, "2 rows (1 snapshot rows) from 1 sources, 0 duplicates") ||
		!strings.Contains(out, "NO DUPLICATES") {
		t.Fatalf("clean lake: exit %d\n%s", code, out)
	}
	commit(tc.Changes[1:])
	out, code := run()
	if code != 1 || !strings.Contains(out, "source a change at commit 0/C8 position 0 twice") || !strings.Contains(out, "1 DUPLICATES") {
		t.Fatalf("a change written twice: exit %d\n%s", code, out)
	}
	t.Logf("dev lake-read on a change written twice (exit %d):\n%s", code, out)
}
