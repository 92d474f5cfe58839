package pgoutput

import (
	"strings"
	"testing"
)

// benchCases are the messages of the relay's hot path: two row changes and
// a Begin.
var benchCases = []string{"insert every column kind", "update old key", "begin"}

// BenchmarkDecode measures the per-message cost of the package-level
// Decode, which allocates each message.
func BenchmarkDecode(b *testing.B) {
	for _, name := range benchCases {
		tc := decodeCaseNamed(b, name)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(tc.data, testLSN, tc.inStream); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecoder measures the per-message cost of Decoder.Decode, the
// relay's hot path, which reuses its structs.
func BenchmarkDecoder(b *testing.B) {
	for _, name := range benchCases {
		tc := decodeCaseNamed(b, name)
		b.Run(name, func(b *testing.B) {
			var d Decoder
			b.SetBytes(int64(len(tc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Decode(tc.data, testLSN); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecoderTPCB is the relay's decoding CPU per pgbench TPC-B
// transaction, as the server sends it (BEGIN, three UPDATEs, one INSERT,
// COMMIT): one op decodes the transaction's six messages with one Decoder.
func BenchmarkDecoderTPCB(b *testing.B) {
	txt := func(s string) Column { return Column{Kind: ColumnText, Data: []byte(s)} }
	null := Column{Kind: ColumnNull}
	var txn [][]byte
	for _, m := range []Message{
		&Begin{FinalLSN: 0x1000, Xid: 700, CommitTime: 849_000_000_000_000},
		&Update{RelationID: 16401, New: []Column{txt("1234567"), txt("13"), txt("-4711"), txt(strings.Repeat(" ", 84))}},
		&Update{RelationID: 16402, New: []Column{txt("117"), txt("13"), txt("-202811"), null}},
		&Update{RelationID: 16403, New: []Column{txt("13"), txt("1893311"), null}},
		&Insert{RelationID: 16404, New: []Column{txt("117"), txt("13"), txt("1234567"), txt("-4711"), txt("2026-12-01 13:21:48.123456"), null}},
		&Commit{CommitLSN: 0x1000, EndLSN: 0x1030, CommitTime: 849_000_000_000_000},
	} {
		txn = append(txn, Append(nil, m))
	}
	var d Decoder
	b.ReportAllocs()
	for b.Loop() {
		for _, data := range txn {
			if _, err := d.Decode(data, 0x1000); err != nil {
				b.Fatal(err)
			}
		}
	}
}
