package apply

import (
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// Snapshot batches are loaded with COPY ... FROM STDIN in text format: the
// values already are PostgreSQL text output, so the server's input
// functions parse them exactly as an INSERT would, and COPY avoids a
// per-row round trip and per-row executor start-up.
//
// Text format, one line per row:
//
//	value TAB value TAB ... value LF
//
// A NULL is the two characters \N. Inside a value, backslash, LF, CR and TAB
// are written as \\ \n \r \t; every other byte stands for itself. An empty
// string is an empty field, never \N. Because every backslash in the data is
// doubled, a value can never form the end-of-data marker \. by accident.

// appendCopyRow appends one row of text COPY data for tuple.
func appendCopyRow(dst []byte, tuple []*pb.Value) []byte {
	for i, v := range tuple {
		if i > 0 {
			dst = append(dst, '\t')
		}
		if v.GetKind() == pb.ValueKind_VALUE_KIND_NULL {
			dst = append(dst, '\\', 'N')
			continue
		}
		dst = appendCopyText(dst, v.GetData())
	}
	return append(dst, '\n')
}

// appendCopyText appends data with text COPY escaping.
func appendCopyText(dst, data []byte) []byte {
	start := 0
	for i, c := range data {
		var esc byte
		switch c {
		case '\\':
			esc = '\\'
		case '\n':
			esc = 'n'
		case '\r':
			esc = 'r'
		case '\t':
			esc = 't'
		default:
			continue
		}
		dst = append(dst, data[start:i]...)
		dst = append(dst, '\\', esc)
		start = i + 1
	}
	return append(dst, data[start:]...)
}
