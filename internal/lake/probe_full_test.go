//go:build full

package lake_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/lake"
	"github.com/trellara/trellara/internal/pgtest"
)

// TestProbePositionIsFlushed runs issue 34's sequence: a read-only
// transaction that prunes pages writes WAL nothing flushes. The probe
// position must be flushed (the walsender decodes only flushed WAL), or an idle, caught-up source waits ~15 s to be confirmed and
// its epoch reads complete_with_gaps.
func TestProbePositionIsFlushed(t *testing.T) {
	pgtest.Require(t)
	c := pgtest.Start(t, pgtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	pruningSetup(ctx, t, conn)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM t`); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)

	var ins, fl uint64
	if err := conn.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint, (pg_current_wal_flush_lsn() - '0/0')::bigint`).Scan(&ins, &fl); err != nil {
		t.Fatal(err)
	}
	if ins <= fl {
		t.Fatalf("the sequence left no unflushed WAL (insert %X, flush %X): the test would not see the defect", ins, fl)
	}
	pos, err := lake.ProbePosition(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	var flAfter uint64
	if err := conn.QueryRow(ctx, `SELECT (pg_current_wal_flush_lsn() - '0/0')::bigint`).Scan(&flAfter); err != nil {
		t.Fatal(err)
	}
	if pos != ins {
		t.Fatalf("probe position %X is not the insert position %X", pos, ins)
	}
	if flAfter < pos {
		t.Fatalf("probe position %X is past the flush position %X: the walsender cannot confirm it until something flushes", pos, flAfter)
	}
}

// TestIdleSourceAfterPruningIsComplete: issue 34's reproduction through
// the fleet runtime (close_interval 2s, max_lag 6s). After the read-only
// transaction, the epochs that follow are complete, not
// complete_with_gaps: the probe does not wait for WAL nothing flushes.
func TestIdleSourceAfterPruningIsComplete(t *testing.T) {
	pgtest.Require(t)
	catalog := pgtest.Start(t, pgtest.Options{})
	e := newFleet(t, 1, catalog)
	b, err := os.ReadFile(e.fleet)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(string(b), "epochs: {close_interval: 1s, max_lag: 3s}", "epochs: {close_interval: 2s, max_lag: 6s}", 1)
	if body == string(b) {
		t.Fatal("fleet.yml has no epochs line to change")
	}
	if err := os.WriteFile(e.fleet, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	l := e.openLake()
	e.waitEpoch(l, 0, "complete", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.sources[0].URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	pruningSetup(ctx, t, conn)
	// Every epoch so far; the ones after the read-only transaction are
	// the ones that probe into its unflushed WAL.
	after := lastID(t, l)
	if _, err := conn.Exec(ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT count(*) FROM t; ROLLBACK;`); err != nil {
		t.Fatal(err)
	}
	var ins, fl uint64
	if err := conn.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint, (pg_current_wal_flush_lsn() - '0/0')::bigint`).Scan(&ins, &fl); err != nil {
		t.Fatal(err)
	}
	if ins <= fl {
		t.Fatalf("the sequence left no unflushed WAL (insert %X, flush %X): the test would not see the defect", ins, fl)
	}
	// Three epochs after it (6 s of closes at 2 s) each probe while the
	// pruning WAL is unflushed; each must be complete.
	seen := after
	for range 3 {
		ep := e.waitEpoch(l, seen, "closed", func(lake.Epoch) bool { return true })
		if ep.Status != lake.StatusComplete {
			b, _ := os.ReadFile(filepath.Join(e.dir, "fleet.log"))
			t.Fatalf("epoch %d after the read-only transaction is %s (missing %v): %+v\nfleet log tail:\n%s", ep.ID, ep.Status, ep.Missing(), ep.Sources, tail(string(b), 30))
		}
		seen = ep.ID
	}
}

// pruningSetup is the sequence before its read-only transaction:
// 2,000 rows inserted, read, checkpointed, 4 deleted, checkpointed again,
// so the next read prunes pages and writes WAL nothing flushes.
func pruningSetup(ctx context.Context, t *testing.T, conn *pgx.Conn) {
	t.Helper()
	for _, q := range []string{
		`CREATE TABLE t (id int PRIMARY KEY, v text)`,
		`INSERT INTO t SELECT g, repeat('x', 40) FROM generate_series(1, 2000) g`,
		`SELECT count(*) FROM t`,
		`CHECKPOINT`,
		`DELETE FROM t WHERE id IN (10, 500, 1000, 1500)`,
		`CHECKPOINT`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
