package segmentlog

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// inotifyInstances counts this process's inotify file descriptors.
func inotifyInstances(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// 150 watched log directories (beyond the kernel's default 128 inotify
// instances per user) share one inotify instance, and a change in one
// directory wakes that directory's watcher only.
//
// Mutation tried: an inotify instance per watcher (as before) turns it red
// (150 instances, or the 129th watcher refused with EMFILE).
func TestWatchersShareOneInotifyInstance(t *testing.T) {
	root := t.TempDir()
	var ws []*dirWatcher
	for i := range 150 {
		dir := filepath.Join(root, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := newDirWatcher(dir)
		if err != nil {
			t.Fatalf("watcher %d: %v", i, err)
		}
		ws = append(ws, w)
	}
	defer func() {
		for _, w := range ws {
			w.close()
		}
	}()
	if n := inotifyInstances(t); n != 1 {
		t.Fatalf("150 watchers use %d inotify instances, want 1", n)
	}
	// Two watchers of one directory share its watch; closing one keeps the other's.
	twin, err := newDirWatcher(filepath.Join(root, "149"))
	if err != nil {
		t.Fatal(err)
	}
	twin.close()

	tmp := filepath.Join(root, "149", "DURABLE.tmp")
	if err := os.WriteFile(tmp, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(root, "149", "DURABLE")); err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- ws[149].wait(time.Minute) }()
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the rename into directory 149 did not wake its watcher")
	}
	if len(ws[0].notify) != 0 || len(ws[148].notify) != 0 {
		t.Fatal("a change in directory 149 woke another directory's watcher")
	}
}
