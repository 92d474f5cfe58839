package apply

import (
	"strconv"
	"testing"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// TestPrefoldAppliesWhatFoldingAnewApplies: batches folded ahead, while
// the target executes the batch before, leave exactly what the same
// batches folded when their turn comes leave, and what row by row
// leaves: rows, checkpoint, quarantine and error. Also when the folded
// ahead batch holds a redelivered transaction (the checkpoint has moved
// past it by the time the batch is applied: what was folded ahead is not
// what is applied) and when it meets a divergence (isolated, then
// quarantined).
func TestPrefoldAppliesWhatFoldingAnewApplies(t *testing.T) {
	conn, rel := foldTarget(t)
	none, key := pb.OldTuple_OLD_TUPLE_NONE, pb.OldTuple_OLD_TUPLE_KEY
	// Transaction i (1..12) inserts row 10+i, updates row 1 and row
	// 1+i%4, and every third deletes the row inserted three before.
	// Transaction 5 inserts nothing (applied twice, a redelivery must
	// not fail on a duplicate key: it would be isolated and the failure
	// would hide what it did) and also updates rows 5 and 6; transaction
	// 6 updates row 6 again.
	txns := make([]*txn, 13)
	for i := 1; i <= 12; i++ {
		x := newTxn(uint64(i) * 0x100)
		if i != 5 {
			x.insert(rel, vals(strconv.Itoa(10+i), "new "+strconv.Itoa(i), "doc")...)
		}
		x.update(rel, none, nil, []*pb.Value{tv("1"), tv("by " + strconv.Itoa(i)), toast()})
		x.update(rel, none, nil, []*pb.Value{tv(strconv.Itoa(1 + i%4)), tv("also by " + strconv.Itoa(i)), toast()})
		switch i {
		case 5:
			x.update(rel, none, nil, []*pb.Value{tv("5"), tv("only by 5"), toast()})
			x.update(rel, none, nil, []*pb.Value{tv("6"), tv("by 5"), toast()})
		case 6:
			x.update(rel, none, nil, []*pb.Value{tv("6"), tv("by 6"), toast()})
		}
		if i%3 == 0 && i > 3 && i-3 != 5 {
			x.delete(rel, key, []*pb.Value{tv(strconv.Itoa(10 + i - 3)), null(), null()})
		}
		txns[i] = x
	}
	enc := func(ids ...int) [][]byte {
		var out [][]byte
		for _, i := range ids {
			out = append(out, txns[i].encode(t))
		}
		return out
	}
	cases := []struct {
		name     string
		payloads [][]byte
		missing  string // a row deleted from the target first
	}{
		{"four batches", enc(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), ""},
		// Batches of three: 1-3, 4-6, then 5 again with 7 and 8. Folded
		// ahead while 4-6 ran, that batch still held 5; applied, 5 is
		// behind the checkpoint and only 7 and 8 are written. Writing
		// what was folded ahead would set row 6 back to 5's value.
		{"a redelivery in the batch folded ahead", enc(1, 2, 3, 4, 5, 6, 5, 7, 8, 9, 10, 11, 12), ""},
		// Row 5 is missing: transaction 5 (second batch, folded ahead
		// while the first ran) updates it.
		{"a divergence in the batch folded ahead", enc(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), "5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := func(maxBatch int, prefold bool) (foldOutcome, int64) {
				exec(t, conn, `TRUNCATE ft`, `DELETE FROM trellara.checkpoints`, `DELETE FROM trellara.quarantine`,
					`INSERT INTO ft SELECT g, 'v' || g, 'doc ' || g FROM generate_series(1, 6) g`)
				if tc.missing != "" {
					exec(t, conn, `DELETE FROM ft WHERE id = `+tc.missing)
				}
				a, err := stepApplier(t, conn, maxBatch, prefold, tc.payloads)
				return readOutcome(t, conn, err), a.pg.prefoldsUsed.Load()
			}
			rowByRow, _ := run(1, false)
			anew, usedAnew := run(3, false)
			ahead, usedAhead := run(3, true)
			t.Logf("row by row: %+v", rowByRow)
			if anew != rowByRow {
				t.Errorf("folded anew: %+v\nrow by row: %+v", anew, rowByRow)
			}
			if ahead != rowByRow {
				t.Errorf("folded ahead: %+v\nrow by row: %+v", ahead, rowByRow)
			}
			if usedAnew != 0 || usedAhead == 0 {
				t.Errorf("batches written from a prefold: %d with prefold off, %d with it on; want 0 and some", usedAnew, usedAhead)
			}
			if tc.missing != "" && rowByRow.err == "<nil>" {
				t.Error("row by row did not report the missing row")
			}
		})
	}
}
