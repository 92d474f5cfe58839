package segmentlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// readOnlyPollInterval bounds how long a read-only log waits before it
// looks at the durable end again when no change notification arrived
// (inotify is missing, or the directory is on a filesystem that does not
// report another host's writes). With inotify, new data wakes readers at
// once; this is the fallback, not the mechanism.
const readOnlyPollInterval = time.Second

// ErrReadOnly is returned by the writing methods of a Log opened with
// OpenReadOnly.
var ErrReadOnly = errors.New("segmentlog: log is open read-only")

// ErrNoDurableEnd means the directory holds no durable-end record: no
// writer of this format version has opened it yet.
var ErrNoDurableEnd = errors.New("segmentlog: the log has no published durable end")

// OpenReadOnly opens the log in dir for reading while another process
// (the writer, which holds the directory's lock) appends to it. It takes
// no lock and never modifies a segment: it reads only up to the durable
// end the writer publishes after each fsync (see durable.go), so it never
// sees a torn or unsynced tail, and it follows that end through inotify
// on the directory, with a bounded poll as the fallback.
//
// Readers (NewReader, NewCursorReader) work as on a writer's log.
// CommitCursor registers and moves this process's own cursors on disk,
// where the writer's retention reads them. Append, ApplyRetention,
// ResetCursor and DeleteCursor return ErrReadOnly. Sealed segments are
// read without their offset index, so positioning a reader costs a scan
// of frame headers from the start of its segment.
func OpenReadOnly(dir string, opts Options) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Log{
		dir:         dir,
		opts:        o,
		fs:          o.FS,
		logger:      o.Logger,
		readOnly:    true,
		closing:     make(chan struct{}),
		flusherDone: make(chan struct{}),
		notify:      make(chan struct{}),
		cursors:     make(map[string]*cursorState),
	}
	if err := l.refresh(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s: %v; the writer publishes it when it opens the log, so the writer has to open it once",
				ErrNoDurableEnd, dir, err)
		}
		return nil, err
	}
	if err := l.loadCursors(); err != nil {
		return nil, err
	}
	if l.watcher, err = newDirWatcher(dir); err != nil {
		l.logger.Info("segmentlog: no change notifications; polling for new data", "dir", dir, "interval", readOnlyPollInterval, "err", err)
		l.watcher = nil
	}
	go l.watch()
	return l, nil
}

// WriterPID returns the PID of the process that holds dir for writing, or
// 0 when no live process does. It reads the PID the writer recorded in its
// lock file and asks the kernel whether that process exists; it takes no
// lock and changes nothing, so it can never make a starting writer fail.
// A writer killed with SIGKILL leaves its PID behind, so a PID reused by
// an unrelated process reads as a writer: use the answer to describe, not
// to decide what may be written.
func WriterPID(dir string) int {
	pid := lockHolder(OSFS{}, filepath.Join(dir, lockFileName))
	if pid <= 0 {
		return 0
	}
	if err := unix.Kill(pid, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return 0
	}
	return pid
}

// ReadOnly reports whether l was opened with OpenReadOnly.
func (l *Log) ReadOnly() bool { return l.readOnly }

// refresh reads the writer's durable end and the directory, and publishes
// what is new to readers. Only OpenReadOnly and the watch goroutine call
// it, one at a time.
func (l *Log) refresh() error {
	d, err := readDurable(l.fs, l.dir)
	if err != nil {
		return err
	}
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("segmentlog: read directory %s: %w", l.dir, err)
	}
	var bases []uint64
	for _, name := range names {
		if !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		// Segments after the published active one may exist (a roll
		// happened after the record was written); they hold nothing
		// durable that the record names yet.
		if base, ok := parseBaseName(name, segmentSuffix); ok && base <= d.activeBase {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	if len(bases) == 0 || bases[len(bases)-1] != d.activeBase {
		// The writer rolled and retention removed the recorded segment
		// between our two reads: the record is stale, the next event or
		// poll brings a fresh one.
		return fmt.Errorf("segmentlog: %s: durable end names segment %s, which is not in the directory", l.dir, segmentName(d.activeBase))
	}

	l.mu.Lock()
	if d.next < l.next {
		// An older record (a power loss lost the newest one before the
		// writer reopened): never move readers backwards.
		l.mu.Unlock()
		return nil
	}
	known := make(map[uint64]*segment, len(l.segs))
	for _, s := range l.segs {
		known[s.base] = s
	}
	l.mu.Unlock()

	// A sealed segment is complete: its size on disk is its committed
	// size. Stat it once, outside the lock, when it becomes sealed.
	sealedSize := map[uint64]int64{}
	for i, base := range bases[:len(bases)-1] {
		if s := known[base]; s != nil && s != l.roActive && s.end == bases[i+1] {
			continue
		}
		path := filepath.Join(l.dir, segmentName(base))
		f, err := l.fs.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed by retention meanwhile
			}
			return fmt.Errorf("segmentlog: open %s: %w", path, err)
		}
		size, err := f.Size()
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("segmentlog: stat %s: %w", path, err)
		}
		sealedSize[base] = size
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	segs := make([]*segment, 0, len(bases))
	for i, base := range bases {
		s := known[base]
		if s == nil {
			s = &segment{base: base, path: filepath.Join(l.dir, segmentName(base))}
		}
		if base == d.activeBase {
			s.size, s.end = d.activeSize, d.next
			l.roActive = s
		} else if size, ok := sealedSize[base]; ok {
			s.size, s.end = size, bases[i+1]
		} else if s.size == 0 {
			continue // vanished before we could size it
		}
		segs = append(segs, s)
	}
	changed := d.next != l.next || len(segs) != len(l.segs) || (len(l.segs) > 0 && segs[0] != l.segs[0])
	l.segs, l.next = segs, d.next
	if changed {
		l.wakeLocked()
	}
	return nil
}

// watch refreshes the read-only view whenever the writer publishes a new
// durable end or changes the directory, and at least every
// readOnlyPollInterval, until Close.
func (l *Log) watch() {
	defer close(l.flusherDone)
	w := l.watcher
	if w != nil {
		defer w.close()
	}
	var lastErr string
	for {
		if w != nil {
			if err := w.wait(readOnlyPollInterval); err != nil {
				l.logger.Info("segmentlog: change notifications failed; polling for new data", "dir", l.dir, "err", err)
				w = nil // closed by the deferred close, after Close's interrupt
			}
		} else {
			t := time.NewTimer(readOnlyPollInterval)
			select {
			case <-t.C:
			case <-l.closing:
				t.Stop()
			}
		}
		select {
		case <-l.closing:
			return
		default:
		}
		if err := l.refresh(); err != nil {
			// Readers keep what they have and wait; say so once per cause.
			if msg := err.Error(); msg != lastErr {
				l.logger.Warn("segmentlog: cannot read the writer's durable end; readers wait", "dir", l.dir, "err", err)
				lastErr = msg
			}
		} else {
			lastErr = ""
		}
	}
}

// closeReadOnly stops the watcher.
func (l *Log) closeReadOnly() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.closing)
	l.mu.Unlock()
	if l.watcher != nil {
		l.watcher.interrupt()
	}
	<-l.flusherDone
	return nil
}

// oldestOnDisk is the base offset of the oldest segment in the directory.
// The caller holds the cursor lock, under which the writer's retention
// removes segments, so the answer holds until it is released.
func (l *Log) oldestOnDisk() (uint64, error) {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return 0, fmt.Errorf("segmentlog: read directory %s: %w", l.dir, err)
	}
	oldest, found := uint64(0), false
	for _, name := range names {
		if !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		if base, ok := parseBaseName(name, segmentSuffix); ok && (!found || base < oldest) {
			oldest, found = base, true
		}
	}
	if !found {
		return 0, fmt.Errorf("segmentlog: %s holds no segment", l.dir)
	}
	return oldest, nil
}

// HoldWriterLock takes the log directory's writer lock without opening the
// log: no repair, no write, no file created or changed (the lock file must
// exist, as it does once a writer has opened the log). While it is held no
// writer can open the log, so a read-only reader sees a log at rest that
// cannot move. It returns a *LockedError naming the writer's PID when one
// holds the log, and an error wrapping fs.ErrNotExist when no writer ever
// opened it.
func HoldWriterLock(dir string) (io.Closer, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("segmentlog: lock %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &LockedError{Dir: dir, PID: lockHolder(OSFS{}, path)}
		}
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	return f, nil
}
