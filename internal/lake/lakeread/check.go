package lakeread

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// TDRow is one row of pg_logical_slot_get_changes over a test_decoding
// slot: lsn, xid, data.
type TDRow struct {
	LSN  uint64
	Xid  int64
	Data string
}

// Txn is one committed source transaction as test_decoding recorded it.
type Txn struct {
	Xid     int64
	EndLSN  uint64   // the COMMIT row's lsn: the end of the commit record
	Changes []TDLine // INSERT, UPDATE, DELETE and TRUNCATE lines, in order
}

// ParseLSN parses PostgreSQL's X/Y text form of an LSN.
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("lsn %q: want X/Y", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %v", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %v", s, err)
	}
	return h<<32 | l, nil
}

func fmtLSN(v uint64) string { return fmt.Sprintf("%X/%X", uint32(v>>32), uint32(v)) }

// RecordFromTestDecoding groups test_decoding rows into transactions. A
// transaction must be closed by its COMMIT: the rows of an unfinished one
// at the end are an error (read the slot after the workload stopped).
func RecordFromTestDecoding(rows []TDRow) ([]Txn, error) {
	var out []Txn
	var cur *Txn
	for i, r := range rows {
		l, err := ParseTestDecoding(r.Data)
		if err != nil {
			return nil, fmt.Errorf("row %d at %s: %w", i, fmtLSN(r.LSN), err)
		}
		switch l.Kind {
		case "BEGIN":
			if cur != nil {
				return nil, fmt.Errorf("row %d at %s: BEGIN %d inside transaction %d", i, fmtLSN(r.LSN), l.Xid, cur.Xid)
			}
			cur = &Txn{Xid: l.Xid}
		case "COMMIT":
			if cur == nil || cur.Xid != l.Xid {
				return nil, fmt.Errorf("row %d at %s: COMMIT %d outside its transaction", i, fmtLSN(r.LSN), l.Xid)
			}
			cur.EndLSN = r.LSN
			out = append(out, *cur)
			cur = nil
		case "MESSAGE":
		default:
			if cur == nil {
				return nil, fmt.Errorf("row %d at %s: %s outside a transaction", i, fmtLSN(r.LSN), l.Kind)
			}
			cur.Changes = append(cur.Changes, l)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("transaction %d has no COMMIT in the record", cur.Xid)
	}
	return out, nil
}

// State is a table's contents: the key (a JSON array of the key columns'
// text, in key-column order) to the row (column name to text, nil for
// NULL).
type State map[string]map[string]*string

// Source is what the checker knows about one source.
type Source struct {
	ID string
	// Record is every transaction committed at the source since before the
	// fleet's slot was created (a test_decoding slot made first). A
	// transaction that ended at or before the source's snapshot point (the
	// _commit_lsn of its snapshot rows) is in the snapshot instead.
	Record []Txn
	// Final is each source table's contents after the workload, by
	// schema.name.
	Final map[string]State
}

// Report is the checker's result.
type Report struct {
	Tables   []TableReport
	Problems []string // empty: every check held
}

// TableReport counts one table's check for one source.
type TableReport struct {
	Table, Source string
	Rows          int // changelog rows of the source
	SnapshotRows  int
	Txns          int // transactions matched one to one with the record
	Absorbed      int // recorded transactions inside the initial snapshot
	Keys          int // keys in the net state
}

// problemsMax bounds the problems a report lists.
const problemsMax = 50

func (r *Report) fail(format string, args ...any) {
	if len(r.Problems) < problemsMax {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	} else if len(r.Problems) == problemsMax {
		r.Problems = append(r.Problems, "... more problems left out")
	}
}

// Err is nil when every check held, else an error listing the problems.
func (r *Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("lakeread: the changelog disagrees with the sources:\n  %s", strings.Join(r.Problems, "\n  "))
}

// KeyOf renders the key of a row: a JSON array of the key columns' text.
func KeyOf(cols map[string]*string, keys []string) string {
	k := make([]*string, len(keys))
	for i, n := range keys {
		k[i] = cols[n]
	}
	b, _ := json.Marshal(k) // []*string always marshals
	return string(b)
}

func tdMap(cs []TDCol) map[string]*string {
	m := make(map[string]*string, len(cs))
	for _, c := range cs {
		if !c.Unchanged {
			m[c.Name] = c.Value
		}
	}
	return m
}

var tdOps = map[string]string{"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}

// Check compares the changelog tables (read by a Reader) with the sources:
//
//   - exactly once: every recorded change of a source to a table's source
//     table is in the changelog once, in its transaction (one commit LSN
//     per transaction, commit LSNs in the record's commit order), at its
//     position, with its op, key, old key and values; the changelog has no
//     change the record lacks, and no (source, commit LSN, position) twice.
//     A transaction that ended at or before the source's snapshot point is
//     in the snapshot rows instead, and not also a change.
//   - net state: the snapshot rows, then the changes in (commit LSN,
//     position) order (insert, update and snapshot set the key; an update
//     with an old key first ends that key; delete ends it), equal the
//     source table's final contents, key by key and column by column.
func Check(tables []*Table, sources []Source) *Report {
	rep := &Report{}
	known := map[string]bool{}
	for _, s := range sources {
		known[s.ID] = true
	}
	// The snapshot point of every source: the commit LSN of its snapshot
	// rows, the same in every table (one consistent point per slot).
	snapAt := map[string]uint64{}
	for _, t := range tables {
		for _, r := range t.Rows {
			if !known[r.SourceID] {
				rep.fail("%s: a row of source %q, which is not among the sources checked (file %s)", t.Name, r.SourceID, r.File)
				known[r.SourceID] = true // once
				continue
			}
			if r.Op != "snapshot" {
				continue
			}
			if at, ok := snapAt[r.SourceID]; ok && at != r.CommitLSN {
				rep.fail("%s: source %s has snapshot rows at %s and at %s", t.Name, r.SourceID, fmtLSN(at), fmtLSN(r.CommitLSN))
				continue
			}
			snapAt[r.SourceID] = r.CommitLSN
		}
	}
	for _, t := range tables {
		if len(t.Keys) == 0 {
			rep.fail("%s: no key columns (property %s)", t.Name, PropKeyColumns)
			continue
		}
		for _, s := range sources {
			checkOne(rep, t, s, snapAt[s.ID])
		}
	}
	return rep
}

func checkOne(rep *Report, t *Table, s Source, snapLSN uint64) {
	tr := TableReport{Table: t.Name, Source: s.ID}
	name := fmt.Sprintf("%s (%s) source %s", t.Name, t.SourceTable, s.ID)
	state := State{}
	byXid := map[int64][]Row{}
	var changes []Row
	seen := map[[2]uint64]string{}
	for _, r := range t.Rows {
		if r.SourceID != s.ID {
			continue
		}
		tr.Rows++
		switch r.Op {
		case "snapshot":
			tr.SnapshotRows++
			k := KeyOf(r.Cols, t.Keys)
			if _, dup := state[k]; dup {
				rep.fail("%s: snapshot row for key %s twice (file %s)", name, k, r.File)
			}
			state[k] = r.Cols
		case "insert", "update", "delete":
			id := [2]uint64{r.CommitLSN, uint64(r.Seq)}
			if f, dup := seen[id]; dup {
				rep.fail("%s: change at commit %s position %d twice (files %s and %s)", name, fmtLSN(r.CommitLSN), r.Seq, f, r.File)
				continue
			}
			seen[id] = r.File
			byXid[r.Xid] = append(byXid[r.Xid], r)
			changes = append(changes, r)
		default:
			rep.fail("%s: row at commit %s has op %q", name, fmtLSN(r.CommitLSN), r.Op)
		}
	}
	// Exactly once, transaction by transaction.
	matched := map[int64]bool{}
	var lastLSN uint64
	var lastXid int64
	for _, txn := range s.Record {
		var want []TDLine
		for _, c := range txn.Changes {
			if c.Table == t.SourceTable {
				want = append(want, c)
			}
		}
		if len(want) == 0 {
			continue
		}
		got := byXid[txn.Xid]
		if len(got) == 0 {
			if snapLSN != 0 && txn.EndLSN <= snapLSN {
				tr.Absorbed++
				continue
			}
			rep.fail("%s: transaction %d (committed, ending at %s, %d changes) is not in the changelog", name, txn.Xid, fmtLSN(txn.EndLSN), len(want))
			continue
		}
		matched[txn.Xid] = true
		if snapLSN != 0 && txn.EndLSN <= snapLSN {
			rep.fail("%s: transaction %d ended at %s, inside the snapshot at %s, and is also in the changelog as changes", name, txn.Xid, fmtLSN(txn.EndLSN), fmtLSN(snapLSN))
		}
		sort.Slice(got, func(i, j int) bool { return got[i].Seq < got[j].Seq })
		lsn := got[0].CommitLSN
		for _, g := range got[1:] {
			if g.CommitLSN != lsn {
				rep.fail("%s: transaction %d has rows at commit %s and at %s", name, txn.Xid, fmtLSN(lsn), fmtLSN(g.CommitLSN))
				break
			}
		}
		if lsn >= txn.EndLSN {
			rep.fail("%s: transaction %d: commit LSN %s is not before the end of its commit record %s", name, txn.Xid, fmtLSN(lsn), fmtLSN(txn.EndLSN))
		}
		if lastLSN != 0 && lsn <= lastLSN {
			rep.fail("%s: transaction %d (commit %s) committed after transaction %d but its commit LSN is not above %s", name, txn.Xid, fmtLSN(lsn), lastXid, fmtLSN(lastLSN))
		}
		lastLSN, lastXid = lsn, txn.Xid
		if len(got) != len(want) {
			rep.fail("%s: transaction %d at %s: %d changes in the changelog, %d committed", name, txn.Xid, fmtLSN(lsn), len(got), len(want))
			continue
		}
		for i, w := range want {
			compareChange(rep, name, t.Keys, txn.Xid, got[i], w)
		}
		tr.Txns++
	}
	for xid, rows := range byXid {
		if !matched[xid] {
			rep.fail("%s: transaction %d at commit %s (%d rows, file %s) is in the changelog but not in the source's record", name, xid, fmtLSN(rows[0].CommitLSN), len(rows), rows[0].File)
		}
	}
	// Net state.
	sort.SliceStable(changes, func(i, j int) bool {
		if changes[i].CommitLSN != changes[j].CommitLSN {
			return changes[i].CommitLSN < changes[j].CommitLSN
		}
		return changes[i].Seq < changes[j].Seq
	})
	for _, c := range changes {
		k := KeyOf(c.Cols, t.Keys)
		switch c.Op {
		case "insert":
			state[k] = c.Cols
		case "update":
			if c.OldKey != nil && *c.OldKey != k {
				delete(state, *c.OldKey)
			}
			state[k] = c.Cols
		case "delete":
			delete(state, k)
		}
	}
	tr.Keys = len(state)
	final, ok := s.Final[t.SourceTable]
	if !ok {
		rep.fail("%s: no final state of %s given for source %s", name, t.SourceTable, s.ID)
	}
	diffs := 0
	keys := make([]string, 0, len(state)+len(final))
	for k := range state {
		keys = append(keys, k)
	}
	for k := range final {
		if _, ok := state[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		got, inLake := state[k]
		want, inSource := final[k]
		var why string
		switch {
		case !inLake:
			why = "in the source, not in the changelog's net state"
		case !inSource:
			why = "in the changelog's net state, not in the source"
		default:
			for _, col := range t.Columns {
				if w, ok := want[col]; ok && text(got[col]) != text(w) {
					why = fmt.Sprintf("column %s: changelog %s, source %s", col, text(got[col]), text(w))
					break
				}
			}
		}
		if why != "" {
			if diffs < 5 {
				rep.fail("%s: key %s %s", name, k, why)
			}
			diffs++
		}
	}
	if diffs > 5 {
		rep.fail("%s: %d keys differ in all", name, diffs)
	}
	rep.Tables = append(rep.Tables, tr)
}

func compareChange(rep *Report, name string, keys []string, xid int64, got Row, want TDLine) {
	at := fmt.Sprintf("%s: transaction %d commit %s position %d", name, xid, fmtLSN(got.CommitLSN), got.Seq)
	if tdOps[want.Kind] != got.Op {
		rep.fail("%s: op %s, committed %s", at, got.Op, want.Kind)
		return
	}
	if want.NoData {
		rep.fail("%s: test_decoding sent no tuple data for this %s (set REPLICA IDENTITY)", at, want.Kind)
		return
	}
	wcols := tdMap(want.Cols)
	if gk, wk := KeyOf(got.Cols, keys), KeyOf(wcols, keys); gk != wk {
		rep.fail("%s: key %s, committed %s", at, gk, wk)
		return
	}
	if want.Kind == "UPDATE" {
		wo := ""
		if want.OldKey != nil {
			wo = KeyOf(tdMap(want.OldKey), keys)
		}
		gotOld := ""
		if got.OldKey != nil {
			gotOld = *got.OldKey
		}
		if (got.OldKey == nil) != (want.OldKey == nil) || gotOld != wo {
			rep.fail("%s: old key %q, committed %q", at, gotOld, wo)
		}
	}
	if want.Kind == "DELETE" {
		return
	}
	for c, w := range wcols {
		if g, ok := got.Cols[c]; !ok || text(g) != text(w) {
			rep.fail("%s: column %s %s, committed %s", at, c, text(g), text(w))
		}
	}
}

func text(s *string) string {
	if s == nil {
		return "NULL"
	}
	return strconv.Quote(*s)
}

// Duplicates checks one table on its own, with no record of the sources:
// no change at the same (source, commit LSN, position) twice, no snapshot
// row for the same (source, key) twice, and one commit LSN per (source,
// transaction). It is the check `trellara-full dev lake-read` runs.
func Duplicates(t *Table) []string {
	var out []string
	add := func(format string, args ...any) {
		if len(out) < problemsMax {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	type pos struct {
		src      string
		lsn, seq uint64
	}
	type skey struct{ src, key string }
	type xkey struct {
		src string
		xid int64
	}
	seen := map[pos]string{}
	snap := map[skey]string{}
	xlsn := map[xkey]uint64{}
	for _, r := range t.Rows {
		if r.Op == "snapshot" {
			k := skey{r.SourceID, KeyOf(r.Cols, t.Keys)}
			if f, dup := snap[k]; dup {
				add("%s: source %s snapshot row for key %s twice (files %s and %s)", t.Name, r.SourceID, k.key, f, r.File)
			}
			snap[k] = r.File
			continue
		}
		p := pos{r.SourceID, r.CommitLSN, uint64(r.Seq)}
		if f, dup := seen[p]; dup {
			add("%s: source %s change at commit %s position %d twice (files %s and %s)", t.Name, r.SourceID, fmtLSN(r.CommitLSN), r.Seq, f, r.File)
		}
		seen[p] = r.File
		x := xkey{r.SourceID, r.Xid}
		if l, ok := xlsn[x]; ok && l != r.CommitLSN {
			add("%s: source %s transaction %d has rows at commit %s and at %s", t.Name, r.SourceID, r.Xid, fmtLSN(l), fmtLSN(r.CommitLSN))
		}
		xlsn[x] = r.CommitLSN
	}
	return out
}
