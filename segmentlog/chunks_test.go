package segmentlog

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellara/trellara/segmentlog/segmentlogtest"
)

// TestCrashMidChunks cuts the segment at every byte inside a chunked entry,
// as a crash between (or inside) its write calls would: the entry
// disappears whole, its offset is reused, and offsets stay dense.
func TestCrashMidChunks(t *testing.T) {
	m := segmentlogtest.NewFS()
	opts := Options{FrameBytesMax: 64, FS: m}
	l := mustOpen(t, memDir, opts)
	first := []byte("before the big one")
	mustAppend(t, l, first)
	big := payloadFor(5, 0, 300) // 5 chunks + manifest
	mustAppend(t, l, big)
	l.Close()
	seg := memDir + "/" + segmentName(0)
	full := m.Bytes(seg)
	start := int64(segmentHeaderSize + frameHeaderSize + len(first))

	for cut := start; cut < int64(len(full)); cut++ {
		img := m.CrashImage(nil)
		img.SetBytes(seg, full[:cut])
		o := opts
		o.FS = img
		l, rep, err := Open(memDir, o)
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", cut, err)
		}
		if (rep == nil) != (cut == start) || (rep != nil && (rep.Position != start || rep.NextOffset != 1)) {
			t.Fatalf("cut at %d: report %v", cut, rep)
		}
		got := readAll(t, l, 0)
		if len(got) != 1 || !bytes.Equal(got[0], first) {
			t.Fatalf("cut at %d: %d entries visible, want only the first", cut, len(got))
		}
		if off := mustAppend(t, l, []byte("next")); off != 1 {
			t.Fatalf("cut at %d: next append got offset %d, want 1", cut, off)
		}
		l.Close()
	}
}

// TestHalfWrittenEntryInvisible holds the flusher in the middle of writing
// a chunked entry: a tailing reader must not see any of it until the
// whole entry is durable.
func TestHalfWrittenEntryInvisible(t *testing.T) {
	m := segmentlogtest.NewFS()
	opts := Options{FrameBytesMax: 64, FS: m, writeChunkBytes: 100}
	l := mustOpen(t, memDir, opts)
	defer l.Close()

	release := make(chan struct{})
	blocked := make(chan struct{})
	var once sync.Once
	writes := 0
	m.SetHooks(segmentlogtest.Hooks{Write: func(path string, p []byte) (int, error) {
		if strings.HasSuffix(path, segmentSuffix) {
			if writes++; writes == 2 {
				// Hooks run outside the filesystem's lock: only
				// this write waits, the reader does not.
				once.Do(func() { close(blocked) })
				<-release
			}
		}
		return len(p), nil
	}})
	big := payloadFor(6, 0, 1000)
	appended := make(chan error, 1)
	go func() { _, err := l.Append(big); appended <- err }()
	<-blocked

	r := l.NewReader(0)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, _, err := r.Next(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reader saw something of a half-written entry: %v", err)
	}
	close(release)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	off, p, err := nextCtx(r)
	if err != nil || off != 0 || !bytes.Equal(p, big) {
		t.Fatalf("after commit: %d, %d bytes, %v", off, len(p), err)
	}
}
