package segmentlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// dirWatcher waits for the writer to rename a file into the log
// directory (a new durable end, a new segment) or remove one (retention).
// Every watcher of the process shares one inotify instance (the hub): the
// kernel allows 128 instances per user by default
// (fs.inotify.max_user_instances), and a process reading hundreds of logs
// (the fleet's lake committer) would otherwise fall back to polling past
// the 128th; watches are limited by max_user_watches (8192 and up) instead.
type dirWatcher struct {
	wd     int
	notify chan struct{} // buffered 1: a pending change, coalesced
	intr   chan struct{} // closed by interrupt
	once   sync.Once
}

// inotifyHub is the process's inotify instance and its dispatcher: a
// goroutine that reads events and wakes the watchers of their watch
// descriptor. Several watchers of one directory share its descriptor (the
// kernel returns the same one for the same inode).
type inotifyHub struct {
	mu       sync.Mutex
	fd       int
	err      error
	watchers map[int][]*dirWatcher
}

var (
	hubOnce sync.Once
	hub     inotifyHub
)

func sharedHub() (*inotifyHub, error) {
	hubOnce.Do(func() {
		hub.watchers = map[int][]*dirWatcher{}
		hub.fd, hub.err = unix.InotifyInit1(unix.IN_CLOEXEC)
		if hub.err == nil {
			go hub.dispatch()
		}
	})
	return &hub, hub.err
}

func newDirWatcher(dir string) (*dirWatcher, error) {
	h, err := sharedHub()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	wd, err := unix.InotifyAddWatch(h.fd, dir, unix.IN_MOVED_TO|unix.IN_DELETE)
	if err != nil {
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	w := &dirWatcher{wd: wd, notify: make(chan struct{}, 1), intr: make(chan struct{})}
	h.watchers[wd] = append(h.watchers[wd], w)
	return w, nil
}

// dispatch reads the hub's events for the life of the process and wakes
// each event's watchers. A burst of commits costs each watcher one wake-up.
func (h *inotifyHub) dispatch() {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(h.fd, buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			// The instance is unusable: wake everyone; their next wait
			// reports it and they poll.
			h.mu.Lock()
			h.err = fmt.Errorf("inotify read: %w", err)
			for _, ws := range h.watchers {
				for _, w := range ws {
					w.wake()
				}
			}
			h.mu.Unlock()
			return
		}
		h.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int(int32(binary.NativeEndian.Uint32(buf[off:])))
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			for _, w := range h.watchers[wd] {
				w.wake()
			}
			off += unix.SizeofInotifyEvent + nameLen
		}
		h.mu.Unlock()
	}
}

func (w *dirWatcher) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// wait returns after a change, a wake-up or timeout.
func (w *dirWatcher) wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.notify:
	case <-w.intr:
	case <-t.C:
	}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	return hub.err
}

// interrupt wakes a wait in progress (and every later one).
func (w *dirWatcher) interrupt() { w.once.Do(func() { close(w.intr) }) }

// close removes w from the hub, and the directory's watch with its last
// watcher.
func (w *dirWatcher) close() {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	ws := hub.watchers[w.wd]
	for i, o := range ws {
		if o == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) > 0 {
		hub.watchers[w.wd] = ws
		return
	}
	delete(hub.watchers, w.wd)
	_, _ = unix.InotifyRmWatch(hub.fd, uint32(w.wd))
}
