// Package envelopetest generates valid random envelopes for tests,
// benchmarks and the deterministic simulator. Same seed, same envelopes.
package envelopetest

import (
	"fmt"
	"math/rand/v2"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// Random returns a valid, sealed transaction envelope drawn from rng. Row
// count, relation count and value sizes vary widely enough to reach every
// branch of validation: NULLs, empty strings, unchanged TOAST, old keys and
// full old tuples, truncates and logical messages.
func Random(rng *rand.Rand, sourceID string, commitLSN uint64) *pb.Envelope {
	nrel := 1 + rng.IntN(3)
	rels := make([]*pb.Relation, nrel)
	for i := range rels {
		ncol := 1 + rng.IntN(6)
		cols := make([]*pb.RelationColumn, ncol)
		for j := range cols {
			cols[j] = &pb.RelationColumn{
				Name:         fmt.Sprintf("c%d_%d", j, rng.IntN(100)),
				TypeOid:      []uint32{23, 20, 25, 1043, 1700, 3802, 17, 1184}[rng.IntN(8)],
				TypeModifier: int32(rng.IntN(3)) - 1,
				Key:          j == 0,
			}
		}
		rels[i] = &pb.Relation{
			Oid: 16384 + uint32(rng.IntN(1000)), Schema: "public",
			Name:            fmt.Sprintf("t%d", i),
			ReplicaIdentity: uint32([]byte{'d', 'f', 'i'}[rng.IntN(3)]),
			Columns:         cols,
		}
	}
	nrows := rng.IntN(40)
	rows := make([]*pb.Row, nrows)
	for i := range rows {
		ri := uint32(rng.IntN(nrel))
		ncol := len(rels[ri].Columns)
		r := &pb.Row{Seq: uint64(i), RelationIndex: ri}
		switch rng.IntN(10) {
		case 0, 1, 2, 3:
			r.Op = pb.Op_OP_INSERT
			r.NewTuple = randomTuple(rng, ncol, false)
		case 4, 5, 6:
			r.Op = pb.Op_OP_UPDATE
			r.NewTuple = randomTuple(rng, ncol, true)
			if rng.IntN(3) == 0 {
				r.OldKind = pb.OldTuple_OLD_TUPLE_KEY
				r.OldTuple = randomTuple(rng, ncol, false)
			}
		case 7, 8:
			r.Op = pb.Op_OP_DELETE
			r.OldKind = []pb.OldTuple{pb.OldTuple_OLD_TUPLE_KEY, pb.OldTuple_OLD_TUPLE_FULL}[rng.IntN(2)]
			r.OldTuple = randomTuple(rng, ncol, false)
		default:
			if rng.IntN(2) == 0 {
				r.Op = pb.Op_OP_TRUNCATE
				r.TruncateFlags = uint32(rng.IntN(4))
			} else {
				r.Op = pb.Op_OP_MESSAGE
				r.RelationIndex = 0
				r.MessagePrefix = "trellara.test"
				r.MessageContent = randomBytes(rng, rng.IntN(64))
			}
		}
		rows[i] = r
	}
	e := &pb.Envelope{
		ProtocolVersion:      envelope.ProtocolVersion,
		SourceId:             sourceID,
		Xid:                  rng.Uint32(),
		CommitLsn:            commitLSN,
		EndLsn:               commitLSN + uint64(rng.IntN(1<<16)),
		CommitTimeUnixMicros: 1_700_000_000_000_000 + rng.Int64N(1<<40),
		Rows:                 rows,
		Boundary:             &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION, TotalRows: uint64(nrows)},
		Relations:            rels,
	}
	if rng.IntN(8) == 0 {
		e.DdlEvents = []*pb.DDLEvent{{Seq: 0, Kind: "add_nullable_column", Relation: "public.t0",
			OldFingerprint: rng.Uint64(), NewFingerprint: rng.Uint64(), Detail: "column note text"}}
	}
	envelope.Seal(e)
	return e
}

func randomTuple(rng *rand.Rand, ncol int, toast bool) []*pb.Value {
	vals := make([]*pb.Value, ncol)
	for i := range vals {
		switch n := rng.IntN(10); {
		case n == 0:
			vals[i] = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_NULL}
		case n == 1 && toast:
			vals[i] = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST}
		case n == 2:
			vals[i] = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT} // empty string, not NULL
		default:
			vals[i] = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: randomBytes(rng, 1+rng.IntN(48))}
		}
	}
	return vals
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
