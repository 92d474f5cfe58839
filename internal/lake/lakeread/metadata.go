package lakeread

import (
	"encoding/json"
	"fmt"
)

// Metadata is the part of an Iceberg table metadata file the reader uses.
// https://iceberg.apache.org/spec/#table-metadata-fields
type Metadata struct {
	FormatVersion     int               `json:"format-version"`
	TableUUID         string            `json:"table-uuid"`
	Location          string            `json:"location"`
	CurrentSnapshotID *int64            `json:"current-snapshot-id"`
	Snapshots         []Snapshot        `json:"snapshots"`
	Schemas           []Schema          `json:"schemas"`
	CurrentSchemaID   int               `json:"current-schema-id"`
	Properties        map[string]string `json:"properties"`
	// Format version 1 may carry only the one schema.
	SchemaV1 *Schema `json:"schema"`
}

// Snapshot is one snapshot of the table.
type Snapshot struct {
	SnapshotID     int64  `json:"snapshot-id"`
	SequenceNumber int64  `json:"sequence-number"`
	TimestampMs    int64  `json:"timestamp-ms"`
	ManifestList   string `json:"manifest-list"`
	// Manifests is format version 1's inline list, refused.
	Manifests []string `json:"manifests"`
}

// Schema is a table schema.
type Schema struct {
	SchemaID int     `json:"schema-id"`
	Fields   []Field `json:"fields"`
}

// Field is a top-level field. Type is a primitive type name; a nested
// type (a JSON object) is kept raw and refused when read.
type Field struct {
	ID       int             `json:"id"`
	Name     string          `json:"name"`
	Required bool            `json:"required"`
	Type     json.RawMessage `json:"type"`
}

// TypeName is the field's primitive type ("string", "long", ...), or ""
// for a nested one.
func (f Field) TypeName() string {
	var s string
	if json.Unmarshal(f.Type, &s) != nil {
		return ""
	}
	return s
}

// metadataBytesMax bounds a metadata file: it grows with the snapshot
// log, a few hundred bytes a commit.
const metadataBytesMax = 256 << 20

// ParseMetadata decodes and validates a table metadata file.
func ParseMetadata(b []byte) (*Metadata, error) {
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, corrupt("table metadata JSON: %v", err)
	}
	if m.FormatVersion != 1 && m.FormatVersion != 2 {
		return nil, unsupported("format-version %d (this reader reads 1 and 2)", m.FormatVersion)
	}
	if len(m.Schemas) == 0 && m.SchemaV1 != nil {
		m.Schemas = []Schema{*m.SchemaV1}
		m.CurrentSchemaID = m.SchemaV1.SchemaID
	}
	if _, err := m.CurrentSchema(); err != nil {
		return nil, err
	}
	return &m, nil
}

// CurrentSchema is the schema current-schema-id names.
func (m *Metadata) CurrentSchema() (*Schema, error) {
	for i := range m.Schemas {
		if m.Schemas[i].SchemaID == m.CurrentSchemaID {
			return &m.Schemas[i], nil
		}
	}
	return nil, corrupt("current-schema-id %d is not among the %d schemas", m.CurrentSchemaID, len(m.Schemas))
}

// CurrentSnapshot is the current snapshot, or nil for a table with none
// (created, never written). A current-snapshot-id of -1 means none.
func (m *Metadata) CurrentSnapshot() (*Snapshot, error) {
	if m.CurrentSnapshotID == nil || *m.CurrentSnapshotID == -1 {
		return nil, nil
	}
	for i := range m.Snapshots {
		if m.Snapshots[i].SnapshotID == *m.CurrentSnapshotID {
			s := &m.Snapshots[i]
			if s.ManifestList == "" {
				if len(s.Manifests) > 0 {
					return nil, unsupported("snapshot %d lists its manifests inline (format version 1 without a manifest list)", s.SnapshotID)
				}
				return nil, corrupt("snapshot %d has no manifest-list", s.SnapshotID)
			}
			return s, nil
		}
	}
	return nil, corrupt("current-snapshot-id %d is not among the %d snapshots", *m.CurrentSnapshotID, len(m.Snapshots))
}

func (s Snapshot) String() string { return fmt.Sprintf("snapshot %d", s.SnapshotID) }
