package segmentlog

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellara/trellara/segmentlog/segmentlogtest"
)

const memDir = "/log"

func memOpts(m *segmentlogtest.FS) Options {
	o := smallOpts()
	o.FS = m
	return o
}

func TestFaultShortWriteIsUndone(t *testing.T) {
	m := segmentlogtest.NewFS()
	l := mustOpen(t, memDir, memOpts(m))
	defer l.Close()
	var want [][]byte
	for i := range 3 {
		p := payloadFor(1, i, 100)
		mustAppend(t, l, p)
		want = append(want, p)
	}
	seg := memDir + "/" + segmentName(0)
	before := m.Bytes(seg)
	m.SetSpace(50)
	_, err := l.Append(make([]byte, 300))
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrMustReopen) {
		t.Fatalf("Append with a short write = %v, want a non-fatal ENOSPC", err)
	}
	if after := m.Bytes(seg); !bytes.Equal(after, before) {
		t.Fatalf("partial write left %d bytes behind", len(after)-len(before))
	}
	m.SetSpace(-1)
	p := payloadFor(1, 3, 100)
	if off := mustAppend(t, l, p); off != 3 {
		t.Fatalf("append after the failure got offset %d, want 3 (dense)", off)
	}
	want = append(want, p)
	checkEntries(t, readAll(t, l, 0), want)

	l2 := mustOpen(t, memDir, memOpts(m.CrashImage(nil)))
	defer l2.Close()
	checkEntries(t, readAll(t, l2, 0), want)
}

func TestFaultENOSPCWhenRolling(t *testing.T) {
	m := segmentlogtest.NewFS()
	l := mustOpen(t, memDir, memOpts(m))
	defer l.Close()
	m.SetHooks(segmentlogtest.Hooks{Create: func(path string) error {
		if strings.HasSuffix(path, segmentSuffix+tmpSuffix) {
			return syscall.ENOSPC
		}
		return nil
	}})
	var want [][]byte
	var err error
	for i := 0; err == nil; i++ {
		p := payloadFor(2, i, 900)
		if _, err = l.Append(p); err == nil {
			want = append(want, p)
		}
	}
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrMustReopen) {
		t.Fatalf("Append needing a new segment = %v, want a non-fatal ENOSPC", err)
	}
	m.SetHooks(segmentlogtest.Hooks{})
	for i := range 10 {
		p := payloadFor(3, i, 900)
		if off := mustAppend(t, l, p); off != uint64(len(want)) {
			t.Fatalf("offset %d after ENOSPC cleared, want %d", off, len(want))
		}
		want = append(want, p)
	}
	checkEntries(t, readAll(t, l, 0), want)
	l2 := mustOpen(t, memDir, memOpts(m.CrashImage(nil)))
	defer l2.Close()
	checkEntries(t, readAll(t, l2, 0), want)
}

func TestFaultFsyncFailureIsFatal(t *testing.T) {
	for _, target := range []string{"segment", "directory", "cursor"} {
		t.Run(target, func(t *testing.T) {
			m := segmentlogtest.NewFS()
			l := mustOpen(t, memDir, memOpts(m))
			var want [][]byte
			for i := range 5 {
				p := payloadFor(4, i, 500)
				mustAppend(t, l, p)
				want = append(want, p)
			}
			r := l.NewReader(0)
			defer r.Close()
			eio := syscall.EIO
			var err error
			switch target {
			case "segment":
				m.SetHooks(segmentlogtest.Hooks{Sync: func(p string) error {
					if strings.HasSuffix(p, segmentSuffix) {
						return eio
					}
					return nil
				}})
				_, err = l.Append([]byte("doomed"))
			case "directory":
				m.SetHooks(segmentlogtest.Hooks{SyncDir: func(string) error { return eio }})
				for err == nil { // until a roll needs the directory synced
					_, err = l.Append(make([]byte, 900))
				}
			case "cursor":
				m.SetHooks(segmentlogtest.Hooks{Sync: func(p string) error {
					if strings.Contains(p, cursorSuffix) {
						return eio
					}
					return nil
				}})
				err = l.CommitCursor("c", 2)
			}
			var fe *FatalError
			if !errors.As(err, &fe) || !errors.Is(err, ErrMustReopen) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("got %v, want a *FatalError wrapping EIO", err)
			}
			if !strings.Contains(err.Error(), "reopen") {
				t.Fatalf("fatal error does not say to reopen: %v", err)
			}
			// Every later call fails the same way: no retry-and-pretend.
			m.SetHooks(segmentlogtest.Hooks{})
			calls := map[string]error{}
			_, calls["Append"] = l.Append([]byte("after"))
			calls["CommitCursor"] = l.CommitCursor("c", 1)
			_, _, calls["CursorOffset"] = l.CursorOffset("c")
			_, calls["ApplyRetention"] = l.ApplyRetention(time.Now())
			_, _, calls["Reader.Next"] = nextCtx(r)
			for name, err := range calls {
				if !errors.Is(err, ErrMustReopen) {
					t.Errorf("%s after a failed fsync = %v, want the fatal error", name, err)
				}
			}
			l.Close()
			// What was acknowledged before the failure survives a crash.
			l2, _, err := Open(memDir, memOpts(m.CrashImage(nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			got := readAll(t, l2, 0)
			if len(got) < len(want) {
				t.Fatalf("%d entries after crash, want at least the %d acknowledged", len(got), len(want))
			}
			checkEntries(t, got[:len(want)], want)
		})
	}
}

func TestFaultTornCopyFailureLeavesSegmentAlone(t *testing.T) {
	m := segmentlogtest.NewFS()
	l := mustOpen(t, memDir, memOpts(m))
	mustAppend(t, l, []byte("one"))
	l.Close()
	seg := memDir + "/" + segmentName(0)
	damaged := append(m.Bytes(seg), 1, 2, 3)
	m.SetBytes(seg, damaged)
	m.SetHooks(segmentlogtest.Hooks{Create: func(p string) error {
		if strings.Contains(p, tornInfix) {
			return syscall.ENOSPC
		}
		return nil
	}})
	if _, _, err := Open(memDir, memOpts(m)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Open = %v, want ENOSPC from the torn copy", err)
	}
	if !bytes.Equal(m.Bytes(seg), damaged) {
		t.Fatal("segment was truncated although its torn bytes could not be kept")
	}
	m.SetHooks(segmentlogtest.Hooks{})
	l, rep, err := Open(memDir, memOpts(m))
	if err != nil || rep == nil || rep.BytesDropped != 3 {
		t.Fatalf("retry: %v %v", rep, err)
	}
	l.Close()
}

// TestSimulatedPowerLoss runs concurrent writers against segmentlogtest.FS and takes
// crash images (only synced bytes and synced directory entries) at random
// moments: every append acknowledged before the image is in it.
func TestSimulatedPowerLoss(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	iterations := 20
	if testing.Short() {
		iterations = 8
	}
	repairs := 0
	for it := range iterations {
		m := segmentlogtest.NewFS()
		opts := Options{SegmentBytesMax: 8 << 10, FrameBytesMax: 700, IndexIntervalBytes: 512, FS: m}
		l := mustOpen(t, memDir, opts)
		var ackMu sync.Mutex
		acked := map[uint64][]byte{}
		var image *segmentlogtest.FS
		var snapshot map[uint64][]byte
		imageAt := 1 + rng.IntN(40)
		imageTaken := make(chan struct{})
		syncs := 0
		// The crash image is taken inside an fsync of a segment, the
		// moment when unsynced bytes are most likely to be in flight.
		m.SetHooks(segmentlogtest.Hooks{Sync: func(path string) error {
			if !strings.HasSuffix(path, segmentSuffix) {
				return nil
			}
			if syncs++; syncs == imageAt {
				image = m.CrashImage(rng)
				ackMu.Lock()
				snapshot = maps.Clone(acked)
				ackMu.Unlock()
				close(imageTaken)
			}
			return nil
		}})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					p := payloadFor(seed, it<<20|w<<16|i, []int{10, 300, 1500, 3000}[(w+i)%4])
					off, err := l.Append(p)
					if err != nil {
						return
					}
					ackMu.Lock()
					acked[off] = p
					ackMu.Unlock()
				}
			})
		}
		<-imageTaken
		cancel()
		wg.Wait()
		l.Close()

		opts.FS = image
		l2, rep, err := Open(memDir, opts)
		if err != nil {
			t.Fatalf("iteration %d: Open after power loss: %v", it, err)
		}
		if rep != nil {
			repairs++
			t.Logf("iteration %d: %v", it, rep)
		}
		got := readAll(t, l2, 0)
		for off, p := range snapshot {
			if off >= uint64(len(got)) || !bytes.Equal(got[off], p) {
				t.Fatalf("iteration %d: acknowledged offset %d lost or changed (log has %d entries)", it, off, len(got))
			}
		}
		l2.Close()
	}
	t.Logf("%d of %d crash images needed a torn-tail repair", repairs, iterations)
}
