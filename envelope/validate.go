package envelope

import (
	"fmt"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// sourceIDBytesMax bounds source_id so a hostile envelope cannot make every
// error message and checkpoint row carry megabytes.
const sourceIDBytesMax = 256

// Validate checks every protocol rule. It does not check the checksum: that
// belongs to the wire form (Decode).
func Validate(e *pb.Envelope) error { return validate(e, nil) }

// validate is Validate, taking each relation's fingerprint from sealed[i]
// where it is set (sealedRelationsOf: its metadata is unchanged since Seal
// derived it).
func validate(e *pb.Envelope, sealed []*sealedRelation) error {
	if e == nil {
		return &InvalidError{Field: "envelope", Reason: "nil envelope"}
	}
	bad := func(field, format string, args ...any) error {
		return &InvalidError{SourceID: e.GetSourceId(), CommitLSN: e.GetCommitLsn(), Field: field,
			Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case e.ProtocolVersion == ProtocolVersion && IsBarrier(e):
		return bad("protocol_version", "version %d cannot carry a DDL barrier (a DDL event naming a column); barriers are version %d",
			ProtocolVersion, ProtocolVersionBarrier)
	case e.ProtocolVersion == ProtocolVersionBarrier && !IsBarrier(e):
		return bad("protocol_version", "version %d is for DDL barriers, and this envelope carries no DDL event naming a column", ProtocolVersionBarrier)
	case e.ProtocolVersion != ProtocolVersion && e.ProtocolVersion != ProtocolVersionBarrier:
		return bad("protocol_version", "version %d is not supported (this reader accepts %d and %d)", e.ProtocolVersion, ProtocolVersion, ProtocolVersionBarrier)
	}
	if e.SourceId == "" || len(e.SourceId) > sourceIDBytesMax {
		return bad("source_id", "must be 1..%d bytes, got %d", sourceIDBytesMax, len(e.SourceId))
	}
	b := e.Boundary
	if b == nil || b.Kind == pb.UnitKind_UNIT_KIND_UNSPECIFIED {
		return bad("boundary.kind", "unit kind is unset")
	}
	if _, ok := pb.UnitKind_name[int32(b.Kind)]; !ok {
		return bad("boundary.kind", "unknown unit kind %d", b.Kind)
	}
	if e.CommitLsn == 0 {
		return bad("commit_lsn", "must be non-zero")
	}
	if e.EndLsn < e.CommitLsn {
		return bad("end_lsn", "end LSN %s precedes commit LSN", FormatLSN(e.EndLsn))
	}
	if e.RowCount != uint64(len(e.Rows)) {
		return bad("row_count", "says %d but the envelope holds %d rows", e.RowCount, len(e.Rows))
	}

	for i, r := range e.Relations {
		if r == nil || r.Name == "" || r.Schema == "" {
			return bad("relations", "relation %d has no schema or name", i)
		}
		if len(r.Columns) == 0 {
			return bad("relations", "relation %s.%s has no columns", r.Schema, r.Name)
		}
		for j, c := range r.Columns {
			if c == nil || c.Name == "" {
				return bad("relations", "relation %s.%s column %d has no name", r.Schema, r.Name, j)
			}
		}
		if want := relationFingerprint(r, sealedAt(sealed, i)); r.Fingerprint != want {
			return bad("relations", "relation %s.%s fingerprint %016x does not match its metadata (%016x)", r.Schema, r.Name, r.Fingerprint, want)
		}
	}
	if want := SchemaFingerprint(e.Relations); e.SchemaFingerprint != want {
		return bad("schema_fingerprint", "%016x does not match the relations (%016x)", e.SchemaFingerprint, want)
	}

	if err := validateBoundary(e, bad); err != nil {
		return err
	}
	for i, r := range e.Rows {
		if err := validateRow(e, i, r, bad); err != nil {
			return err
		}
	}
	for i, d := range e.DdlEvents {
		if d == nil || d.Seq != uint64(i) {
			return bad("ddl_events", "event %d is out of sequence", i)
		}
		if d.Kind == "" {
			return bad("ddl_events", "event %d has no kind", i)
		}
		if d.Column != "" && (d.ColumnType == "" || d.Relation == "") {
			return bad("ddl_events", "event %d (%s of column %s) has no relation or column type", i, d.Kind, d.Column)
		}
		if d.OldColumn != "" && (d.Column == "" || d.OldColumn == d.Column) {
			return bad("ddl_events", "event %d (%s) has old_column %q and column %q: a rename names two different columns", i, d.Kind, d.OldColumn, d.Column)
		}
		if d.Kind == AddTableKind && (d.Relation == "" || d.Detail == "") {
			return bad("ddl_events", "event %d (add_table) has no relation or table definition", i)
		}
	}
	return nil
}

type badFunc func(field, format string, args ...any) error

func validateBoundary(e *pb.Envelope, bad badFunc) error {
	b := e.Boundary
	switch b.Kind {
	case pb.UnitKind_UNIT_KIND_CHUNK:
		if b.ChunkCount == 0 || b.ChunkIndex >= b.ChunkCount {
			return bad("boundary", "chunk %d of %d is out of range", b.ChunkIndex, b.ChunkCount)
		}
		if b.TotalRows < e.RowCount {
			return bad("boundary.total_rows", "%d is less than this chunk's %d rows", b.TotalRows, e.RowCount)
		}
		// Rows of a chunk are a subsequence of the transaction: strictly
		// increasing positions below the transaction's total.
		for i, r := range e.Rows {
			if r == nil {
				return bad("rows", "row %d is empty", i)
			}
			if r.Seq >= b.TotalRows || (i > 0 && r.Seq <= e.Rows[i-1].GetSeq()) {
				return bad("rows.seq", "chunk row %d has position %d out of order (total %d)", i, r.Seq, b.TotalRows)
			}
		}
		return nil
	case pb.UnitKind_UNIT_KIND_SNAPSHOT, pb.UnitKind_UNIT_KIND_SNAPSHOT_END:
		if b.SnapshotRelation == "" {
			return bad("boundary.snapshot_relation", "snapshot unit names no relation")
		}
		if b.Kind == pb.UnitKind_UNIT_KIND_SNAPSHOT_END && len(e.Rows) != 0 {
			return bad("rows", "a snapshot end marker carries %d rows", len(e.Rows))
		}
		// chunk_index numbers the relation's snapshot batches (and on the
		// end marker counts them); a snapshot unit is never split further.
		if b.ChunkCount != 0 {
			return bad("boundary.chunk_count", "a snapshot unit is not chunked (chunk_count %d)", b.ChunkCount)
		}
		for i, r := range e.Rows {
			if r.GetOp() != pb.Op_OP_INSERT {
				return bad("rows.op", "snapshot row %d is %s, not an insert", i, r.GetOp())
			}
		}
	case pb.UnitKind_UNIT_KIND_TRANSACTION:
		if b.ChunkIndex != 0 || b.ChunkCount > 1 {
			return bad("boundary", "a %s is not chunked (chunk %d of %d)", b.Kind, b.ChunkIndex, b.ChunkCount)
		}
	}
	if b.TotalRows != 0 && b.TotalRows != e.RowCount {
		return bad("boundary.total_rows", "%d differs from row_count %d", b.TotalRows, e.RowCount)
	}
	for i, r := range e.Rows {
		if r == nil || r.Seq != uint64(i) {
			return bad("rows.seq", "row %d is out of sequence", i)
		}
	}
	return nil
}

func validateRow(e *pb.Envelope, i int, r *pb.Row, bad badFunc) error {
	if r.Op == pb.Op_OP_MESSAGE {
		if len(r.NewTuple)+len(r.OldTuple) != 0 || r.OldKind != pb.OldTuple_OLD_TUPLE_NONE {
			return bad("rows", "row %d: a message carries tuples", i)
		}
		return nil
	}
	if int(r.RelationIndex) >= len(e.Relations) {
		return bad("rows.relation_index", "row %d references relation %d of %d", i, r.RelationIndex, len(e.Relations))
	}
	rel := e.Relations[r.RelationIndex]
	ncols := len(rel.Columns)
	tuple := func(name string, vals []*pb.Value, toastOK bool) error {
		if len(vals) != ncols {
			return bad("rows."+name, "row %d (%s.%s) has %d values for %d columns", i, rel.Schema, rel.Name, len(vals), ncols)
		}
		for j, v := range vals {
			switch v.GetKind() {
			case pb.ValueKind_VALUE_KIND_TEXT:
			case pb.ValueKind_VALUE_KIND_NULL:
				if len(v.Data) != 0 {
					return bad("rows."+name, "row %d column %s is NULL but carries data", i, rel.Columns[j].Name)
				}
			case pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST:
				if !toastOK {
					return bad("rows."+name, "row %d column %s: unchanged TOAST is not possible here", i, rel.Columns[j].Name)
				}
				if len(v.Data) != 0 {
					return bad("rows."+name, "row %d column %s is unchanged TOAST but carries data", i, rel.Columns[j].Name)
				}
			default:
				return bad("rows."+name, "row %d column %s has value kind %d", i, rel.Columns[j].Name, v.GetKind())
			}
		}
		return nil
	}
	oldOK := func() error {
		switch r.OldKind {
		case pb.OldTuple_OLD_TUPLE_NONE:
			if len(r.OldTuple) != 0 {
				return bad("rows.old_tuple", "row %d has an old tuple but old_kind NONE", i)
			}
			return nil
		case pb.OldTuple_OLD_TUPLE_KEY, pb.OldTuple_OLD_TUPLE_FULL:
			return tuple("old_tuple", r.OldTuple, true)
		default:
			return bad("rows.old_kind", "row %d has old_kind %d", i, r.OldKind)
		}
	}
	switch r.Op {
	case pb.Op_OP_INSERT:
		if r.OldKind != pb.OldTuple_OLD_TUPLE_NONE || len(r.OldTuple) != 0 {
			return bad("rows.old_tuple", "row %d: an insert has no old tuple", i)
		}
		return tuple("new_tuple", r.NewTuple, false)
	case pb.Op_OP_UPDATE:
		if err := tuple("new_tuple", r.NewTuple, true); err != nil {
			return err
		}
		return oldOK()
	case pb.Op_OP_DELETE:
		if len(r.NewTuple) != 0 {
			return bad("rows.new_tuple", "row %d: a delete has no new tuple", i)
		}
		if r.OldKind == pb.OldTuple_OLD_TUPLE_NONE {
			return bad("rows.old_kind", "row %d: a delete must carry its key or full old tuple", i)
		}
		return oldOK()
	case pb.Op_OP_TRUNCATE:
		if len(r.NewTuple)+len(r.OldTuple) != 0 || r.OldKind != pb.OldTuple_OLD_TUPLE_NONE {
			return bad("rows", "row %d: a truncate carries tuples", i)
		}
		if r.TruncateFlags > 3 {
			return bad("rows.truncate_flags", "row %d has unknown truncate flags %#x", i, r.TruncateFlags)
		}
		return nil
	default:
		return bad("rows.op", "row %d has op %d", i, r.Op)
	}
}
