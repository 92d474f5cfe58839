package pgcatalog

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/pgname"
)

// TestReadTable reads a real catalog: columns with their formatted types,
// NOT NULL and generation expressions, the primary key and its constraint,
// a replica identity index, unique keys (an expression index and a partial
// index left out), and a partitioned table's leaves at every depth with
// their own identities; a missing table is an error that names it.
func TestReadTable(t *testing.T) {
	pgtest.Require(t)
	c := pgtest.Start(t, pgtest.Options{NoFsync: true})
	c.CreateDB(t, "src")
	c.ExecDB(t, "src",
		"CREATE SCHEMA shop",
		`CREATE TABLE shop.orders (id bigint, region text NOT NULL, total numeric(12,2), code text NOT NULL, email text,
			cents bigint GENERATED ALWAYS AS ((total * 100)::bigint) STORED, CONSTRAINT orders_pk PRIMARY KEY (id))`,
		"CREATE UNIQUE INDEX orders_code ON shop.orders (region, code)",
		"CREATE UNIQUE INDEX orders_lower ON shop.orders (lower(email))",
		"CREATE UNIQUE INDEX orders_partial ON shop.orders (email) WHERE email IS NOT NULL",
		"CREATE TABLE shop.keyed (k text NOT NULL, v text)",
		"CREATE UNIQUE INDEX keyed_k ON shop.keyed (k)",
		"ALTER TABLE shop.keyed REPLICA IDENTITY USING INDEX keyed_k",
		"CREATE TABLE shop.events (id bigint, at date NOT NULL, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)",
		"CREATE TABLE shop.events_2026 PARTITION OF shop.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01') PARTITION BY RANGE (at)",
		"CREATE TABLE shop.events_2026h1 PARTITION OF shop.events_2026 FOR VALUES FROM ('2026-01-01') TO ('2026-07-01')",
		"CREATE TABLE shop.events_2026h2 PARTITION OF shop.events_2026 FOR VALUES FROM ('2026-07-01') TO ('2027-01-01')",
		"CREATE TABLE shop.events_old (id bigint NOT NULL, at date NOT NULL)",
		"ALTER TABLE shop.events ATTACH PARTITION shop.events_old FOR VALUES FROM ('2000-01-01') TO ('2026-01-01')",
		"ALTER TABLE shop.events_old REPLICA IDENTITY NOTHING")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgx.Connect(ctx, c.URL("src"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())

	names := func(ss ...string) []pgname.Name {
		out := make([]pgname.Name, len(ss))
		for i, s := range ss {
			if out[i], err = pgname.Parse(s); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	if _, err := ReadTables(ctx, db, names("shop.orders", "shop.missing")); err == nil || !strings.Contains(err.Error(), "shop.missing does not exist") {
		t.Errorf("missing table: %v", err)
	}
	defs, err := ReadTables(ctx, db, names("shop.orders", "shop.keyed", "shop.events"))
	if err != nil {
		t.Fatal(err)
	}
	o := defs[0]
	if o.String() != "shop.orders" || !slices.Equal(o.PrimaryKey, []string{"id"}) || o.PrimaryKeyConstraint != "orders_pk" ||
		o.ReplicaIdentity != IdentityDefault || len(o.Columns) != 6 || o.Partitions != nil {
		t.Fatalf("shop.orders = %+v", o)
	}
	if c := o.Columns[2]; c.Type != "numeric(12,2)" || c.NotNull {
		t.Errorf("total = %+v", c)
	}
	if c := o.Columns[0]; !c.NotNull {
		t.Errorf("id = %+v, want NOT NULL (primary key)", c)
	}
	if c := o.Columns[5]; !strings.Contains(c.Generated, "total") {
		t.Errorf("cents = %+v, want its generation expression", c)
	}
	if len(o.UniqueKeys) != 1 || !slices.Equal(o.UniqueKeys[0], []string{"region", "code"}) {
		t.Errorf("unique keys = %v, want [[region code]] (expression and partial indexes left out)", o.UniqueKeys)
	}
	k := defs[1]
	if k.ReplicaIdentity != IdentityIndex || !slices.Equal(k.IdentityIndex, []string{"k"}) || !slices.Equal(k.IdentityKey(), []string{"k"}) {
		t.Errorf("shop.keyed = %+v, key %v", k, k.IdentityKey())
	}
	e := defs[2]
	var leaves []string
	for _, p := range e.Partitions {
		leaves = append(leaves, p.String())
	}
	if want := []string{"shop.events_2026h1", "shop.events_2026h2", "shop.events_old"}; !slices.Equal(leaves, want) {
		t.Fatalf("leaves = %v, want %v (leaves only, every depth)", leaves, want)
	}
	if e.Partitions[2].ReplicaIdentity != IdentityNothing {
		t.Errorf("events_old identity = %c, want its own (n)", e.Partitions[2].ReplicaIdentity)
	}
	gate := e.IdentityGate()
	if gate == nil || gate.Table.String() != "shop.events_old" || !strings.Contains(gate.Problem, "a partition of shop.events") {
		t.Errorf("gate = %v, want the leaf with REPLICA IDENTITY NOTHING named", gate)
	}
	if _, found, err := ReadTable(ctx, db, pgname.Name{Schema: "shop", Name: "orders_code"}); err != nil || found {
		t.Errorf("an index read as a table: found=%v err=%v", found, err)
	}
}

// The identity gate admits exactly the tables whose updates and deletes
// carry an identity, and its fix is SQL with the name quoted.
func TestIdentityGate(t *testing.T) {
	odd := TableDef{Schema: `S "x"`, Name: "t; drop"}
	cases := []struct {
		name  string
		ident byte
		pk    []string
		index []string
		ok    bool
		fix   string
	}{
		{"primary key", 'd', []string{"id"}, nil, true, ""},
		{"no key", 'd', nil, nil, false, `ALTER TABLE "S ""x"""."t; drop" ADD PRIMARY KEY`},
		{"full", 'f', nil, nil, true, ""},
		{"index", 'i', nil, []string{"k"}, true, ""},
		{"index dropped", 'i', nil, nil, false, `REPLICA IDENTITY FULL`},
		{"nothing with a key", 'n', []string{"id"}, nil, false, `ALTER TABLE "S ""x"""."t; drop" REPLICA IDENTITY DEFAULT`},
		{"nothing", 'n', nil, nil, false, `ALTER TABLE "S ""x"""."t; drop" REPLICA IDENTITY FULL`},
	}
	for _, c := range cases {
		d := odd
		d.ReplicaIdentity, d.PrimaryKey, d.IdentityIndex = c.ident, c.pk, c.index
		e := d.IdentityGate()
		if (e == nil) != c.ok {
			t.Errorf("%s: gate = %v, want ok=%v", c.name, e, c.ok)
			continue
		}
		if e != nil && (!strings.Contains(e.Fix, c.fix) || e.Table != d.TableName()) {
			t.Errorf("%s: fix %q does not contain %q", c.name, e.Fix, c.fix)
		}
	}
}
