package segmentlog

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

func smallOpts() Options {
	return Options{SegmentBytesMax: 4 << 10, FrameBytesMax: 512, IndexIntervalBytes: 256}
}

func TestAppendReadRoundTrip(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	l := mustOpen(t, dir, smallOpts())
	var want [][]byte
	for i := range 300 {
		// Sizes around the frame and segment boundaries, plus empties.
		size := []int{0, 1, 511, 512, 513, 1024, 1025, 3000, 5000, rng.IntN(2000)}[rng.IntN(10)]
		p := payloadFor(seed, i, size)
		if off := mustAppend(t, l, p); off != uint64(i) {
			t.Fatalf("Append returned offset %d, want %d", off, i)
		}
		want = append(want, p)
	}
	checkEntries(t, readAll(t, l, 0), want)
	if st := l.Stats(); st.Segments < 10 {
		t.Fatalf("expected many segments with SegmentBytesMax 4 KiB, got %d", st.Segments)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, smallOpts())
	defer l.Close()
	checkEntries(t, readAll(t, l, 0), want)
	if got := l.NextOffset(); got != uint64(len(want)) {
		t.Fatalf("NextOffset after reopen = %d, want %d", got, len(want))
	}
}

func TestSeekEveryOffset(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	l := mustOpen(t, dir, smallOpts())
	var want [][]byte
	for i := range 200 {
		p := payloadFor(seed, i, (i*37)%1500)
		mustAppend(t, l, p)
		want = append(want, p)
	}
	check := func(l *Log) {
		for from := range want {
			r := l.NewReader(uint64(from))
			off, p, err := nextCtx(r)
			r.Close()
			if err != nil || off != uint64(from) || !bytes.Equal(p, want[from]) {
				t.Fatalf("NewReader(%d).Next = %d, %d bytes, %v", from, off, len(p), err)
			}
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen with the index files, then with them damaged or missing:
	// each is rebuilt to the same bytes.
	idx := filepath.Join(dir, indexName(0))
	orig, err := os.ReadFile(idx)
	if err != nil {
		t.Fatalf("sealed segment has no index: %v", err)
	}
	for _, damage := range []string{"none", "flip", "truncate", "remove"} {
		switch damage {
		case "flip":
			b := bytes.Clone(orig)
			b[len(b)/2] ^= 0x10
			os.WriteFile(idx, b, 0o644)
		case "truncate":
			os.WriteFile(idx, orig[:len(orig)-3], 0o644)
		case "remove":
			os.Remove(idx)
		}
		l := mustOpen(t, dir, smallOpts())
		check(l)
		l.Close()
		got, err := os.ReadFile(idx)
		if err != nil || !bytes.Equal(got, orig) {
			t.Fatalf("after %s the index was not rebuilt identically (err %v)", damage, err)
		}
	}
}

func TestConcurrentWritersAndReaders(t *testing.T) {
	seed := testSeed(t)
	l := mustOpen(t, t.TempDir(), Options{SegmentBytesMax: 64 << 10, FrameBytesMax: 1024})
	defer l.Close()
	const writers, perWriter = 8, 200
	// Each payload names its writer and sequence; the content is derived
	// from both, so readers can check any entry.
	mk := func(w, i int) []byte {
		return payloadFor(seed, w*1_000_000+i, 16+(w*131+i*17)%3000)
	}
	var wg sync.WaitGroup
	got := make([]map[uint64]int, writers)
	for w := range writers {
		got[w] = map[uint64]int{}
		wg.Go(func() {
			for i := range perWriter {
				off, err := l.Append(mk(w, i))
				if err != nil {
					t.Error(err)
					return
				}
				got[w][off] = i
			}
		})
	}
	total := writers * perWriter
	readErr := make(chan error, 3)
	for range 3 {
		go func() {
			r := l.NewReader(0)
			defer r.Close()
			seen := 0
			for seen < total {
				off, p, err := nextCtx(r)
				if err != nil {
					readErr <- err
					return
				}
				if off != uint64(seen) {
					readErr <- errors.New("reader saw offsets out of order")
					return
				}
				if len(p) < 16 {
					readErr <- errors.New("short payload")
					return
				}
				seen++
			}
			readErr <- nil
		}()
	}
	wg.Wait()
	for range 3 {
		if err := <-readErr; err != nil {
			t.Fatal(err)
		}
	}
	// Offsets are unique and dense, and each holds what its writer sent.
	owner := map[uint64][2]int{}
	for w := range writers {
		for off, i := range got[w] {
			if _, dup := owner[off]; dup {
				t.Fatalf("offset %d handed out twice", off)
			}
			owner[off] = [2]int{w, i}
		}
	}
	entries := readAll(t, l, 0)
	if len(entries) != total {
		t.Fatalf("%d entries, want %d", len(entries), total)
	}
	for off, wi := range owner {
		if !bytes.Equal(entries[off], mk(wi[0], wi[1])) {
			t.Fatalf("offset %d does not hold writer %d's entry %d", off, wi[0], wi[1])
		}
	}
}

func TestTailingReaderWakesOnAppend(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	r := l.NewReader(0)
	defer r.Close()
	type res struct {
		off uint64
		p   []byte
		err error
	}
	out := make(chan res)
	go func() {
		for range 3 {
			off, p, err := nextCtx(r)
			out <- res{off, p, err}
		}
	}()
	for i := range 3 {
		// The reader is (most likely) already blocked; either way it must
		// return exactly this entry, woken by the append, not by a timer.
		want := []byte{byte(i), 'x'}
		mustAppend(t, l, want)
		got := <-out
		if got.err != nil || got.off != uint64(i) || !bytes.Equal(got.p, want) {
			t.Fatalf("tailing Next = %d %q %v", got.off, got.p, got.err)
		}
	}

	// Cancellation returns the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, _, err := r.Next(ctx); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel = %v, want context.Canceled", err)
	}
	// Close wakes blocked readers with ErrClosed.
	go func() { _, _, err := r.Next(context.Background()); done <- err }()
	time.Sleep(10 * time.Millisecond) // let it block; the result does not depend on it
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Next during Close = %v, want ErrClosed", err)
	}
	if _, err := l.Append([]byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
}

func TestReaderBeyondEnd(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	mustAppend(t, l, []byte("a"))
	r := l.NewReader(5)
	defer r.Close()
	if _, _, err := nextCtx(r); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Next beyond end = %v, want ErrOutOfRange", err)
	}
}

func TestLargePayloadChunks(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	// 300 KiB frames exercise the direct-read path (above the window);
	// 1 KiB frames exercise many small chunks.
	for _, frameMax := range []int{1 << 10, 300 << 10} {
		opts := Options{SegmentBytesMax: 1 << 20, FrameBytesMax: frameMax, IndexIntervalBytes: 4096}
		d := filepath.Join(dir, strconv.Itoa(frameMax))
		l := mustOpen(t, d, opts)
		var want [][]byte
		for i, size := range []int{frameMax - 1, frameMax, frameMax + 1, 2 * frameMax, 2*frameMax + 1, 7*frameMax + 3, 10, 3 << 20, 5} {
			p := payloadFor(seed, i, size)
			if off := mustAppend(t, l, p); off != uint64(i) {
				t.Fatalf("offset %d, want %d: one offset per logical payload", off, i)
			}
			want = append(want, p)
		}
		checkEntries(t, readAll(t, l, 0), want)
		for from := range want {
			r := l.NewReader(uint64(from))
			_, p, err := nextCtx(r)
			r.Close()
			if err != nil || !bytes.Equal(p, want[from]) {
				t.Fatalf("seek to chunked entry %d: %v", from, err)
			}
		}
		l.Close()
		l = mustOpen(t, d, opts)
		checkEntries(t, readAll(t, l, 0), want)
		l.Close()
	}
	l := mustOpen(t, filepath.Join(dir, "limit"), Options{FrameBytesMax: 16, PayloadBytesMax: 100})
	defer l.Close()
	if _, err := l.Append(make([]byte, 101)); !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("oversized Append = %v, want ErrPayloadTooLarge", err)
	}
}

func TestAppendBatch(t *testing.T) {
	l := mustOpen(t, t.TempDir(), smallOpts())
	defer l.Close()
	first, err := l.AppendBatch([][]byte{[]byte("a"), make([]byte, 2000), []byte("c")})
	if err != nil || first != 0 {
		t.Fatalf("AppendBatch = %d, %v", first, err)
	}
	first, err = l.AppendBatch([][]byte{[]byte("d")})
	if err != nil || first != 3 {
		t.Fatalf("second AppendBatch = %d, %v", first, err)
	}
	if off, err := l.AppendBatch(nil); err != nil || off != 4 {
		t.Fatalf("empty AppendBatch = %d, %v", off, err)
	}
	got := readAll(t, l, 0)
	if string(got[0]) != "a" || len(got[1]) != 2000 || string(got[2]) != "c" || string(got[3]) != "d" {
		t.Fatalf("batch entries read back wrong")
	}
}

func TestOpenLocksDirectory(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	if _, _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	l.Close()
	mustOpen(t, dir, Options{}).Close()
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		field string
	}{
		{"defaults", Options{}, ""},
		{"segment too small", Options{SegmentBytesMax: 100}, "SegmentBytesMax"},
		{"frame too small", Options{FrameBytesMax: 8}, "FrameBytesMax"},
		{"frame above format limit", Options{FrameBytesMax: 65 << 20}, "FrameBytesMax"},
		{"payload below frame", Options{FrameBytesMax: 1024, PayloadBytesMax: 100}, "PayloadBytesMax"},
		{"payload above 4 GiB", Options{PayloadBytesMax: 1<<32 + 1}, "PayloadBytesMax"},
		{"fsync never", Options{Fsync: "never"}, "Fsync"},
		{"index interval too small", Options{IndexIntervalBytes: 10}, "IndexIntervalBytes"},
		{"index interval above segment", Options{SegmentBytesMax: 4096, IndexIntervalBytes: 8192}, "IndexIntervalBytes"},
		{"negative retention bytes", Options{Retention: Retention{MaxBytes: -1}}, "Retention.MaxBytes"},
		{"negative retention age", Options{Retention: Retention{MaxAge: -time.Second}}, "Retention.MaxAge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.opts.withDefaults()
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var oe *OptionsError
			if !errors.As(err, &oe) || oe.Field != tt.field || !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("got %v, want an OptionsError for %s", err, tt.field)
			}
		})
	}
}
