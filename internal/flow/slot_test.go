package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/internal/pgtest"
)

// A run that starts while the slot's previous user is still letting go (a
// walsender outlives its client by a moment) waits for the slot instead of
// refusing; a slot held for good is refused with the query that finds its
// holder.
func TestRunWaitsForTheSlotToBeReleased(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE orders (id int PRIMARY KEY, qty int NOT NULL)`, `INSERT INTO orders SELECT g, g FROM generate_series(1, 20) g`)
	f := newSchemaFlow(t, src, dst, "public.orders")
	f.mustConverge("first run")

	ctx := context.Background()
	hold, err := pgconn.Connect(ctx, src.ReplicationURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pglogrepl.StartReplication(ctx, hold, "trellara_ddl", 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'trellara_ddl'"}}); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(2 * time.Second)
		hold.Close(ctx)
	}()
	src.Exec(t, `INSERT INTO orders VALUES (100, 100)`)
	f.mustConverge("a run while the slot is still held for 2 s")
	<-released
}
