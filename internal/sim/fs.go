package sim

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/trellara/trellara/segmentlog"
)

// simFS is the segment log's filesystem in the simulation. It keeps what a
// crash would keep separately from what the running process sees: file
// contents as of their last Sync, and directory entries as of their
// directory's last SyncDir. Faults: a failing fsync, a full disk (ENOSPC
// with a short write), and a hook at every fsync where the harness can
// take a crash image or fail the call.
//
// The segment log's flusher goroutine calls it while the harness waits in
// Append, so it is locked, and the hooks run with the harness blocked.
type simFS struct {
	mu      sync.Mutex
	files   map[string]*inode // live namespace
	durable map[string]*inode // namespace as of the last SyncDir of each directory
	dirs    map[string]bool
	locks   map[string]bool

	// spaceBytes, when ≥ 0, is how many more bytes writes may add before
	// they fail with ENOSPC.
	spaceBytes int64
	// onSync runs before a file's Sync takes effect; an error fails it.
	onSync func(path string) error
	// syncNoop makes Sync report success without making anything
	// durable: the storage lies (an environment mutation).
	syncNoop bool
}

type inode struct {
	data   []byte
	synced []byte
}

func newSimFS() *simFS {
	return &simFS{files: map[string]*inode{}, durable: map[string]*inode{}, dirs: map[string]bool{"/": true},
		locks: map[string]bool{}, spaceBytes: -1}
}

var _ segmentlog.FS = (*simFS)(nil)

// crashImage returns the filesystem a machine finds after losing power at
// this instant. Clean: only durable names, each with its synced bytes.
// Torn (rng non-nil): each file also keeps a random part of its unsynced
// appended bytes, sometimes with a zeroed hole, because pages of an
// unsynced write reach the disk in any order. Callers hold no lock.
func (m *simFS) crashImage(rng *rand.Rand) *simFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashImageLocked(rng)
}

func (m *simFS) crashImageLocked(rng *rand.Rand) *simFS {
	n := newSimFS()
	for d := range m.dirs {
		n.dirs[d] = true
	}
	names := make([]string, 0, len(m.durable))
	for name := range m.durable {
		names = append(names, name)
	}
	slices.Sort(names) // the rng is consumed in a fixed order
	copies := map[*inode]*inode{}
	for _, name := range names {
		ino := m.durable[name]
		c, ok := copies[ino]
		if !ok {
			b := slices.Clone(ino.synced)
			if rng != nil && len(ino.data) > len(ino.synced) && hasPrefix(ino.data, ino.synced) {
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

func hasPrefix(b, prefix []byte) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == string(prefix)
}

// flip inverts one byte of a file, live and durable: damage at rest.
func (m *simFS) flip(name string, pos int) bool {
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

// names lists the live files under dir whose base name has suffix.
func (m *simFS) names(dir, suffix string) []string {
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

func (m *simFS) size(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ino, ok := m.files[name]; ok {
		return len(ino.data)
	}
	return 0
}

func (m *simFS) setSpace(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spaceBytes = n
}

func notExist(op, name string) error { return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist} }

// OpenFile implements segmentlog.FS.
func (m *simFS) OpenFile(name string, flag int, _ fs.FileMode) (segmentlog.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = filepath.Clean(name)
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
	return &simFile{fs: m, ino: ino, path: name, appendMode: flag&os.O_APPEND != 0}, nil
}

// Rename implements segmentlog.FS.
func (m *simFS) Rename(oldpath, newpath string) error {
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
func (m *simFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[name]; !ok {
		return notExist("remove", name)
	}
	delete(m.files, name)
	return nil
}

// ReadDir implements segmentlog.FS (sorted, so the log's scans are
// deterministic).
func (m *simFS) ReadDir(dir string) ([]string, error) {
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
func (m *simFS) MkdirAll(dir string, _ fs.FileMode) error {
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
func (m *simFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.syncNoop {
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

type simLock struct {
	m    *simFS
	name string
}

func (l simLock) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	delete(l.m.locks, l.name)
	return nil
}

// Lock implements segmentlog.FS.
func (m *simFS) Lock(name string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, segmentlog.ErrLocked
	}
	m.locks[name] = true
	return simLock{m, name}, nil
}

type simFile struct {
	fs         *simFS
	ino        *inode
	path       string
	appendMode bool
	pos        int64
	closed     bool
}

var errFileClosed = errors.New("file already closed")

func (f *simFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errFileClosed
	}
	n, err := len(p), error(nil)
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

func (f *simFile) ReadAt(p []byte, off int64) (int, error) {
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

func (f *simFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errFileClosed
	}
	f.closed = true
	return nil
}

func (f *simFile) Sync() error {
	f.fs.mu.Lock()
	hook := f.fs.onSync
	f.fs.mu.Unlock()
	if hook != nil {
		if err := hook(f.path); err != nil {
			return err
		}
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if !f.fs.syncNoop {
		f.ino.synced = slices.Clone(f.ino.data)
	}
	return nil
}

func (f *simFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if size <= int64(len(f.ino.data)) {
		f.ino.data = f.ino.data[:size]
	} else {
		f.ino.data = append(f.ino.data, make([]byte, size-int64(len(f.ino.data)))...)
	}
	return nil
}

func (f *simFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return int64(len(f.ino.data)), nil
}
