//go:build full

package lake

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	_ "github.com/apache/iceberg-go/catalog/rest" // the rest catalog kind
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for sql-postgres
	_ "modernc.org/sqlite"             // database/sql driver "sqlite" for sql-sqlite

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
)

// Lake is an open Iceberg catalog with the fleet's namespace.
type Lake struct {
	cat  catalog.Catalog
	ns   table.Identifier
	sink Sink
	uri  string // resolved catalog URI, for scrubbing errors
	// s3secret is lake.s3.secret_access_key resolved, for scrubbing
	// errors: no SDK message is expected to quote it, and none may.
	s3secret string
	// db is the SQL catalog's database (nil for rest): the committers'
	// lease table lives next to the catalog tables (lease.go).
	db      *sql.DB
	dialect leaseDialect
}

// Open opens the catalog of sink, creating its tables (SQL catalogs) and
// the namespace when they do not exist.
func Open(ctx context.Context, sink Sink) (*Lake, error) {
	sec, err := sink.Catalog.URI.Resolve()
	if err != nil {
		return nil, fmt.Errorf("lake: lake.catalog.uri: %w", err)
	}
	uri := sec.Reveal()
	if sink.Production && sink.Catalog.Kind == CatalogPostgres {
		// The production TLS rule, as for the flows' own connections.
		if fe := config.CheckPostgresTLS("lake.catalog.uri", uri, "lake.catalog.verify_ca_reason", sink.Catalog.VerifyCAReason); fe != nil {
			return nil, fmt.Errorf("lake: %s (fix: %s)", fe.Message, fe.Fix)
		}
	}
	props := iceberg.Properties{"warehouse": sink.Warehouse}
	for k, v := range sink.Properties {
		props[k] = v
	}
	// lake.s3 goes to iceberg-go as catalog properties: every table's
	// FileIO (io.LoadFS) is built from them, for the committer's writes
	// and for lake epoch / fanin verify's reads alike.
	s3props, err := sink.S3.S3Props()
	if err != nil {
		return nil, err
	}
	for k, v := range s3props {
		props[k] = v
	}
	l := &Lake{ns: table.Identifier{sink.Namespace}, sink: sink, uri: uri, s3secret: s3props["s3.secret-access-key"]}
	switch sink.Catalog.Kind {
	case CatalogSQLite, CatalogPostgres:
		driver, dialect, dsn := "pgx", sqlcat.Postgres, uri
		if sink.Catalog.Kind == CatalogSQLite {
			if dir := filepath.Dir(strings.TrimPrefix(uri, "file:")); !isDir(dir) {
				return nil, &PermanentError{Err: fmt.Errorf("lake: lake.catalog.uri: the SQLite catalog's directory %s does not exist; fix: mkdir -p %s (fleet init creates it)", dir, shell.Quote(dir))}
			}
			// WAL and a busy timeout on every pooled connection: the fleet
			// commits while lake epoch / fanin verify read.
			driver, dialect = "sqlite", sqlcat.SQLite
			dsn = "file:" + strings.TrimPrefix(uri, "file:") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
		}
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return nil, l.scrub(fmt.Errorf("lake: open %s catalog: %w", sink.Catalog.Kind, err))
		}
		if sink.Catalog.Kind == CatalogSQLite {
			db.SetMaxOpenConns(1)
		}
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			return nil, l.scrub(fmt.Errorf("lake: connect to the %s catalog %s: %w", sink.Catalog.Kind, config.RedactConnString(uri), err))
		}
		c, err := sqlcat.NewCatalog(sink.Catalog.Name, db, dialect, props)
		if err != nil {
			_ = db.Close()
			return nil, l.scrub(fmt.Errorf("lake: %s catalog %s: %w", sink.Catalog.Kind, config.RedactConnString(uri), err))
		}
		l.cat, l.db, l.dialect = c, db, leasePostgres
		if sink.Catalog.Kind == CatalogSQLite {
			l.dialect = leaseSQLite
		}
	case CatalogREST:
		props["uri"], props["type"] = uri, "rest"
		c, err := catalog.Load(ctx, sink.Catalog.Name, props)
		if err != nil {
			return nil, l.scrub(fmt.Errorf("lake: rest catalog %s: %w", config.RedactConnString(uri), err))
		}
		l.cat = c
	default:
		return nil, fmt.Errorf("lake: lake.catalog.kind %q: must be %s, %s or %s", sink.Catalog.Kind, CatalogSQLite, CatalogPostgres, CatalogREST)
	}
	if err := l.cat.CreateNamespace(ctx, l.ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		l.Close()
		return nil, l.scrub(fmt.Errorf("lake: create namespace %s: %w", sink.Namespace, err))
	}
	return l, nil
}

// Close releases the catalog.
func (l *Lake) Close() {
	if c, ok := l.cat.(interface{ Close() error }); ok {
		_ = c.Close()
	}
}

func (l *Lake) scrub(err error) error {
	err = config.ScrubConnError(err, l.uri)
	// The secret is replaced whole, and only when it is long enough not
	// to be an ordinary word of the message (AWS secret keys are 40
	// characters).
	if err != nil && len(l.s3secret) >= 16 && strings.Contains(err.Error(), l.s3secret) {
		return &scrubbed{msg: strings.ReplaceAll(err.Error(), l.s3secret, "<redacted>"), err: err}
	}
	return err
}

// scrubbed is an error whose message had a secret cut out; errors.Is and
// errors.As still see the original chain.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

func (l *Lake) ident(name string) table.Identifier {
	return append(append(table.Identifier{}, l.ns...), name)
}

// location is where table name's files go under the warehouse.
func (l *Lake) location(name string) string {
	w := strings.TrimSuffix(l.sink.Warehouse, "/")
	return w + "/" + url.PathEscape(l.sink.Namespace) + "/" + url.PathEscape(name)
}

// load returns table name, or nil when it does not exist.
func (l *Lake) load(ctx context.Context, name string) (*table.Table, error) {
	t, err := l.cat.LoadTable(ctx, l.ident(name))
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, nil
	}
	if err != nil {
		return nil, l.scrub(fmt.Errorf("lake: load table %s.%s: %w", l.sink.Namespace, name, err))
	}
	return t, nil
}

// changelogSchema is the schema of a changelog table with source columns
// cols (all strings: the source's text output).
func changelogSchema(cols []string) *iceberg.Schema {
	f := []iceberg.NestedField{
		{ID: 1, Name: ColSourceID, Type: iceberg.PrimitiveTypes.String, Required: true},
		{ID: 2, Name: ColCommitLSN, Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{ID: 3, Name: ColXid, Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{ID: 4, Name: ColSeq, Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{ID: 5, Name: ColCommitTime, Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{ID: 6, Name: ColOp, Type: iceberg.PrimitiveTypes.String, Required: true},
		{ID: 7, Name: ColOldKey, Type: iceberg.PrimitiveTypes.String},
	}
	for i, c := range cols {
		f = append(f, iceberg.NestedField{ID: 8 + i, Name: c, Type: iceberg.PrimitiveTypes.String})
	}
	return iceberg.NewSchema(0, f...)
}

// changelogTable loads (or creates) the changelog table of tc.Table and
// adds any source column it does not have yet.
func (l *Lake) changelogTable(ctx context.Context, tc TableChanges) (*table.Table, error) {
	name := tc.Table.LakeName()
	t, err := l.load(ctx, name)
	if err != nil {
		return nil, err
	}
	if t == nil {
		props := iceberg.Properties{
			"trellara.source_table": tc.Table.String(),
			"trellara.key_columns":  strings.Join(tc.Keys, ","),
			"write.format.default":  "parquet",
		}
		t, err = l.cat.CreateTable(ctx, l.ident(name), changelogSchema(tc.Columns),
			catalog.WithLocation(l.location(name)), catalog.WithProperties(props))
		if err != nil {
			// Another writer may have created it in between.
			if t2, lerr := l.load(ctx, name); lerr == nil && t2 != nil {
				return t2, nil
			}
			return nil, l.scrub(fmt.Errorf("lake: create table %s.%s for %s: %w", l.sink.Namespace, name, tc.Table, err))
		}
		return t, nil
	}
	var missing []string
	for _, c := range tc.Columns {
		if _, ok := t.Schema().FindFieldByName(c); !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return t, nil
	}
	tx := t.NewTransaction()
	us := tx.UpdateSchema(true, false)
	for _, c := range missing {
		us = us.AddColumn([]string{c}, iceberg.PrimitiveTypes.String, "", false, nil)
	}
	if err := us.Commit(); err != nil {
		return nil, fmt.Errorf("lake: table %s.%s: add columns %s: %w", l.sink.Namespace, name, strings.Join(missing, ", "), err)
	}
	t, err = tx.Commit(ctx)
	if err != nil {
		return nil, l.scrub(fmt.Errorf("lake: table %s.%s: add columns %s: %w", l.sink.Namespace, name, strings.Join(missing, ", "), err))
	}
	return t, nil
}

// throughMarks reads table t's committed per-source marks into d.
func throughMarks(t *table.Table, name string, d *Dedup) {
	for k, v := range t.Properties() {
		if src, ok := strings.CutPrefix(k, PropThrough); ok {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				d.Observe(name, src, n)
			}
		}
	}
}

// arrowSchema is t's current schema as Arrow, in field order.
func arrowSchema(t *table.Table) (*arrow.Schema, error) {
	return table.SchemaToArrowSchema(t.Schema(), nil, false, false)
}

// appendChanges writes changes to t in one Iceberg commit that also sets
// the per-source through marks, so rows and marks land together or not at
// all.
func (l *Lake) appendChanges(ctx context.Context, t *table.Table, changes []Change, marks map[string]uint64) (*table.Table, error) {
	sc, err := arrowSchema(t)
	if err != nil {
		return nil, err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, ch := range changes {
		for i, f := range sc.Fields() {
			fb := b.Field(i)
			switch f.Name {
			case ColSourceID:
				appendString(fb, &ch.SourceID)
			case ColCommitLSN:
				fb.(*array.Int64Builder).Append(int64(ch.CommitLSN))
			case ColXid:
				fb.(*array.Int64Builder).Append(int64(ch.Xid))
			case ColSeq:
				fb.(*array.Int64Builder).Append(int64(ch.Seq))
			case ColCommitTime:
				fb.(*array.Int64Builder).Append(ch.CommitTime)
			case ColOp:
				appendString(fb, &ch.Op)
			case ColOldKey:
				if ch.OldKey == "" {
					fb.AppendNull()
				} else {
					appendString(fb, &ch.OldKey)
				}
			default:
				appendString(fb, ch.Cols[f.Name])
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer tbl.Release()
	tx := t.NewTransaction()
	props := iceberg.Properties{}
	for src, v := range marks {
		props[PropThrough+src] = strconv.FormatUint(v, 10)
	}
	if err := tx.SetProperties(props); err != nil {
		return nil, err
	}
	if err := tx.AppendTable(ctx, tbl, int64(len(changes))+1, iceberg.Properties{"trellara.rows": strconv.Itoa(len(changes))}); err != nil {
		return nil, fmt.Errorf("lake: table %s: write %d rows: %w", t.Identifier(), len(changes), err)
	}
	nt, err := tx.Commit(ctx)
	if err != nil {
		return nil, l.scrub(fmt.Errorf("lake: table %s: commit %d rows: %w", t.Identifier(), len(changes), err))
	}
	return nt, nil
}

func appendString(b array.Builder, s *string) {
	if s == nil {
		b.AppendNull()
		return
	}
	switch sb := b.(type) {
	case *array.StringBuilder:
		sb.Append(*s)
	case *array.LargeStringBuilder:
		sb.Append(*s)
	default:
		b.AppendNull()
	}
}

// ChangelogTables lists the changelog tables (every table of the
// namespace but the epochs table).
func (l *Lake) ChangelogTables(ctx context.Context) ([]string, error) {
	var out []string
	for id, err := range l.cat.ListTables(ctx, l.ns) {
		if err != nil {
			return nil, l.scrub(fmt.Errorf("lake: list tables of %s: %w", l.sink.Namespace, err))
		}
		if n := id[len(id)-1]; n != EpochsTable {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Row is one changelog row read back.
type Row struct {
	Change
}

// ReadChanges reads every row of changelog table name through iceberg-go's
// scan API, with the table's key columns. A table that does not exist has
// no rows.
func (l *Lake) ReadChanges(ctx context.Context, name string) ([]Change, []string, error) {
	return l.ReadChangesAsOf(ctx, name, 0)
}

// ReadChangesAsOf is ReadChanges of the table's snapshot current at
// asOfMs (milliseconds since the Unix epoch; 0: the current one). Before
// the table's first snapshot it has no rows.
func (l *Lake) ReadChangesAsOf(ctx context.Context, name string, asOfMs int64) ([]Change, []string, error) {
	t, err := l.load(ctx, name)
	if err != nil || t == nil {
		return nil, nil, err
	}
	var keys []string
	if k := t.Properties()["trellara.key_columns"]; k != "" {
		keys = strings.Split(k, ",")
	}
	if t.CurrentSnapshot() == nil {
		return nil, keys, nil
	}
	var opts []table.ScanOption
	if asOfMs > 0 {
		snap := t.SnapshotAsOf(asOfMs, true)
		if snap == nil {
			return nil, keys, nil
		}
		opts = append(opts, table.WithSnapshotID(snap.SnapshotID))
	}
	at, err := t.Scan(opts...).ToArrowTable(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("lake: scan %s.%s: %w", l.sink.Namespace, name, err)
	}
	defer at.Release()
	var out []Change
	tr := array.NewTableReader(at, 4096)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		sc := rec.Schema()
		for r := 0; r < int(rec.NumRows()); r++ {
			ch := Change{Cols: map[string]*string{}}
			for i, f := range sc.Fields() {
				col := rec.Column(i)
				switch f.Name {
				case ColSourceID:
					ch.SourceID = *stringAt(col, r)
				case ColCommitLSN:
					ch.CommitLSN = uint64(col.(*array.Int64).Value(r))
				case ColXid:
					ch.Xid = uint32(col.(*array.Int64).Value(r))
				case ColSeq:
					ch.Seq = uint64(col.(*array.Int64).Value(r))
				case ColCommitTime:
					ch.CommitTime = col.(*array.Int64).Value(r)
				case ColOp:
					ch.Op = *stringAt(col, r)
				case ColOldKey:
					if s := stringAt(col, r); s != nil {
						ch.OldKey = *s
					}
				default:
					ch.Cols[f.Name] = stringAt(col, r)
				}
			}
			out = append(out, ch)
		}
	}
	if err := tr.Err(); err != nil {
		return nil, nil, err
	}
	return out, keys, nil
}

func stringAt(col arrow.Array, r int) *string {
	if col.IsNull(r) {
		return nil
	}
	var s string
	switch c := col.(type) {
	case *array.String:
		s = c.Value(r)
	case *array.LargeString:
		s = c.Value(r)
	case *array.StringView:
		s = c.Value(r)
	default:
		s = col.ValueStr(r)
	}
	return &s
}

// epochsSchema is the schema of _trellara_epochs: one row per epoch and
// source.
func epochsSchema() *iceberg.Schema {
	return iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "epoch_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "closed_at", Type: iceberg.PrimitiveTypes.String, Required: true},
		iceberg.NestedField{ID: 3, Name: "status", Type: iceberg.PrimitiveTypes.String, Required: true},
		iceberg.NestedField{ID: 4, Name: "source_id", Type: iceberg.PrimitiveTypes.String, Required: true},
		iceberg.NestedField{ID: 5, Name: "included", Type: iceberg.PrimitiveTypes.Bool, Required: true},
		iceberg.NestedField{ID: 6, Name: "through_lsn", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 7, Name: "through_lsn_text", Type: iceberg.PrimitiveTypes.String, Required: true},
		iceberg.NestedField{ID: 8, Name: "lagging", Type: iceberg.PrimitiveTypes.Bool, Required: true},
		iceberg.NestedField{ID: 9, Name: "offline", Type: iceberg.PrimitiveTypes.Bool, Required: true},
		iceberg.NestedField{ID: 10, Name: "quarantined", Type: iceberg.PrimitiveTypes.Bool, Required: true},
		iceberg.NestedField{ID: 11, Name: "past_retention", Type: iceberg.PrimitiveTypes.Bool, Required: true},
		iceberg.NestedField{ID: 12, Name: "reason", Type: iceberg.PrimitiveTypes.String},
	)
}

// epochsTable loads or creates _trellara_epochs.
func (l *Lake) epochsTable(ctx context.Context) (*table.Table, error) {
	t, err := l.load(ctx, EpochsTable)
	if err != nil || t != nil {
		return t, err
	}
	t, err = l.cat.CreateTable(ctx, l.ident(EpochsTable), epochsSchema(),
		catalog.WithLocation(l.location(EpochsTable)), catalog.WithProperties(iceberg.Properties{"write.format.default": "parquet"}))
	if err != nil {
		if t2, lerr := l.load(ctx, EpochsTable); lerr == nil && t2 != nil {
			return t2, nil
		}
		return nil, l.scrub(fmt.Errorf("lake: create table %s.%s: %w", l.sink.Namespace, EpochsTable, err))
	}
	return t, nil
}

// PropLastEpoch is the epochs table property holding the last epoch id.
const PropLastEpoch = "trellara.last_epoch"

// WriteEpoch appends epoch e (its id is assigned: the last one + 1) in
// one commit, and returns it.
func (l *Lake) WriteEpoch(ctx context.Context, closedAt time.Time, lines []SourceEpoch) (Epoch, error) {
	t, err := l.epochsTable(ctx)
	if err != nil {
		return Epoch{}, err
	}
	last, _ := strconv.ParseInt(t.Properties()[PropLastEpoch], 10, 64)
	e := CloseEpoch(last+1, closedAt, lines)
	sc, err := arrowSchema(t)
	if err != nil {
		return Epoch{}, err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	closed := e.ClosedAt.Format(time.RFC3339Nano)
	for _, s := range e.Sources {
		th := fmtLSN(s.ThroughLSN)
		vals := map[string]any{"epoch_id": e.ID, "closed_at": closed, "status": e.Status, "source_id": s.SourceID,
			"included": s.Included, "through_lsn": int64(s.ThroughLSN), "through_lsn_text": th, "lagging": s.Lagging,
			"offline": s.Offline, "quarantined": s.Quarantined, "past_retention": s.PastRetention, "reason": s.Reason}
		for i, f := range sc.Fields() {
			switch v := vals[f.Name].(type) {
			case int64:
				b.Field(i).(*array.Int64Builder).Append(v)
			case bool:
				b.Field(i).(*array.BooleanBuilder).Append(v)
			case string:
				appendString(b.Field(i), &v)
			default:
				b.Field(i).AppendNull()
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	at := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer at.Release()
	tx := t.NewTransaction()
	if err := tx.SetProperties(iceberg.Properties{PropLastEpoch: strconv.FormatInt(e.ID, 10)}); err != nil {
		return Epoch{}, err
	}
	if err := tx.AppendTable(ctx, at, int64(len(e.Sources))+1, nil); err != nil {
		return Epoch{}, fmt.Errorf("lake: write epoch %d: %w", e.ID, err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		return Epoch{}, l.scrub(fmt.Errorf("lake: commit epoch %d: %w", e.ID, err))
	}
	return e, nil
}

// Epochs reads every epoch record, oldest first.
func (l *Lake) Epochs(ctx context.Context) ([]Epoch, error) {
	t, err := l.load(ctx, EpochsTable)
	if err != nil || t == nil || t.CurrentSnapshot() == nil {
		return nil, err
	}
	at, err := t.Scan().ToArrowTable(ctx)
	if err != nil {
		return nil, fmt.Errorf("lake: scan %s.%s: %w", l.sink.Namespace, EpochsTable, err)
	}
	defer at.Release()
	byID := map[int64]*Epoch{}
	tr := array.NewTableReader(at, 4096)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		idx := map[string]int{}
		for i, f := range rec.Schema().Fields() {
			idx[f.Name] = i
		}
		str := func(n string, r int) string {
			if s := stringAt(rec.Column(idx[n]), r); s != nil {
				return *s
			}
			return ""
		}
		bl := func(n string, r int) bool { return rec.Column(idx[n]).(*array.Boolean).Value(r) }
		for r := 0; r < int(rec.NumRows()); r++ {
			id := rec.Column(idx["epoch_id"]).(*array.Int64).Value(r)
			e := byID[id]
			if e == nil {
				ts, _ := time.Parse(time.RFC3339Nano, str("closed_at", r))
				e = &Epoch{ID: id, ClosedAt: ts, Status: str("status", r)}
				byID[id] = e
			}
			e.Sources = append(e.Sources, SourceEpoch{SourceID: str("source_id", r), Included: bl("included", r),
				ThroughLSN: uint64(rec.Column(idx["through_lsn"]).(*array.Int64).Value(r)), Lagging: bl("lagging", r),
				Offline: bl("offline", r), Quarantined: bl("quarantined", r), PastRetention: bl("past_retention", r), Reason: str("reason", r)})
		}
	}
	if err := tr.Err(); err != nil {
		return nil, err
	}
	out := make([]Epoch, 0, len(byID))
	for _, e := range byID {
		sort.Slice(e.Sources, func(i, j int) bool { return e.Sources[i].SourceID < e.Sources[j].SourceID })
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// CreateLocalDirs creates the directories the sink names on this machine:
// a SQLite catalog's directory and a file:// warehouse (0700: the lake's
// data is the sources' data).
func (s Sink) CreateLocalDirs() error {
	var dirs []string
	if s.Catalog.Kind == CatalogSQLite && s.Catalog.URI.IsInline() {
		if sec, err := s.Catalog.URI.Resolve(); err == nil {
			dirs = append(dirs, filepath.Dir(strings.TrimPrefix(sec.Reveal(), "file:")))
		}
	}
	if p, ok := strings.CutPrefix(s.Warehouse, "file://"); ok {
		dirs = append(dirs, p)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("lake: create %s: %w", d, err)
		}
	}
	return nil
}
