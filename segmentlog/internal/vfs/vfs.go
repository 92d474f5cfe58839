// Package vfs declares the segment log's filesystem seam: the interfaces
// segmentlog calls and every filesystem implements, the operating
// system's (segmentlog.OSFS) and the simulated one (segmentlogtest.FS).
// segmentlog re-exports them as aliases (segmentlog.FS, segmentlog.File,
// segmentlog.ErrLocked).
//
// It imports nothing of segmentlog, so a filesystem built on it does not
// either, and segmentlog's own in-package tests can use one without an
// import cycle.
package vfs

import (
	"errors"
	"io"
	"io/fs"
)

// ErrLocked means another process (or another Log in this process) holds
// the directory. Two writers would interleave frames.
var ErrLocked = errors.New("segmentlog: directory is locked by another log instance")

// FS is the filesystem seam. The log calls nothing else, so an
// implementation can model short writes, fsync failures, ENOSPC and the
// loss of unsynced data after a crash.
type FS interface {
	// OpenFile opens a file like os.OpenFile. The log opens segments it
	// appends to with os.O_APPEND, so File.Write always appends.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// ReadDir returns the names of the entries in dir, in any order.
	ReadDir(dir string) ([]string, error)
	MkdirAll(dir string, perm fs.FileMode) error
	// SyncDir makes creations, renames and removals in dir durable.
	SyncDir(dir string) error
	// Lock takes an exclusive, non-blocking lock on the named file
	// (creating it) that is released by Close or by the process dying.
	// It returns ErrLocked when someone else holds it.
	Lock(name string) (io.Closer, error)
}

// File is an open file.
type File interface {
	io.Writer
	io.ReaderAt
	io.Closer
	// Sync makes the file's data and size durable (fdatasync).
	Sync() error
	Truncate(size int64) error
	Size() (int64, error)
}
