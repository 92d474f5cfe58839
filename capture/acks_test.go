package capture_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/capture"
)

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, dir string) *capture.FileAcks {
	t.Helper()
	a, err := capture.OpenFileAcks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// checkMigrated: the store holds want in X/X and no older file is left.
func checkMigrated(t *testing.T, dir string, want uint64, wantText string) {
	t.Helper()
	if got, _ := open(t, dir).Load(); got != want {
		t.Fatalf("Load = %d, want %d", got, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, capture.AckFile))
	if err != nil || string(b) != wantText {
		t.Fatalf("%s holds %q (%v), want %q", capture.AckFile, b, err, wantText)
	}
	for _, old := range []string{"idle-ack", "extension-progress"} {
		if _, err := os.Stat(filepath.Join(dir, old)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s still there after migration (%v)", old, err)
		}
	}
}

func TestFileAcksMigratesIdleAck(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "idle-ack"), "24589384\n") // 0x1773448, the relay's decimal format
	checkMigrated(t, dir, 24589384, "0/1773448\n")
}

func TestFileAcksMigratesExtensionProgress(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "extension-progress"), "0/16B3748\n")
	checkMigrated(t, dir, 0x16B3748, "0/16B3748\n")
}

// A flow that ran both capture paths has both files: the store keeps the
// higher position (a statement about the source's WAL, whichever slot).
func TestFileAcksMigratesBothTakingTheHigher(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "idle-ack"), "100\n")
	write(t, filepath.Join(dir, "extension-progress"), "1/0\n")
	checkMigrated(t, dir, 1<<32, "1/0\n")
}

// An older file a crash left behind after the store was written holds no
// more than the store: it is removed and the store keeps its position.
func TestFileAcksStoreWinsOverLeftovers(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, capture.AckFile), "0/200\n")
	write(t, filepath.Join(dir, "idle-ack"), "256\n")
	checkMigrated(t, dir, 0x200, "0/200\n")
}

// A previous release run on the directory after the store was written (a
// downgrade) records its acknowledgements in idle-ack only, and the slot
// has them: reopening takes the higher position, or the next start would
// report a gap that is not there.
func TestFileAcksTakesANewerIdleAckAfterADowngrade(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, capture.AckFile), "0/200\n")
	write(t, filepath.Join(dir, "idle-ack"), "4096\n") // 0x1000
	checkMigrated(t, dir, 0x1000, "0/1000\n")
}

func TestFileAcksRecordSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir)
	if got, _ := a.Load(); got != 0 {
		t.Fatalf("empty store Load = %d", got)
	}
	if err := a.Record(0x2A0001234); err != nil {
		t.Fatal(err)
	}
	if got, _ := open(t, dir).Load(); got != 0x2A0001234 {
		t.Fatalf("reopened Load = %X", got)
	}
}

func TestFileAcksRefusesDamage(t *testing.T) {
	for _, name := range []string{capture.AckFile, "idle-ack", "extension-progress"} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, name), "garbage\n")
		_, err := capture.OpenFileAcks(dir)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, name)) {
			t.Fatalf("%s damaged: err = %v, want one naming the file", name, err)
		}
	}
}

// TestAckRecordedOverLostEntriesDoesNotHideTheGap: an idle advance
// recorded after a transaction stands on that transaction being in the
// transport. If the log later lost it (a damaged tail cut after a power
// loss left DURABLE stale), the record must not cover the gap: the resume
// is refused (issue 29: the slot past the lost row, the ack store past the
// slot, and the relay streamed on to DIVERGED).
//
// Mutation tried: AckedFor ignoring the basis (returning the record) turns
// it red: CheckResume accepts the resume.
func TestAckRecordedOverLostEntriesDoesNotHideTheGap(t *testing.T) {
	dir := t.TempDir()
	a, err := capture.OpenFileAcks(dir)
	if err != nil {
		t.Fatal(err)
	}
	const rowEnd, idle = 0x15B3758, 0x15B3800
	// The publisher recorded the idle advance over a transport ending at
	// the row's transaction.
	if err := a.RecordOver(idle, rowEnd); err != nil {
		t.Fatal(err)
	}
	a, err = capture.OpenFileAcks(dir) // a restart reads it back
	if err != nil {
		t.Fatal(err)
	}
	intact := capture.Resume{DurableEnd: rowEnd, SkipThrough: 0x15B36F0, SkipEqual: true}
	acked, lost, err := capture.AckedFor(a, intact)
	if err != nil || lost || acked != idle {
		t.Fatalf("intact log: AckedFor = %x, %v, %v; want the record %x", acked, lost, err, uint64(idle))
	}
	if err := capture.CheckResume("s", intact, idle, acked, "recover"); err != nil {
		t.Fatalf("intact log refused: %v", err)
	}
	lostTail := capture.Resume{DurableEnd: 0x15B3600, SkipThrough: 0x15B3500, SkipEqual: true}
	acked, lost, err = capture.AckedFor(a, lostTail)
	if err != nil || !lost || acked != 0 {
		t.Fatalf("log without the row: AckedFor = %x, %v, %v; want 0, lost", acked, lost, err)
	}
	var g *capture.GapError
	if err := capture.CheckResume("s", lostTail, idle, acked, "recover"); !errors.As(err, &g) {
		t.Fatalf("log without the row: CheckResume = %v, want a GapError", err)
	}
	// The store keeps the format older releases read.
	if b, _ := os.ReadFile(filepath.Join(dir, capture.AckFile)); string(b) != "0/15B3800\n" {
		t.Fatalf("acks holds %q, want the one-LSN format", b)
	}
	// A record an older release wrote after the basis (another LSN) has no
	// known basis, and is counted as before.
	os.WriteFile(filepath.Join(dir, capture.AckFile), []byte("0/15B3900\n"), 0o600)
	a, _ = capture.OpenFileAcks(dir)
	if acked, lost, _ := capture.AckedFor(a, lostTail); lost || acked != 0x15B3900 {
		t.Fatalf("record without a basis: %x, %v", acked, lost)
	}
}
