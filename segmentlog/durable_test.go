package segmentlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// dirDigest is every name under dir with the hash of its contents: what a
// refused Open must leave exactly as it was.
func dirDigest(t testing.TB, dir string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			out[rel+"/"] = 0
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[rel] = xxh3.Hash(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffDigest(before, after map[string]uint64) string {
	var d []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			d = append(d, "removed "+k)
		} else if w != v {
			d = append(d, "changed "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d = append(d, "created "+k)
		}
	}
	slices.Sort(d)
	return strings.Join(d, ", ")
}

// TestDamageRelativeToDurableEnd is the fault matrix of the torn-tail
// rule: damage is cut as a torn tail only when it lies past the durable
// end; at or below it, in the newest segment or an older one, Open refuses
// with a CorruptionError naming the first lost offset and changes no byte,
// no name and no file. Entries 0..2 are acknowledged (the durable end is
// the start of entry 3); entry 3 is written but unacknowledged.
//
// Mutation tried: checkDurable returning nil (the rule before issue 29)
// turns the "below"/"at" newest-segment cases red (Open cuts them).
func TestDamageRelativeToDurableEnd(t *testing.T) {
	sizes := []int{300, 300, 300, 300}
	type layout struct {
		durEnd  int64 // first byte past the durable end (start of entry 3)
		last    int64 // end of file
		entry1  int64 // start of entry 1
		segment string
	}
	tests := []struct {
		name    string
		damage  func(b []byte, lo layout) []byte
		refuse  bool
		lostAt  uint64 // first lost offset when refused
		keep    int    // entries left after a cut
		repairs bool
	}{
		{"flip well below the durable end", func(b []byte, lo layout) []byte { b[lo.entry1+frameHeaderSize+9] ^= 0x10; return b }, true, 1, 0, false},
		{"flip the last acknowledged byte", func(b []byte, lo layout) []byte { b[lo.durEnd-1] ^= 0x01; return b }, true, 2, 0, false},
		{"zero 8 bytes ending at the durable end", func(b []byte, lo layout) []byte { clear(b[lo.durEnd-8 : lo.durEnd]); return b }, true, 2, 0, false},
		{"truncate one byte below the durable end", func(b []byte, lo layout) []byte { return b[:lo.durEnd-1] }, true, 2, 0, false},
		{"truncate to the header", func(b []byte, lo layout) []byte { return b[:segmentHeaderSize] }, true, 0, 0, false},
		{"flip the first byte at the durable end", func(b []byte, lo layout) []byte { b[lo.durEnd] ^= 0x01; return b }, false, 0, 3, true},
		{"flip 8 bytes near the end of the file", func(b []byte, lo layout) []byte {
			for i := lo.last - 12; i < lo.last-4; i++ {
				b[i] ^= 0xff
			}
			return b
		}, false, 0, 3, true},
		{"truncate exactly at the durable end", func(b []byte, lo layout) []byte { return b[:lo.durEnd] }, false, 0, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			want := buildLogTorn(t, dir, Options{}, sizes, 3)
			path := filepath.Join(dir, segmentName(0))
			orig, _ := os.ReadFile(path)
			fr := framesOf(t, orig)
			lo := layout{durEnd: fr[3].pos, last: int64(len(orig)), entry1: fr[1].pos, segment: path}
			if d, err := readDurable(OSFS{}, dir); err != nil || d.activeSize != lo.durEnd || d.next != 3 {
				t.Fatalf("durable end %+v (%v), want byte %d offset 3", d, err, lo.durEnd)
			}
			os.WriteFile(path, tt.damage(bytes.Clone(orig), lo), 0o644)
			before := dirDigest(t, dir)
			l, rep, err := Open(dir, Options{})
			if tt.refuse {
				c := asCorruption(t, err)
				if c.Path != path || !c.HasLost || c.LostFrom != tt.lostAt || c.LostTo != 3 || !c.HasOffset || c.Offset != tt.lostAt {
					t.Fatalf("corruption %+v, want %s losing offsets [%d, 3)", c, path, tt.lostAt)
				}
				if d := diffDigest(before, dirDigest(t, dir)); d != "" {
					t.Fatalf("a refused Open changed the log directory: %s", d)
				}
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer l.Close()
			if (rep != nil) != tt.repairs {
				t.Fatalf("repair report %v, want one: %v", rep, tt.repairs)
			}
			if rep != nil && (rep.Position != lo.durEnd || rep.NextOffset != 3) {
				t.Fatalf("report %+v, want a cut at the durable end %d", rep, lo.durEnd)
			}
			checkEntries(t, readAll(t, l, 0), want[:tt.keep])
		})
	}
}

// TestDamageRelativeToDurableEndOlderSegments: a sealed segment is below
// every durable end, so damage in it is refused wherever it is; the newest
// segment past a durable end that still names the segment before it (a
// roll the record has not caught up with) is a torn tail; a durable end in
// a segment that is missing is lost acknowledged data.
//
// Mutation tried: checkDurable returning nil turns "flip in the newest
// segment below the durable end" and "durable end in a missing segment"
// red (Open cuts, or serves a log without its newest segment).
func TestDamageRelativeToDurableEndOlderSegments(t *testing.T) {
	opts := smallOpts()
	build := func(t *testing.T) (dir string, bases []uint64) {
		dir = t.TempDir()
		var sizes []int
		for range 30 {
			sizes = append(sizes, 300)
		}
		buildLog(t, dir, opts, sizes)
		names, _ := os.ReadDir(dir)
		for _, n := range names {
			if b, ok := parseBaseName(n.Name(), segmentSuffix); ok {
				bases = append(bases, b)
			}
		}
		if len(bases) < 3 {
			t.Fatalf("test layout changed: %d segments", len(bases))
		}
		return dir, bases
	}
	refused := func(t *testing.T, dir, path string) {
		t.Helper()
		before := dirDigest(t, dir)
		_, _, err := Open(dir, opts)
		if c := asCorruption(t, err); c.Path != path {
			t.Fatalf("corruption names %s, want %s", c.Path, path)
		}
		if d := diffDigest(before, dirDigest(t, dir)); d != "" {
			t.Fatalf("a refused Open changed the log directory: %s", d)
		}
		t.Log(err)
	}
	t.Run("flip in a sealed segment, index removed", func(t *testing.T) {
		dir, bases := build(t)
		path := filepath.Join(dir, segmentName(bases[1]))
		b, _ := os.ReadFile(path)
		b[len(b)-3] ^= 0x20 // the last frame of a sealed segment
		os.WriteFile(path, b, 0o644)
		os.Remove(filepath.Join(dir, indexName(bases[1])))
		os.WriteFile(filepath.Join(dir, segmentName(99)+tmpSuffix), []byte("stale"), 0o644)
		refused(t, dir, path)
	})
	t.Run("flip in the newest segment below the durable end", func(t *testing.T) {
		dir, bases := build(t)
		path := filepath.Join(dir, segmentName(bases[len(bases)-1]))
		b, _ := os.ReadFile(path)
		b[len(b)-1] ^= 0x20
		os.WriteFile(path, b, 0o644)
		refused(t, dir, path)
	})
	t.Run("durable end in a missing segment", func(t *testing.T) {
		dir, bases := build(t)
		os.Remove(filepath.Join(dir, segmentName(bases[len(bases)-1])))
		os.Remove(filepath.Join(dir, indexName(bases[len(bases)-2])))
		refused(t, dir, filepath.Join(dir, segmentName(bases[len(bases)-2])))
	})
	t.Run("newest segment past a durable end in the segment before", func(t *testing.T) {
		dir, bases := build(t)
		prev, newest := bases[len(bases)-2], bases[len(bases)-1]
		prevSize, _ := os.Stat(filepath.Join(dir, segmentName(prev)))
		os.WriteFile(filepath.Join(dir, durableFileName),
			encodeDurable(durableRecord{activeBase: prev, activeSize: prevSize.Size(), next: newest}), 0o644)
		path := filepath.Join(dir, segmentName(newest))
		b, _ := os.ReadFile(path)
		b[len(b)-1] ^= 0x20
		os.WriteFile(path, b, 0o644)
		l, rep, err := Open(dir, opts)
		if err != nil || rep == nil || rep.Segment != path {
			t.Fatalf("Open = %v, %v; want a torn-tail cut of %s", rep, err, path)
		}
		l.Close()
	})
}

// TestAcknowledgedImpliesDurableEnd: every offset an Append returned is
// named by DURABLE when it returns, and a failure to publish DURABLE fails
// the append instead of acknowledging it.
//
// Mutation tried: publishing after answering (or logging a publish failure
// instead of failing) turns the second half red.
func TestAcknowledgedImpliesDurableEnd(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	for i := range 20 {
		off := mustAppend(t, l, payloadFor(3, i, 50+i))
		if d, err := readDurable(OSFS{}, dir); err != nil || d.next <= off {
			t.Fatalf("append %d acknowledged offset %d but DURABLE is %+v (%v)", i, off, d, err)
		}
	}
	l.Close()

	fsys := renameFailFS{OSFS{}}
	l, _, err := Open(dir, Options{FS: fsys})
	if err == nil {
		l.Close()
		t.Fatal("Open succeeded although it could not publish the durable end")
	}
	l = mustOpen(t, dir, Options{})
	defer l.Close()
	l.fs = fsys // the flusher reads it per group
	if _, err := l.Append([]byte("x")); !errors.Is(err, ErrMustReopen) {
		t.Fatalf("append whose durable end could not be published: %v, want a FatalError", err)
	}
}

type renameFailFS struct{ OSFS }

func (renameFailFS) Rename(from, to string) error {
	if filepath.Base(to) == durableFileName {
		return errors.New("injected rename failure")
	}
	return os.Rename(from, to)
}
