package segmentlog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/trellara/trellara/segmentlog/segmentlogtest"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// Environment of the reader child: the test binary re-executed as a
// read-only process next to a writer in the test process.
const (
	readerChildModeEnv = "TRELLARA_SEGMENTLOG_READER_MODE"
	readerChildDirEnv  = "TRELLARA_SEGMENTLOG_READER_DIR"
	readerChildArgEnv  = "TRELLARA_SEGMENTLOG_READER_ARG"
)

// readerChild is a read-only process. Modes:
//
//	tail:   prints "ready", then "e <offset> <xxh3 of payload>" for every
//	        entry from offset 0 as it appears; on the stdin line "refresh"
//	        it rereads the durable end and prints "next <NextOffset>";
//	        stdin EOF ends it.
//	commit: commits cursor "ext" at the offset in $READER_ARG, prints "ok".
//	writer: opens the log for writing, prints "ready", holds it until
//	        stdin EOF.
func readerChild(mode, dir string) int {
	fail := func(err error) int { fmt.Println("error", err); return 1 }
	switch mode {
	case "writer":
		l, _, err := Open(dir, Options{})
		if err != nil {
			return fail(err)
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return exitCode(l.Close())
	case "commit":
		l, err := OpenReadOnly(dir, Options{})
		if err != nil {
			return fail(err)
		}
		off, _ := strconv.ParseUint(os.Getenv(readerChildArgEnv), 10, 64)
		if err := l.CommitCursor("ext", off); err != nil {
			return fail(err)
		}
		fmt.Println("ok")
		return exitCode(l.Close())
	case "tail":
		l, err := OpenReadOnly(dir, Options{})
		if err != nil {
			return fail(err)
		}
		var mu sync.Mutex // one line at a time on stdout
		say := func(format string, a ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf(format+"\n", a...)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int)
		go func() {
			r := l.NewReader(0)
			defer r.Close()
			for {
				off, p, err := r.Next(ctx)
				if err != nil {
					if ctx.Err() != nil {
						done <- 0
						return
					}
					say("error %v", err)
					done <- 1
					return
				}
				say("e %d %d", off, xxh3.Hash(p))
			}
		}()
		say("ready")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "refresh" {
				if err := l.refresh(); err != nil {
					say("error %v", err)
					continue
				}
				say("next %d", l.NextOffset())
			}
		}
		cancel()
		code := <-done
		if err := l.Close(); err != nil {
			return 1
		}
		return code
	}
	return fail(fmt.Errorf("unknown mode %q", mode))
}

func exitCode(err error) int {
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	return 0
}

// child is a running reader child with line-wise access to its output.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startReaderChild(t *testing.T, mode, dir, arg string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), readerChildModeEnv+"="+mode, readerChildDirEnv+"="+dir, readerChildArgEnv+"="+arg)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1<<16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	return c
}

// expect reads lines until one starts with prefix (failing on "error"),
// handing every other line to other.
func (c *child) expect(t *testing.T, prefix string, other func(string)) string {
	t.Helper()
	for line := range c.lines {
		switch {
		case strings.HasPrefix(line, prefix):
			return line
		case strings.HasPrefix(line, "error"):
			t.Fatalf("reader process: %s", line)
		default:
			if other == nil {
				t.Fatalf("reader process: unexpected line %q while waiting for %q", line, prefix)
			}
			other(line)
		}
	}
	t.Fatalf("reader process ended before printing %q", prefix)
	return ""
}

// syncFailFS is the operating system's filesystem whose segment fsyncs
// fail on demand after the data was written: the bytes sit in the page
// cache, visible to every process, but were never made durable.
type syncFailFS struct {
	OSFS
	fail *atomic.Bool
}

func (s syncFailFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := s.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, segmentSuffix) {
		return f, err
	}
	return syncFailFile{f, s.fail}, nil
}

type syncFailFile struct {
	File
	fail *atomic.Bool
}

func (f syncFailFile) Sync() error {
	if f.fail.Load() {
		return errors.New("injected fdatasync failure (EIO)")
	}
	return f.File.Sync()
}

// TestReaderProcessStopsAtDurableEnd runs a reader in another process
// while this process appends, then makes one commit group's fsync fail
// after its bytes reached the file. The reader must see exactly the
// acknowledged entries, with their payloads, and never the unsynced one.
func TestReaderProcessStopsAtDurableEnd(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	var fail atomic.Bool
	opts := Options{SegmentBytesMax: 16 << 10, FrameBytesMax: 1 << 10, FS: syncFailFS{fail: &fail}}
	l := mustOpen(t, dir, opts)
	defer l.Close()

	c := startReaderChild(t, "tail", dir, "")
	c.expect(t, "ready", nil)

	const writers, perWriter = 4, 100
	var mu sync.Mutex
	acked := map[uint64]uint64{} // offset -> xxh3 of payload
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				p := payloadFor(seed, w*perWriter+i, 1+(w*perWriter+i)%3000)
				off, err := l.Append(p)
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				mu.Lock()
				acked[off] = xxh3.Hash(p)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	end := l.NextOffset()

	fail.Store(true)
	if _, err := l.Append(payloadFor(seed, -1, 500)); !errors.Is(err, ErrMustReopen) {
		t.Fatalf("append with failing fsync: got %v, want a fatal error", err)
	}
	// The test only means something if the unsynced frame is in the file.
	d, err := readDurable(OSFS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, segmentName(d.activeBase)))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() <= d.activeSize || d.next != end {
		t.Fatalf("durable end %+v, file %d bytes, log end %d: want unsynced bytes after the durable end", d, st.Size(), end)
	}

	seen := map[uint64]bool{}
	check := func(line string) {
		var off, sum uint64
		if _, err := fmt.Sscanf(line, "e %d %d", &off, &sum); err != nil {
			t.Fatalf("reader process: %q: %v", line, err)
		}
		want, ok := acked[off]
		if !ok {
			t.Fatalf("reader process read offset %d, which was never acknowledged (log end %d)", off, end)
		}
		if sum != want {
			t.Fatalf("reader process read offset %d with checksum %d, appended %d", off, sum, want)
		}
		seen[off] = true
	}
	if _, err := io.WriteString(c.stdin, "refresh\n"); err != nil {
		t.Fatal(err)
	}
	line := c.expect(t, "next ", check)
	if line != fmt.Sprintf("next %d", end) {
		t.Fatalf("reader process: %q after the failed fsync, want the durable end %d", line, end)
	}
	for uint64(len(seen)) < end {
		line, ok := <-c.lines
		if !ok {
			t.Fatalf("reader process ended after %d of %d entries", len(seen), end)
		}
		check(line)
	}
	_ = c.stdin.Close()
	for line := range c.lines {
		check(line)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("reader process: %v", err)
	}
}

// TestSecondWriterRefused: a second writer is refused with the directory
// and the writer's PID named, while read-only opens succeed next to the
// writer and change nothing in the directory.
//
// Mutation tried: not calling recordHolder in Open turns it red (PID 0).
func TestSecondWriterRefused(t *testing.T) {
	dir := t.TempDir()
	c := startReaderChild(t, "writer", dir, "")
	c.expect(t, "ready", nil)
	before := dirDigest(t, dir)
	_, _, err := Open(dir, Options{})
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) || !errors.As(err, &le) || le.PID != c.cmd.Process.Pid ||
		!strings.Contains(err.Error(), fmt.Sprintf("process %d", c.cmd.Process.Pid)) {
		t.Fatalf("second writer: got %v, want ErrLocked naming %s and process %d", err, dir, c.cmd.Process.Pid)
	}
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatalf("read-only open next to a writer: %v", err)
	}
	if _, err := ro.Append([]byte("x")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("append on a read-only log: got %v, want ErrReadOnly", err)
	}
	if _, err := ro.ApplyRetention(time.Now()); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("retention on a read-only log: got %v, want ErrReadOnly", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if d := diffDigest(before, dirDigest(t, dir)); d != "" {
		t.Fatalf("a refused writer and a read-only open beside the writer changed the directory: %s", d)
	}
}

// TestReaderCursorHoldsRetention: a cursor that a read-only process
// commits is kept by the writer's retention, and once retention expires
// it, that process can no longer move it over the gap.
func TestReaderCursorHoldsRetention(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	opts := Options{SegmentBytesMax: 4 << 10, IndexIntervalBytes: 1 << 10, Retention: Retention{MaxBytes: 1}}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	for i := range 200 {
		if _, err := l.Append(payloadFor(seed, i, 300)); err != nil {
			t.Fatal(err)
		}
	}
	const hold = 5
	c := startReaderChild(t, "commit", dir, strconv.Itoa(hold))
	c.expect(t, "ok", nil)
	rep, err := l.ApplyRetention(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstOffset > hold {
		t.Fatalf("retention removed up to offset %d although consumer %q of another process is at %d", rep.FirstOffset, "ext", hold)
	}
	if off, ok, err := l.CursorOffset("ext"); err != nil || !ok || off != hold {
		t.Fatalf("writer sees cursor ext at %d (registered %v, %v), want %d", off, ok, err, hold)
	}

	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.CommitCursor("ext", hold+1); err != nil {
		t.Fatal(err)
	}
	l.opts.Retention.Expire = true
	if _, err := l.ApplyRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	var pr *PastRetentionError
	if err := ro.CommitCursor("ext", hold+2); !errors.As(err, &pr) {
		t.Fatalf("commit after retention expired the cursor: got %v, want *PastRetentionError", err)
	}
}

// A reader process rewinds its own cursor (an applier whose target lost
// commits goes back to its checkpoint), within the segments still on disk:
// below the oldest one it is refused even when its view is stale.
func TestReaderResetsItsOwnCursor(t *testing.T) {
	seed := testSeed(t)
	// The simulated filesystem sends no change notifications, so the
	// reader's view stays as it was until its next poll: stale on purpose.
	m := segmentlogtest.NewFS()
	dir := memDir
	opts := memOpts(m)
	opts.SegmentBytesMax, opts.IndexIntervalBytes, opts.Retention = 4<<10, 1<<10, Retention{MaxBytes: 1}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	for i := range 200 {
		if _, err := l.Append(payloadFor(seed, i, 300)); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := OpenReadOnly(dir, memOpts(m))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.CommitCursor("sink", 150); err != nil {
		t.Fatal(err)
	}
	if err := ro.ResetCursor("sink", 20); err != nil {
		t.Fatalf("a reader rewinding its own cursor within the log: %v", err)
	}
	// The file on disk says 20: moving back to 19 is a regression, 21 is
	// forward (commits read the file under the cursor lock).
	if err := ro.CommitCursor("sink", 19); !errors.Is(err, ErrCursorRegress) {
		t.Fatalf("commit below the reset cursor: got %v, want ErrCursorRegress", err)
	}
	if err := ro.CommitCursor("sink", 21); err != nil {
		t.Fatalf("commit after the reset: %v", err)
	}
	// Retention past the cursor (expiring it), then a rewind below what
	// is left on disk: the reader's view still lists the old segments.
	if err := ro.CommitCursor("sink", 190); err != nil {
		t.Fatal(err)
	}
	rep, err := l.ApplyRetention(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstOffset <= 20 {
		t.Fatalf("retention kept offset 20 (first %d); the test needs it gone", rep.FirstOffset)
	}
	if err := ro.ResetCursor("sink", 20); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("rewind below the oldest segment on disk: got %v, want ErrOutOfRange", err)
	}
}
