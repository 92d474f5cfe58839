package apply

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
)

// stepSnapshot applies payloads with Step (every payload is ready, so
// consecutive snapshot batches form runs deterministically) with the
// applier's batch rows bounded by maxRows, from offset from until the
// source is idle or a Step fails, and returns that error.
func stepSnapshot(t *testing.T, conn *pgx.Conn, maxRows int, payloads [][]byte, from int) error {
	t.Helper()
	ctx := context.Background()
	a := newApplier(t, conn, func(c *Config) { c.MaxBatchRows = maxRows })
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	src, cur := &sliceSource{payloads: payloads, pos: from}, &recCursor{}
	for {
		ok, err := a.Step(ctx, src, cur)
		if err != nil || !ok {
			return err
		}
	}
}

// TestSnapshotRuns: consecutive snapshot batches of a relation apply as
// one target transaction within the batch row limit, with one progress
// row past the last of them and the cursor at the last one; a redelivered
// run is skipped batch by batch; a run the target refuses applies batch
// by batch, so the batches before the refused one commit and exactly the
// refused one is quarantined.
func TestSnapshotRuns(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, "CREATE TABLE s (id int PRIMARY KEY, v text)")
	s := relation("public", "s", 'd', "id*", "v")
	b := func(n uint32, ids ...string) []byte {
		var rows [][]*pb.Value
		for _, id := range ids {
			rows = append(rows, vals(id, "v"+id))
		}
		return snapshotBatch(t, s, 100, n, rows...)
	}
	// Five batches of two rows, at most four rows per target transaction:
	// runs {0,1} {2,3} {4}; then batches 1-3 again (redelivered), skipped.
	payloads := [][]byte{b(0, "1", "2"), b(1, "3", "4"), b(2, "5", "6"), b(3, "7", "8"), b(4, "9", "10"),
		b(1, "3", "4"), b(2, "5", "6"), b(3, "7", "8")}
	err := stepSnapshot(t, conn, 4, payloads, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, conn, "SELECT count(*) || ' rows, ' || count(DISTINCT xmin::text) || ' transactions' FROM s"); got != "10 rows, 3 transactions" {
		t.Fatalf("s: %s, want 10 rows, 3 transactions (runs of two batches within 4 rows)", got)
	}
	st := readStatus(t, conn)
	if p := st.Snapshots[0]; p.NextBatch != 5 || p.Rows != 10 || p.Done || st.Checkpoint.TxnsSkipped != 3 {
		t.Fatalf("after the runs: progress %+v, skipped %d; want next batch 5, 10 rows, 3 skipped", p, st.Checkpoint.TxnsSkipped)
	}
	if st.Checkpoint.Offset != 4 {
		t.Fatalf("checkpoint at offset %d, want 4 (the last batch applied; redeliveries move no position)", st.Checkpoint.Offset)
	}

	// A run whose second batch the target refuses (row 13 is already
	// there): batch 5 commits alone, batch 6 is quarantined.
	exec(t, conn, "INSERT INTO s VALUES (13, 'planted')")
	payloads = append(payloads, b(5, "11", "12"), b(6, "13", "14"), b(7, "15", "16"))
	err = stepSnapshot(t, conn, 100, payloads, 8)
	var qe *QuarantinedError
	if !errors.As(err, &qe) || qe.Unit != "snapshot" || qe.SQLState != "23505" {
		t.Fatalf("refused run: %v, want batch 6 quarantined (23505)", err)
	}
	if got := queryString(t, conn, "SELECT string_agg(id::text, ',' ORDER BY id) FROM s WHERE id > 10"); got != "11,12,13" {
		t.Fatalf("rows past 10 = %s, want 11,12 (batch 5) and the planted 13", got)
	}
	st = readStatus(t, conn)
	if p := st.Snapshots[0]; p.NextBatch != 6 || p.Rows != 12 || st.QuarantineOpen != 1 {
		t.Fatalf("after the refusal: progress %+v, %d open quarantine rows; want next batch 6, 12 rows, 1 open", p, st.QuarantineOpen)
	}
}
