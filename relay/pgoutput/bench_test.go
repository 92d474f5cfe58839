package pgoutput

import "testing"

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
