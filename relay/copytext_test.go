package relay

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// refRows is the COPY text format decoded the plain way, the oracle for
// copyRows: the whole stream split into lines and tabs, each field
// decoded byte by byte into its own slice (nil for \N). A last line
// without '\n' is a row; a stream ending in '\n' has no empty row after it.
func refRows(stream []byte, ncols int) ([][][]byte, error) {
	var out [][][]byte
	lines := bytes.Split(stream, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for n, line := range lines {
		var row [][]byte
		for _, f := range bytes.Split(line, []byte("\t")) {
			if string(f) == `\N` {
				row = append(row, nil)
				continue
			}
			row = append(row, refUnescape(f))
		}
		if len(row) != ncols {
			return nil, fmt.Errorf("COPY row %d has %d columns, want %d", n+1, len(row), ncols)
		}
		out = append(out, row)
	}
	return out, nil
}

func refUnescape(f []byte) []byte {
	out := []byte{}
	for i := 0; i < len(f); i++ {
		if f[i] != '\\' || i+1 == len(f) {
			out = append(out, f[i])
			continue
		}
		i++
		c := f[i]
		switch {
		case strings.IndexByte("bfnrtv", c) >= 0:
			out = append(out, "\b\f\n\r\t\v"[strings.IndexByte("bfnrtv", c)])
		case c == 'x':
			v, n := 0, 0
			for ; n < 2 && i+1 < len(f) && isHex(f[i+1]); n++ {
				i++
				v = v*16 + hexVal(f[i])
			}
			if n == 0 {
				out = append(out, 'x')
			} else {
				out = append(out, byte(v))
			}
		case c >= '0' && c <= '7':
			v := int(c - '0')
			for n := 1; n < 3 && i+1 < len(f) && f[i+1] >= '0' && f[i+1] <= '7'; n++ {
				i++
				v = v*8 + int(f[i]-'0')
			}
			out = append(out, byte(v))
		default:
			out = append(out, c)
		}
	}
	return out
}

// parseInPieces feeds stream to a copyRows in writes of the given sizes
// (cycled), then closes it, and returns the rows it built (encoded as a
// snapshot batch and decoded again) and the sizes it reported.
func parseInPieces(stream []byte, ncols int, pieces []int) ([][][]byte, int, error) {
	total := 0
	cr := newCopyRows(ncols, func(size int) error { total += size; return nil })
	for i, p := 0, stream; len(p) > 0; i++ {
		n := min(len(p), max(1, pieces[i%len(pieces)]))
		if _, err := cr.Write(p[:n]); err != nil {
			return nil, 0, err
		}
		p = p[n:]
	}
	if err := cr.Close(); err != nil {
		return nil, 0, err
	}
	rel := &pb.Relation{Oid: 1, Schema: "public", Name: "t"}
	for c := range ncols {
		rel.Columns = append(rel.Columns, &pb.RelationColumn{Name: fmt.Sprintf("c%d", c), TypeOid: 25})
	}
	b, err := envelope.EncodeInserts(&pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: "src", CommitLsn: 1, EndLsn: 1,
		Relations: []*pb.Relation{rel}, Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_SNAPSHOT, SnapshotRelation: "public.t"}}, cr.rows)
	if err != nil {
		return nil, 0, err
	}
	e, err := envelope.Decode(b)
	if err != nil {
		return nil, 0, err
	}
	var rows [][][]byte
	for _, r := range e.Rows {
		if r.Op != pb.Op_OP_INSERT || len(r.NewTuple) != ncols || r.Seq != uint64(len(rows)) {
			return nil, 0, fmt.Errorf("row %d: op %s, seq %d, %d values", len(rows), r.Op, r.Seq, len(r.NewTuple))
		}
		var row [][]byte
		for _, v := range r.NewTuple {
			switch v.Kind {
			case pb.ValueKind_VALUE_KIND_NULL:
				row = append(row, nil)
			case pb.ValueKind_VALUE_KIND_TEXT:
				row = append(row, append([]byte{}, v.Data...))
			default:
				return nil, 0, fmt.Errorf("row %d: value kind %s", len(rows), v.Kind)
			}
		}
		rows = append(rows, row)
	}
	return rows, total, nil
}

func sameRows(a, b [][][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if (a[i][j] == nil) != (b[i][j] == nil) || !bytes.Equal(a[i][j], b[i][j]) {
				return false
			}
		}
	}
	return true
}

// TestCopyRows: the parser yields what the plain decoding does, for
// NULLs, empty strings, every escape the server writes and some it does
// not, a value past two-byte lengths, and a stream cut at every byte.
func TestCopyRows(t *testing.T) {
	wide := strings.Repeat("w", 1<<18+17)
	stream := []byte("1\tplain\t\\N\n" +
		"2\t\t\\\\N\n" + // empty string; the two-byte text \N (escaped), not NULL
		"3\ttab\\there\\nnl\\rcr\\\\bs\\b\\f\\v\t\\x41\\x4a2\\101\\0\n" +
		"4\t" + wide + "\t\\N\n" +
		"5\t\\q\\x\\8\tend\\") // no final newline; a trailing lone backslash
	want, err := refRows(stream, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(want[1][2]); got != `\N` {
		t.Fatalf("oracle: row 2 column 3 = %q, want the text \\N", got)
	}
	for _, pieces := range [][]int{{len(stream)}, {1}, {2, 3, 5}, {7, 1}, {1 << 16}} {
		got, size, err := parseInPieces(stream, 3, pieces)
		if err != nil {
			t.Fatalf("pieces %v: %v", pieces, err)
		}
		if !sameRows(got, want) {
			t.Fatalf("pieces %v:\n got  %q\n want %q", pieces, got, want)
		}
		if size != len(stream) {
			t.Fatalf("pieces %v: sizes add to %d, want the stream's %d", pieces, size, len(stream))
		}
	}
	// Many rows, some with escapes: every one intact.
	var many bytes.Buffer
	for i := range 3000 {
		fmt.Fprintf(&many, "%d\tv%d\\t%s\n", i, i, strings.Repeat("x", i%300))
	}
	want, _ = refRows(many.Bytes(), 2)
	got, _, err := parseInPieces(many.Bytes(), 2, []int{4096})
	if err != nil || !sameRows(got, want) {
		t.Fatalf("%d rows: err %v, rows equal %v", len(want), err, sameRows(got, want))
	}
}

// TestCopyRowsColumnCount: a row with too few or too many columns is an
// error naming the row, whichever write it arrives in.
func TestCopyRowsColumnCount(t *testing.T) {
	for _, tc := range []struct{ stream, want string }{
		{"1\ta\n2\n", "COPY row 2 has 1 columns, want 2"},
		{"1\ta\tb\n", "COPY row 1 has 3 columns, want 2"},
		{"1\ta\n2\tb\tc", "COPY row 2 has 3 columns, want 2"},
	} {
		_, _, err := parseInPieces([]byte(tc.stream), 2, []int{3})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: err %v, want %q", tc.stream, err, tc.want)
		}
	}
}

// FuzzCopyRows: for any stream, any column count and any way of cutting
// it into writes, copyRows agrees with the plain decoding: the same rows,
// or an error where it has one.
func FuzzCopyRows(f *testing.F) {
	f.Add([]byte("1\ta\\tb\t\\N\n2\t\t\\x41\n"), uint8(3), uint8(1))
	f.Add([]byte("x\\\\N\\101\\7\\\n"), uint8(1), uint8(5))
	f.Add([]byte("\n\n"), uint8(1), uint8(2))
	f.Fuzz(func(t *testing.T, stream []byte, ncols, piece uint8) {
		n := int(ncols%8) + 1
		want, werr := refRows(stream, n)
		got, size, err := parseInPieces(stream, n, []int{int(piece) + 1, 1})
		if (err != nil) != (werr != nil) {
			t.Fatalf("stream %q, %d columns: err %v, oracle %v", stream, n, err, werr)
		}
		if err != nil {
			return
		}
		if !sameRows(got, want) {
			t.Fatalf("stream %q, %d columns:\n got  %q\n want %q", stream, n, got, want)
		}
		if size != len(stream) {
			t.Fatalf("stream %q: sizes add to %d, want %d", stream, size, len(stream))
		}
	})
}
