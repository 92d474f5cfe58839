package lake

import (
	"encoding/json"
	"fmt"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// Change is one row of a changelog table: one row change of one source
// transaction, with the row's columns as the source's text output.
type Change struct {
	SourceID   string
	CommitLSN  uint64
	Xid        uint32
	Seq        uint64 // the row's position in its transaction (envelope Row.seq)
	CommitTime int64  // microseconds since the Unix epoch
	Op         string // insert, update, delete or snapshot
	// Cols are the row's values by column name: the new tuple for insert,
	// update and snapshot, the old tuple (the key, or the full row under
	// REPLICA IDENTITY FULL) for delete. nil is NULL.
	Cols map[string]*string
	// OldKey is the old key of an update that carried one (the key
	// changed, or REPLICA IDENTITY FULL): a JSON array of the key values in
	// key-column order. "" otherwise.
	OldKey string
}

// TableRef names a source table.
type TableRef struct{ Schema, Name string }

func (t TableRef) String() string { return t.Schema + "." + t.Name }

// LakeName is the changelog table of source table t: one table per source
// table across every source of the fleet, keyed by _source_id. The name is
// schema__table (a double underscore: Iceberg identifiers carry the
// namespace separately, and a single underscore could be part of either
// name).
func (t TableRef) LakeName() string { return t.Schema + "__" + t.Name }

// Columns of a changelog table that are not source columns. A source
// column with one of these names is refused (ErrReservedColumn).
const (
	ColSourceID   = "_source_id"
	ColCommitLSN  = "_commit_lsn"
	ColXid        = "_xid"
	ColSeq        = "_txn_seq"
	ColCommitTime = "_commit_time_us"
	ColOp         = "_op"
	ColOldKey     = "_old_key"
)

// MetaColumns are the changelog's own columns, in table order.
var MetaColumns = []string{ColSourceID, ColCommitLSN, ColXid, ColSeq, ColCommitTime, ColOp, ColOldKey}

// Ops.
const (
	OpInsert   = "insert"
	OpUpdate   = "update"
	OpDelete   = "delete"
	OpSnapshot = "snapshot" // a row of the initial snapshot: an insert for the net state
)

// TableChanges are the changes one envelope carries for one table, with
// the table's columns as the envelope's relation describes them.
type TableChanges struct {
	Table   TableRef
	Columns []string // source columns in relation order
	Keys    []string // key columns in relation order
	Changes []Change
}

// Changes splits envelope e into per-table changelog rows. Rows the
// changelog does not carry (logical messages) are dropped; a TRUNCATE, an
// unchanged-TOAST value or a reserved column name is an error naming the
// envelope's commit LSN and the relation, because writing around them
// would make the changelog's net state silently wrong.
func Changes(e *pb.Envelope) ([]TableChanges, error) {
	byRel := map[uint32]int{}
	var out []TableChanges
	for _, r := range e.Rows {
		if r.Op == pb.Op_OP_MESSAGE {
			continue
		}
		if int(r.RelationIndex) >= len(e.Relations) {
			return nil, fmt.Errorf("lake: source %s commit %s: row %d names relation %d of %d", e.SourceId, fmtLSN(e.CommitLsn), r.Seq, r.RelationIndex, len(e.Relations))
		}
		rel := e.Relations[r.RelationIndex]
		ref := TableRef{rel.Schema, rel.Name}
		i, ok := byRel[r.RelationIndex]
		if !ok {
			tc := TableChanges{Table: ref}
			for _, c := range rel.Columns {
				for _, m := range MetaColumns {
					if c.Name == m {
						return nil, fmt.Errorf("lake: source %s table %s: column %q: %w", e.SourceId, ref, c.Name, ErrReservedColumn)
					}
				}
				tc.Columns = append(tc.Columns, c.Name)
				if c.Key {
					tc.Keys = append(tc.Keys, c.Name)
				}
			}
			i = len(out)
			byRel[r.RelationIndex] = i
			out = append(out, tc)
		}
		ch := Change{SourceID: e.SourceId, CommitLSN: e.CommitLsn, Xid: e.Xid, Seq: r.Seq, CommitTime: e.CommitTimeUnixMicros}
		var vals []*pb.Value
		switch r.Op {
		case pb.Op_OP_INSERT:
			ch.Op, vals = OpInsert, r.NewTuple
			if e.Boundary.GetKind() == pb.UnitKind_UNIT_KIND_SNAPSHOT {
				ch.Op = OpSnapshot
			}
		case pb.Op_OP_UPDATE:
			ch.Op, vals = OpUpdate, r.NewTuple
			if r.OldKind != pb.OldTuple_OLD_TUPLE_NONE {
				k, err := oldKey(rel, r.OldTuple)
				if err != nil {
					return nil, fmt.Errorf("lake: source %s commit %s table %s: %w", e.SourceId, fmtLSN(e.CommitLsn), ref, err)
				}
				ch.OldKey = k
			}
		case pb.Op_OP_DELETE:
			ch.Op, vals = OpDelete, r.OldTuple
		case pb.Op_OP_TRUNCATE:
			return nil, fmt.Errorf("lake: source %s commit %s table %s: %w", e.SourceId, fmtLSN(e.CommitLsn), ref, ErrTruncate)
		default:
			return nil, fmt.Errorf("lake: source %s commit %s table %s: row %d has op %s", e.SourceId, fmtLSN(e.CommitLsn), ref, r.Seq, r.Op)
		}
		ch.Cols = make(map[string]*string, len(vals))
		for j, v := range vals {
			if j >= len(rel.Columns) {
				break
			}
			switch v.Kind {
			case pb.ValueKind_VALUE_KIND_TEXT:
				s := string(v.Data)
				ch.Cols[rel.Columns[j].Name] = &s
			case pb.ValueKind_VALUE_KIND_NULL:
				ch.Cols[rel.Columns[j].Name] = nil
			case pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST:
				// Under REPLICA IDENTITY FULL the old tuple has the value.
				if r.OldKind == pb.OldTuple_OLD_TUPLE_FULL && j < len(r.OldTuple) && r.OldTuple[j].Kind != pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
					if o := r.OldTuple[j]; o.Kind == pb.ValueKind_VALUE_KIND_TEXT {
						s := string(o.Data)
						ch.Cols[rel.Columns[j].Name] = &s
					} else {
						ch.Cols[rel.Columns[j].Name] = nil
					}
					continue
				}
				return nil, fmt.Errorf("lake: source %s commit %s table %s column %s: %w", e.SourceId, fmtLSN(e.CommitLsn), ref, rel.Columns[j].Name, ErrUnchangedToast)
			}
		}
		out[i].Changes = append(out[i].Changes, ch)
	}
	return out, nil
}

// oldKey renders the key columns of an old tuple as a JSON array.
func oldKey(rel *pb.Relation, old []*pb.Value) (string, error) {
	var key []*string
	for j, c := range rel.Columns {
		if !c.Key {
			continue
		}
		if j >= len(old) {
			return "", fmt.Errorf("old tuple has %d values, key column %s is number %d", len(old), c.Name, j+1)
		}
		switch old[j].Kind {
		case pb.ValueKind_VALUE_KIND_TEXT:
			s := string(old[j].Data)
			key = append(key, &s)
		default:
			key = append(key, nil)
		}
	}
	b, err := json.Marshal(key)
	return string(b), err
}

// KeyOf renders the values of keys in cols as the JSON array OldKey uses.
func KeyOf(cols map[string]*string, keys []string) string {
	k := make([]*string, len(keys))
	for i, n := range keys {
		k[i] = cols[n]
	}
	b, _ := json.Marshal(k) // []*string always marshals
	return string(b)
}

func fmtLSN(v uint64) string { return fmt.Sprintf("%X/%X", uint32(v>>32), uint32(v)) }
