package schemachange

import (
	"reflect"
	"strings"
	"testing"
)

func num(p, s int) int32 { return int32(p<<16|s) + 4 }

func TestDiffAndClassifyEveryKind(t *testing.T) {
	id := Column{Name: "id", TypeOID: oidInt4, TypeMod: -1, Key: true, Facts: &Facts{NotNull: true}}
	note := Column{Name: "note", TypeOID: oidText, TypeMod: -1, Facts: &Facts{}}
	base := Shape{Relation: "public.t", Columns: []Column{id, note}}
	with := func(cols ...Column) Shape { return Shape{Relation: "public.t", Columns: cols} }
	strict := Policy{Mode: ModeStrict, Configured: true}
	mapped := Policy{Mode: ModeStrict, Configured: true, Renames: []ColumnRename{{From: "other", To: "remark"}, {From: "note", To: "memo"}}}
	const renameDDL = `DO $trellara$ BEGIN IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'public.t'::regclass AND attname = 'note' AND attnum > 0 AND NOT attisdropped) ` +
		`THEN ALTER TABLE public.t RENAME COLUMN "note" TO "memo"; END IF; END $trellara$`

	cases := []struct {
		name  string
		old   Shape
		live  Shape
		p     Policy
		kinds []Kind
		axes  Classification // of the first change
		ddl   string         // of the first change
	}{
		{"add nullable", base, with(id, note, Column{Name: "extra", TypeOID: oidInt8, TypeMod: -1, Facts: &Facts{}}), strict,
			[]Kind{AddNullableColumn}, Classification{Compatible, AutoApply, ModeStrict, ""},
			`ALTER TABLE public.t ADD COLUMN IF NOT EXISTS "extra" bigint`},
		{"add with default", base, with(id, note, Column{Name: "extra", TypeOID: oidInt8, TypeMod: -1, Facts: &Facts{HasDefault: true}}), strict,
			[]Kind{AddColumnDefaultNotNull}, Classification{RequiresMapping, ManualReview, ModeStrict, ""}, ""},
		{"add not null", base, with(id, note, Column{Name: "extra", TypeOID: oidInt8, TypeMod: -1, Facts: &Facts{NotNull: true, HasDefault: true}}), strict,
			[]Kind{AddColumnDefaultNotNull}, Classification{RequiresMapping, ManualReview, ModeStrict, ""}, ""},
		{"add without catalog facts", base, with(id, note, Column{Name: "extra", TypeOID: oidInt8, TypeMod: -1}), strict,
			[]Kind{AddColumnDefaultNotNull}, Classification{RequiresMapping, ManualReview, ModeStrict, ""}, ""},
		{"drop", base, with(id), strict,
			[]Kind{DropColumn}, Classification{DestructiveOrAmbiguous, Block, ModeStrict, ""}, ""},
		{"rename", base, with(id, Column{Name: "memo", TypeOID: oidText, TypeMod: -1, Facts: &Facts{}}), strict,
			[]Kind{RenameColumn}, Classification{RequiresMapping, ManualReview, ModeStrict, ""}, ""},
		{"rename with its mapping", base, with(id, Column{Name: "memo", TypeOID: oidText, TypeMod: -1, Facts: &Facts{}}), mapped,
			[]Kind{RenameColumn}, Classification{RequiresMapping, AutoApply, ModeStrict, ""}, renameDDL},
		{"rename with another mapping", base, with(id, Column{Name: "remark", TypeOID: oidText, TypeMod: -1, Facts: &Facts{}}), mapped,
			[]Kind{RenameColumn}, Classification{RequiresMapping, ManualReview, ModeStrict, ""}, ""},
		{"mapped rename in partitioned mode", base, with(id, Column{Name: "memo", TypeOID: oidText, TypeMod: -1, Facts: &Facts{}}),
			Policy{Mode: ModePartitioned, Configured: true, Renames: mapped.Renames},
			[]Kind{RenameColumn}, Classification{RequiresMapping, StageThenApply, ModePartitioned, ""}, ""},
		{"widen int4 to int8", with(id, Column{Name: "n", TypeOID: oidInt4, TypeMod: -1}), with(id, Column{Name: "n", TypeOID: oidInt8, TypeMod: -1}), strict,
			[]Kind{WidenType}, Classification{Compatible, AutoApply, ModeStrict, ""}, `ALTER TABLE public.t ALTER COLUMN "n" TYPE bigint`},
		{"widen numeric precision", with(id, Column{Name: "n", TypeOID: oidNumeric, TypeMod: num(10, 2)}), with(id, Column{Name: "n", TypeOID: oidNumeric, TypeMod: num(14, 2)}), strict,
			[]Kind{WidenType}, Classification{Compatible, AutoApply, ModeStrict, ""}, `ALTER TABLE public.t ALTER COLUMN "n" TYPE numeric(14,2)`},
		{"widen varchar to text", with(id, Column{Name: "n", TypeOID: oidVarchar, TypeMod: 14}), with(id, Column{Name: "n", TypeOID: oidText, TypeMod: -1}), strict,
			[]Kind{WidenType}, Classification{Compatible, AutoApply, ModeStrict, ""}, `ALTER TABLE public.t ALTER COLUMN "n" TYPE text`},
		{"widen float4", with(id, Column{Name: "n", TypeOID: oidFloat4, TypeMod: -1}), with(id, Column{Name: "n", TypeOID: oidFloat8, TypeMod: -1}), strict,
			[]Kind{WidenType}, Classification{Compatible, AutoApply, ModeStrict, ""}, `ALTER TABLE public.t ALTER COLUMN "n" TYPE double precision`},
		{"numeric scale change", with(id, Column{Name: "n", TypeOID: oidNumeric, TypeMod: num(10, 2)}), with(id, Column{Name: "n", TypeOID: oidNumeric, TypeMod: num(12, 3)}), strict,
			[]Kind{NarrowOrIncompatibleType}, Classification{DestructiveOrAmbiguous, Block, ModeStrict, ""}, ""},
		{"narrow int8 to int4", with(id, Column{Name: "n", TypeOID: oidInt8, TypeMod: -1}), with(id, Column{Name: "n", TypeOID: oidInt4, TypeMod: -1}), strict,
			[]Kind{NarrowOrIncompatibleType}, Classification{DestructiveOrAmbiguous, Block, ModeStrict, ""}, ""},
		{"text to int", with(id, Column{Name: "n", TypeOID: oidText, TypeMod: -1}), with(id, Column{Name: "n", TypeOID: oidInt4, TypeMod: -1}), strict,
			[]Kind{NarrowOrIncompatibleType}, Classification{DestructiveOrAmbiguous, Block, ModeStrict, ""}, ""},
		{"increase varchar", with(id, Column{Name: "n", TypeOID: oidVarchar, TypeMod: 14}), with(id, Column{Name: "n", TypeOID: oidVarchar, TypeMod: 44}), strict,
			[]Kind{IncreaseVarchar}, Classification{Compatible, AutoApply, ModeStrict, ""}, `ALTER TABLE public.t ALTER COLUMN "n" TYPE character varying(40)`},
		{"decrease varchar", with(id, Column{Name: "n", TypeOID: oidVarchar, TypeMod: 44}), with(id, Column{Name: "n", TypeOID: oidVarchar, TypeMod: 14}), strict,
			[]Kind{NarrowOrIncompatibleType}, Classification{DestructiveOrAmbiguous, Block, ModeStrict, ""}, ""},
		{"set not null", base, with(id, Column{Name: "note", TypeOID: oidText, TypeMod: -1, Facts: &Facts{NotNull: true}}), strict,
			[]Kind{SetNotNull}, Classification{DestructiveOrAmbiguous, Block, ModeStrict, ""}, ""},
		{"primary key change", base, with(Column{Name: "id", TypeOID: oidInt4, TypeMod: -1, Key: true}, Column{Name: "note", TypeOID: oidText, TypeMod: -1, Key: true}), strict,
			[]Kind{PrimaryKeyChange}, Classification{DestructiveOrAmbiguous, Block, ModeStrict, ""}, ""},
		{"table renamed", base, Shape{Relation: "public.t2", Columns: base.Columns}, strict,
			[]Kind{DropOrRenameTable}, Classification{DestructiveOrAmbiguous, Block, ModeStrict, ""}, ""},
		{"add nullable on an unconfigured table", base, with(id, note, Column{Name: "x", TypeOID: oidText, TypeMod: -1, Facts: &Facts{}}), Policy{Mode: ModeStrict},
			[]Kind{AddNullableColumn}, Classification{BlockedByPolicy, Block, ModeStrict, ""}, ""},
		{"widen in partitioned mode", with(id, Column{Name: "n", TypeOID: oidInt2, TypeMod: -1}), with(id, Column{Name: "n", TypeOID: oidInt4, TypeMod: -1}), Policy{Mode: ModePartitioned, Configured: true},
			[]Kind{WidenType}, Classification{Compatible, StageThenApply, ModePartitioned, ""}, ""},
		{"drop and add is two changes", base, with(id, Column{Name: "memo", TypeOID: oidInt4, TypeMod: -1, Facts: &Facts{}}), strict,
			[]Kind{DropColumn, AddNullableColumn}, Classification{DestructiveOrAmbiguous, Block, ModeStrict, ""}, ""},
	}
	seen := map[Kind]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := Diff(tc.old, tc.live)
			var kinds []Kind
			for _, c := range cs {
				kinds = append(kinds, c.Kind)
				seen[c.Kind] = true
			}
			if !reflect.DeepEqual(kinds, tc.kinds) {
				t.Fatalf("kinds = %v, want %v (%+v)", kinds, tc.kinds, cs)
			}
			got := ClassifyChange(cs[0], tc.p)
			got.Why = ""
			if got != tc.axes {
				t.Fatalf("classification = %+v, want %+v", got, tc.axes)
			}
			wantAuto := tc.axes.Decision == AutoApply && len(cs) == 1
			if AutoApplies(cs, tc.p) != wantAuto {
				t.Fatalf("AutoApplies = %v, want %v", !wantAuto, wantAuto)
			}
			ddl := ""
			if wantAuto {
				ddl = TargetDDL("public.t", cs[0], tc.live)
			}
			if ddl != tc.ddl {
				t.Fatalf("target DDL = %q, want %q", ddl, tc.ddl)
			}
		})
	}
	// add_table is never derived from two shapes: the caller names it for
	// a relation that has no pin and is not configured.
	seen[AddTable] = true
	if c := Classify(AddTable, Policy{Mode: ModeStrict}); c.Decision != Block || c.Compatibility != BlockedByPolicy {
		t.Fatalf("add_table: %+v", c)
	}
	for _, k := range Kinds {
		if !seen[k] {
			t.Errorf("kind %s has no case", k)
		}
	}
	if len(Kinds) != 11 {
		t.Errorf("%d kinds, the documented list has eleven", len(Kinds))
	}
}

// Only three kinds are ever compatible, on a configured table; add_table
// joins them only when the policy admits tables (a whole-schema flow under
// unknown_table_policy: allow_compatible).
func TestOnlyThreeKindsAreEverCompatible(t *testing.T) {
	renames := []ColumnRename{{From: "a", To: "b"}}
	for _, k := range Kinds {
		for _, base := range []Policy{{Mode: ModeStrict, Configured: true}, {Mode: ModeStrict}, {Mode: ModePartitioned, Configured: true}, {Mode: ModePartitioned},
			{Mode: ModeStrict, Configured: true, Renames: renames}, {Mode: ModeStrict, Renames: renames}, {Mode: ModePartitioned, Configured: true, Renames: renames}} {
			for _, admit := range []bool{false, true} {
				p := base
				p.AdmitTables = admit
				// Each kind as a bare kind, and as a change naming the mapped
				// columns (a mapping only ever applies to a rename).
				for _, ch := range []Change{{Kind: k}, {Kind: k, OldColumn: "a", Column: "b"}} {
					c := ClassifyChange(ch, p)
					compat := (k == AddNullableColumn || k == WidenType || k == IncreaseVarchar) && p.Configured ||
						k == AddTable && p.AdmitTables
					if c.Compatibility == Compatible && !compat {
						t.Errorf("%s under %+v is compatible", k, p)
					}
					mappedRename := k == RenameColumn && ch.OldColumn != "" && len(p.Renames) > 0 && p.Configured
					if c.Decision == AutoApply && (p.Mode != ModeStrict || !(compat || mappedRename)) {
						t.Errorf("%+v under %+v auto-applies", ch, p)
					}
					if k == RenameColumn && c.Compatibility != RequiresMapping {
						t.Errorf("%+v under %+v is %s, want requires-mapping", ch, p, c.Compatibility)
					}
					if k == AddTable && p.AdmitTables && p.Mode == ModeStrict && c.Decision != AutoApply {
						t.Errorf("add_table under %+v does not auto-apply: %+v", p, c)
					}
				}
			}
		}
	}
}

// A rename auto-applies only with the configured mapping of that very
// rename; without it the classification and UnmappedRenames name the
// schema.renames entry to add.
func TestRenameNeedsItsMapping(t *testing.T) {
	ch := Change{Kind: RenameColumn, OldColumn: "note", Column: "remark"}
	p := Policy{Mode: ModeStrict, Configured: true}
	c := ClassifyChange(ch, p)
	if c.Decision != ManualReview || !strings.Contains(c.Why, "schema.renames") || !strings.Contains(c.Why, "from: note, to: remark") {
		t.Fatalf("unmapped: %+v", c)
	}
	if got := UnmappedRenames([]Change{ch, {Kind: DropColumn, Column: "x"}}, p); !reflect.DeepEqual(got, []ColumnRename{{"note", "remark"}}) {
		t.Fatalf("UnmappedRenames = %v", got)
	}
	for _, wrong := range [][]ColumnRename{{{"remark", "note"}}, {{"note", "memo"}}, {{"memo", "remark"}}} {
		if c := ClassifyChange(ch, Policy{Mode: ModeStrict, Configured: true, Renames: wrong}); c.Decision != ManualReview {
			t.Errorf("mapping %v applies to note → remark: %+v", wrong, c)
		}
	}
	p.Renames = []ColumnRename{{"note", "remark"}}
	c = ClassifyChange(ch, p)
	if c.Decision != AutoApply || c.Compatibility != RequiresMapping || !strings.Contains(c.Why, "schema.renames (from: note, to: remark)") {
		t.Fatalf("mapped: %+v", c)
	}
	if got := UnmappedRenames([]Change{ch}, p); got != nil {
		t.Fatalf("UnmappedRenames with the mapping = %v", got)
	}
	if !AutoApplies([]Change{ch}, p) {
		t.Fatal("a mapped rename does not auto-apply")
	}
	// Without its old name a rename has no statement.
	if s := Statement("public.t", RenameColumn, "", "remark", "text"); s != "" {
		t.Fatalf("rename without its old name: %q", s)
	}
	// Names are quoted as identifiers and as literals; the dollar quote
	// never occurs in the body.
	s := Statement(`"Odd's"."t$trellara$"`, RenameColumn, `it's "x"`, "y", "text")
	want := `DO $trellara1$ BEGIN IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = '"Odd''s"."t$trellara$"'::regclass AND attname = 'it''s "x"' AND attnum > 0 AND NOT attisdropped) ` +
		`THEN ALTER TABLE "Odd's"."t$trellara$" RENAME COLUMN "it's ""x""" TO "y"; END IF; END $trellara1$`
	if s != want {
		t.Fatalf("statement\n got %s\nwant %s", s, want)
	}
}

// A table that may hold rows the stream never carried is blocked whatever
// the policy; one created where it is first written joins when admitted.
func TestNewTablePlan(t *testing.T) {
	live := Shape{Relation: "app.new_t", Columns: []Column{{Name: "id", TypeOID: 23, Key: true}}}
	admit := Policy{Mode: ModeStrict, AdmitTables: true}
	if pl := NewTablePlan(live, admit, ""); pl.Blocked || !pl.AutoApplies() || pl.Kinds() != "add_table" {
		t.Errorf("admitted new table: %+v", pl)
	}
	if pl := NewTablePlan(live, admit, "rows may predate the stream"); !pl.Blocked || pl.Changes[0].Classification.Decision != Block ||
		pl.Changes[0].Classification.Why != "rows may predate the stream" {
		t.Errorf("table with rows that predate the stream: %+v", pl)
	}
	if pl := NewTablePlan(live, Policy{Mode: ModeStrict}, ""); !pl.Blocked || pl.Changes[0].Classification.Compatibility != BlockedByPolicy {
		t.Errorf("default policy: %+v", pl)
	}
}
