//go:build full

package lake

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/config"
)

// TestSQLiteCatalogCommitsAccumulate: successive commits to one changelog
// table, from different sources, are all read back through the scan.
func TestSQLiteCatalogCommitsAccumulate(t *testing.T) {
	dir := t.TempDir()
	sink := Sink{Catalog: Catalog{Kind: CatalogSQLite, Name: "t", URI: config.InlineRef(filepath.Join(dir, "catalog.db"))},
		Warehouse: "file://" + filepath.Join(dir, "wh"), Namespace: "ns"}
	ctx := context.Background()
	_ = slog.New(slog.NewTextHandler(io.Discard, nil))
	v := func(s string) *string { return &s }
	for i, src := range []string{"a", "b", "c"} {
		l, err := Open(ctx, sink)
		if err != nil {
			t.Fatal(err)
		}
		tc := TableChanges{Table: TableRef{"public", "t"}, Columns: []string{"id"}, Keys: []string{"id"},
			Changes: []Change{{SourceID: src, CommitLSN: 100, Op: OpSnapshot, Cols: map[string]*string{"id": v("1")}}}}
		tb, err := l.changelogTable(ctx, tc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.appendChanges(ctx, tb, tc.Changes, map[string]uint64{src: 100}); err != nil {
			t.Fatal(err)
		}
		chs, _, err := l.ReadChanges(ctx, "public__t")
		if err != nil {
			t.Fatal(err)
		}
		if len(chs) != i+1 {
			t.Fatalf("after %d commits: %d rows", i+1, len(chs))
		}
		l.Close()
	}
}

// TestCatalogErrorsHideThePassword: a catalog that cannot be reached is
// named without its password.
func TestCatalogErrorsHideThePassword(t *testing.T) {
	sink := Sink{Catalog: Catalog{Kind: CatalogPostgres, Name: "t", URI: config.InlineRef("postgres://lake:s3cretpw@127.0.0.1:1/cat?connect_timeout=2")},
		Warehouse: "file://" + t.TempDir(), Namespace: "ns"}
	_, err := Open(context.Background(), sink)
	if err == nil {
		t.Fatal("no error from an unreachable catalog")
	}
	if strings.Contains(err.Error(), "s3cretpw") {
		t.Fatalf("the error shows the password: %v", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("the error does not name the catalog: %v", err)
	}
}
