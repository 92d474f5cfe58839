//go:build full

package cli

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/lake"
	"github.com/trellara/trellara/internal/lake/lakeread"
)

func init() { devLakeRead = runLakeRead }

// lakeReadTable is one table's line of dev lake-read.
type lakeReadTable struct {
	Table      string   `json:"table"`
	SnapshotID int64    `json:"snapshot_id"`
	Manifests  int      `json:"manifests"`
	Files      int      `json:"files"`
	Rows       int      `json:"rows"`
	Snapshot   int      `json:"snapshot_rows"`
	Sources    int      `json:"sources"`
	Duplicates []string `json:"duplicates"`
}

// runLakeRead reads every changelog table of the fleet's namespace with
// lakeread, which shares no code with the committer's writer, and fails
// (exit 1) on any change that is there twice. Read-only: it runs SELECTs
// on the catalog and reads files.
func runLakeRead(c *cli.Context) error {
	f, format, err := loadFleet(c)
	if err != nil {
		return err
	}
	sink := f.Lake
	sec, err := sink.Catalog.URI.Resolve()
	if err != nil {
		return failure(fmt.Errorf("dev lake-read: lake.catalog.uri: %w", err))
	}
	uri := sec.Reveal()
	var db *sql.DB
	var dialect lakeread.Dialect
	switch sink.Catalog.Kind {
	case lake.CatalogPostgres:
		if sink.Production {
			if fe := config.CheckPostgresTLS("lake.catalog.uri", uri, "lake.catalog.verify_ca_reason", sink.Catalog.VerifyCAReason); fe != nil {
				return failure(fmt.Errorf("dev lake-read: %s (fix: %s)", fe.Message, fe.Fix))
			}
		}
		db, err = sql.Open("pgx", uri)
		dialect = lakeread.Postgres
	case lake.CatalogSQLite:
		// Read-only, and patient with the committer's writes.
		db, err = sql.Open("sqlite", "file:"+strings.TrimPrefix(uri, "file:")+"?mode=ro&_pragma=busy_timeout(10000)")
		dialect = lakeread.SQLite
	default:
		return cli.Exit(fmt.Sprintf("dev lake-read: lake.catalog.kind %s: the independent reader reads SQL catalogs (%s, %s)",
			sink.Catalog.Kind, lake.CatalogSQLite, lake.CatalogPostgres), ExitError)
	}
	if err != nil {
		return failure(config.ScrubConnError(fmt.Errorf("dev lake-read: open the %s catalog: %w", sink.Catalog.Kind, err), uri))
	}
	defer db.Close()
	ctx, stop := signalContext(c)
	defer stop()
	r := &lakeread.Reader{Catalog: lakeread.NewCatalog(db, dialect, sink.Catalog.Name), Opener: lakeread.FileOpener{}}
	started := time.Now()
	names, err := r.Tables(ctx, sink.Namespace)
	if err != nil {
		return failure(config.ScrubConnError(err, uri))
	}
	var out []lakeReadTable
	dups := 0
	for _, n := range names {
		if n == lake.EpochsTable {
			continue
		}
		t, err := r.ReadTable(ctx, sink.Namespace, n)
		if err != nil {
			return failure(config.ScrubConnError(err, uri))
		}
		line := lakeReadTable{Table: sink.Namespace + "." + n, SnapshotID: t.SnapshotID, Manifests: len(t.Manifests),
			Files: len(t.Files), Rows: len(t.Rows), Duplicates: lakeread.Duplicates(t)}
		srcs := map[string]bool{}
		for _, row := range t.Rows {
			srcs[row.SourceID] = true
			if row.Op == "snapshot" {
				line.Snapshot++
			}
		}
		line.Sources = len(srcs)
		if line.Duplicates == nil {
			line.Duplicates = []string{}
		}
		dups += len(line.Duplicates)
		out = append(out, line)
	}
	took := time.Since(started)
	if format == "json" {
		if err := writeJSON(c, dups == 0, map[string]any{"namespace": sink.Namespace, "tables": out, "duplicates": dups, "read_ms": took.Milliseconds()}); err != nil {
			return err
		}
	} else {
		w := c.App.Writer
		for _, t := range out {
			fmt.Fprintf(w, "%s: snapshot %d, %d manifests, %d data files, %d rows (%d snapshot rows) from %d sources, %d duplicates\n",
				t.Table, t.SnapshotID, t.Manifests, t.Files, t.Rows, t.Snapshot, t.Sources, len(t.Duplicates))
			for _, d := range t.Duplicates {
				fmt.Fprintf(w, "  %s\n", d)
			}
		}
		verdict := "NO DUPLICATES"
		if dups > 0 {
			verdict = fmt.Sprintf("%d DUPLICATES", dups)
		}
		fmt.Fprintf(w, "%s: %d changelog tables read independently (SQL catalog, metadata JSON, Avro manifests, Parquet files) in %v\n",
			verdict, len(out), took.Round(time.Millisecond))
	}
	if dups > 0 {
		return &exitErr{err: errors.New("dev lake-read: a change is in the changelog twice"), code: ExitFindings}
	}
	return nil
}
