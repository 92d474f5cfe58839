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
	vals := make([]*pb.Value, 1024)
	for i := range vals {
		vals[i] = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(strconv.Itoa(i * 7919))}
	}
	vals[3] = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_NULL}
	m := pgtype.NewMap()
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = m.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, textArray(vals), buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
