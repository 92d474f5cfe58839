package lakeread

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamba/avro/v2/ocf"
	_ "modernc.org/sqlite"
)

// memOpener serves files from memory by location: the Opener contract a
// warehouse on object storage would implement.
type memOpener map[string][]byte

type memFile struct{ *bytes.Reader }

func (memFile) Close() error { return nil }

func (o memOpener) Open(_ context.Context, loc string) (File, error) {
	b, ok := o[loc]
	if !ok {
		return nil, fmt.Errorf("%s: no such object", loc)
	}
	return memFile{bytes.NewReader(b)}, nil
}

const (
	capDir    = "file:///tmp/lrsample/wh/ns/public__t"
	capList   = capDir + "/metadata/snap-8804277782781766830-0-7e151d52-f1a2-49b4-a22a-32a9b37e9517.avro"
	capMan    = capDir + "/metadata/7e151d52-f1a2-49b4-a22a-32a9b37e9517-m1.avro"
	capOther  = capDir + "/metadata/996c5753-e636-4fc6-a8b0-0187dd7e3e0a-m1.avro"
	capData   = capDir + "/data/00000-0-7e151d52-f1a2-49b4-a22a-32a9b37e9517-00001.parquet"
	capMeta   = capDir + "/metadata/00002-fe46d4c6-6eae-4d79-9796-7599bd4f8555.metadata.json"
	otherData = capDir + "/data/00000-0-996c5753-e636-4fc6-a8b0-0187dd7e3e0a-00001.parquet"
)

// captured is the captured table (testdata) under its original locations;
// its second manifest and data file are the first ones again under the
// other names, which is enough for the reader (the rows are then those of
// one file, twice over: Duplicates must say so).
func captured(t *testing.T) memOpener {
	return memOpener{
		capMeta: readTestdata(t, "table.metadata.json"), capList: readTestdata(t, "manifest-list.avro"),
		capMan: readTestdata(t, "manifest.avro"), capData: readTestdata(t, "data.parquet"),
		capOther: rewriteAvro(t, readTestdata(t, "manifest.avro"), func(m map[string]any) {
			m["data_file"].(map[string]any)["file_path"] = otherData
		}),
		otherData: readTestdata(t, "data.parquet"),
	}
}

// rewriteAvro re-encodes an OCF file with every record passed through f.
func rewriteAvro(t *testing.T, b []byte, f func(map[string]any)) []byte {
	t.Helper()
	dec, err := ocf.NewDecoder(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	enc, err := ocf.NewEncoder(dec.Schema().String(), &out, ocf.WithCodec(ocf.Deflate))
	if err != nil {
		t.Fatal(err)
	}
	for dec.HasNext() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		f(m)
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// catalogWith is a SQLite SQL catalog holding one table, ns.public__t,
// at metadata location loc.
func catalogWith(t *testing.T, loc string) *Catalog {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE iceberg_tables (catalog_name TEXT, table_namespace TEXT, table_name TEXT,
		metadata_location TEXT, previous_metadata_location TEXT, PRIMARY KEY (catalog_name, table_namespace, table_name))`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO iceberg_tables VALUES ('c', 'ns', 'public__t', ?, NULL)`, loc); err != nil {
		t.Fatal(err)
	}
	return NewCatalog(db, SQLite, "c")
}

func TestReadTableThroughAnOpener(t *testing.T) {
	r := &Reader{Catalog: catalogWith(t, capMeta), Opener: captured(t)}
	tb, err := r.ReadTable(context.Background(), "ns", "public__t")
	if err != nil {
		t.Fatal(err)
	}
	if tb.SnapshotID != 8804277782781766830 || len(tb.Files) != 2 || len(tb.Rows) != 4 || tb.SourceTable != "public.t" {
		t.Fatalf("read %s", tb)
	}
	if d := Duplicates(tb); len(d) != 2 || !strings.Contains(d[0], "twice") {
		t.Fatalf("the same rows in two files: Duplicates = %v", d)
	}
}

// TestReadTableRefuses: what the reader does not read is refused with an
// error that names the file.
func TestReadTableRefuses(t *testing.T) {
	cases := []struct {
		name, file string
		err        error
		mut        func(t *testing.T, o memOpener)
	}{
		{"a delete manifest", capMan, ErrUnsupported, func(t *testing.T, o memOpener) {
			o[capList] = rewriteAvro(t, o[capList], func(m map[string]any) { m["content"] = 1 })
		}},
		{"a delete file", capData, ErrUnsupported, func(t *testing.T, o memOpener) {
			o[capMan] = rewriteAvro(t, o[capMan], func(m map[string]any) { m["data_file"].(map[string]any)["content"] = 2 })
		}},
		{"an ORC file", capData, ErrUnsupported, func(t *testing.T, o memOpener) {
			o[capMan] = rewriteAvro(t, o[capMan], func(m map[string]any) { m["data_file"].(map[string]any)["file_format"] = "ORC" })
		}},
		{"a data file shorter than its manifest says", capData, ErrCorrupt, func(t *testing.T, o memOpener) {
			o[capData] = o[capData][:len(o[capData])-1]
		}},
		{"a row count the manifest does not say", capData, ErrCorrupt, func(t *testing.T, o memOpener) {
			o[capMan] = rewriteAvro(t, o[capMan], func(m map[string]any) { m["data_file"].(map[string]any)["record_count"] = int64(3) })
		}},
		{"an s3 data file", "s3://b/k.parquet", ErrUnsupported, func(t *testing.T, o memOpener) {
			o[capMan] = rewriteAvro(t, o[capMan], func(m map[string]any) { m["data_file"].(map[string]any)["file_path"] = "s3://b/k.parquet" })
		}},
		{"a manifest that is not Avro", capOther, ErrCorrupt, func(t *testing.T, o memOpener) { o[capOther] = []byte("{}") }},
		{"metadata that is not JSON", capMeta, ErrCorrupt, func(t *testing.T, o memOpener) { o[capMeta] = []byte("Obj\x01") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := captured(t)
			c.mut(t, o)
			op := Opener(o)
			if strings.HasPrefix(c.file, "s3://") {
				op = s3Refusing{o}
			}
			r := &Reader{Catalog: catalogWith(t, capMeta), Opener: op}
			_, err := r.ReadTable(context.Background(), "ns", "public__t")
			var fe *FileError
			if !errors.Is(err, c.err) || !errors.As(err, &fe) || fe.Path != c.file {
				t.Fatalf("error %v, want %v naming %s", err, c.err, c.file)
			}
		})
	}
}

// s3Refusing opens file:// locations from memory and refuses the rest as
// FileOpener does.
type s3Refusing struct{ memOpener }

func (o s3Refusing) Open(ctx context.Context, loc string) (File, error) {
	if _, err := LocalPath(loc); err != nil {
		return nil, err
	}
	return o.memOpener.Open(ctx, loc)
}
