package sim

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/schemachange"
)

// Every modelled change is the kind it is filed under, as package
// schemachange classifies it, and flows exactly when that kind is one of
// the three compatible ones, or, in a simulation, when it is a rename the
// workload's schema.renames maps.
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
		pl := sp.plan(simPolicy)
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
	mapped, unmapped := 0, 0
	for _, s := range simulations {
		w := s.Workload
		if w.Change == "" {
			continue
		}
		rename := w.Change == schemachange.RenameColumn
		want := compatible[w.Change] || rename && len(w.Renames) > 0
		if got := w.plan().AutoApplies(); got != want {
			t.Errorf("%s: flows %v under the flow's policy, want %v", s.Name, got, want)
		}
		switch {
		case rename && len(w.Renames) > 0:
			mapped++
		case rename:
			unmapped++
		}
	}
	if mapped != 1 || unmapped != 1 {
		t.Errorf("%d simulations of a mapped rename and %d of an unmapped one, want one each", mapped, unmapped)
	}
}

// The simulated target runs schemachange's rename as PostgreSQL runs it:
// inside the transaction, a no-op once the old name is gone, an error on a
// table that has both names; and it refuses any other text.
func TestSimTargetRunsRename(t *testing.T) {
	db := newSimDB(nil)
	db.useTables(Workload{Change: schemachange.RenameColumn}.tables())
	target := quotedName(tAccounts)
	stmt := schemachange.Statement(target, schemachange.RenameColumn, "note", "memo", "text")
	x := &simTx{c: db.connect()}
	for range 2 { // the second time, a barrier that came again: nothing to do
		if err := x.exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		if d := x.table(tAccounts.name); describe(d) != "id bigint, balance bigint, memo text" {
			t.Errorf("after %s the transaction sees (%s)", stmt, describe(d))
		}
	}
	if d := db.defs[tAccounts.name]; describe(d) != describe(tAccounts) {
		t.Errorf("the rename is visible before its transaction commits: (%s)", describe(d))
	}

	both := &simTx{c: db.connect()}
	if err := both.exec(schemachange.Statement(target, schemachange.AddNullableColumn, "", "memo", "text")); err != nil {
		t.Fatal(err)
	}
	if err := both.exec(stmt); sqlState(err) != "42701" {
		t.Errorf("a rename on a table with both names: %v, want 42701", err)
	}

	// A dollar-quote tag other than $trellara$, when a name holds it.
	odd := schemachange.Statement(target, schemachange.RenameColumn, "note", "a$trellara$b", "text")
	if y := (&simTx{c: db.connect()}); y.exec(odd) != nil || y.table(tAccounts.name).col("a$trellara$b") != 2 {
		t.Errorf("%s: not run", odd)
	}

	for _, bad := range []string{
		strings.Replace(stmt, "attname = 'note'", "attname = 'balance'", 1),
		strings.Replace(stmt, `'"public"."accounts"'`, `'"public"."orders"'`, 1),
		strings.Replace(stmt, "IF EXISTS", "IF NOT EXISTS", 1),
		strings.Replace(stmt, "; END IF", "; DROP TABLE x; END IF", 1),
		strings.ReplaceAll(stmt, "$trellara$", "$x$"),
		strings.TrimSuffix(stmt, " $trellara$"),
		stmt + ";",
		`ALTER TABLE "public"."accounts" RENAME COLUMN "note" TO "memo"`,
		`ALTER TABLE public.accounts ALTER COLUMN "balance" TYPE bigint`,
		`ALTER TABLE "public"."accounts" ADD COLUMN IF NOT EXISTS "tier" text DEFAULT 'x'`,
	} {
		if err := (&simTx{c: db.connect()}).exec(bad); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", bad, err)
		}
	}
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
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
