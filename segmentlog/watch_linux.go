package segmentlog

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// dirWatcher waits for the writer to rename a file into the log
// directory (a new durable end, a new segment) or remove one (retention),
// with inotify.
type dirWatcher struct {
	ino  int
	wake int // eventfd: Close interrupts a wait
	buf  []byte
}

func newDirWatcher(dir string) (*dirWatcher, error) {
	ino, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	if _, err := unix.InotifyAddWatch(ino, dir, unix.IN_MOVED_TO|unix.IN_DELETE); err != nil {
		_ = unix.Close(ino)
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(ino)
		return nil, err
	}
	return &dirWatcher{ino: ino, wake: wake, buf: make([]byte, 64<<10)}, nil
}

// wait returns after a change, a wake-up or timeout. It drains every
// queued event, so a burst of commits costs one refresh.
func (w *dirWatcher) wait(timeout time.Duration) error {
	fds := []unix.PollFd{{Fd: int32(w.ino), Events: unix.POLLIN}, {Fd: int32(w.wake), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, int(timeout/time.Millisecond)); err != nil && !errors.Is(err, unix.EINTR) {
		return err
	}
	for {
		if _, err := unix.Read(w.ino, w.buf); err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				return nil
			}
			return err
		}
	}
}

// interrupt wakes a wait in progress (and the next one).
func (w *dirWatcher) interrupt() {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(w.wake, one[:])
}

func (w *dirWatcher) close() {
	_ = unix.Close(w.ino)
	_ = unix.Close(w.wake)
}
