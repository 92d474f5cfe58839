package segmentlog

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync uses fdatasync: it flushes the data and the metadata needed to
// read it back (the file size) and skips the timestamp update that fsync
// would also write.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
		return nil
	}
}
