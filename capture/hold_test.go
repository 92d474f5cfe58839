package capture

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/schemachange"
)

var otherRel = &pgoutput.Relation{RelationID: 16401, Namespace: "public", Name: "other", ReplicaIdentity: 'd',
	Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 20, TypeModifier: -1}, {Name: "v", TypeOID: 25, TypeModifier: -1}}}

// With HoldTable, a blocked change (DROP COLUMN on orders) holds only
// orders: the first transaction under the new shape carries a hold
// barrier and the other table's rows, never orders' rows; orders is told
// held only once that unit is durable, and its pin stays; a new session
// holds it again without a second barrier; once a reseed has taken the
// change over, the next reseed watermark releases it and orders' rows are
// published again, behind a reseed barrier.
func TestHoldTableHoldsOnlyItsRelation(t *testing.T) {
	pins, err := OpenPins(t.TempDir() + "/pins.json")
	if err != nil {
		t.Fatal(err)
	}
	held, accepted := map[string]bool{}, false
	var phases []string
	opts := AssemblerOptions{SourceID: "src", Pins: pins, HoldTable: true,
		Policy: func(string) schemachange.Policy {
			return schemachange.Policy{Mode: schemachange.ModeStrict, Configured: true}
		},
		Held:     func(r string) bool { return held[r] },
		Accepted: func(string) bool { return accepted },
		OnBarrier: func(b Barrier, phase string) error {
			phases = append(phases, fmt.Sprintf("%s %s %s", b.ID, b.Events[0].Kind, phase))
			if phase == BarrierHeld {
				if b.Plan == nil || b.Plan.LSN != "0/30" || !strings.Contains(b.Plan.Kinds(), "drop_column") {
					t.Errorf("held with plan %+v, want drop_column at 0/30", b.Plan)
				}
				held[b.Relation] = true
			}
			return nil
		}}
	var c captured
	a := NewAssembler(opts, c.emit)
	if err := feed(t, a, &pgoutput.Begin{FinalLSN: 0x10, Xid: 1}, ordersRel, otherRel,
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("1"), txt("a")}},
		&pgoutput.Insert{RelationID: 16401, New: []pgoutput.Column{txt("1"), txt("a")}},
		&pgoutput.Commit{CommitLSN: 0x10, EndLSN: 0x20}); err != nil {
		t.Fatal(err)
	}
	old, _ := pins.Pinned("public.orders")
	dropped := *ordersRel
	dropped.Columns = ordersRel.Columns[:1]
	both := func(a *Assembler, lsn uint64, id string) *pb.Envelope {
		t.Helper()
		n := len(c.units)
		if err := feed(t, a, &pgoutput.Begin{FinalLSN: pgoutput.LSN(lsn), Xid: 2}, &dropped, otherRel,
			&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt(id)}},
			&pgoutput.Insert{RelationID: 16401, New: []pgoutput.Column{txt(id), txt("b")}},
			&pgoutput.Commit{CommitLSN: pgoutput.LSN(lsn), EndLSN: pgoutput.LSN(lsn + 0x10)}); err != nil {
			t.Fatalf("a held change must not stop capture: %v", err)
		}
		if len(c.units) != n+1 {
			t.Fatalf("%d units for one transaction", len(c.units)-n)
		}
		return c.units[n]
	}
	onlyOther := func(what string, u *pb.Envelope, wantHold bool) {
		t.Helper()
		for _, r := range u.Rows {
			if rel := u.Relations[r.RelationIndex]; rel.Name != "other" {
				t.Fatalf("%s: a row of held %s.%s was published", what, rel.Schema, rel.Name)
			}
		}
		if len(u.Rows) != 1 {
			t.Fatalf("%s: %d rows, want the other table's one", what, len(u.Rows))
		}
		hold := len(u.DdlEvents) == 1 && u.DdlEvents[0].Kind == HoldKind && u.DdlEvents[0].Relation == "public.orders" && u.DdlEvents[0].Column == ""
		if hold != wantHold {
			t.Fatalf("%s: hold barrier %v, want %v (%v)", what, hold, wantHold, u.DdlEvents)
		}
	}
	onlyOther("first transaction under the new shape", both(a, 0x30, "2"), true)
	onlyOther("second transaction", both(a, 0x50, "3"), false)
	// A transaction writing only the held table publishes nothing.
	n := len(c.units)
	if err := feed(t, a, &pgoutput.Begin{FinalLSN: 0x60, Xid: 3}, &pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("4")}},
		&pgoutput.Commit{CommitLSN: 0x60, EndLSN: 0x68}); err != nil || len(c.units) != n {
		t.Fatalf("a transaction of the held table only: %v, %d units", err, len(c.units)-n)
	}
	if err := a.MovePins(0x30); err != nil {
		t.Fatal(err)
	}
	if len(phases) != 0 || held["public.orders"] {
		t.Fatalf("held before the hold barrier was durable: %v", phases)
	}
	if err := a.MovePins(0x40); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(phases, "; "); got != "public.orders@0/30 hold published; public.orders@0/30 hold held" {
		t.Fatalf("phases %s", got)
	}
	if fp, _ := pins.Pinned("public.orders"); fp != old {
		t.Fatal("a held relation's pin moved")
	}
	// A new session: held again, no second barrier.
	a = NewAssembler(opts, c.emit)
	onlyOther("new session", both(a, 0x30, "2"), false)
	// The reseed takes the change over: at its next watermark, orders is
	// published again behind a reseed barrier.
	accepted = true
	if err := feed(t, a, &pgoutput.Begin{FinalLSN: 0x70, Xid: 4},
		&pgoutput.LogicalMessage{Transactional: true, Prefix: ReseedPrefix, Content: []byte(`{"id":1,"phase":"begin"}`)},
		&pgoutput.Commit{CommitLSN: 0x70, EndLSN: 0x78}); err != nil {
		t.Fatal(err)
	}
	u := both(a, 0x90, "5")
	if len(u.Rows) != 2 || len(u.DdlEvents) != 1 || u.DdlEvents[0].Kind != ReseedKind {
		t.Fatalf("after the takeover: %d rows, events %v; want both tables' rows behind a reseed barrier", len(u.Rows), u.DdlEvents)
	}
	if err := a.MovePins(0xa0); err != nil {
		t.Fatal(err)
	}
	if sh, ok := pins.PinnedShape("public.orders"); !ok || len(sh.Columns) != 1 {
		t.Fatalf("after the takeover barrier is durable the pin is the new shape; got %+v", sh)
	}
}
