package lake

import (
	"encoding/json"
	"sort"

	"github.com/zeebo/xxh3"
)

// NetState replays changes (one source's rows of one table, in any order:
// they are sorted by commit LSN and position first) into the table's rows
// by key, as KeyOf renders it. With no key columns, the whole row (cols in
// order) is the key. Snapshot rows and inserts set a row, updates move it
// (from OldKey when the key changed), deletes remove it.
func NetState(changes []Change, keys, cols []string) map[string]map[string]*string {
	sorted := append([]Change(nil), changes...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].CommitLSN != sorted[j].CommitLSN {
			return sorted[i].CommitLSN < sorted[j].CommitLSN
		}
		return sorted[i].Seq < sorted[j].Seq
	})
	if len(keys) == 0 {
		keys = cols
	}
	state := map[string]map[string]*string{}
	for _, ch := range sorted {
		k := KeyOf(ch.Cols, keys)
		switch ch.Op {
		case OpInsert, OpSnapshot:
			state[k] = ch.Cols
		case OpUpdate:
			if ch.OldKey != "" {
				delete(state, ch.OldKey)
			}
			state[k] = ch.Cols
		case OpDelete:
			delete(state, k)
		}
	}
	return state
}

// Digest is a table's count and order-independent checksums: the sum of
// XXH3 over each key, and over each key with its row (cols in order).
type Digest struct {
	Rows    int64  `json:"rows"`
	KeySum  uint64 `json:"key_checksum"`
	RowSum  uint64 `json:"row_checksum"`
	rowHash map[string]uint64
}

// NewDigest digests rows (key → values by column) over cols.
func NewDigest(rows map[string]map[string]*string, cols []string) Digest {
	d := Digest{rowHash: map[string]uint64{}}
	for k, r := range rows {
		vals := make([]*string, len(cols))
		for i, c := range cols {
			vals[i] = r[c]
		}
		b, _ := json.Marshal(vals) // []*string always marshals
		h := xxh3.HashString(k + "\x00" + string(b))
		d.Rows++
		d.KeySum += xxh3.HashString(k)
		d.RowSum += h
		d.rowHash[k] = h
	}
	return d
}

// Equal reports whether two digests agree.
func (d Digest) Equal(o Digest) bool {
	return d.Rows == o.Rows && d.KeySum == o.KeySum && d.RowSum == o.RowSum
}

// Diff names up to n keys whose rows differ between d (the source) and o
// (the lake): missing, extra or changed.
func (d Digest) Diff(o Digest, n int) []string {
	var out []string
	for k, h := range d.rowHash {
		if oh, ok := o.rowHash[k]; !ok {
			out = append(out, "missing in the lake: "+k)
		} else if oh != h {
			out = append(out, "differs: "+k)
		}
	}
	for k := range o.rowHash {
		if _, ok := d.rowHash[k]; !ok {
			out = append(out, "extra in the lake: "+k)
		}
	}
	sort.Strings(out)
	if len(out) > n {
		out = out[:n]
	}
	return out
}
