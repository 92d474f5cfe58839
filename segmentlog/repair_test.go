package segmentlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

type frameAt struct {
	pos int64
	h   frameHeader
}

// framesOf decodes every frame of a healthy segment file.
func framesOf(t testing.TB, b []byte) []frameAt {
	t.Helper()
	var out []frameAt
	for pos := int64(segmentHeaderSize); pos < int64(len(b)); {
		h, _, n, err := readFrame(b[pos:])
		if err != nil {
			t.Fatalf("frame at %d: %v", pos, err)
		}
		out = append(out, frameAt{pos, h})
		pos += int64(n)
	}
	return out
}

// buildLog appends payloads one per commit group and returns them.
func buildLog(t testing.TB, dir string, opts Options, sizes []int) [][]byte {
	t.Helper()
	return buildLogTorn(t, dir, opts, sizes, len(sizes))
}

// buildLogTorn is buildLog that leaves the durable end where the writer
// published it after the first acked entries: the later ones are on disk
// but unacknowledged, as when a crash interrupts their commit group after
// the write and before DURABLE names it. Only those can be a torn tail.
func buildLogTorn(t testing.TB, dir string, opts Options, sizes []int, acked int) [][]byte {
	t.Helper()
	l := mustOpen(t, dir, opts)
	var want [][]byte
	var durable []byte
	for i, size := range sizes {
		if i == acked {
			durable = readDurableFile(t, dir)
		}
		p := payloadFor(7, i, size)
		mustAppend(t, l, p)
		want = append(want, p)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if durable != nil {
		if err := os.WriteFile(filepath.Join(dir, durableFileName), durable, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

func readDurableFile(t testing.TB, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, durableFileName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTornTailRepair(t *testing.T) {
	// One segment, entries 0..3; entry 3 is the last commit group.
	// Each case damages the tail the way a crash can and says how many
	// whole entries must survive.
	sizes := []int{100, 200, 2000, 2000}
	opts := Options{FrameBytesMax: 256}
	tests := []struct {
		name   string
		damage func(b []byte, fr []frameAt) []byte
		keep   int
	}{
		{"cut inside last frame header", func(b []byte, fr []frameAt) []byte {
			return b[:fr[len(fr)-1].pos+10]
		}, 3},
		{"cut inside last payload", func(b []byte, fr []frameAt) []byte { return b[:len(b)-5] }, 3},
		{"cut between chunks, no manifest", func(b []byte, fr []frameAt) []byte {
			return b[:fr[len(fr)-2].pos] // drop the manifest of entry 3
		}, 3},
		{"zeroed sector at the tail", func(b []byte, fr []frameAt) []byte {
			end := len(b) &^ 511
			clear(b[end-512 : end])
			return b
		}, 3},
		{"trailing zeros after last frame", func(b []byte, fr []frameAt) []byte {
			return append(b, make([]byte, 4096)...)
		}, 4},
		{"trailing garbage after last frame", func(b []byte, fr []frameAt) []byte {
			return append(b, bytes.Repeat([]byte{0xa5}, 77)...)
		}, 4},
		{"flipped bit in last payload", func(b []byte, fr []frameAt) []byte {
			b[len(b)-1] ^= 1
			return b
		}, 3},
		{"flipped bit in a middle chunk of the last entry", func(b []byte, fr []frameAt) []byte {
			b[fr[len(fr)-3].pos+40] ^= 4
			return b
		}, 3},
		{"cut back to the durable end", func(b []byte, fr []frameAt) []byte { return b[:fr[len(fr)-8].pos] }, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			// Entry 3 is the commit group a crash interrupted: on disk,
			// not yet named by the durable end, never acknowledged.
			want := buildLogTorn(t, dir, opts, sizes, 3)
			path := filepath.Join(dir, segmentName(0))
			orig, _ := os.ReadFile(path)
			fr := framesOf(t, orig)
			if fr[len(fr)-1].h.typ != frameManifest || fr[len(fr)-1].h.offset != 3 {
				t.Fatalf("test layout changed: last frame is %v at offset %d", fr[len(fr)-1].h.typ, fr[len(fr)-1].h.offset)
			}
			damaged := tt.damage(bytes.Clone(orig), fr)
			os.WriteFile(path, damaged, 0o644)

			l, rep, err := Open(dir, opts)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer l.Close()
			// Where the segment must be cut: the start of the first entry
			// that does not survive.
			cut := int64(len(orig))
			if tt.keep < len(sizes) {
				for _, f := range fr {
					if f.h.offset == uint64(tt.keep) {
						cut = f.pos
						break
					}
				}
			}
			if int64(len(damaged)) == cut {
				if rep != nil {
					t.Fatalf("nothing to cut but got %v", rep)
				}
			} else {
				if rep == nil {
					t.Fatal("repair was silent: no RepairReport")
				}
				if rep.Position != cut || rep.BytesDropped != int64(len(damaged))-cut || rep.NextOffset != uint64(tt.keep) {
					t.Fatalf("report %+v, want cut at %d dropping %d, next offset %d", rep, cut, int64(len(damaged))-cut, tt.keep)
				}
				if last, ok := rep.LastGoodOffset(); ok != (tt.keep > 0) || (ok && last != uint64(tt.keep-1)) {
					t.Fatalf("LastGoodOffset = %d, %v", last, ok)
				}
				aside, err := os.ReadFile(rep.TornPath)
				if err != nil || !bytes.Equal(aside, damaged[cut:]) {
					t.Fatalf("dropped bytes not kept in %s (err %v)", rep.TornPath, err)
				}
				t.Log(rep)
			}
			checkEntries(t, readAll(t, l, 0), want[:tt.keep])
			// Offsets stay dense: the next append reuses the first
			// dropped offset.
			if off := mustAppend(t, l, []byte("after")); off != uint64(tt.keep) {
				t.Fatalf("append after repair got offset %d, want %d", off, tt.keep)
			}
		})
	}
}

func TestRepairNumbersTornFiles(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, Options{}, []int{10, 20})
	path := filepath.Join(dir, segmentName(0))
	for n := 1; n <= 2; n++ {
		f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		f.Write([]byte("torn!"))
		f.Close()
		l, rep, err := Open(dir, Options{})
		if err != nil || rep == nil {
			t.Fatalf("Open: %v, %v", rep, err)
		}
		if want := path + ".torn-" + string(rune('0'+n)); rep.TornPath != want {
			t.Fatalf("torn path %s, want %s", rep.TornPath, want)
		}
		l.Close()
	}
}

func TestCorruptionMidSegmentIsHardError(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, Options{}, []int{100, 100, 100, 100, 100})
	path := filepath.Join(dir, segmentName(0))
	orig, _ := os.ReadFile(path)
	fr := framesOf(t, orig)
	for _, tc := range []struct {
		name string
		at   int64
	}{
		{"payload bit", fr[1].pos + frameHeaderSize + 50},
		{"length bit", fr[2].pos + 5},
		{"zeroed header", fr[1].pos},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(orig)
			if tc.name == "zeroed header" {
				clear(b[tc.at : tc.at+frameHeaderSize])
			} else {
				b[tc.at] ^= 0x08
			}
			os.WriteFile(path, b, 0o644)
			_, _, err := Open(dir, Options{})
			c := asCorruption(t, err)
			frame := fr[1].pos
			if tc.name == "length bit" {
				frame = fr[2].pos
			}
			if c.Path != path || c.Position != frame {
				t.Fatalf("corruption at %s:%d, want %s:%d", c.Path, c.Position, path, frame)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(after, b) {
				t.Fatal("Open modified a segment with mid-segment damage")
			}
			t.Log(err)
		})
	}
	os.WriteFile(path, orig, 0o644)
	mustOpen(t, dir, Options{}).Close()
}

func TestDamageInsideLastCommitGroupIsTorn(t *testing.T) {
	// Pages of an unsynced group can reach disk out of order: a hole in
	// the middle of the last group with its later frames intact is a
	// torn write, not corruption, because none of the group was acked.
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	mustAppend(t, l, []byte("acked"))
	durable := readDurableFile(t, dir)
	if _, err := l.AppendBatch([][]byte{make([]byte, 600), make([]byte, 600), make([]byte, 600)}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	path := filepath.Join(dir, segmentName(0))
	b, _ := os.ReadFile(path)
	fr := framesOf(t, b)
	clear(b[fr[2].pos : fr[2].pos+512]) // entry 2, inside group {1,2,3}
	os.WriteFile(path, b, 0o644)
	// The crash came before the durable end named the group.
	os.WriteFile(filepath.Join(dir, durableFileName), durable, 0o644)
	l, rep, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	if rep == nil || rep.Position != fr[2].pos || rep.NextOffset != 2 {
		t.Fatalf("report %v, want cut at %d with next offset 2", rep, fr[2].pos)
	}
}

func TestCorruptionInOldSegment(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts()
	var sizes []int
	for range 40 {
		sizes = append(sizes, 300)
	}
	buildLog(t, dir, opts, sizes)
	path := filepath.Join(dir, segmentName(0))
	b, _ := os.ReadFile(path)
	fr := framesOf(t, b)
	victim := fr[3]
	b[victim.pos+frameHeaderSize+7] ^= 0x40
	os.WriteFile(path, b, 0o644)

	// The index is intact, so Open does not scan the sealed segment; the
	// reader that reaches the frame reports it, naming file and position.
	l := mustOpen(t, dir, opts)
	r := l.NewReader(0)
	var err error
	for range 10 {
		if _, _, err = nextCtx(r); err != nil {
			break
		}
	}
	c := asCorruption(t, err)
	if c.Path != path || c.Position != victim.pos || !c.HasOffset || c.Offset != victim.h.offset {
		t.Fatalf("reader reported %v, want %s at %d", err, path, victim.pos)
	}
	if _, _, again := nextCtx(r); !errors.Is(again, err) {
		t.Fatalf("corruption is not sticky: %v", again)
	}
	r.Close()
	// Readers starting after the damage are unaffected.
	rr := l.NewReader(victim.h.offset + 1)
	if _, _, err := nextCtx(rr); err != nil {
		t.Fatalf("reader after the damage: %v", err)
	}
	rr.Close()
	l.Close()

	// Without the index Open must scan and refuses the segment.
	os.Remove(filepath.Join(dir, indexName(0)))
	_, _, err = Open(dir, opts)
	c = asCorruption(t, err)
	if c.Path != path || c.Position != victim.pos {
		t.Fatalf("Open reported %v, want %s at %d", err, path, victim.pos)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(after, b) {
		t.Fatal("Open modified an old segment")
	}
}

func TestTruncatedOldSegmentIsCorruption(t *testing.T) {
	dir := t.TempDir()
	var sizes []int
	for range 30 {
		sizes = append(sizes, 300)
	}
	buildLog(t, dir, smallOpts(), sizes)
	path := filepath.Join(dir, segmentName(0))
	b, _ := os.ReadFile(path)
	os.WriteFile(path, b[:len(b)-10], 0o644)
	_, _, err := Open(dir, smallOpts())
	if c := asCorruption(t, err); c.Path != path {
		t.Fatalf("corruption names %s, want %s", c.Path, path)
	}
}

func TestOpenRemovesTempFiles(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, Options{}, []int{1})
	stale := filepath.Join(dir, segmentName(1)+tmpSuffix)
	os.WriteFile(stale, []byte("partial"), 0o644)
	l := mustOpen(t, dir, Options{})
	defer l.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temporary segment survived Open: %v", err)
	}
}
