package envelope

import (
	"errors"
	"fmt"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// InsertRows builds the rows of a snapshot batch — inserts of the
// envelope's one relation — directly in their wire form, one value at a
// time: the bytes Encode writes for the same rows given as pb.Row, without
// a pb.Row or a pb.Value per row. A row is Begin, then Null or Text once
// per column in column order, then End. EncodeInserts writes the envelope
// around them; Reset makes the builder ready for the next batch, its
// buffer kept.
//
// What Validate checks of a row holds by construction: op INSERT,
// relation 0, no old tuple, exactly as many values as columns (End refuses
// a row with another count), each TEXT or NULL, a NULL carrying no data.
type InsertRows struct {
	ncols int
	b     []byte
	n     int // complete rows
	start int // the open row's body
	vals  int // values of the open row
	open  bool
}

// NewInsertRows returns a builder of rows of ncols values.
func NewInsertRows(ncols int) *InsertRows { return &InsertRows{ncols: ncols} }

// Begin opens the next row.
func (w *InsertRows) Begin() {
	w.b = append(w.b, key(8, wtBytes), 0, 0)
	w.start = len(w.b)
	w.b = appendUint(w.b, 1, uint64(w.n)) // seq
	w.b = appendUint(w.b, 2, uint64(pb.Op_OP_INSERT))
	w.vals, w.open = 0, true
}

// Null appends a NULL value to the open row.
func (w *InsertRows) Null() {
	w.b = appendKindData(w.b, 4, pb.ValueKind_VALUE_KIND_NULL, nil)
	w.vals++
}

// Text appends a value in its text form to the open row; data is copied.
func (w *InsertRows) Text(data []byte) {
	w.b = appendKindData(w.b, 4, pb.ValueKind_VALUE_KIND_TEXT, data)
	w.vals++
}

// End closes the open row. A row without exactly one value per column is
// an error, and is dropped.
func (w *InsertRows) End() error {
	if !w.open {
		return errors.New("envelope: InsertRows.End without Begin")
	}
	w.open = false
	if w.vals != w.ncols {
		w.b = w.b[:w.start-3]
		return fmt.Errorf("row %d has %d values for %d columns", w.n, w.vals, w.ncols)
	}
	w.b = fixLen2(w.b, w.start)
	w.n++
	return nil
}

// Rows is the number of complete rows.
func (w *InsertRows) Rows() int { return w.n }

// Reset drops the rows, keeping the buffer.
func (w *InsertRows) Reset() { w.b, w.n, w.open = w.b[:0], 0, false }

// EncodeInserts is Encode of e with rows as its rows. e is a SNAPSHOT
// unit with one relation, of rows' column count, and no rows of its own;
// EncodeInserts seals it (Seal) and sets its row count. The bytes are
// those Encode writes for the same envelope holding the rows as pb.Row.
func EncodeInserts(e *pb.Envelope, rows *InsertRows) ([]byte, error) {
	switch {
	case e.GetBoundary().GetKind() != pb.UnitKind_UNIT_KIND_SNAPSHOT:
		return nil, fmt.Errorf("envelope: EncodeInserts of a %s unit (source %q, commit LSN %s): only SNAPSHOT batches are built from InsertRows",
			e.GetBoundary().GetKind(), e.GetSourceId(), FormatLSN(e.GetCommitLsn()))
	case len(e.Rows) != 0 || len(e.Relations) != 1 || len(e.Relations[0].GetColumns()) != rows.ncols || rows.open || e.Boundary.TotalRows != 0:
		return nil, fmt.Errorf("envelope: EncodeInserts (source %q, commit LSN %s): want one relation of %d columns, no rows of the envelope's own, no open row and no boundary.total_rows",
			e.GetSourceId(), FormatLSN(e.GetCommitLsn()), rows.ncols)
	}
	Seal(e)
	var buf [1]*sealedRelation
	sealed := sealedRelationsOf(buf[:0], e.Relations)
	// Everything but the rows is validated as Encode does; the rows are
	// valid by construction (InsertRows).
	if err := validate(e, sealed); err != nil {
		return nil, err
	}
	e.RowCount = uint64(rows.n)
	e.Checksum = 0
	if !envelopeEncodable(e, sealed) {
		if _, err := marshalOpts.Marshal(e); err != nil {
			return nil, fmt.Errorf("envelope: encode (source %q, commit LSN %s): %w", e.SourceId, FormatLSN(e.CommitLsn), err)
		}
		return nil, fmt.Errorf("envelope: encode (source %q, commit LSN %s): the envelope carries fields this encoder does not write", e.SourceId, FormatLSN(e.CommitLsn))
	}
	return pooledExact(func(dst []byte) ([]byte, error) {
		start := len(dst)
		out := appendEnvelopeBody(dst, e, sealed, rows.b)
		out, e.Checksum = appendChecksum(out, start)
		return out, nil
	})
}
