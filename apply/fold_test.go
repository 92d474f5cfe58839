package apply

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
)

// sliceSource is a PollSource over payloads at offsets 0, 1, ...: Step
// batches exactly what it holds, so a test decides which units share a
// target transaction (and are folded) and which go alone (row by row).
type sliceSource struct {
	payloads [][]byte
	pos      int
}

func (s *sliceSource) Poll(context.Context) (uint64, []byte, bool, error) {
	if s.pos >= len(s.payloads) {
		return 0, nil, false, nil
	}
	s.pos++
	return uint64(s.pos - 1), s.payloads[s.pos-1], true, nil
}

func (s *sliceSource) Seek(offset uint64) error { s.pos = int(offset); return nil }

// stepAll applies payloads with Step until the source is idle or a Step
// fails, and returns that error.
func stepAll(t *testing.T, conn *pgx.Conn, maxBatch int, payloads [][]byte) error {
	t.Helper()
	_, err := stepApplier(t, conn, maxBatch, true, payloads)
	return err
}

// stepApplier applies payloads with Step in batches of maxBatch, each next
// batch folded while the target executes the one before or not (prefold),
// until the source is idle or a Step fails. It returns the applier, closed,
// and that error.
func stepApplier(t *testing.T, conn *pgx.Conn, maxBatch int, prefold bool, payloads [][]byte) (*Applier, error) {
	t.Helper()
	ctx := context.Background()
	a := newApplier(t, conn, func(c *Config) { c.MaxBatchTxns = maxBatch })
	a.pg.prefoldOn = prefold
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	src := &sliceSource{payloads: payloads}
	for {
		ok, err := a.Step(ctx, src, &recCursor{})
		if err != nil || !ok {
			return a, err
		}
	}
}

// foldTarget starts a target with table ft (id int key, v, doc) and the
// Trellara schema, and returns it with ft's relation.
func foldTarget(t *testing.T) (*pgx.Conn, *pb.Relation) {
	t.Helper()
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, `CREATE TABLE ft (id int PRIMARY KEY, v text NOT NULL, doc text)`)
	if err := EnsureSchema(context.Background(), conn, ""); err != nil {
		t.Fatal(err)
	}
	return conn, relation("public", "ft", 'd', "id*", "v", "doc")
}

// foldOutcome is everything a run leaves behind that a user can see.
type foldOutcome struct {
	err        string
	rows       string
	checkpoint string
	quarantine string
}

func readOutcome(t *testing.T, conn *pgx.Conn, err error) foldOutcome {
	t.Helper()
	o := foldOutcome{
		rows: queryString(t, conn, `SELECT coalesce(string_agg(id || ':' || v || ':' || coalesce(doc, 'NULL'), ' ' ORDER BY id), '') FROM ft`),
		checkpoint: queryString(t, conn, `SELECT commit_lsn || ' offset ' || coalesce(log_offset::text, '-') || ' applied ' || txns_applied
			|| ' rows ' || rows_applied FROM trellara.checkpoints WHERE flow = $1`, testFlow),
		quarantine: queryString(t, conn, `SELECT coalesce(string_agg(commit_lsn || ' ' || relation || ' ' || error, '; ' ORDER BY id), '')
			FROM trellara.quarantine WHERE flow = $1`, testFlow),
	}
	var qe *QuarantinedError
	switch {
	case err == nil:
		o.err = "<nil>"
	case errors.As(err, &qe):
		o.err = fmt.Sprintf("quarantined %s %s on %s: %v", qe.Unit, envelope.FormatLSN(qe.CommitLSN), qe.Relation, qe.Err)
	default:
		t.Fatalf("Step = %v, want nil or a *QuarantinedError", err)
	}
	return o
}

// TestFoldingReportsWhatRowByRowReports: the same transactions against the
// same target give the same outcome — error, rows, checkpoint, quarantine —
// whether they share one target transaction (folded into set-based
// statements) or are applied one statement per row. Row 3 is missing from
// the target in every case, so each case is a divergence that row by row
// reports; folding must report it too.
func TestFoldingReportsWhatRowByRowReports(t *testing.T) {
	conn, rel := foldTarget(t)
	none, key := pb.OldTuple_OLD_TUPLE_NONE, pb.OldTuple_OLD_TUPLE_KEY
	keyOf := func(id string) []*pb.Value { return []*pb.Value{tv(id), null(), null()} }
	cases := []struct {
		name string
		// rows of the middle transaction; the one before it updates row 1,
		// the one after it row 2.
		rows func(x *txn)
		// missing: row 3 is absent from the target (a divergence).
		missing bool
	}{
		{"update of key and unchanged TOAST only", func(x *txn) {
			x.update(rel, none, nil, []*pb.Value{tv("3"), toast(), toast()})
		}, true},
		{"update", func(x *txn) { x.update(rel, none, nil, []*pb.Value{tv("3"), tv("b"), toast()}) }, true},
		{"two updates, TOAST merged", func(x *txn) {
			x.update(rel, none, nil, []*pb.Value{tv("3"), tv("b"), toast()})
			x.update(rel, none, nil, []*pb.Value{tv("3"), toast(), tv("new doc")})
		}, true},
		{"update then key and unchanged TOAST only", func(x *txn) {
			x.update(rel, none, nil, []*pb.Value{tv("3"), toast(), toast()})
			x.update(rel, none, nil, []*pb.Value{tv("3"), toast(), toast()})
		}, true},
		{"delete", func(x *txn) { x.delete(rel, key, keyOf("3")) }, true},
		{"update then delete", func(x *txn) {
			x.update(rel, none, nil, []*pb.Value{tv("3"), tv("b"), toast()})
			x.delete(rel, key, keyOf("3"))
		}, true},
		{"replace (delete then insert)", func(x *txn) {
			x.delete(rel, key, keyOf("3"))
			x.insert(rel, vals("3", "again", "doc again")...)
		}, true},
		{"key and unchanged TOAST only, row present", func(x *txn) {
			x.update(rel, none, nil, []*pb.Value{tv("3"), toast(), toast()})
		}, false},
		{"replace and TOAST merge, row present", func(x *txn) {
			x.delete(rel, key, keyOf("3"))
			x.insert(rel, vals("3", "again", "doc again")...)
			x.update(rel, none, nil, []*pb.Value{tv("3"), tv("later"), toast()})
			x.insert(rel, vals("5", "five", "doc 5")...)
			x.update(rel, none, nil, []*pb.Value{tv("5"), tv("five b"), toast()})
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t1 := newTxn(0x1000).update(rel, none, nil, []*pb.Value{tv("1"), tv("x"), toast()})
			t2 := newTxn(0x2000)
			tc.rows(t2)
			t3 := newTxn(0x3000).update(rel, none, nil, []*pb.Value{tv("2"), tv("y"), toast()})
			envs := []*pb.Envelope{t1.e, t2.e, t3.e}
			payloads := [][]byte{t1.encode(t), t2.encode(t), t3.encode(t)}
			if _, ok := compact(envs); !ok {
				t.Fatal("the batch does not fold: the test would compare row by row with itself")
			}
			var outcomes [2]foldOutcome
			for i, maxBatch := range []int{1, len(payloads)} { // row by row, then folded
				exec(t, conn, `TRUNCATE ft`, `DELETE FROM trellara.checkpoints`, `DELETE FROM trellara.quarantine`,
					`INSERT INTO ft SELECT g, 'v' || g, 'doc ' || g FROM generate_series(1, 4) g`)
				if tc.missing {
					exec(t, conn, `DELETE FROM ft WHERE id = 3`)
				}
				err := stepAll(t, conn, maxBatch, payloads)
				outcomes[i] = readOutcome(t, conn, err)
			}
			rowByRow, folded := outcomes[0], outcomes[1]
			t.Logf("row by row: %+v", rowByRow)
			if folded != rowByRow {
				t.Errorf("folded: %+v\nrow by row: %+v", folded, rowByRow)
			}
			if tc.missing && rowByRow.err == "<nil>" {
				t.Error("row by row did not report the missing row")
			}
		})
	}
}
