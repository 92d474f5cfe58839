package segmentlog

import (
	"bytes"
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
)

// memFS is an in-memory FS that models what a crash keeps: file contents
// as of their last Sync and directory entries as of their directory's last
// SyncDir. Hooks inject short writes, ENOSPC and fsync failures.
type memFS struct {
	mu      sync.Mutex
	files   map[string]*memInode // live namespace
	durable map[string]*memInode // namespace as of the last SyncDir of each directory
	dirs    map[string]bool
	locks   map[string]bool

	// writeHook, if set, decides how much of a write lands and what error
	// it returns. It runs with mu held; it must not call back into memFS.
	writeHook func(path string, p []byte) (int, error)
	// syncHook, if set, can fail File.Sync (before anything is synced).
	syncHook func(path string) error
	// syncDirHook, if set, can fail SyncDir.
	syncDirHook func(dir string) error
	// createHook, if set, can fail OpenFile with O_CREATE.
	createHook func(path string) error
}

type memInode struct {
	data   []byte
	synced []byte
}

func newMemFS() *memFS {
	return &memFS{files: map[string]*memInode{}, durable: map[string]*memInode{}, dirs: map[string]bool{"/": true}, locks: map[string]bool{}}
}

func (m *memFS) setHooks(f func(m *memFS)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// crash returns the filesystem a machine would find after losing power:
// only durable names, each with only its synced bytes. Locks are released.
func (m *memFS) crash() *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := newMemFS()
	for d := range m.dirs {
		n.dirs[d] = true
	}
	inodes := map[*memInode]*memInode{}
	for name, ino := range m.durable {
		c, ok := inodes[ino]
		if !ok {
			c = &memInode{data: slices.Clone(ino.synced), synced: slices.Clone(ino.synced)}
			inodes[ino] = c
		}
		n.files[name] = c
		n.durable[name] = c
	}
	return n
}

// crashTorn is crash, except that each file also keeps a random part of
// its unsynced appended bytes, sometimes with a hole of zeros in them:
// pages of an unsynced write reach the disk in any order.
// It is called from a hook, with m.mu held.
func (m *memFS) crashTornLocked(rng *rand.Rand) *memFS {
	n := newMemFS()
	for d := range m.dirs {
		n.dirs[d] = true
	}
	inodes := map[*memInode]*memInode{}
	for name, ino := range m.durable {
		c, ok := inodes[ino]
		if !ok {
			b := slices.Clone(ino.synced)
			if len(ino.data) > len(ino.synced) && bytes.HasPrefix(ino.data, ino.synced) {
				keep := len(ino.synced) + rng.IntN(len(ino.data)-len(ino.synced)+1)
				b = slices.Clone(ino.data[:keep])
				if unsynced := keep - len(ino.synced); unsynced > 0 && rng.IntN(2) == 0 {
					from := len(ino.synced) + rng.IntN(unsynced)
					clear(b[from:min(keep, from+512)])
				}
			}
			c = &memInode{data: b, synced: slices.Clone(b)}
			inodes[ino] = c
		}
		n.files[name] = c
		n.durable[name] = c
	}
	return n
}

func (m *memFS) bytes(name string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ino, ok := m.files[name]; ok {
		return slices.Clone(ino.data)
	}
	return nil
}

func (m *memFS) setBytes(name string, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino := m.files[name]
	ino.data = slices.Clone(b)
	ino.synced = slices.Clone(b)
}

func notExist(op, name string) error { return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist} }

func (m *memFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
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
		if m.createHook != nil {
			if err := m.createHook(name); err != nil {
				return nil, &fs.PathError{Op: "open", Path: name, Err: err}
			}
		}
		ino = &memInode{}
		m.files[name] = ino
	}
	if flag&os.O_TRUNC != 0 {
		ino.data = nil
	}
	return &memFile{fs: m, ino: ino, path: name, appendMode: flag&os.O_APPEND != 0}, nil
}

func (m *memFS) Rename(oldpath, newpath string) error {
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

func (m *memFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[name]; !ok {
		return notExist("remove", name)
	}
	delete(m.files, name)
	return nil
}

func (m *memFS) ReadDir(dir string) ([]string, error) {
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

func (m *memFS) MkdirAll(dir string, perm fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		m.dirs[d] = true
		if d == "/" || d == "." {
			return nil
		}
	}
}

func (m *memFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.syncDirHook != nil {
		if err := m.syncDirHook(dir); err != nil {
			return err
		}
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

type memLock struct {
	m    *memFS
	name string
}

func (l memLock) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	delete(l.m.locks, l.name)
	return nil
}

func (m *memFS) Lock(name string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, ErrLocked
	}
	m.locks[name] = true
	return memLock{m, name}, nil
}

type memFile struct {
	fs         *memFS
	ino        *memInode
	path       string
	appendMode bool
	pos        int64
	closed     bool
}

var errFileClosed = errors.New("file already closed")

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, errFileClosed
	}
	n, err := len(p), error(nil)
	if f.fs.writeHook != nil {
		n, err = f.fs.writeHook(f.path, p)
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

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
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

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return errFileClosed
	}
	f.closed = true
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.syncHook != nil {
		if err := f.fs.syncHook(f.path); err != nil {
			return err
		}
	}
	f.ino.synced = slices.Clone(f.ino.data)
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if size <= int64(len(f.ino.data)) {
		f.ino.data = f.ino.data[:size]
	} else {
		f.ino.data = append(f.ino.data, make([]byte, size-int64(len(f.ino.data)))...)
	}
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return int64(len(f.ino.data)), nil
}

// enospcAfter returns a write hook that lets n more bytes land and then
// fails every write with ENOSPC, writing what still fits (a short write).
func enospcAfter(n int, match string) func(string, []byte) (int, error) {
	left := n
	return func(path string, p []byte) (int, error) {
		if !strings.Contains(path, match) {
			return len(p), nil
		}
		if len(p) <= left {
			left -= len(p)
			return len(p), nil
		}
		w := left
		left = 0
		return w, syscall.ENOSPC
	}
}
