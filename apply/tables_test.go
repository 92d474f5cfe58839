package apply

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/pgcatalog"
	"github.com/trellara/trellara/pgname"
)

// TestTargetTables: definitions read from a source catalog create the
// target tables; ValidateTables then finds nothing, and names every
// difference planted afterwards with a fix that, applied, clears it.
func TestTargetTables(t *testing.T) {
	c, dst := target(t, pgtest.Options{NoFsync: true})
	c.CreateDB(t, "src")
	src := connect(t, c.URL("src"))
	exec(t, src,
		"CREATE SCHEMA shop",
		`CREATE TABLE shop.orders (id bigint PRIMARY KEY, region text NOT NULL, total numeric(12,2), note varchar(40),
			tags text[], placed timestamptz DEFAULT now(), cents bigint GENERATED ALWAYS AS ((total * 100)::bigint) STORED)`,
		`CREATE TABLE shop."Line Items" (order_id bigint, n int, amount numeric(12,2) NOT NULL, PRIMARY KEY (order_id, n))`,
		"CREATE TABLE public.events (kind text, at timestamptz)",
		"ALTER TABLE public.events REPLICA IDENTITY FULL",
		"CREATE TABLE public.nokey (v text)")
	ctx := context.Background()

	if _, err := pgcatalog.ReadTables(ctx, src, tableNames(t, "shop.missing")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing table: %v", err)
	}
	defs, err := pgcatalog.ReadTables(ctx, src, tableNames(t, "shop.orders", `shop."Line Items"`, "public.events", "public.nokey"))
	if err != nil {
		t.Fatal(err)
	}
	o := defs[0]
	if o.String() != "shop.orders" || !slices.Equal(o.PrimaryKey, []string{"id"}) || o.ReplicaIdentity != 'd' || len(o.Columns) != 7 {
		t.Fatalf("shop.orders = %+v", o)
	}
	if c := o.Columns[2]; c.Name != "total" || c.Type != "numeric(12,2)" || c.NotNull {
		t.Errorf("total = %+v", c)
	}
	if c := o.Columns[1]; !c.NotNull || c.Type != "text" {
		t.Errorf("region = %+v", c)
	}
	if c := o.Columns[6]; c.Generated == "" {
		t.Errorf("cents = %+v, want its generation expression", c)
	}
	if !slices.Equal(defs[1].PrimaryKey, []string{"order_id", "n"}) || defs[2].ReplicaIdentity != 'f' {
		t.Errorf("Line Items PK %v, events identity %c", defs[1].PrimaryKey, defs[2].ReplicaIdentity)
	}

	// Before creation: every table is missing (and nokey is flagged at the source).
	ms, err := ValidateTables(ctx, dst, defs)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[MismatchKind]int{}
	for _, m := range ms {
		kinds[m.Kind]++
	}
	if kinds[MissingTable] != 4 || kinds[NoReplicaKey] != 1 {
		t.Errorf("before creation: %v", ms)
	}

	if err := CreateTables(ctx, dst, defs); err != nil {
		t.Fatal(err)
	}
	if err := CreateTables(ctx, dst, defs); err != nil {
		t.Fatalf("CreateTables is not idempotent: %v", err)
	}
	ms, err = ValidateTables(ctx, dst, defs[:3])
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 0 {
		t.Fatalf("fresh target tables mismatch: %v", ms)
	}

	// Plant one of each difference.
	exec(t, dst,
		"ALTER TABLE shop.orders DROP COLUMN note",
		"ALTER TABLE shop.orders ALTER COLUMN placed TYPE timestamp",
		"ALTER TABLE shop.orders ALTER COLUMN tags SET NOT NULL",
		"ALTER TABLE shop.orders ADD COLUMN required int NOT NULL",
		"ALTER TABLE shop.orders ADD COLUMN optional int NOT NULL DEFAULT 0",
		`ALTER TABLE shop."Line Items" DROP CONSTRAINT "Line Items_pkey"`,
		"ALTER TABLE public.events ADD COLUMN id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
		"ALTER TABLE public.events ALTER COLUMN kind SET NOT NULL",
	)
	ms, err = ValidateTables(ctx, dst, defs[:3])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]MismatchKind{
		"shop.orders.note":     MissingColumn,
		"shop.orders.placed":   TypeDiffers,
		"shop.orders.tags":     NotNullDiffers,
		"shop.orders.required": ExtraColumn,
		`shop."Line Items".`:   PKDiffers,
		"public.events.kind":   NotNullDiffers,
		"public.events.":       PKDiffers,
	}
	got := map[string]MismatchKind{}
	for _, m := range ms {
		got[m.Table+"."+m.Column] = m.Kind
		if m.Fix == "" {
			t.Errorf("%v has no fix", m)
		}
		t.Log(m)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d mismatches, want %d: %v", len(got), len(want), ms)
	}

	// The fixes are runnable SQL and clear the mismatches (the PK on
	// events is the source's business: none there, so no action).
	for _, m := range ms {
		if strings.HasPrefix(m.Fix, "ALTER TABLE") {
			exec(t, dst, m.Fix)
		}
	}
	ms, err = ValidateTables(ctx, dst, defs[:3])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !(m.Kind == PKDiffers && m.Table == "public.events") {
			t.Errorf("left after applying the fixes: %v", m)
		}
	}
}

func tableNames(t *testing.T, names ...string) []pgname.Name {
	t.Helper()
	out := make([]pgname.Name, len(names))
	for i, n := range names {
		tn, err := pgname.Parse(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		out[i] = tn
	}
	return out
}
