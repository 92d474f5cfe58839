package segmentlog

import (
	"bytes"
	"context"
	"github.com/trellara/trellara/segmentlog/segmentlogtest"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
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
	f.Fuzz(checkReadFrame)
}

// FuzzReadFrameResealed is FuzzReadFrame with the checksums recomputed
// after the mutation (payload sum, then header sum), so that mutations of
// the length, type, flags, reserved bytes, offset and group delta reach
// the checks behind the checksums instead of stopping at the first one.
func FuzzReadFrameResealed(f *testing.F) {
	for _, s := range goldenSeeds(f) {
		f.Add(s)
		if len(s) > 40 {
			f.Add(s[segmentHeaderSize:])
		}
	}
	f.Add(make([]byte, frameHeaderSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		b := slices.Clone(data)
		resealFrames(b)
		checkReadFrame(t, b)
	})
}

func checkReadFrame(t *testing.T, data []byte) {
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
}

// resealFrames recomputes, in place, every checksum of the frames that b
// holds from its start: a manifest's sum of the chunk payloads before it,
// each frame's payload sum (when its length fits in b) and each header
// sum. Mutated bytes then pass the checksums and reach the decoder's
// other checks.
func resealFrames(b []byte) {
	var chunks []byte
	for pos := 0; len(b)-pos >= frameHeaderSize; {
		h := b[pos : pos+frameHeaderSize]
		end := int64(pos) + frameHeaderSize + int64(le.Uint32(h[4:]))
		if end <= int64(len(b)) {
			p := b[pos+frameHeaderSize : end]
			switch frameType(h[24]) {
			case frameChunk:
				chunks = append(chunks, p...)
			case frameManifest:
				if len(p) == manifestSize {
					le.PutUint64(p[16:], xxh3.Hash(chunks))
				}
				chunks = nil
			default:
				chunks = nil
			}
			le.PutUint64(h[16:], xxh3.Hash(p))
		}
		le.PutUint32(h[0:], sum32(h[4:]))
		if end > int64(len(b)) {
			return
		}
		pos = int(end)
	}
}

// resealSegment recomputes a segment file's header sum and its frames'
// checksums.
func resealSegment(b []byte) {
	if len(b) < segmentHeaderSize {
		return
	}
	le.PutUint32(b[28:], sum32(b[:28]))
	resealFrames(b[segmentHeaderSize:])
}

// FuzzScanSegment feeds arbitrary segment files to the open-time scan and
// the torn-tail search: they parse untrusted bytes and must never panic.
func FuzzScanSegment(f *testing.F) {
	for _, s := range goldenSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(checkScanSegment)
}

// FuzzScanSegmentResealed is FuzzScanSegment with every checksum
// recomputed after the mutation, so the scan's checks of offsets, commit
// groups, chunk sequences and manifests see the mutated values.
func FuzzScanSegmentResealed(f *testing.F) {
	for _, s := range goldenSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := slices.Clone(data)
		resealSegment(b)
		checkScanSegment(t, b)
	})
}

func checkScanSegment(t *testing.T, data []byte) {
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
	// What the scan accepts is a well-formed run of entries: offsets dense
	// from the base, each one full frame or chunks closed by a manifest.
	want, chunks := base, 0
	for pos := int64(segmentHeaderSize); pos < res.size; {
		h, _, n, err := readFrame(data[pos:res.size])
		if err != nil || h.offset != want {
			t.Fatalf("scan accepted %d bytes, but at byte %d: offset %d (want %d), %v", res.size, pos, h.offset, want, err)
		}
		switch {
		case h.typ == frameChunk:
			chunks++
		case h.typ == frameFull && chunks == 0, h.typ == frameManifest && chunks >= 2:
			want, chunks = want+1, 0
		default:
			t.Fatalf("scan accepted a %s frame after %d chunks at byte %d", h.typ, chunks, pos)
		}
		pos += int64(n)
	}
	if chunks != 0 || want != res.end {
		t.Fatalf("scan says the good part ends at offset %d; it holds entries through %d (%d chunks open)", res.end, want, chunks)
	}
	if d := res.damage; d != nil {
		if d.cut != res.size || d.pos < d.cut {
			t.Fatalf("damage %+v inconsistent with good size %d", d, res.size)
		}
		if _, _, err := findLaterGroup(ra, d.searchFrom, int64(len(data)), d.expect); err != nil {
			t.Fatal(err)
		}
	}
}

// fuzzLogOptions opens the golden log on m without logging.
func fuzzLogOptions(m *segmentlogtest.FS) Options {
	o := goldenOptions(m)
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return o
}

// checkGoldenReads reads the golden log from every offset: each read must
// return exactly the entry written there or, when corruptionOK, refuse
// with a *CorruptionError. Never another entry, never other bytes.
func checkGoldenReads(t *testing.T, l *Log, corruptionOK bool) {
	t.Helper()
	if n := l.NextOffset(); n != uint64(len(goldenPayloads)) {
		t.Fatalf("log ends at offset %d, want %d", n, len(goldenPayloads))
	}
	for k, want := range goldenPayloads {
		r := l.NewReader(uint64(k))
		off, p, err := r.Next(context.Background())
		r.Close()
		if err != nil && corruptionOK && IsCorruption(err) {
			continue
		}
		if err != nil || off != uint64(k) || !bytes.Equal(p, want) {
			t.Fatalf("read from offset %d: offset %d, %q, %v; want %q", k, off, p, err, want)
		}
	}
}

// FuzzIndexFile replaces a sealed segment's index in the golden log with
// arbitrary bytes, its checksum recomputed, so that every mutation reaches
// the index decoder and validation. An index that decodes is exactly what
// the encoder writes. An index that Open rejects is rebuilt, and the log
// reads back whole. One that passes validation but points inside a frame
// (only a writer bug could produce it: its checksum is right) may make
// Open or a read refuse with a *CorruptionError; no read may ever return
// another entry or other bytes.
func FuzzIndexFile(f *testing.F) {
	golden := buildGolden(f)
	for _, second := range []bool{false, true} {
		f.Add(golden.Bytes(filepath.Join(memDir, indexName(map[bool]uint64{false: 0, true: 3}[second]))), second)
	}
	f.Fuzz(func(t *testing.T, data []byte, second bool) {
		b := slices.Clone(data)
		if len(b) >= indexHeaderSize+indexTrailerSize {
			body := b[:len(b)-indexTrailerSize]
			le.PutUint64(b[len(body):], xxh3.Hash(body))
		}
		base, next := uint64(0), uint64(3)
		if second {
			base, next = 3, 4
		}
		trusted := false
		if ix, err := decodeIndex(b); err == nil {
			if !bytes.Equal(encodeIndex(ix), b) {
				t.Fatalf("decoded index does not re-encode to its bytes")
			}
			size := int64(len(golden.Bytes(filepath.Join(memDir, segmentName(base)))))
			trusted = validateIndex(ix, base, next, size) == nil
		}
		m := golden.CrashImage(nil)
		m.SetBytes(filepath.Join(memDir, indexName(base)), b)
		l, _, err := Open(memDir, fuzzLogOptions(m))
		if err != nil {
			if !trusted {
				t.Fatalf("index %s (%d bytes) fails validation, so Open must rebuild it, yet Open failed: %v", indexName(base), len(b), err)
			}
			asCorruption(t, err)
			return
		}
		defer l.Close()
		checkGoldenReads(t, l, trusted)
	})
}

// FuzzCursorFile replaces the golden log's cursor file with arbitrary
// bytes, its checksum recomputed. Open accepts exactly the cursors that
// decode and lie within the log, and the cursor then reads back, and reads
// from, the offset it holds; anything else is a *CorruptionError.
func FuzzCursorFile(f *testing.F) {
	golden := buildGolden(f)
	path := filepath.Join(memDir, cursorDirName, "relay"+cursorSuffix)
	f.Add(golden.Bytes(path))
	f.Fuzz(func(t *testing.T, data []byte) {
		b := slices.Clone(data)
		if len(b) >= cursorFileSize {
			le.PutUint64(b[16:], xxh3.Hash(b[:16]))
		}
		rec, derr := decodeCursor(b)
		if derr == nil && !bytes.Equal(encodeCursor(rec), b) {
			t.Fatalf("decoded cursor does not re-encode to its bytes")
		}
		m := golden.CrashImage(nil)
		m.SetBytes(path, b)
		l, _, err := Open(memDir, fuzzLogOptions(m))
		if derr != nil || rec.offset > uint64(len(goldenPayloads)) {
			if err == nil {
				l.Close()
				t.Fatalf("Open accepted cursor bytes %x (decode: %v)", b, derr)
			}
			asCorruption(t, err)
			return
		}
		if err != nil {
			t.Fatalf("Open refused a valid cursor at offset %d: %v", rec.offset, err)
		}
		defer l.Close()
		off, ok, cerr := l.CursorOffset("relay")
		if !ok || off != rec.offset || (cerr != nil) != rec.pastRetention {
			t.Fatalf("cursor reads back as %d %v %v, want %d (past retention %v)", off, ok, cerr, rec.offset, rec.pastRetention)
		}
		checkGoldenReads(t, l, false)
	})
}
