package segmentlog

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/trellara/trellara/segmentlog/internal/vfs"
)

// FS is the filesystem seam: the log calls nothing else, so an
// implementation can model short writes, fsync failures, ENOSPC and the
// loss of unsynced data after a crash. The method contracts are in
// internal/vfs, a leaf package, so that segmentlogtest's simulated
// filesystem can implement FS without importing segmentlog.
type FS = vfs.FS

// File is an open file (see FS).
type File = vfs.File

// Modes of everything the log creates. Its entries are the source's row
// data and its cursors say what a consumer has applied: readable by the
// service's own user only, like PostgreSQL's data directory.
const (
	fileMode fs.FileMode = 0o600
	dirMode  fs.FileMode = 0o700
)

// OSFS is the operating system's filesystem.
type OSFS struct{}

var _ FS = OSFS{}

// OpenFile implements FS.
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Rename implements FS.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Stat is os.Stat (Log.CursorCommittedAt).
func (OSFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }

// SyncDir implements FS. A new or renamed file is only reachable after a
// crash once its directory entry is durable, which fsync on the file does
// not guarantee.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Lock implements FS with flock(2), which the kernel releases when the
// process dies, so a crashed writer never leaves a stale lock behind.
func (OSFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, fileMode)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return f, nil
}

type osFile struct{ f *os.File }

func (o osFile) Write(p []byte) (int, error)             { return o.f.Write(p) }
func (o osFile) ReadAt(p []byte, off int64) (int, error) { return o.f.ReadAt(p, off) }
func (o osFile) Close() error                            { return o.f.Close() }
func (o osFile) Truncate(size int64) error               { return o.f.Truncate(size) }

func (o osFile) Sync() error { return datasync(o.f) }

func (o osFile) Size() (int64, error) {
	st, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// recordHolder writes this process's PID into the writer's lock file, so
// a refused second writer can name the process to stop. The lock is the
// flock, not the contents: a PID left by a dead writer is overwritten by
// the next one and read only after a refusal. Best effort: the writer
// runs without it on a filesystem that is not the OS's.
func recordHolder(lock io.Closer) {
	f, ok := lock.(*os.File)
	if !ok {
		return
	}
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
}

// clearHolder empties the lock file before the writer releases it, so no
// PID names a writer that has gone.
func clearHolder(lock io.Closer) {
	if f, ok := lock.(*os.File); ok {
		_ = f.Truncate(0)
	}
}

// lockHolder reads the PID the lock file's holder recorded, 0 when none.
func lockHolder(fsys FS, path string) int {
	b, err := readFileBounded(fsys, path, 32)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
