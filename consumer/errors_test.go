package consumer_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/envelope/envelopetest"
	"github.com/trellara/trellara/segmentlog"
)

// segmentedLog writes n envelopes into a log of small segments (several
// units each) and closes it; it returns the directory and the segment
// files in offset order.
func segmentedLog(t *testing.T, n int) (string, []string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "log")
	l, _, err := segmentlog.Open(dir, segmentlog.Options{SegmentBytesMax: 4 << 10, IndexIntervalBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range n {
		b, err := envelope.Encode(envelopetest.Random(rng, "src", uint64(0x100+i*0x10)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) < 4 {
		t.Fatalf("want at least 4 segments, have %v (%v)", segs, err)
	}
	slices.Sort(segs)
	return dir, segs
}

// readAll reads from the oldest entry until the first error.
func readAll(t *testing.T, dir string) (int, error) {
	t.Helper()
	c, err := consumer.Open(dir, "app", consumer.Options{Start: consumer.Start{Kind: consumer.StartEarliest}, NoCommit: true})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	for c.Offset() < c.NextOffset() {
		if _, err := c.Next(ctx); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// checkStreamError requires err to be kind, with the position and a
// recovery in its message, and no other kind.
func checkStreamError(t *testing.T, err, kind error) *consumer.StreamError {
	t.Helper()
	var se *consumer.StreamError
	if !errors.Is(err, kind) || !errors.As(err, &se) {
		t.Fatalf("error %v, want a *consumer.StreamError matching %v", err, kind)
	}
	for _, k := range []error{consumer.ErrGap, consumer.ErrPastRetention, consumer.ErrCorrupt} {
		if k != kind && errors.Is(err, k) {
			t.Errorf("error matches %v as well as %v", k, kind)
		}
	}
	if !strings.Contains(err.Error(), se.Position.String()) || !strings.Contains(err.Error(), "offset") || !strings.Contains(err.Error(), "recovery: ") {
		t.Errorf("message %q does not name the position and the recovery", err)
	}
	return se
}

func TestLocalLogCorruptSegmentIsErrCorrupt(t *testing.T) {
	dir, segs := segmentedLog(t, 60)
	b, err := os.ReadFile(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(segs[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := readAll(t, dir)
	t.Logf("read %d units; %v", n, err)
	checkStreamError(t, err, consumer.ErrCorrupt)
}

func TestLocalLogDamagedEnvelopeIsErrCorrupt(t *testing.T) {
	dir, l, _ := writeLog(t, 2)
	b, _ := envelope.Encode(envelopetest.Random(rand.New(rand.NewPCG(1, 1)), "src", 0x900))
	b[len(b)/2] ^= 1
	if _, err := l.Append(b); err != nil {
		t.Fatal(err)
	}
	n, err := readAll(t, dir)
	se := checkStreamError(t, err, consumer.ErrCorrupt)
	var de *consumer.DecodeError
	if n != 2 || se.Position.Offset != 2 || !errors.As(err, &de) || se.Position.LSN == 0 {
		t.Fatalf("read %d, error at %+v (%v), want *DecodeError at offset 2 after two units", n, se.Position, err)
	}
}

// A sealed segment deleted from the middle of the log: segmentlog sees
// the segment before it end short of the next one's base, which is
// acknowledged data missing, so the consumer reports it as ErrCorrupt at
// the first missing offset (with the restore-or-rebuild recovery) and
// never hands out the units after it.
func TestLocalLogDeletedSegmentIsNotSkipped(t *testing.T) {
	dir, segs := segmentedLog(t, 60)
	if err := os.Remove(segs[2]); err != nil {
		t.Fatal(err)
	}
	base, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(segs[2]), ".seg"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	n, err := readAll(t, dir)
	se := checkStreamError(t, err, consumer.ErrCorrupt)
	if uint64(n) != base || se.Position.Offset != base {
		t.Fatalf("read %d units, error at offset %d, want both %d (the deleted segment's base): %v", n, se.Position.Offset, base, err)
	}
}

func TestLocalLogPastRetentionIsErrPastRetention(t *testing.T) {
	dir, segs := segmentedLog(t, 60)
	// A registered cursor at 0, then the oldest segment gone.
	l, _, err := segmentlog.Open(dir, segmentlog.Options{SegmentBytesMax: 4 << 10, IndexIntervalBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CommitCursor("app", 0); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := os.Remove(segs[0]); err != nil {
		t.Fatal(err)
	}
	c, err := consumer.Open(dir, "app", consumer.Options{})
	if err == nil {
		defer c.Close()
		_, err = c.Next(context.Background())
	}
	t.Logf("%v", err)
	checkStreamError(t, err, consumer.ErrPastRetention)
}
