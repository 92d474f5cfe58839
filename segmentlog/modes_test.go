package segmentlog

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Everything the log creates — directories, segments, indexes, cursors,
// the lock file and a repair's .torn-N copy — is private to the service's
// user: 0700 directories, 0600 files, whatever the umask lets through.
func TestCreatedFileModes(t *testing.T) {
	// Nothing masked, so the test sees the modes the log asks for (a umask
	// of 077 would hide a 0644). No test in this package runs in parallel.
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	dir := filepath.Join(t.TempDir(), "flow", "log")
	l := mustOpen(t, dir, Options{SegmentBytesMax: segmentBytesMin, IndexIntervalBytes: indexIntervalBytesMin})
	for i := 0; i < 20; i++ {
		mustAppend(t, l, payloadFor(1, i, 100)) // several sealed segments, each with its index
	}
	if err := l.CommitCursor("applier", 3); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A torn tail: Open copies it aside before truncating.
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	if len(segs) < 2 {
		t.Fatalf("want several segments, got %v", segs)
	}
	f, err := os.OpenFile(segs[len(segs)-1], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("torn!"))
	f.Close()
	l, rep, err := Open(dir, Options{SegmentBytesMax: segmentBytesMin, IndexIntervalBytes: indexIntervalBytesMin})
	if err != nil || rep == nil {
		t.Fatalf("reopen: repair %v, %v", rep, err)
	}
	defer l.Close()

	kinds := map[string]int{}
	err = filepath.WalkDir(filepath.Dir(dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
		kinds[filepath.Ext(path)]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checked: %v", kinds)
	if rep.TornPath == "" || kinds[segmentSuffix] < 2 || kinds[indexSuffix] == 0 || kinds[""] < 3 {
		t.Fatalf("not every kind of file was created: %v (torn %q)", kinds, rep.TornPath)
	}
}
