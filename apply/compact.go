package apply

import (
	"strings"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// Net-effect compaction.
//
// Several whole source transactions share one target transaction; readers
// only ever see its commit, so only the batch's net effect per row is
// observable. compact folds a batch's row changes into at most one change
// per (table, key): inserts and updates of the same row become one insert
// or one update carrying the last values, an update then a delete becomes
// the delete, a delete then an insert becomes a replace. The PostgreSQL
// target then writes each table's changes with a few set-based statements
// instead of one statement per source row.
//
// compact refuses (ok false) whenever folding could hide something the
// row-by-row path would have reported or done differently, and the caller
// applies the batch row by row instead:
//   - a TRUNCATE, or a relation whose shape changes inside the batch;
//   - a relation without a replica identity key, or with REPLICA IDENTITY
//     FULL (every column is the key, so no update keeps its key);
//   - an update that changes its key, or whose key is NULL or unsent;
//   - an insert of a key already inserted or updated in the batch, an
//     update or delete of a key already deleted, a delete of a key inserted
//     in the batch (each is an error, or an observable no-op, row by row).

// netOp is the folded change to one row.
type netOp byte

const (
	netInsert  netOp = 'I'
	netUpdate  netOp = 'U'
	netDelete  netOp = 'D'
	netReplace netOp = 'R' // delete the existing row, insert the new one
)

// netRow is one row's net change. vals are the new values (insert, update,
// replace; an update may carry unchanged-TOAST markers); oldKey are the
// key values that identify the existing row (update, delete, replace).
type netRow struct {
	op     netOp
	vals   []*pb.Value
	oldKey []*pb.Value
}

// netTable is one relation's folded changes, keys in first-seen order.
type netTable struct {
	rel   *pb.Relation
	key   []int
	order []string
	rows  map[string]*netRow
	// slab is where new netRows are taken from: the batch's, one
	// allocation sized for every data row of the batch, shared by its
	// tables. It never grows, so the pointers into it stay valid.
	slab *[]netRow
}

// newRow returns a new netRow of t.
func (t *netTable) newRow(r netRow) *netRow {
	s := t.slab
	if len(*s) == cap(*s) {
		return &r // not reached: the slab has room for every row
	}
	*s = append(*s, r)
	return &(*s)[len(*s)-1]
}

// netBatch is a whole batch folded, relations in first-seen order.
type netBatch struct {
	tables   []*netTable
	rows     int // source data rows folded in
	messages int
}

// compact folds envs (whole source transactions, in commit order).
func compact(envs []*pb.Envelope) (*netBatch, bool) {
	b := &netBatch{}
	byName := map[string]*netTable{}
	byRel := map[*pb.Relation]*netTable{}
	// First the refusals that need no folding, so that a batch that
	// cannot fold (a keyless table) costs no allocation for its rows.
	n := 0
	keyed := map[*pb.Relation]bool{}
	for _, e := range envs {
		n += len(e.Rows)
		for _, r := range e.Rows {
			if r.Op == pb.Op_OP_MESSAGE {
				continue
			}
			if r.Op == pb.Op_OP_TRUNCATE || int(r.RelationIndex) >= len(e.Relations) {
				return nil, false
			}
			rel := e.Relations[r.RelationIndex]
			ok, seen := keyed[rel]
			if !seen {
				ok = foldable(rel)
				keyed[rel] = ok
			}
			if !ok {
				return nil, false
			}
		}
	}
	slab := make([]netRow, 0, n)
	var kb strings.Builder
	keyOf := func(t *netTable, vals []*pb.Value) (string, bool) {
		if len(t.key) == 1 {
			// The common single-column key: the value itself, no copy.
			if k := t.key[0]; k < len(vals) && vals[k].GetKind() == pb.ValueKind_VALUE_KIND_TEXT {
				return valueString(vals[k]), true
			}
			return "", false
		}
		kb.Reset()
		for i, k := range t.key {
			if k >= len(vals) {
				return "", false
			}
			v := vals[k]
			if v.GetKind() != pb.ValueKind_VALUE_KIND_TEXT {
				return "", false
			}
			if i > 0 {
				kb.WriteByte(0)
			}
			kb.Write(v.Data)
		}
		return kb.String(), true
	}
	for _, e := range envs {
		for _, r := range e.Rows {
			if r.Op == pb.Op_OP_MESSAGE {
				b.messages++
				continue
			}
			rel := e.Relations[r.RelationIndex]
			// Envelopes from one decoder share their relations: the
			// pointer finds the table without building its name.
			t := byRel[rel]
			if t == nil {
				t = byName[relationName(rel)]
				if t != nil {
					byRel[rel] = t
				}
			}
			if t == nil {
				name := relationName(rel)
				t = &netTable{rel: rel, rows: map[string]*netRow{}, slab: &slab}
				for i, c := range rel.Columns {
					if c.Key {
						t.key = append(t.key, i)
					}
				}
				byName[name] = t
				byRel[rel] = t
				b.tables = append(b.tables, t)
			} else if t.rel.Fingerprint != rel.Fingerprint {
				return nil, false
			}
			b.rows++
			switch r.Op {
			case pb.Op_OP_INSERT:
				k, ok := keyOf(t, r.NewTuple)
				if !ok {
					return nil, false
				}
				prev := t.rows[k]
				switch {
				case prev == nil:
					t.order = append(t.order, k)
					t.rows[k] = t.newRow(netRow{op: netInsert, vals: r.NewTuple})
				case prev.op == netDelete:
					prev.op, prev.vals = netReplace, r.NewTuple
				default:
					return nil, false
				}
			case pb.Op_OP_UPDATE:
				k, ok := keyOf(t, r.NewTuple)
				if !ok {
					return nil, false
				}
				if r.OldKind != pb.OldTuple_OLD_TUPLE_NONE {
					if old, ok := keyOf(t, r.OldTuple); !ok || old != k {
						return nil, false // the update moves the row to another key
					}
				}
				prev := t.rows[k]
				switch {
				case prev == nil:
					t.order = append(t.order, k)
					t.rows[k] = t.newRow(netRow{op: netUpdate, vals: r.NewTuple, oldKey: keyValues(t, r.NewTuple)})
				case prev.op == netDelete:
					return nil, false
				default:
					prev.vals = mergeValues(prev.vals, r.NewTuple)
				}
			case pb.Op_OP_DELETE:
				k, ok := keyOf(t, r.OldTuple)
				if !ok {
					return nil, false
				}
				prev := t.rows[k]
				switch {
				case prev == nil:
					t.order = append(t.order, k)
					t.rows[k] = t.newRow(netRow{op: netDelete, oldKey: keyValues(t, r.OldTuple)})
				case prev.op == netUpdate, prev.op == netReplace:
					prev.op, prev.vals = netDelete, nil
					if prev.oldKey == nil {
						prev.oldKey = keyValues(t, r.OldTuple)
					}
				default:
					return nil, false
				}
			default:
				return nil, false
			}
		}
	}
	return b, true
}

// foldable reports whether rel's rows can be folded: it has a replica
// identity key, and not REPLICA IDENTITY FULL.
func foldable(rel *pb.Relation) bool {
	if rel.ReplicaIdentity == 'f' {
		return false
	}
	for _, c := range rel.Columns {
		if c.Key {
			return true
		}
	}
	return false
}

// keyValues are the key columns of vals, in key order. A single-column
// key is a subslice of vals (never appended to), not a copy.
func keyValues(t *netTable, vals []*pb.Value) []*pb.Value {
	if len(t.key) == 1 {
		k := t.key[0]
		return vals[k : k+1 : k+1]
	}
	out := make([]*pb.Value, len(t.key))
	for i, k := range t.key {
		out[i] = vals[k]
	}
	return out
}

// mergeValues is the row after next is applied on top of prev: a column
// next leaves as unchanged TOAST keeps prev's value (which may itself be
// unchanged TOAST: then the target's stored value stays).
func mergeValues(prev, next []*pb.Value) []*pb.Value {
	out := make([]*pb.Value, len(next))
	for i, v := range next {
		if v.GetKind() == pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST && i < len(prev) {
			out[i] = prev[i]
		} else {
			out[i] = v
		}
	}
	return out
}
