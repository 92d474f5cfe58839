package hoptrace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStampsReachTheFile: off, a stamp writes nothing; on, each stamp is
// one "hop lsn nanos" line, in order, and stamps after Close are dropped.
// (Mutation: drop the Flush in Close and the file is empty.)
func TestStampsReachTheFile(t *testing.T) {
	Stamp(Received, 1) // off: dropped
	p := filepath.Join(t.TempDir(), "hops")
	if err := Open(p); err != nil {
		t.Fatal(err)
	}
	if !On() {
		t.Fatal("On() = false after Open")
	}
	at := time.Unix(100, 5)
	At(Commit, 42, at)
	Stamp(Durable, 42)
	if err := Close(); err != nil {
		t.Fatal(err)
	}
	Stamp(Committed, 42) // closed: dropped
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 || lines[0] != "commit 42 100000000005" || !strings.HasPrefix(lines[1], "durable 42 ") {
		t.Fatalf("file:\n%s", raw)
	}
}
