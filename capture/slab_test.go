package capture

import (
	"fmt"
	"strings"
	"testing"

	"github.com/trellara/trellara/relay/pgoutput"
)

// TestAssembleManyRelationsAndReusedBuffers: a transaction writing more
// relations than relIndex scans for (so it indexes them by map), in an
// order that revisits each, then transactions reusing the finished
// transaction's buffer with fewer relations, one of them rolled back
// partly into a NULL, long and empty values. Each envelope lists exactly
// the relations its rows use, and each row names its own relation and
// carries its own values.
func TestAssembleManyRelationsAndReusedBuffers(t *testing.T) {
	const nrel = 3 * relIndexScanMax
	rels := make([]*pgoutput.Relation, nrel)
	for i := range rels {
		rels[i] = &pgoutput.Relation{RelationID: pgoutput.OID(17000 + i), Namespace: "public", Name: fmt.Sprintf("t%02d", i),
			ReplicaIdentity: 'd', Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 23, TypeModifier: -1},
				{Name: "v", TypeOID: 25, TypeModifier: -1}}}
	}
	long := strings.Repeat("x", slabValueMax+1)
	var c captured
	a := NewAssembler(AssemblerOptions{SourceID: "src"}, c.emit)
	var msgs []pgoutput.Message
	for _, r := range rels {
		msgs = append(msgs, r)
	}
	// Transaction 1 writes t00..t23, then t23..t00 again; each row's value
	// names its relation.
	var want [][]string
	var order []int
	for i := 0; i < nrel; i++ {
		order = append(order, i)
	}
	for i := nrel - 1; i >= 0; i-- {
		order = append(order, i)
	}
	msgs = append(msgs, &pgoutput.Begin{FinalLSN: 0x2000, Xid: 700})
	var rows1 []string
	for k, i := range order {
		v := fmt.Sprintf("t%02d/%d", i, k)
		msgs = append(msgs, &pgoutput.Insert{RelationID: rels[i].RelationID, New: []pgoutput.Column{txt(fmt.Sprint(k)), txt(v)}})
		rows1 = append(rows1, v)
	}
	msgs = append(msgs, &pgoutput.Commit{CommitLSN: 0x2000, EndLSN: 0x2010})
	want = append(want, rows1)
	// Transactions 2 and 3 reuse its buffer with three relations and two.
	msgs = append(msgs, &pgoutput.Begin{FinalLSN: 0x3000, Xid: 701},
		&pgoutput.Insert{RelationID: rels[5].RelationID, New: []pgoutput.Column{txt("1"), txt("t05/a")}},
		&pgoutput.Update{RelationID: rels[17].RelationID, New: []pgoutput.Column{txt("2"), txt("t17/" + long)}},
		&pgoutput.Delete{RelationID: rels[5].RelationID, OldKind: pgoutput.TupleKey, Old: []pgoutput.Column{txt("1"), {Kind: pgoutput.ColumnNull}}},
		&pgoutput.Insert{RelationID: rels[2].RelationID, New: []pgoutput.Column{txt("3"), txt("t02/")}},
		&pgoutput.Commit{CommitLSN: 0x3000, EndLSN: 0x3010},
		&pgoutput.Begin{FinalLSN: 0x4000, Xid: 702},
		&pgoutput.Insert{RelationID: rels[9].RelationID, New: []pgoutput.Column{txt("4"), txt("t09/b")}},
		&pgoutput.Insert{RelationID: rels[0].RelationID, New: []pgoutput.Column{txt("5"), txt("t00/c")}},
		&pgoutput.Commit{CommitLSN: 0x4000, EndLSN: 0x4010})
	want = append(want, []string{"t05/a", "t17/" + long, "", "t02/"}, []string{"t09/b", "t00/c"})
	wantRels := []int{nrel, 3, 2}
	if err := feed(t, a, msgs...); err != nil {
		t.Fatal(err)
	}
	if len(c.units) != 3 {
		t.Fatalf("%d units, want 3", len(c.units))
	}
	for u, e := range c.units {
		if len(e.Relations) != wantRels[u] {
			t.Fatalf("transaction %d lists %d relations, want %d", u+1, len(e.Relations), wantRels[u])
		}
		if len(e.Rows) != len(want[u]) {
			t.Fatalf("transaction %d has %d rows, want %d", u+1, len(e.Rows), len(want[u]))
		}
		used := map[uint32]bool{}
		for i, r := range e.Rows {
			used[r.RelationIndex] = true
			rel := e.Relations[r.RelationIndex].Name
			tuple := r.NewTuple
			if tuple == nil {
				tuple = r.OldTuple
			}
			got := string(tuple[1].Data)
			if got != want[u][i] {
				t.Fatalf("transaction %d row %d: value %.20q, want %.20q", u+1, i, got, want[u][i])
			}
			if got != "" && !strings.HasPrefix(got, rel+"/") {
				t.Fatalf("transaction %d row %d of %s carries %.20q: the row names another relation", u+1, i, rel, got)
			}
		}
		if len(used) != len(e.Relations) {
			t.Fatalf("transaction %d lists %d relations, its rows use %d", u+1, len(e.Relations), len(used))
		}
	}
}
