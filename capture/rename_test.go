package capture

import (
	"errors"
	"strings"
	"testing"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/schemachange"
)

// A column rename stops capture unless the policy maps it; mapped, the
// first transaction under the new name carries a rename_column barrier
// that names both the old and the new column.
func TestMappedRenameIsABarrier(t *testing.T) {
	renamed := *ordersRel
	renamed.Columns = append([]pgoutput.RelationColumn(nil), ordersRel.Columns...)
	renamed.Columns[1].Name = "remark"
	for _, mapped := range []bool{false, true} {
		pins, err := OpenPins(t.TempDir() + "/pins.json")
		if err != nil {
			t.Fatal(err)
		}
		p := schemachange.Policy{Mode: schemachange.ModeStrict, Configured: true}
		if mapped {
			p.Renames = []schemachange.ColumnRename{{From: "note", To: "remark"}}
		}
		var c captured
		a := NewAssembler(AssemblerOptions{SourceID: "src", Pins: pins, Policy: func(string) schemachange.Policy { return p },
			Catalog: func(string) (map[string]schemachange.Facts, error) {
				return map[string]schemachange.Facts{"note": {TypeName: "text"}, "remark": {TypeName: "text"}}, nil
			}}, c.emit)
		if err := feed(t, a, &pgoutput.Begin{FinalLSN: 0x10, Xid: 1}, ordersRel,
			&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("1"), txt("a")}},
			&pgoutput.Commit{CommitLSN: 0x10, EndLSN: 0x20}); err != nil {
			t.Fatal(err)
		}
		err = feed(t, a, &pgoutput.Begin{FinalLSN: 0x30, Xid: 2}, &renamed,
			&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("2"), txt("b")}},
			&pgoutput.Commit{CommitLSN: 0x30, EndLSN: 0x40})
		if !mapped {
			var drift *SchemaDriftError
			if !errors.As(err, &drift) || drift.LSN != 0x30 || !strings.Contains(err.Error(), "rename_column note text → remark text: requires-mapping, manual-review") {
				t.Fatalf("unmapped rename: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("mapped rename: %v", err)
		}
		u := c.units[len(c.units)-1]
		if !envelope.IsBarrier(u) || len(u.DdlEvents) != 1 {
			t.Fatalf("mapped rename: no barrier: %v", u.DdlEvents)
		}
		d := u.DdlEvents[0]
		if d.Kind != string(schemachange.RenameColumn) || d.OldColumn != "note" || d.Column != "remark" || d.ColumnType != "text" ||
			d.Detail != schemachange.Statement(`"public"."orders"`, schemachange.RenameColumn, "note", "remark", "text") {
			t.Fatalf("mapped rename: event %+v", d)
		}
	}
}

// A table renamed while capture was not running arrives in the next
// session under its new name with no earlier Relation message to compare:
// the pins, which keep each relation's OID, tell it is the pinned table
// renamed, and capture stops with drop_or_rename_table instead of taking
// it for a table new to the flow.
func TestTableRenamedBetweenSessionsIsSeen(t *testing.T) {
	pins, err := OpenPins(t.TempDir() + "/pins.json")
	if err != nil {
		t.Fatal(err)
	}
	policy := func(rel string) schemachange.Policy {
		return schemachange.Policy{Mode: schemachange.ModeStrict, Configured: rel == "public.orders"}
	}
	opts := AssemblerOptions{SourceID: "src", Pins: pins, Policy: policy,
		Catalog: func(string) (map[string]schemachange.Facts, error) {
			return map[string]schemachange.Facts{"id": {TypeName: "bigint", NotNull: true}, "note": {TypeName: "text"}}, nil
		}}
	var c captured
	if err := feed(t, NewAssembler(opts, c.emit), &pgoutput.Begin{FinalLSN: 0x10, Xid: 1}, ordersRel,
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("1"), txt("a")}},
		&pgoutput.Commit{CommitLSN: 0x10, EndLSN: 0x20}); err != nil {
		t.Fatal(err)
	}
	renamed := *ordersRel
	renamed.Name = "orders_v2"
	err = feed(t, NewAssembler(opts, c.emit), &pgoutput.Begin{FinalLSN: 0x30, Xid: 2}, &renamed,
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("2"), txt("b")}},
		&pgoutput.Commit{CommitLSN: 0x30, EndLSN: 0x40})
	var drift *SchemaDriftError
	if !errors.As(err, &drift) || drift.LSN != 0x30 || !strings.Contains(err.Error(), string(schemachange.DropOrRenameTable)) {
		t.Fatalf("a table renamed between sessions: %v", err)
	}
	if _, pinned := pins.Pinned("public.orders_v2"); pinned || len(c.units) != 1 {
		t.Fatalf("the renamed table was pinned (%v) or published (%d units)", pinned, len(c.units))
	}
}
