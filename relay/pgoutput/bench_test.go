package pgoutput

import "testing"

// BenchmarkDecode measures the per-message decode cost, the relay's hot
// path, for two row changes and a Begin.
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"insert every column kind", "update old key", "begin"} {
		var tc decodeCase
		for _, c := range decodeCases {
			if c.name == name {
				tc = c
			}
		}
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
