package sim

import (
	"strings"
	"testing"

	"github.com/trellara/trellara/schemachange"
)

// Every modelled change is the kind it is filed under, as package
// schemachange classifies it, and flows exactly when that kind is one of
// the three compatible ones.
func TestChangeSpecsClassify(t *testing.T) {
	compatible := map[schemachange.Kind]bool{schemachange.AddNullableColumn: true, schemachange.WidenType: true, schemachange.IncreaseVarchar: true}
	modelled := map[schemachange.Kind]bool{schemachange.AddNullableColumn: true}
	for _, k := range changeKinds {
		modelled[k.kind] = true
	}
	for k, sp := range changeSpecs {
		if !modelled[k] {
			t.Errorf("%s has a change but no simulation", k)
		}
		pl := sp.plan()
		if !strings.Contains(pl.Kinds(), string(k)) {
			t.Errorf("%s: schemachange classifies the change as %s", k, pl.Kinds())
		}
		if pl.AutoApplies() != compatible[k] {
			t.Errorf("%s: flows %v, want %v", k, pl.AutoApplies(), compatible[k])
		}
		if compatible[k] && sp.wide == nil && k != schemachange.AddNullableColumn {
			t.Errorf("%s: no value past the old shape, so a late DDL would go unnoticed", k)
		}
	}
}

// The simulated target runs the statements schemachange writes and keeps
// the types they name.
func TestSimTargetRunsTargetDDL(t *testing.T) {
	for _, sql := range []string{"bigint", "integer", "text", "character varying(200)", "numeric(12,2)", "numeric"} {
		oid, mod, ok := typeOf(sql)
		if mod == 0 {
			mod = -1
		}
		if !ok || schemachange.TypeName(oid, mod) != sql {
			t.Errorf("typeOf(%q) = %d %d %v", sql, oid, mod, ok)
		}
	}
	db := newSimDB(nil)
	db.useTables(Workload{Change: schemachange.WidenType}.tables())
	x := &simTx{c: db.connect()}
	stmt := schemachange.Statement(quotedName(tAccounts), schemachange.WidenType, "", "balance", "bigint")
	if err := x.exec(stmt); err != nil {
		t.Fatal(err)
	}
	if d := x.table(tAccounts.name); d.cols[1].typeOID != 20 || db.defs[tAccounts.name].cols[1].typeOID != 23 {
		t.Errorf("after %s: the transaction sees %s, the committed table is %s", stmt, describe(d), describe(db.defs[tAccounts.name]))
	}
	if err := fits(colBalance4, num(4_000_000_000)); err == nil {
		t.Error("a value past integer fits an integer column")
	}
}
