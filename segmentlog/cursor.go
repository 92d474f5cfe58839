package segmentlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// cursorNameBytesMax bounds cursor names; they become file names.
const cursorNameBytesMax = 128

// cursorLockFileName is the lock file (in the log directory) that
// serialises cursor updates across processes.
const cursorLockFileName = "CURSORS.LOCK"

// cursorState is a cursor in memory. offset is the next offset the
// consumer will read: everything below it has been processed.
type cursorState struct {
	offset        uint64
	pastRetention bool
	// segBase and pos locate offset in the log, for lag in bytes.
	segBase uint64
	pos     int64
}

func validCursorName(name string) error {
	if name == "" || len(name) > cursorNameBytesMax || name[0] == '.' {
		return fmt.Errorf("%w: %q (1 to %d characters, not starting with '.')", ErrInvalidCursorName, name, cursorNameBytesMax)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q (allowed characters are A-Z a-z 0-9 . _ -)", ErrInvalidCursorName, name)
		}
	}
	return nil
}

func (l *Log) cursorPath(name string) string {
	return filepath.Join(l.dir, cursorDirName, name+cursorSuffix)
}

// CommitCursor durably records that consumer name has processed every
// offset below offset; a restart resumes exactly at offset. The first
// commit registers the cursor, and from then on retention keeps what it
// still needs (unless Retention.Expire). Cursors only move forward:
// a smaller offset returns ErrCursorRegress and changes nothing, the same
// offset is a no-op, and offset may not exceed NextOffset.
//
// It works the same on a read-only log: the cursor file is the truth and
// is read, checked and replaced under the directory's cursor lock, so a
// commit in one process and retention expiring the cursor in the writer
// never overwrite each other.
func (l *Log) CommitCursor(name string, offset uint64) error {
	if err := validCursorName(name); err != nil {
		return err
	}
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	unlock, err := l.lockCursors()
	if err != nil {
		return err
	}
	defer unlock()
	cur, registered, err := l.readCursor(name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	err = l.usableLocked()
	next, first := l.next, l.segs[0].base
	l.mu.Unlock()
	switch {
	case err != nil:
		return err
	case registered && cur.pastRetention:
		return &PastRetentionError{Consumer: name, Offset: cur.offset, FirstOffset: first}
	case registered && offset < cur.offset:
		return fmt.Errorf("%w: cursor %q is at offset %d; refusing to move it to %d", ErrCursorRegress, name, cur.offset, offset)
	case registered && offset == cur.offset:
		return nil
	case offset > next:
		return fmt.Errorf("%w: cannot commit cursor %q at offset %d: the log ends at %d", ErrOutOfRange, name, offset, next)
	case offset < first:
		return &PastRetentionError{Consumer: name, Offset: offset, FirstOffset: first}
	}
	return l.storeCursor(name, cursorRecord{offset: offset})
}

// cursorLockWait bounds how long a cursor operation waits for another
// process's cursor operation (which holds the lock for one small file
// write, or the writer's retention for a few file removals).
const cursorLockWait = 10 * time.Second

// lockCursors takes the directory's cursor lock (CURSORS.LOCK, flock),
// which serialises every read-check-replace of a cursor file across the
// writer and all read-only processes. Without it a reader's commit could
// overwrite the past-retention mark that the writer's retention wrote just
// before removing the segments the cursor needed.
func (l *Log) lockCursors() (func(), error) {
	path := filepath.Join(l.dir, cursorLockFileName)
	deadline := time.Now().Add(cursorLockWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		c, err := l.fs.Lock(path)
		if err == nil {
			return func() { _ = c.Close() }, nil
		}
		if !errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("segmentlog: lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("segmentlog: lock %s: another process held it for more than %s; look for a stuck process using %s", path, cursorLockWait, l.dir)
		}
		time.Sleep(wait)
	}
}

// readCursor reads cursor name from disk; registered is false when it has
// no file. Caller holds the cursor lock.
func (l *Log) readCursor(name string) (rec cursorRecord, registered bool, err error) {
	path := l.cursorPath(name)
	b, err := readFileBounded(l.fs, path, cursorFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return cursorRecord{}, false, nil
	}
	if err != nil && !errors.Is(err, errFileTooLarge) {
		return cursorRecord{}, false, fmt.Errorf("segmentlog: read cursor %s: %w", path, err)
	}
	if err == nil {
		rec, err = decodeCursor(b)
	}
	if err != nil {
		return cursorRecord{}, false, &CorruptionError{Path: path, Reason: err.Error() + fmt.Sprintf(" (the cursor of consumer %q)", name)}
	}
	return rec, true, nil
}

// ResetCursor moves cursor name to offset in either direction, clears its
// past-retention mark and registers it if needed. It is a recovery
// primitive (`trellara reseed --all-tables` for a sink past retention), not something a
// consumer calls in normal operation. offset must lie within [FirstOffset, NextOffset].
//
// A read-only log may reset a cursor too (the consumer's own), within the
// segments still on disk and its view of the durable end.
func (l *Log) ResetCursor(name string, offset uint64) error {
	if err := validCursorName(name); err != nil {
		return err
	}
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	unlock, err := l.lockCursors()
	if err != nil {
		return err
	}
	defer unlock()
	l.mu.Lock()
	err = l.usableLocked()
	next, first := l.next, l.segs[0].base
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if l.readOnly {
		// A reader process resets only its own cursor (an applier
		// rewinding to its target's checkpoint). Its view of the oldest
		// segment may be stale; the directory is not, while the cursor
		// lock is held, since the writer's retention removes segments
		// under it.
		if first, err = l.oldestOnDisk(); err != nil {
			return err
		}
	}
	if offset < first || offset > next {
		return fmt.Errorf("%w: cannot reset cursor %q to offset %d: the log holds [%d, %d]", ErrOutOfRange, name, offset, first, next)
	}
	return l.storeCursor(name, cursorRecord{offset: offset})
}

// DeleteCursor unregisters cursor name, so retention stops keeping data
// for it.
func (l *Log) DeleteCursor(name string) error {
	if err := validCursorName(name); err != nil {
		return err
	}
	if l.readOnly {
		return ErrReadOnly
	}
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	unlock, err := l.lockCursors()
	if err != nil {
		return err
	}
	defer unlock()
	_, ok, err := l.readCursor(name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	err = l.usableLocked()
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownCursor, name)
	}
	if err := l.fs.Remove(l.cursorPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("segmentlog: delete cursor %q: %w", name, err)
	}
	dir := filepath.Join(l.dir, cursorDirName)
	if err := l.fs.SyncDir(dir); err != nil {
		return l.setFatal("directory fsync", dir, err)
	}
	l.mu.Lock()
	delete(l.cursors, name)
	l.mu.Unlock()
	return nil
}

// CursorOffset returns the committed offset of cursor name and whether it
// is registered. For a cursor that retention expired it also returns a
// *PastRetentionError.
func (l *Log) CursorOffset(name string) (uint64, bool, error) {
	if l.readOnly {
		return l.cursorOffsetOnDisk(name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usableLocked(); err != nil {
		return 0, false, err
	}
	c, ok := l.cursors[name]
	if !ok {
		return 0, false, nil
	}
	if c.pastRetention {
		return c.offset, true, &PastRetentionError{Consumer: name, Offset: c.offset, FirstOffset: l.segs[0].base}
	}
	return c.offset, true, nil
}

// storeCursor makes rec durable as cursor name (temporary file, fsync,
// rename, directory fsync) and then publishes it in memory. Caller holds
// adminMu and the cursor lock. An fsync failure is fatal like any other: the cursor's durable
// state is unknown.
func (l *Log) storeCursor(name string, rec cursorRecord) error {
	st := &cursorState{offset: rec.offset, pastRetention: rec.pastRetention}
	if !rec.pastRetention && !l.readOnly {
		// Lag in bytes is the writer's statistic; a read-only log keeps
		// no index to find the position cheaply.
		var err error
		if st.segBase, st.pos, err = l.positionOf(rec.offset); err != nil {
			return err
		}
	}
	path := l.cursorPath(name)
	if err := l.writeFileAtomic(path, encodeCursor(rec)); err != nil {
		var se *syncError
		if errors.As(err, &se) {
			return l.setFatal("fdatasync", path+tmpSuffix, se.err)
		}
		return fmt.Errorf("segmentlog: write cursor %q: %w", name, err)
	}
	dir := filepath.Join(l.dir, cursorDirName)
	if err := l.fs.SyncDir(dir); err != nil {
		return l.setFatal("directory fsync", dir, err)
	}
	l.mu.Lock()
	l.cursors[name] = st
	l.mu.Unlock()
	return nil
}

// loadCursors reads every cursor file at Open. A cursor file is replaced
// only by rename after an fsync, so one that does not decode is damage,
// not an interrupted write, and Open refuses it.
func (l *Log) loadCursors() error {
	unlock, err := l.lockCursors()
	if err != nil {
		return err
	}
	defer unlock()
	return l.reloadCursors()
}

// reloadCursors replaces the in-memory cursors with the cursor files on
// disk, which other processes (read-only consumers) register and move.
// The writer's retention calls it before deciding what to remove. Caller
// holds the cursor lock; the writer removes stale temporary files, which
// exist only while someone holds that lock.
func (l *Log) reloadCursors() error {
	dir := filepath.Join(l.dir, cursorDirName)
	names, err := l.fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("segmentlog: read directory %s: %w", dir, err)
	}
	l.mu.Lock()
	old := l.cursors
	l.mu.Unlock()
	loaded := make(map[string]*cursorState, len(names))
	for _, fname := range names {
		path := filepath.Join(dir, fname)
		if strings.HasSuffix(fname, tmpSuffix) {
			if l.readOnly {
				continue
			}
			if err := l.fs.Remove(path); err != nil {
				return fmt.Errorf("segmentlog: remove %s: %w", path, err)
			}
			continue
		}
		name, ok := strings.CutSuffix(fname, cursorSuffix)
		if !ok || validCursorName(name) != nil {
			l.logger.Warn("segmentlog: ignoring unexpected file in cursor directory", "path", path)
			continue
		}
		rec, ok, err := l.readCursor(name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if next := l.NextOffset(); rec.offset > next && !l.readOnly {
			return &CorruptionError{Path: path, Position: 8,
				Reason: fmt.Sprintf("cursor %q is at offset %d but the log ends at offset %d", name, rec.offset, next)}
		}
		if c := old[name]; c != nil && c.offset == rec.offset && c.pastRetention == rec.pastRetention {
			loaded[name] = c
			continue
		}
		st := &cursorState{offset: rec.offset, pastRetention: rec.pastRetention}
		// A read-only log positions its cursors too (a scan of frame
		// headers: it has no index), so its Stats report their lag in bytes.
		if !rec.pastRetention && rec.offset >= l.FirstOffset() {
			if st.segBase, st.pos, err = l.positionOf(rec.offset); err != nil {
				return err
			}
		}
		loaded[name] = st
	}
	l.mu.Lock()
	l.cursors = loaded
	l.mu.Unlock()
	return nil
}

// refreshExpiredCursor reads cursor name again from disk when this
// process holds it as past retention: a recovery in another process
// (ResetCursor, run by `trellara reseed --all-tables`) may have moved it
// back within the log since. Without it the writer would keep the stale
// mark until its next retention pass reloads every cursor.
func (l *Log) refreshExpiredCursor(name string) error {
	l.mu.Lock()
	c, ok := l.cursors[name]
	expired := ok && c.pastRetention
	l.mu.Unlock()
	if !expired || l.readOnly {
		return nil
	}
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	unlock, err := l.lockCursors()
	if err != nil {
		return err
	}
	defer unlock()
	rec, registered, err := l.readCursor(name)
	if err != nil || !registered || rec.pastRetention || rec.offset < l.FirstOffset() || rec.offset > l.NextOffset() {
		return err
	}
	st := &cursorState{offset: rec.offset}
	if st.segBase, st.pos, err = l.positionOf(rec.offset); err != nil {
		return err
	}
	l.mu.Lock()
	l.cursors[name] = st
	l.mu.Unlock()
	return nil
}

// cursorOffsetOnDisk is CursorOffset for a read-only log: the file is the
// truth, since the writer's retention may have marked it.
func (l *Log) cursorOffsetOnDisk(name string) (uint64, bool, error) {
	unlock, err := l.lockCursors()
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	rec, ok, err := l.readCursor(name)
	if err != nil || !ok {
		return 0, false, err
	}
	if rec.pastRetention {
		return rec.offset, true, &PastRetentionError{Consumer: name, Offset: rec.offset, FirstOffset: l.FirstOffset()}
	}
	return rec.offset, true, nil
}

// positionOf returns the segment and byte position where the entry at
// offset starts (the end of the log for offset == NextOffset).
func (l *Log) positionOf(offset uint64) (uint64, int64, error) {
	l.mu.Lock()
	if offset >= l.next {
		s := l.segs[len(l.segs)-1]
		base, size := s.base, s.size
		l.mu.Unlock()
		return base, size, nil
	}
	s := l.segmentForLocked(offset)
	base, path, size := s.base, s.path, s.size
	start := floorEntry(s.index, s.base, offset)
	l.mu.Unlock()
	f, err := l.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("segmentlog: open %s: %w", path, err)
	}
	defer f.Close()
	pos, err := seekEntry(newWindow(f, size), path, start, offset)
	return base, pos, err
}

// CursorCommittedAt returns when consumer name last committed its cursor:
// the cursor file's modification time, since every commit replaces the
// file. ok is false when the cursor is not registered, or the log's
// filesystem cannot say.
func (l *Log) CursorCommittedAt(name string) (at time.Time, ok bool, err error) {
	if err := validCursorName(name); err != nil {
		return time.Time{}, false, err
	}
	st, can := l.fs.(interface {
		Stat(name string) (fs.FileInfo, error)
	})
	if !can {
		return time.Time{}, false, nil
	}
	fi, err := st.Stat(l.cursorPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("segmentlog: stat cursor %q: %w", name, err)
	}
	return fi.ModTime(), true, nil
}

// LastAppendAt returns when the log's end last moved: the modification
// time of its newest segment file, which every append writes (a reader
// opened read-only sees the writer's). Beside CursorCommittedAt it tells a
// consumer that stopped moving from one with nothing to read. ok is false
// when the log's filesystem cannot say.
func (l *Log) LastAppendAt() (at time.Time, ok bool, err error) {
	st, can := l.fs.(interface {
		Stat(name string) (fs.FileInfo, error)
	})
	if !can {
		return time.Time{}, false, nil
	}
	l.mu.Lock()
	path := l.segs[len(l.segs)-1].path
	l.mu.Unlock()
	fi, err := st.Stat(path)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("segmentlog: stat segment %s: %w", path, err)
	}
	return fi.ModTime(), true, nil
}

// ReloadCursors reads every cursor file again, so that Stats reflects the
// cursors consumers in other processes moved since Open or the last
// retention pass (a writer's Stats otherwise keeps the positions it last
// read).
func (l *Log) ReloadCursors() error {
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	return l.loadCursors()
}
