package segmentlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// cursorNameBytesMax bounds cursor names; they become file names.
const cursorNameBytesMax = 128

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
func (l *Log) CommitCursor(name string, offset uint64) error {
	if err := validCursorName(name); err != nil {
		return err
	}
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	l.mu.Lock()
	err := l.usableLocked()
	c := l.cursors[name]
	next, first := l.next, l.segs[0].base
	l.mu.Unlock()
	switch {
	case err != nil:
		return err
	case c != nil && c.pastRetention:
		return &PastRetentionError{Consumer: name, Offset: c.offset, FirstOffset: first}
	case c != nil && offset < c.offset:
		return fmt.Errorf("%w: cursor %q is at offset %d; refusing to move it to %d", ErrCursorRegress, name, c.offset, offset)
	case c != nil && offset == c.offset:
		return nil
	case offset > next:
		return fmt.Errorf("%w: cannot commit cursor %q at offset %d: the log ends at %d", ErrOutOfRange, name, offset, next)
	case offset < first:
		return &PastRetentionError{Consumer: name, Offset: offset, FirstOffset: first}
	}
	return l.storeCursor(name, cursorRecord{offset: offset})
}

// ResetCursor moves cursor name to offset in either direction, clears its
// past-retention mark and registers it if needed. It is a recovery
// primitive (for a reseed, which is not implemented yet), not something a
// consumer calls in normal operation. offset must lie within [FirstOffset, NextOffset].
func (l *Log) ResetCursor(name string, offset uint64) error {
	if err := validCursorName(name); err != nil {
		return err
	}
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	l.mu.Lock()
	err := l.usableLocked()
	next, first := l.next, l.segs[0].base
	l.mu.Unlock()
	if err != nil {
		return err
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
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	l.mu.Lock()
	err := l.usableLocked()
	_, ok := l.cursors[name]
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
// adminMu. An fsync failure is fatal like any other: the cursor's durable
// state is unknown.
func (l *Log) storeCursor(name string, rec cursorRecord) error {
	st := &cursorState{offset: rec.offset, pastRetention: rec.pastRetention}
	if !rec.pastRetention {
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

// loadCursors reads every cursor file. A cursor file is replaced only by
// rename after an fsync, so one that does not decode is damage, not an
// interrupted write, and Open refuses it.
func (l *Log) loadCursors() error {
	dir := filepath.Join(l.dir, cursorDirName)
	names, err := l.fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("segmentlog: read directory %s: %w", dir, err)
	}
	for _, fname := range names {
		path := filepath.Join(dir, fname)
		if strings.HasSuffix(fname, tmpSuffix) {
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
		b, err := readFileBounded(l.fs, path, cursorFileSize)
		if err != nil && !errors.Is(err, errFileTooLarge) {
			return fmt.Errorf("segmentlog: read cursor %s: %w", path, err)
		}
		var rec cursorRecord
		if err == nil {
			rec, err = decodeCursor(b)
		}
		if err != nil {
			return &CorruptionError{Path: path, Reason: err.Error() + fmt.Sprintf(" (the cursor of consumer %q)", name)}
		}
		if rec.offset > l.next {
			return &CorruptionError{Path: path, Position: 8,
				Reason: fmt.Sprintf("cursor %q is at offset %d but the log ends at offset %d", name, rec.offset, l.next)}
		}
		st := &cursorState{offset: rec.offset, pastRetention: rec.pastRetention}
		if !rec.pastRetention && rec.offset >= l.segs[0].base {
			if st.segBase, st.pos, err = l.positionOf(rec.offset); err != nil {
				return err
			}
		}
		l.cursors[name] = st
	}
	return nil
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
