// Package lakeread is a second, independent reader of a Trellara changelog
// table. It reads what the lake committer wrote (through iceberg-go, with
// twmb/avro and arrow-go's Parquet writer) with none of that code: the SQL
// catalog through database/sql, the table metadata with encoding/json, the
// manifests with hamba/avro and the data files with parquet-go. A test or
// an operator that compares its output with the sources checks the writer
// against the Iceberg format, not against itself.
//
// The read path, each step a file of its own:
//
//	iceberg_tables (SQL catalog, catalog.go)
//	  catalog_name, table_namespace, table_name -> metadata_location
//	        |
//	        v
//	table metadata JSON (metadata.go)
//	  format-version 1|2, current-snapshot-id, snapshots[].manifest-list,
//	  schemas[current-schema-id].fields[] {id, name, type}, properties
//	        |
//	        v
//	manifest list, Avro OCF (manifest.go)
//	  one record per manifest: manifest_path, manifest_length,
//	  content (0 data, 1 deletes: refused), added_snapshot_id
//	        |
//	        v
//	manifest, Avro OCF (manifest.go)
//	  one entry per file: status (0 existing, 1 added, 2 deleted: skipped),
//	  data_file {content (0 data; 1, 2 delete files: refused),
//	             file_path, file_format (PARQUET only), record_count,
//	             file_size_in_bytes}
//	        |
//	        v
//	data file, Parquet (datafile.go)
//	  flat columns matched to the schema by Iceberg field id (the
//	  Parquet field_id), by name when a file carries no ids; a column a
//	  file lacks (added later) is null
//	        |
//	        v
//	Row: the changelog's columns (_source_id, _commit_lsn, _xid, _txn_seq,
//	     _commit_time_us, _op, _old_key) and every source column as text
//
// Files are opened through an Opener (open.go), so a warehouse on object
// storage needs only a new Opener; FileOpener serves file:// locations and
// absolute paths. What the reader does not support is refused with an
// error naming the file (ErrUnsupported): delete files, formats other than
// Parquet, format version 1 snapshots that embed their manifests, nested
// columns.
//
// check.go holds the checker that compares a changelog read this way with
// a record of every committed source change (testdecoding.go parses the
// output of PostgreSQL's test_decoding plugin into that record) and with
// the sources' final contents.
package lakeread
