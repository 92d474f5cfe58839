package segmentlog

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// testSeed returns a seed for seeded randomness, printed so a failure can
// be replayed with TRELLARA_TEST_SEED.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TRELLARA_TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TRELLARA_TEST_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with TRELLARA_TEST_SEED=%d)", seed, seed)
	return seed
}

// payloadFor returns a deterministic payload for entry i of a test.
func payloadFor(seed uint64, i int, size int) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(r.Uint32())
	}
	return b
}

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, rep, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	if rep != nil {
		t.Fatalf("Open(%s): unexpected repair: %v", dir, rep)
	}
	return l
}

func mustAppend(t testing.TB, l *Log, p []byte) uint64 {
	t.Helper()
	off, err := l.Append(p)
	if err != nil {
		t.Fatalf("Append(%d bytes): %v", len(p), err)
	}
	return off
}

// readAll reads every committed entry from offset from to NextOffset.
func readAll(t testing.TB, l *Log, from uint64) [][]byte {
	t.Helper()
	r := l.NewReader(from)
	defer r.Close()
	end := l.NextOffset()
	var out [][]byte
	for want := from; want < end; want++ {
		off, p, err := r.Next(context.Background())
		if err != nil {
			t.Fatalf("Next at offset %d: %v", want, err)
		}
		if off != want {
			t.Fatalf("Next returned offset %d, want %d (offsets must be dense)", off, want)
		}
		out = append(out, p)
	}
	return out
}

func checkEntries(t testing.TB, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("log holds %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("entry %d: %d bytes differ from the %d bytes appended", i, len(got[i]), len(want[i]))
		}
	}
}

func asCorruption(t testing.TB, err error) *CorruptionError {
	t.Helper()
	var c *CorruptionError
	if !errors.As(err, &c) {
		t.Fatalf("error %v is not a *CorruptionError", err)
	}
	return c
}

// nextCtx is Next with a deadline so a bug cannot hang the suite.
func nextCtx(r *Reader) (uint64, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Next(ctx)
}
