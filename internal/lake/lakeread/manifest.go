package lakeread

import (
	"bytes"
	"fmt"

	"github.com/hamba/avro/v2"
	"github.com/hamba/avro/v2/ocf"
)

// Manifest list and manifest files are Avro object container files
// (https://iceberg.apache.org/spec/#manifests). They are decoded with the
// writer's schema (the one in the file's header) into the few fields read
// here; every other field is skipped. The header schema is checked first:
// a file of another kind decodes into zero values otherwise.

// ManifestFile is one record of a manifest list.
type ManifestFile struct {
	Path            string `avro:"manifest_path"`
	Length          int64  `avro:"manifest_length"`
	Content         int    `avro:"content"` // 0 data, 1 deletes; absent in format version 1 (data)
	AddedSnapshotID int64  `avro:"added_snapshot_id"`
}

// Manifest content kinds.
const (
	ContentData    = 0
	ContentDeletes = 1
)

// Entry is one entry of a manifest.
type Entry struct {
	Status   int      `avro:"status"` // 0 existing, 1 added, 2 deleted
	DataFile DataFile `avro:"data_file"`
}

// Entry statuses.
const (
	StatusExisting = 0
	StatusAdded    = 1
	StatusDeleted  = 2
)

// DataFile is the data_file record of a manifest entry.
type DataFile struct {
	Content     int    `avro:"content"` // 0 data, 1 position deletes, 2 equality deletes
	Path        string `avro:"file_path"`
	Format      string `avro:"file_format"`
	RecordCount int64  `avro:"record_count"`
	SizeBytes   int64  `avro:"file_size_in_bytes"`
}

// Limits on what an Avro file may make the decoder allocate: a path is a
// string, a manifest entry a few kilobytes.
const (
	avroBytesMax       = 1 << 20
	avroSliceAllocMax  = 1 << 20
	manifestBytesMax   = 256 << 20 // a whole manifest or manifest list
	manifestRecordsMax = 1 << 22   // records in one manifest or manifest list
)

var avroAPI = avro.Config{
	MaxByteSliceSize:  avroBytesMax,
	MaxSliceAllocSize: avroSliceAllocMax,
}.Freeze()

// DecodeManifestList decodes a manifest list file.
func DecodeManifestList(b []byte) ([]ManifestFile, error) {
	return decodeOCF[ManifestFile](b, "manifest_file", []string{"manifest_path", "manifest_length", "added_snapshot_id"}, nil)
}

// DecodeManifest decodes a manifest file's entries.
func DecodeManifest(b []byte) ([]Entry, error) {
	return decodeOCF[Entry](b, "manifest_entry", []string{"status", "data_file"},
		map[string][]string{"data_file": {"file_path", "file_format", "record_count", "file_size_in_bytes"}})
}

// decodeOCF decodes every record of an OCF file whose record schema has
// the fields want (and, for each nested record field, its fields nested).
// hamba/avro can panic on some malformed input; a decoder must not, so a
// panic is turned into ErrCorrupt.
func decodeOCF[T any](b []byte, what string, want []string, nested map[string][]string) (out []T, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, corrupt("%s: the Avro decoder failed: %v", what, r)
		}
	}()
	if err := checkOCF(b); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	dec, err := ocf.NewDecoder(bytes.NewReader(b), ocf.WithDecoderConfig(avroAPI))
	if err != nil {
		return nil, corrupt("%s: not an Avro object container file: %v", what, err)
	}
	rs, ok := dec.Schema().(*avro.RecordSchema)
	if !ok {
		return nil, corrupt("%s: the file's schema is %s, not a record", what, dec.Schema().Type())
	}
	if err := hasFields(rs, want, nested); err != nil {
		return nil, corrupt("%s: %v", what, err)
	}
	for dec.HasNext() {
		if len(out) >= manifestRecordsMax {
			return nil, unsupported("%s: more than %d records", what, manifestRecordsMax)
		}
		var v T
		if err := dec.Decode(&v); err != nil {
			return nil, corrupt("%s: record %d: %v", what, len(out), err)
		}
		out = append(out, v)
	}
	if err := dec.Error(); err != nil {
		return nil, corrupt("%s: after %d records: %v", what, len(out), err)
	}
	return out, nil
}

func hasFields(rs *avro.RecordSchema, want []string, nested map[string][]string) error {
	byName := map[string]*avro.Field{}
	for _, f := range rs.Fields() {
		byName[f.Name()] = f
	}
	for _, w := range want {
		f, ok := byName[w]
		if !ok {
			return fmt.Errorf("record %s has no field %s", rs.Name(), w)
		}
		if sub, ok := nested[w]; ok {
			r, ok := f.Type().(*avro.RecordSchema)
			if !ok {
				return fmt.Errorf("field %s is %s, not a record", w, f.Type().Type())
			}
			if err := hasFields(r, sub, nil); err != nil {
				return err
			}
		}
	}
	return nil
}
