package schemachange

import (
	"reflect"
	"testing"
)

func num(p, s int) int32 { return int32(p<<16|s) + 4 }

func TestDiffAndClassifyEveryKind(t *testing.T) {
	id := Column{Name: "id", TypeOID: oidInt4, TypeMod: -1, Key: true, Facts: &Facts{NotNull: true}}
	note := Column{Name: "note", TypeOID: oidText, TypeMod: -1, Facts: &Facts{}}
	base := Shape{Relation: "public.t", Columns: []Column{id, note}}
	with := func(cols ...Column) Shape { return Shape{Relation: "public.t", Columns: cols} }
	strict := Policy{Mode: ModeStrict, Configured: true}

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
			got := Classify(cs[0].Kind, tc.p)
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

func TestOnlyThreeKindsAreEverCompatible(t *testing.T) {
	for _, k := range Kinds {
		for _, p := range []Policy{{ModeStrict, true}, {ModeStrict, false}, {ModePartitioned, true}, {ModePartitioned, false}} {
			c := Classify(k, p)
			compat := k == AddNullableColumn || k == WidenType || k == IncreaseVarchar
			if c.Compatibility == Compatible && (!compat || !p.Configured) {
				t.Errorf("%s under %+v is compatible", k, p)
			}
			if c.Decision == AutoApply && (p.Mode != ModeStrict || !compat || !p.Configured) {
				t.Errorf("%s under %+v auto-applies", k, p)
			}
		}
	}
}
