// Package segmentlogtest provides FS, an in-memory filesystem for the
// segment log that models what a crash keeps. segmentlog's tests and the
// failure simulator (internal/sim) both run the log on it.
//
// It implements the interfaces of segmentlog/internal/vfs and imports
// nothing of segmentlog, so segmentlog's in-package tests can use it
// without an import cycle.
package segmentlogtest

import (
	"errors"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/trellara/trellara/segmentlog/internal/vfs"
)

// FS keeps what a crash would keep separately from what the running
// process sees: file contents as of their last Sync, and directory entries
// as of their directory's last SyncDir (directories themselves are durable
// at once). CrashImage returns what a machine finds after losing power.
//
// Faults: Hooks can shorten or fail writes and fail fsyncs and file
// creation; SetSpace makes the disk full (ENOSPC with a short write);
// SetSyncLies makes fsync succeed without making anything durable.
//
// It is safe for concurrent use (the log's flusher goroutine calls it
// while its caller waits). Everything it does is deterministic: ReadDir
// and Names are sorted, and CrashImage consumes its rng in name order.
type FS struct {
	mu      sync.Mutex
	files   map[string]*inode // live namespace
	durable map[string]*inode // namespace as of the last SyncDir of each directory
	dirs    map[string]bool
	locks   map[string]bool
	hooks   Hooks
	// spaceBytes, when ≥ 0, is how many more bytes writes may add before
	// they fail with ENOSPC.
	spaceBytes int64
	syncLies   bool

	hookMu sync.Mutex // runs hooks one at a time
}

// Hooks inject faults. Each runs before the operation takes effect, one at
// a time and without the filesystem's lock held, so a hook needs no lock
// of its own and may call the FS's methods that run no hook (CrashImage,
// Bytes, ...), for example to take a crash image inside an fsync.
type Hooks struct {
	// Write decides how much of a write lands and what error it returns.
	Write func(path string, p []byte) (int, error)
	// Sync can fail File.Sync; nothing is synced then.
	Sync func(path string) error
	// SyncDir can fail SyncDir; nothing is synced then.
	SyncDir func(dir string) error
	// Create can fail an OpenFile that would create the file.
	Create func(path string) error
}

type inode struct {
	data   []byte
	synced []byte
}

var _ vfs.FS = (*FS)(nil)

// NewFS returns an empty filesystem with only the root directory.
func NewFS() *FS {
	return &FS{files: map[string]*inode{}, durable: map[string]*inode{}, dirs: map[string]bool{"/": true},
		locks: map[string]bool{}, spaceBytes: -1}
}

// SetHooks replaces all hooks; SetHooks(Hooks{}) removes them.
func (m *FS) SetHooks(h Hooks) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hooks = h
}

// SetSpace lets writes add n more bytes before they fail with ENOSPC (a
// short write), and file creation fail once none is left; n < 0 lifts the
// limit. Truncation frees nothing.
func (m *FS) SetSpace(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spaceBytes = n
}

// SetSyncLies makes Sync and SyncDir report success without making
// anything durable: storage that lies about fsync.
func (m *FS) SetSyncLies(lie bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.syncLies = lie
}

func (m *FS) hook() Hooks {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hooks
}

func (m *FS) runHook(run func()) {
	m.hookMu.Lock()
	defer m.hookMu.Unlock()
	run()
}

// CrashImage returns the filesystem a machine finds after losing power at
// this instant: only durable names, each with its synced bytes, no locks,
// no hooks, no limits. With a non-nil rng the crash is torn: each file
// also keeps a random part of its unsynced appended bytes, sometimes with
// a zeroed hole, because pages of an unsynced write reach the disk in any
// order.
func (m *FS) CrashImage(rng *rand.Rand) *FS {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := NewFS()
	for d := range m.dirs {
		n.dirs[d] = true
	}
	// In name order, so the rng is consumed in a fixed order. A file with
	// two durable names (renamed, old name not yet synced away) stays one.
	copies := map[*inode]*inode{}
	for _, name := range slices.Sorted(maps.Keys(m.durable)) {
		ino := m.durable[name]
		c, ok := copies[ino]
		if !ok {
			b := slices.Clone(ino.synced)
			if rng != nil && len(ino.data) > len(ino.synced) && string(ino.data[:len(ino.synced)]) == string(ino.synced) {
				keep := len(ino.synced) + rng.IntN(len(ino.data)-len(ino.synced)+1)
				b = slices.Clone(ino.data[:keep])
				if unsynced := keep - len(ino.synced); unsynced > 0 && rng.IntN(2) == 0 {
					from := len(ino.synced) + rng.IntN(unsynced)
					clear(b[from:min(keep, from+512)])
				}
			}
			c = &inode{data: b, synced: slices.Clone(b)}
			copies[ino] = c
		}
		n.files[name] = c
		n.durable[name] = c
	}
	return n
}

// Bytes returns a copy of a file's live contents, nil if it does not exist.
func (m *FS) Bytes(name string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ino, ok := m.files[name]; ok {
		return slices.Clone(ino.data)
	}
	return nil
}

// SetBytes replaces the contents of an existing file, live and synced.
func (m *FS) SetBytes(name string, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino := m.files[name]
	ino.data = slices.Clone(b)
	ino.synced = slices.Clone(b)
}

// Flip inverts the byte at pos of a file, live and synced: damage at rest.
// It reports false if the file is shorter.
func (m *FS) Flip(name string, pos int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino, ok := m.files[name]
	if !ok || pos >= len(ino.data) {
		return false
	}
	ino.data[pos] ^= 0xff
	if pos < len(ino.synced) {
		ino.synced[pos] ^= 0xff
	}
	return true
}

// Names lists, sorted, the paths of the live files in dir that end in
// suffix.
func (m *FS) Names(dir, suffix string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name := range m.files {
		if filepath.Dir(name) == dir && strings.HasSuffix(name, suffix) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (m *FS) exists(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.files[name]
	return ok
}

func notExist(op, name string) error { return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist} }

// OpenFile implements segmentlog.FS.
func (m *FS) OpenFile(name string, flag int, _ fs.FileMode) (vfs.File, error) {
	name = filepath.Clean(name)
	if hook := m.hook().Create; hook != nil && flag&os.O_CREATE != 0 && !m.exists(name) {
		var err error
		m.runHook(func() { err = hook(name) })
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[filepath.Dir(name)] {
		return nil, notExist("open", name)
	}
	ino, ok := m.files[name]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case !ok && flag&os.O_CREATE == 0:
		return nil, notExist("open", name)
	case !ok:
		if m.spaceBytes == 0 {
			return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
		}
		ino = &inode{}
		m.files[name] = ino
	}
	if flag&os.O_TRUNC != 0 {
		ino.data = nil
	}
	return &file{fs: m, ino: ino, path: name, appendMode: flag&os.O_APPEND != 0}, nil
}

// Rename implements segmentlog.FS.
func (m *FS) Rename(oldpath, newpath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino, ok := m.files[oldpath]
	if !ok {
		return notExist("rename", oldpath)
	}
	delete(m.files, oldpath)
	m.files[newpath] = ino
	return nil
}

// Remove implements segmentlog.FS.
func (m *FS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[name]; !ok {
		return notExist("remove", name)
	}
	delete(m.files, name)
	return nil
}

// ReadDir implements segmentlog.FS, sorted so that the log's scans are
// deterministic.
func (m *FS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir = filepath.Clean(dir)
	if !m.dirs[dir] {
		return nil, notExist("readdir", dir)
	}
	var names []string
	for name := range m.files {
		if filepath.Dir(name) == dir {
			names = append(names, filepath.Base(name))
		}
	}
	for d := range m.dirs {
		if d != dir && filepath.Dir(d) == dir {
			names = append(names, filepath.Base(d))
		}
	}
	slices.Sort(names)
	return names, nil
}

// MkdirAll implements segmentlog.FS. Directories are durable at once.
func (m *FS) MkdirAll(dir string, _ fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		m.dirs[d] = true
		if d == "/" || d == "." {
			return nil
		}
	}
}

// SyncDir implements segmentlog.FS.
func (m *FS) SyncDir(dir string) error {
	if hook := m.hook().SyncDir; hook != nil {
		var err error
		m.runHook(func() { err = hook(dir) })
		if err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.syncLies {
		return nil
	}
	dir = filepath.Clean(dir)
	for name := range m.durable {
		if filepath.Dir(name) == dir {
			delete(m.durable, name)
		}
	}
	for name, ino := range m.files {
		if filepath.Dir(name) == dir {
			m.durable[name] = ino
		}
	}
	return nil
}

type lock struct {
	m    *FS
	name string
}

func (l lock) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	delete(l.m.locks, l.name)
	return nil
}

// Lock implements segmentlog.FS.
func (m *FS) Lock(name string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, vfs.ErrLocked
	}
	m.locks[name] = true
	return lock{m, name}, nil
}

type file struct {
	fs         *FS
	ino        *inode
	path       string
	appendMode bool
	pos        int64
	closed     bool
}

var errFileClosed = errors.New("file already closed")

func (f *file) Write(p []byte) (int, error) {
	n, err := len(p), error(nil)
	if hook := f.fs.hook().Write; hook != nil {
		f.fs.runHook(func() { n, err = hook(f.path, p) })
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errFileClosed
	}
	if s := f.fs.spaceBytes; s >= 0 && int64(n) > s {
		n, err = int(s), syscall.ENOSPC
	}
	if f.fs.spaceBytes >= 0 {
		f.fs.spaceBytes -= int64(n)
	}
	if f.appendMode {
		f.pos = int64(len(f.ino.data))
	}
	if grow := f.pos + int64(n) - int64(len(f.ino.data)); grow > 0 {
		f.ino.data = append(f.ino.data, make([]byte, grow)...)
	}
	copy(f.ino.data[f.pos:], p[:n])
	f.pos += int64(n)
	return n, err
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errFileClosed
	}
	if off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *file) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errFileClosed
	}
	f.closed = true
	return nil
}

func (f *file) Sync() error {
	if hook := f.fs.hook().Sync; hook != nil {
		var err error
		f.fs.runHook(func() { err = hook(f.path) })
		if err != nil {
			return err
		}
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if !f.fs.syncLies {
		f.ino.synced = slices.Clone(f.ino.data)
	}
	return nil
}

func (f *file) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if size <= int64(len(f.ino.data)) {
		f.ino.data = f.ino.data[:size]
	} else {
		f.ino.data = append(f.ino.data, make([]byte, size-int64(len(f.ino.data)))...)
	}
	return nil
}

func (f *file) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return int64(len(f.ino.data)), nil
}
