package capture

import (
	"errors"
	"strings"
	"testing"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/schemachange"
)

var newRel = &pgoutput.Relation{RelationID: 16500, Namespace: "app", Name: "new_t", ReplicaIdentity: 'd',
	Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 20, TypeModifier: -1}, {Name: "v", TypeOID: 25, TypeModifier: -1}}}

// A table the flow does not know: admitted and created in the transaction
// that first writes it, it carries an add_table barrier with the source's
// definition and is pinned only once that unit is durable, as is one
// created earlier that the catalog proves the stream carried whole;
// created earlier without that proof (rows may predate the stream), or not
// admitted, it blocks at the commit's real LSN with the plan, naming the
// condition that failed.
func TestNewTableBarrierOrBlock(t *testing.T) {
	if AddTableKind != string(schemachange.AddTable) {
		t.Fatalf("the envelope's add_table kind %q is not schemachange's %q", AddTableKind, schemachange.AddTable)
	}
	for _, tc := range []struct {
		name    string
		admit   bool
		created uint32
		carried bool // the catalog proves the stream carried an earlier-created table whole
		barrier bool
	}{
		{"admitted, created in the same transaction", true, 7, false, true},
		{"admitted, created earlier", true, 6, false, false},
		{"admitted, created earlier, carried whole", true, 6, true, true},
		{"default policy", false, 7, false, false},
		{"default policy, carried whole", false, 6, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pins, err := OpenPins(t.TempDir() + "/pins.json")
			if err != nil {
				t.Fatal(err)
			}
			var asked bool
			opts := AssemblerOptions{SourceID: "src", Pins: pins, Resnapshot: "trellara run --config f.yml --cleanup",
				Policy: func(string) schemachange.Policy {
					return schemachange.Policy{Mode: schemachange.ModeStrict, AdmitTables: tc.admit}
				},
				NewTable: func(oid uint32, live schemachange.Shape) (NewTableFacts, error) {
					asked = true
					if oid != 16500 || live.Relation != "app.new_t" || len(live.Columns) != 2 {
						t.Errorf("asked about oid %d, %+v", oid, live)
					}
					return NewTableFacts{CreatedXid: tc.created, EarlierCarried: tc.carried, NotCarried: "condition (x) failed",
						Definition: `{"Schema":"app","Name":"new_t"}`}, nil
				}}
			var c captured
			a := NewAssembler(opts, c.emit)
			err = feed(t, a, &pgoutput.Begin{FinalLSN: 0x30, Xid: 7}, newRel,
				&pgoutput.Insert{RelationID: 16500, New: []pgoutput.Column{txt("1"), txt("a")}},
				&pgoutput.Commit{CommitLSN: 0x30, EndLSN: 0x40})
			if asked != tc.admit {
				t.Errorf("catalog asked %v, want %v", asked, tc.admit)
			}
			if !tc.barrier {
				var d *SchemaDriftError
				if !errors.As(err, &d) || d.LSN != 0x30 || d.Xid != 7 || d.Plan == nil || d.Plan.Kinds() != "add_table" ||
					!strings.Contains(err.Error(), "LSN 0/30") || !strings.Contains(err.Error(), "trellara run --config f.yml --cleanup") {
					t.Fatalf("want a blocked add_table at 0/30 with the plan, got %v", err)
				}
				if why := d.Plan.Changes[0].Classification.Why; tc.admit && !strings.Contains(why, "condition (x) failed") {
					t.Fatalf("the plan does not name the failed condition: %q", why)
				}
				if _, ok := pins.Pinned("app.new_t"); ok {
					t.Fatal("a blocked table was pinned")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			u := c.units[len(c.units)-1]
			if !envelope.IsBarrier(u) || u.DdlEvents[0].Kind != AddTableKind || u.DdlEvents[0].Relation != "app.new_t" ||
				!strings.Contains(u.DdlEvents[0].Detail, "new_t") || len(u.Rows) != 1 {
				t.Fatalf("unit %v: want an add_table barrier with the definition and the row", u)
			}
			if _, ok := pins.Pinned("app.new_t"); ok {
				t.Fatal("pinned before the barrier was durable")
			}
			if err := a.MovePins(0x40); err != nil {
				t.Fatal(err)
			}
			if _, ok := pins.PinnedShape("app.new_t"); !ok {
				t.Fatal("not pinned once the barrier was durable")
			}
		})
	}
}
