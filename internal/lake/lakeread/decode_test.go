package lakeread

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// The files in testdata are real captures: one changelog table written by
// the lake committer's writer (iceberg-go v0.7.0 over a SQLite catalog):
// its metadata JSON, the manifest list of its second snapshot, one
// manifest, and one Parquet data file of two rows.

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeCaptures(t *testing.T) {
	md, err := ParseMetadata(readTestdata(t, "table.metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := md.CurrentSnapshot()
	if err != nil || snap == nil || snap.SnapshotID != 8804277782781766830 {
		t.Fatalf("current snapshot %+v, %v", snap, err)
	}
	if md.Properties[PropKeyColumns] != "id" {
		t.Fatalf("properties %v", md.Properties)
	}
	mfs, err := DecodeManifestList(readTestdata(t, "manifest-list.avro"))
	if err != nil || len(mfs) != 2 || mfs[0].Content != ContentData || mfs[0].Length != 4062 {
		t.Fatalf("manifest list %+v, %v", mfs, err)
	}
	es, err := DecodeManifest(readTestdata(t, "manifest.avro"))
	if err != nil || len(es) != 1 || es[0].Status != StatusAdded || es[0].DataFile.Format != "PARQUET" || es[0].DataFile.RecordCount != 2 {
		t.Fatalf("manifest %+v, %v", es, err)
	}
	sc, _ := md.CurrentSchema()
	b := readTestdata(t, "data.parquet")
	rows, err := ReadDataFile(bytes.NewReader(b), int64(len(b)), sc.Fields)
	if err != nil || len(rows) != 2 {
		t.Fatalf("data file: %d rows, %v", len(rows), err)
	}
	// _source_id, _commit_lsn, ..., _op, _old_key, id, v
	if r := rows[1]; r[0].Str != "b" || r[1].Int != 201 || r[5].Str != "update" || r[6].Str != `["1"]` || r[7].Str != "2" || r[8].Str != "x" {
		t.Fatalf("row 2 = %+v", r)
	}
	if r := rows[0]; r[5].Str != "snapshot" || !r[8].Null || !r[6].Null {
		t.Fatalf("row 1 = %+v", r)
	}
}

// TestDecodeRefusals: each kind of file is refused when it is another
// kind, or truncated, with ErrCorrupt or ErrUnsupported.
func TestDecodeRefusals(t *testing.T) {
	list, man := readTestdata(t, "manifest-list.avro"), readTestdata(t, "manifest.avro")
	cases := []struct {
		name string
		err  error
		run  func() error
	}{
		{"manifest as list", ErrCorrupt, func() error { _, err := DecodeManifestList(man); return err }},
		{"list as manifest", ErrCorrupt, func() error { _, err := DecodeManifest(list); return err }},
		{"truncated manifest", ErrCorrupt, func() error { _, err := DecodeManifest(man[:len(man)-40]); return err }},
		{"empty", ErrCorrupt, func() error { _, err := DecodeManifestList(nil); return err }},
		{"metadata v3", ErrUnsupported, func() error {
			_, err := ParseMetadata([]byte(`{"format-version":3,"schemas":[{"schema-id":0,"fields":[]}]}`))
			return err
		}},
		{"v1 inline manifests", ErrUnsupported, func() error {
			md, err := ParseMetadata([]byte(`{"format-version":1,"schema":{"schema-id":0,"fields":[]},"current-snapshot-id":5,"snapshots":[{"snapshot-id":5,"manifests":["m.avro"]}]}`))
			if err != nil {
				return err
			}
			_, err = md.CurrentSnapshot()
			return err
		}},
		{"nested column", ErrUnsupported, func() error {
			b := readTestdata(t, "data.parquet")
			_, err := ReadDataFile(bytes.NewReader(b), int64(len(b)), []Field{{ID: 1, Name: "_source_id", Type: []byte(`{"type":"struct","fields":[]}`)}})
			return err
		}},
		{"not parquet", ErrCorrupt, func() error {
			_, err := ReadDataFile(bytes.NewReader(man), int64(len(man)), nil)
			return err
		}},
		{"s3 location", ErrUnsupported, func() error { _, err := LocalPath("s3://bucket/key"); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.run(); !errors.Is(err, c.err) {
				t.Fatalf("error %v, want %v", err, c.err)
			}
		})
	}
}

func FuzzDecodeManifestList(f *testing.F) {
	f.Add(readTestdata(f, "manifest-list.avro"))
	f.Add(readTestdata(f, "manifest.avro"))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = DecodeManifestList(b) })
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add(readTestdata(f, "manifest.avro"))
	f.Add(readTestdata(f, "manifest-list.avro"))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = DecodeManifest(b) })
}

func FuzzParseMetadata(f *testing.F) {
	f.Add(readTestdata(f, "table.metadata.json"))
	f.Add([]byte(`{"format-version":1,"schema":{"schema-id":0,"fields":[]},"current-snapshot-id":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := ParseMetadata(b)
		if err != nil {
			return
		}
		_, _ = md.CurrentSnapshot()
		for _, s := range md.Schemas {
			for _, fd := range s.Fields {
				_ = fd.TypeName()
			}
		}
	})
}

func FuzzReadDataFile(f *testing.F) {
	f.Add(readTestdata(f, "data.parquet"))
	md, err := ParseMetadata(readTestdata(f, "table.metadata.json"))
	if err != nil {
		f.Fatal(err)
	}
	sc, _ := md.CurrentSchema()
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ReadDataFile(bytes.NewReader(b), int64(len(b)), sc.Fields)
	})
}
