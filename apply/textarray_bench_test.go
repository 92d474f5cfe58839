package apply

import (
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// BenchmarkTextArrayEncode builds and encodes one column of a folded
// batch's set-based statement (1024 text values) the way pgx sends it:
// textArray, then the binary text[] parameter.
func BenchmarkTextArrayEncode(b *testing.B) {
	rows := make([]*netRow, 1024)
	for i := range rows {
		rows[i] = &netRow{vals: []*pb.Value{{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(strconv.Itoa(i * 7919))}}}
	}
	rows[3].vals[0] = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_NULL}
	col0 := func(r *netRow) *pb.Value { return r.vals[0] }
	m := pgtype.NewMap()
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = m.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, textArray(rows, col0), buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
