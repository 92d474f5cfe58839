//go:build !linux

package segmentlog

import (
	"errors"
	"time"
)

// dirWatcher has no implementation outside Linux: read-only logs poll.
type dirWatcher struct{}

func newDirWatcher(string) (*dirWatcher, error) {
	return nil, errors.New("change notifications are implemented on Linux only")
}

func (*dirWatcher) wait(time.Duration) error { return nil }
func (*dirWatcher) interrupt()               {}
func (*dirWatcher) close()                   {}
