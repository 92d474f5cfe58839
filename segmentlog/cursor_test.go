package segmentlog

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/segmentlog/segmentlogtest"
)

func TestCursorDurableMonotonicResume(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallOpts())
	var want [][]byte
	for i := range 50 {
		p := payloadFor(9, i, 200)
		mustAppend(t, l, p)
		want = append(want, p)
	}
	if _, ok, err := l.CursorOffset("relay"); ok || err != nil {
		t.Fatalf("unregistered cursor: ok=%v err=%v", ok, err)
	}
	if _, err := l.NewCursorReader("relay"); !errors.Is(err, ErrUnknownCursor) {
		t.Fatalf("NewCursorReader of unknown cursor = %v", err)
	}
	steps := []struct {
		offset uint64
		err    error
	}{
		{10, nil},
		{10, nil}, // same offset: no-op
		{25, nil},
		{24, ErrCursorRegress},
		{0, ErrCursorRegress},
		{51, ErrOutOfRange},
		{50, nil}, // caught up: equal to NextOffset
	}
	for _, s := range steps {
		if err := l.CommitCursor("relay", s.offset); !errors.Is(err, s.err) {
			t.Fatalf("CommitCursor(%d) = %v, want %v", s.offset, err, s.err)
		}
	}
	if err := l.CommitCursor("sink-a", 17); err != nil {
		t.Fatal(err)
	}
	l.Close()

	l = mustOpen(t, dir, smallOpts())
	defer l.Close()
	for name, at := range map[string]uint64{"relay": 50, "sink-a": 17} {
		got, ok, err := l.CursorOffset(name)
		if err != nil || !ok || got != at {
			t.Fatalf("CursorOffset(%s) after reopen = %d %v %v, want %d", name, got, ok, err, at)
		}
	}
	// A consumer resumes exactly at what it committed.
	r, err := l.NewCursorReader("sink-a")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	off, p, err := nextCtx(r)
	if err != nil || off != 17 || !bytes.Equal(p, want[17]) {
		t.Fatalf("resumed at %d (%v), want 17", off, err)
	}
	if err := l.CommitCursor("relay", 40); !errors.Is(err, ErrCursorRegress) {
		t.Fatalf("regress after reopen = %v", err)
	}
	if err := l.ResetCursor("relay", 5); err != nil {
		t.Fatalf("ResetCursor: %v", err)
	}
	if got, _, _ := l.CursorOffset("relay"); got != 5 {
		t.Fatalf("after ResetCursor offset = %d", got)
	}
	if err := l.DeleteCursor("relay"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := l.CursorOffset("relay"); ok {
		t.Fatal("deleted cursor still registered")
	}
	if err := l.DeleteCursor("relay"); !errors.Is(err, ErrUnknownCursor) {
		t.Fatalf("second DeleteCursor = %v", err)
	}
}

func TestCursorSurvivesPowerLoss(t *testing.T) {
	m := segmentlogtest.NewFS()
	l := mustOpen(t, memDir, memOpts(m))
	for i := range 5 {
		mustAppend(t, l, payloadFor(1, i, 50))
	}
	if err := l.CommitCursor("c", 3); err != nil {
		t.Fatal(err)
	}
	img := m.CrashImage(nil) // no Close: the process dies right after the commit
	l.Close()
	l2 := mustOpen(t, memDir, memOpts(img))
	defer l2.Close()
	if got, ok, err := l2.CursorOffset("c"); got != 3 || !ok || err != nil {
		t.Fatalf("cursor after power loss = %d %v %v, want 3", got, ok, err)
	}
}

func TestCursorNames(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	for _, name := range []string{"", ".hidden", "a/b", "../x", "sp ace", strings.Repeat("x", 129), "ü"} {
		if err := l.CommitCursor(name, 0); !errors.Is(err, ErrInvalidCursorName) {
			t.Errorf("CommitCursor(%q) = %v, want ErrInvalidCursorName", name, err)
		}
	}
	for _, name := range []string{"a", "relay-1", "sink.kafka_2", strings.Repeat("x", 128)} {
		if err := l.CommitCursor(name, 0); err != nil {
			t.Errorf("CommitCursor(%q) = %v", name, err)
		}
	}
}

func TestDamagedCursorFileIsCorruption(t *testing.T) {
	m := segmentlogtest.NewFS()
	l := mustOpen(t, memDir, memOpts(m))
	mustAppend(t, l, []byte("x"))
	if err := l.CommitCursor("c", 1); err != nil {
		t.Fatal(err)
	}
	l.Close()
	path := filepath.Join(memDir, cursorDirName, "c"+cursorSuffix)
	b := m.Bytes(path)
	b[9] ^= 1
	m.SetBytes(path, b)
	_, _, err := Open(memDir, memOpts(m))
	if c := asCorruption(t, err); c.Path != path {
		t.Fatalf("corruption names %s, want %s", c.Path, path)
	}
}
