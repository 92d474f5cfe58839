package segmentlogtest_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"

	"github.com/trellara/trellara/segmentlog/internal/vfs"
	"github.com/trellara/trellara/segmentlog/segmentlogtest"
)

func create(t *testing.T, m *segmentlogtest.FS, name string) vfs.File {
	t.Helper()
	f, err := m.OpenFile(name, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func write(t *testing.T, f vfs.File, s string) {
	t.Helper()
	if _, err := f.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// A crash keeps only what was made durable; a torn crash may also keep a
// part of the unsynced tail, never less than the synced bytes.
func TestCrashImage(t *testing.T) {
	m := segmentlogtest.NewFS()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f := create(t, m, "/d/a")
	write(t, f, "synced")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// The name is not durable until its directory is synced.
	if img := m.CrashImage(nil); img.Bytes("/d/a") != nil {
		t.Fatal("an unsynced directory entry survived the crash")
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	write(t, f, "-unsynced")
	if got := string(m.CrashImage(nil).Bytes("/d/a")); got != "synced" {
		t.Errorf("clean crash kept %q, want the synced bytes only", got)
	}
	torn := map[string]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		got := string(m.CrashImage(rng).Bytes("/d/a"))
		if len(got) < len("synced") || got[:6] != "synced" {
			t.Fatalf("torn crash lost synced bytes: %q", got)
		}
		torn[got] = true
	}
	if len(torn) < 3 {
		t.Errorf("torn crashes kept only %d distinct tails", len(torn))
	}
}

// The same rng seed gives the same torn image: the simulator replays a
// seed byte for byte, so no map order may reach the rng.
func TestCrashImageDeterministic(t *testing.T) {
	m := segmentlogtest.NewFS()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		f := create(t, m, fmt.Sprintf("/d/%02d", i))
		write(t, f, "synced")
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		write(t, f, "-unsynced-tail-of-some-length")
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	image := func() (out [][]byte) {
		img := m.CrashImage(rand.New(rand.NewPCG(7, 7)))
		for _, name := range img.Names("/d", "") {
			out = append(out, img.Bytes(name))
		}
		return out
	}
	first := image()
	for range 20 {
		again := image()
		for i := range first {
			if !bytes.Equal(first[i], again[i]) {
				t.Fatalf("file %d: torn image %q, then %q from the same seed", i, first[i], again[i])
			}
		}
	}
}

func TestFaults(t *testing.T) {
	m := segmentlogtest.NewFS()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f := create(t, m, "/d/a")
	eio := syscall.EIO
	var image *segmentlogtest.FS
	m.SetHooks(segmentlogtest.Hooks{
		Write:   func(_ string, p []byte) (int, error) { return len(p) / 2, eio },
		Sync:    func(string) error { image = m.CrashImage(nil); return eio },
		SyncDir: func(string) error { return eio },
		Create:  func(string) error { return eio },
	})
	if n, err := f.Write([]byte("abcd")); n != 2 || !errors.Is(err, eio) {
		t.Errorf("hooked write = %d, %v; want 2, EIO", n, err)
	}
	if err := f.Sync(); !errors.Is(err, eio) || image == nil {
		t.Errorf("hooked sync = %v (crash image taken in the hook: %v)", err, image != nil)
	}
	if err := m.SyncDir("/d"); !errors.Is(err, eio) {
		t.Errorf("hooked SyncDir = %v", err)
	}
	if _, err := m.OpenFile("/d/b", os.O_CREATE|os.O_RDWR, 0o644); !errors.Is(err, eio) {
		t.Errorf("hooked create = %v", err)
	}
	if _, err := m.OpenFile("/d/a", os.O_CREATE|os.O_RDWR, 0o644); err != nil {
		t.Errorf("opening an existing file ran the create hook: %v", err)
	}
	m.SetHooks(segmentlogtest.Hooks{})
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := string(m.CrashImage(nil).Bytes("/d/a")); got != "" {
		t.Errorf("failed SyncDir made the name durable: %q", got)
	}

	m.SetSpace(3)
	if n, err := f.Write([]byte("abcdef")); n != 3 || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write on a full disk = %d, %v; want a short write with ENOSPC", n, err)
	}
	if _, err := m.OpenFile("/d/c", os.O_CREATE|os.O_RDWR, 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("create on a full disk = %v, want ENOSPC", err)
	}
	m.SetSpace(-1)

	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	before := string(m.CrashImage(nil).Bytes("/d/a"))
	m.SetSyncLies(true)
	write(t, f, "lost")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	create(t, m, "/d/lost")
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	img := m.CrashImage(nil)
	if got := string(img.Bytes("/d/a")); got != before {
		t.Errorf("lying storage kept %q, want %q", got, before)
	}
	if names := img.Names("/d", ""); len(names) != 1 {
		t.Errorf("lying storage kept the names %v", names)
	}
	m.SetSyncLies(false)

	l, err := m.Lock("/d/lock")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock("/d/lock"); !errors.Is(err, vfs.ErrLocked) {
		t.Errorf("second Lock = %v, want ErrLocked", err)
	}
	l.Close()
	if _, err := m.Lock("/d/lock"); err != nil {
		t.Errorf("Lock after Close = %v", err)
	}
}
