package lakeread

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
)

// The changelog's own columns (docs/LAKE.md, "The changelog"). They are
// spelled here again on purpose, not imported from the writer: a rename on
// one side shows as a failure, not as two sides agreeing with themselves.
const (
	ColSourceID   = "_source_id"
	ColCommitLSN  = "_commit_lsn"
	ColXid        = "_xid"
	ColSeq        = "_txn_seq"
	ColCommitTime = "_commit_time_us"
	ColOp         = "_op"
	ColOldKey     = "_old_key"
)

// PropKeyColumns is the table property naming the source table's key
// columns, comma-separated; PropSourceTable names the source table.
const (
	PropKeyColumns  = "trellara.key_columns"
	PropSourceTable = "trellara.source_table"
)

// Row is one changelog row.
type Row struct {
	SourceID   string
	CommitLSN  uint64
	Xid        int64
	Seq        int64
	CommitTime int64
	Op         string
	OldKey     *string            // nil: none
	Cols       map[string]*string // source columns; nil is NULL
	File       string             // the data file it was read from
}

// Table is one changelog table as of its current snapshot.
type Table struct {
	Namespace, Name  string
	MetadataLocation string
	SnapshotID       int64 // 0: the table has no snapshot
	SourceTable      string
	Keys             []string // key columns (trellara.key_columns)
	Columns          []string // source columns in schema order
	Manifests        []string
	Files            []DataFile // live data files of the snapshot
	Rows             []Row
}

// Reader reads changelog tables through a Catalog and an Opener.
type Reader struct {
	Catalog *Catalog
	Opener  Opener
	Log     *slog.Logger // nil: slog.Default()
}

// Tables lists the namespace's tables.
func (r *Reader) Tables(ctx context.Context, namespace string) ([]string, error) {
	return r.Catalog.Tables(ctx, namespace)
}

// ReadTable reads every row of namespace.name's current snapshot.
func (r *Reader) ReadTable(ctx context.Context, namespace, name string) (*Table, error) {
	log := r.Log
	if log == nil {
		log = slog.Default()
	}
	loc, err := r.Catalog.MetadataLocation(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	t := &Table{Namespace: namespace, Name: name, MetadataLocation: loc}
	b, err := readAll(ctx, r.Opener, loc, metadataBytesMax)
	if err != nil {
		return nil, fileErr("metadata", loc, err)
	}
	md, err := ParseMetadata(b)
	if err != nil {
		return nil, fileErr("metadata", loc, err)
	}
	sc, _ := md.CurrentSchema() // ParseMetadata checked it
	meta := map[string]bool{}
	for _, c := range []string{ColSourceID, ColCommitLSN, ColXid, ColSeq, ColCommitTime, ColOp, ColOldKey} {
		meta[c] = true
	}
	seen := map[string]bool{}
	for _, f := range sc.Fields {
		seen[f.Name] = true
		if !meta[f.Name] {
			t.Columns = append(t.Columns, f.Name)
		}
	}
	for c := range meta {
		if !seen[c] {
			return nil, fileErr("metadata", loc, corrupt("table %s.%s: schema %d has no column %s: not a Trellara changelog table", namespace, name, sc.SchemaID, c))
		}
	}
	t.SourceTable = md.Properties[PropSourceTable]
	if k := md.Properties[PropKeyColumns]; k != "" {
		t.Keys = strings.Split(k, ",")
	}
	snap, err := md.CurrentSnapshot()
	if err != nil {
		return nil, fileErr("metadata", loc, err)
	}
	if snap == nil {
		return t, nil
	}
	t.SnapshotID = snap.SnapshotID
	lb, err := readAll(ctx, r.Opener, snap.ManifestList, manifestBytesMax)
	if err != nil {
		return nil, fileErr("manifest list", snap.ManifestList, err)
	}
	mfs, err := DecodeManifestList(lb)
	if err != nil {
		return nil, fileErr("manifest list", snap.ManifestList, err)
	}
	for _, mf := range mfs {
		if mf.Content != ContentData {
			return nil, fileErr("manifest", mf.Path, unsupported("a delete manifest (content %d): this reader reads append-only tables", mf.Content))
		}
		t.Manifests = append(t.Manifests, mf.Path)
		mb, err := readAll(ctx, r.Opener, mf.Path, manifestBytesMax)
		if err != nil {
			return nil, fileErr("manifest", mf.Path, err)
		}
		entries, err := DecodeManifest(mb)
		if err != nil {
			return nil, fileErr("manifest", mf.Path, err)
		}
		for _, e := range entries {
			switch e.Status {
			case StatusDeleted:
				continue // not live in this snapshot
			case StatusExisting, StatusAdded:
			default:
				return nil, fileErr("manifest", mf.Path, corrupt("entry for %s has status %d", e.DataFile.Path, e.Status))
			}
			if e.DataFile.Content != ContentData {
				return nil, fileErr("data file", e.DataFile.Path, unsupported("a delete file (content %d, listed in manifest %s): this reader reads append-only tables", e.DataFile.Content, mf.Path))
			}
			if !strings.EqualFold(e.DataFile.Format, "PARQUET") {
				return nil, fileErr("data file", e.DataFile.Path, unsupported("file format %q (listed in manifest %s): this reader reads Parquet", e.DataFile.Format, mf.Path))
			}
			t.Files = append(t.Files, e.DataFile)
		}
	}
	sort.Slice(t.Files, func(i, j int) bool { return t.Files[i].Path < t.Files[j].Path })
	for i, df := range t.Files {
		if i > 0 && t.Files[i-1].Path == df.Path {
			return nil, fileErr("data file", df.Path, corrupt("listed twice in snapshot %d", snap.SnapshotID))
		}
	}
	for _, df := range t.Files {
		if err := r.readFile(ctx, t, sc.Fields, df); err != nil {
			return nil, fileErr("data file", df.Path, err)
		}
	}
	log.Debug("lakeread: read table", "table", namespace+"."+name, "snapshot", t.SnapshotID, "manifests", len(t.Manifests), "files", len(t.Files), "rows", len(t.Rows))
	return t, nil
}

func (r *Reader) readFile(ctx context.Context, t *Table, fields []Field, df DataFile) error {
	f, err := r.Opener.Open(ctx, df.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Size() != df.SizeBytes {
		return corrupt("%d bytes, the manifest says %d", f.Size(), df.SizeBytes)
	}
	cells, err := ReadDataFile(f, f.Size(), fields)
	if err != nil {
		return err
	}
	if int64(len(cells)) != df.RecordCount {
		return corrupt("%d rows, the manifest says %d", len(cells), df.RecordCount)
	}
	for i, cs := range cells {
		row := Row{Cols: map[string]*string{}, File: df.Path}
		for j, fd := range fields {
			c := cs[j]
			switch fd.Name {
			case ColSourceID, ColOp:
				if c.Null {
					return corrupt("row %d: %s is null", i, fd.Name)
				}
				if fd.Name == ColSourceID {
					row.SourceID = c.Str
				} else {
					row.Op = c.Str
				}
			case ColCommitLSN, ColXid, ColSeq, ColCommitTime:
				if c.Null || c.IsStr {
					return corrupt("row %d: %s is %s, want a long", i, fd.Name, c)
				}
				switch fd.Name {
				case ColCommitLSN:
					row.CommitLSN = uint64(c.Int)
				case ColXid:
					row.Xid = c.Int
				case ColSeq:
					row.Seq = c.Int
				default:
					row.CommitTime = c.Int
				}
			case ColOldKey:
				if !c.Null {
					s := c.Str
					row.OldKey = &s
				}
			default:
				if c.Null {
					row.Cols[fd.Name] = nil
				} else {
					s := c.String()
					row.Cols[fd.Name] = &s
				}
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return nil
}

func (t *Table) String() string {
	return fmt.Sprintf("%s.%s snapshot %d: %d rows in %d files", t.Namespace, t.Name, t.SnapshotID, len(t.Rows), len(t.Files))
}
