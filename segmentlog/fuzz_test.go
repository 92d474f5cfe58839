package segmentlog

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// goldenSeeds returns the golden segments, each whole and split into
// frames: real writer output to mutate from.
func goldenSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, name := range []string{segmentName(0), segmentName(3), segmentName(4)} {
		b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
		for pos := segmentHeaderSize; pos < len(b); {
			_, _, n, err := readFrame(b[pos:])
			if err != nil {
				f.Fatalf("golden %s at %d: %v", name, pos, err)
			}
			seeds = append(seeds, b[pos:pos+n])
			pos += n
		}
	}
	return seeds
}

func FuzzReadFrame(f *testing.F) {
	for _, s := range goldenSeeds(f) {
		f.Add(s)
		if len(s) > 40 {
			f.Add(s[segmentHeaderSize:]) // segment body: frame at 0
		}
	}
	f.Add([]byte{})
	f.Add(make([]byte, frameHeaderSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, payload, n, err := readFrame(data)
		if err != nil {
			return
		}
		if n > len(data) || n != frameHeaderSize+len(payload) || int(h.length) != len(payload) {
			t.Fatalf("readFrame returned n=%d, payload %d bytes, length %d for %d input bytes", n, len(payload), h.length, len(data))
		}
		// A frame that decodes is exactly what the encoder writes.
		if enc := appendFrame(nil, h.typ, h.offset, h.groupDelta, payload); !bytes.Equal(enc, data[:n]) {
			t.Fatalf("decoded frame does not re-encode to its bytes")
		}
	})
}

// FuzzScanSegment feeds arbitrary segment files to the open-time scan and
// the torn-tail search: they parse untrusted bytes and must never panic.
func FuzzScanSegment(f *testing.F) {
	for _, s := range goldenSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Name the segment after the base offset it claims, so mutations
		// of the frames get past the header.
		var base uint64
		if len(data) >= 16 {
			base = le.Uint64(data[8:])
		}
		ra := bytes.NewReader(data)
		res, err := scanSegment(ra, "fuzz.seg", base, int64(len(data)), 64, 1<<20)
		if err != nil {
			return
		}
		if res.size > int64(len(data)) || (res.damage == nil && res.size != int64(len(data))) {
			t.Fatalf("scan claims %d good bytes of %d (damage %v)", res.size, len(data), res.damage)
		}
		if d := res.damage; d != nil {
			if d.cut != res.size || d.pos < d.cut {
				t.Fatalf("damage %+v inconsistent with good size %d", d, res.size)
			}
			if _, _, err := findLaterGroup(ra, d.searchFrom, int64(len(data)), d.expect); err != nil {
				t.Fatal(err)
			}
		}
	})
}
