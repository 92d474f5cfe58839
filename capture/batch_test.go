package capture_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/envelope/envelopetest"
)

// TestBatchUnitsAreTheirOwn: Batch.Add encodes units many to a block. Each
// unit must stay exactly its envelope's encoding whatever is added after
// it (also after Reset, which keeps the block), large units that do not fit
// a block included, and must end at its capacity, so a transport appending
// to one cannot write over the next.
func TestBatchUnitsAreTheirOwn(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var b capture.Batch
	var units, want [][]byte
	for i := 0; i < 400; i++ {
		e := envelopetest.Random(rng, "store_001", 0x1000+uint64(i))
		if i%50 == 7 {
			// Larger than a block.
			e.Rows[0].MessageContent = bytes.Repeat([]byte{'m'}, 70<<10)
			e.Rows[0].Op, e.Rows[0].MessagePrefix, e.Rows[0].NewTuple, e.Rows[0].OldTuple = pb.Op_OP_MESSAGE, "p", nil, nil
			e.Rows[0].RelationIndex, e.Rows[0].OldKind = 0, pb.OldTuple_OLD_TUPLE_NONE
			envelope.Seal(e)
		}
		w, err := envelope.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Add(capture.Resume{}, e, e.EndLsn, true); err != nil {
			t.Fatal(err)
		}
		u := b.Units[len(b.Units)-1]
		if len(u) != cap(u) {
			t.Fatalf("unit %d: %d bytes with capacity %d: an append to it would write past it", i, len(u), cap(u))
		}
		units, want = append(units, u), append(want, w)
		if i%100 == 99 {
			b.Reset()
		}
	}
	for i := range units {
		if !bytes.Equal(units[i], want[i]) {
			t.Fatalf("unit %d changed after later units were added", i)
		}
	}
}
