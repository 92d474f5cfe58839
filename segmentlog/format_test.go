package segmentlog

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/segmentlog/segmentlogtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenFiles are the files TestGoldenFormat pins, relative to the log
// directory. docs/LOG-FORMAT.md shows each as a hex dump.
var goldenFiles = []string{
	segmentName(0),
	indexName(0),
	segmentName(3),
	indexName(3),
	segmentName(4),
	filepath.Join(cursorDirName, "relay"+cursorSuffix),
}

// goldenPayloads are the entries of the golden log, offsets 0..4.
var goldenPayloads = [][]byte{
	[]byte("hello"),
	{},
	[]byte("trellara"),
	[]byte("0123456789abcdefghijklmnopqrstuvwxyzABCD"), // 40 bytes: three chunks
	[]byte("bye"),
}

func goldenOptions(fsys FS) Options {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return Options{SegmentBytesMax: 256, FrameBytesMax: 16, IndexIntervalBytes: 64, FS: fsys,
		Clock: func() time.Time { return created }}
}

// buildGolden writes the golden log: "hello" alone; "" and "trellara" as
// one commit group (AppendBatch); a 40-byte entry in three chunks plus a
// manifest, which does not fit segment 0 and starts segment 3; "bye",
// which starts segment 4; cursor "relay" at offset 2.
func buildGolden(t testing.TB) *segmentlogtest.FS {
	m := segmentlogtest.NewFS()
	l := mustOpen(t, memDir, goldenOptions(m))
	mustAppend(t, l, goldenPayloads[0])
	if _, err := l.AppendBatch(goldenPayloads[1:3]); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, goldenPayloads[3])
	mustAppend(t, l, goldenPayloads[4])
	if err := l.CommitCursor("relay", 2); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return m
}

// hexDump formats b like `hexdump -C` without the trailing length line.
func hexDump(b []byte) string {
	var sb strings.Builder
	for off := 0; off < len(b); off += 16 {
		row := b[off:min(off+16, len(b))]
		fmt.Fprintf(&sb, "%08x ", off)
		for i := range 16 {
			if i == 8 {
				sb.WriteByte(' ')
			}
			if i < len(row) {
				fmt.Fprintf(&sb, " %02x", row[i])
			} else {
				sb.WriteString("   ")
			}
		}
		sb.WriteString("  |")
		for _, c := range row {
			if c < 0x20 || c > 0x7e {
				c = '.'
			}
			sb.WriteByte(c)
		}
		sb.WriteString("|\n")
	}
	return sb.String()
}

func TestGoldenFormat(t *testing.T) {
	m := buildGolden(t)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "LOG-FORMAT.md"))
	if err != nil {
		t.Fatalf("docs/LOG-FORMAT.md: %v", err)
	}
	for _, name := range goldenFiles {
		got := m.Bytes(filepath.Join(memDir, name))
		if got == nil {
			t.Fatalf("golden log has no %s", name)
		}
		golden := filepath.Join("testdata", "golden", name)
		if *update {
			os.MkdirAll(filepath.Dir(golden), 0o755)
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run with -update to create)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the writer no longer produces the golden bytes; the on-disk format changed.\ngot:\n%swant:\n%s", name, hexDump(got), hexDump(want))
		}
		// The documentation shows the same bytes.
		block := "```text\n" + hexDump(want) + "```"
		if !bytes.Contains(doc, []byte(block)) {
			t.Errorf("docs/LOG-FORMAT.md does not show %s as:\n%s", name, block)
		}
	}

	// The golden files are readable as a log, so a change to the reader
	// that breaks version 1 fails here too.
	dir := t.TempDir()
	for _, name := range goldenFiles {
		b, _ := os.ReadFile(filepath.Join("testdata", "golden", name))
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	l := mustOpen(t, dir, goldenOptions(nil))
	defer l.Close()
	checkEntries(t, readAll(t, l, 0), goldenPayloads)
	if c, ok, err := l.CursorOffset("relay"); c != 2 || !ok || err != nil {
		t.Fatalf("golden cursor = %d %v %v", c, ok, err)
	}
}

func TestFrameEncoding(t *testing.T) {
	// Hand-checked fields of one frame, independent of the writer.
	f := appendFrame(nil, frameChunk, 0x0102030405060708, 3, []byte("abc"))
	if len(f) != frameHeaderSize+3 {
		t.Fatalf("frame is %d bytes", len(f))
	}
	if le.Uint32(f[4:]) != 3 || le.Uint64(f[8:]) != 0x0102030405060708 || f[24] != 2 || f[25] != 0 || le.Uint32(f[28:]) != 3 {
		t.Fatalf("header fields misplaced: % x", f[:frameHeaderSize])
	}
	h, p, n, err := readFrame(f)
	if err != nil || string(p) != "abc" || n != len(f) || h.groupStart() != 0x0102030405060705 {
		t.Fatalf("readFrame = %+v %q %d %v", h, p, n, err)
	}
	// Every single-bit flip in the header or payload is detected.
	for i := range len(f) * 8 {
		b := bytes.Clone(f)
		b[i/8] ^= 1 << (i % 8)
		if _, _, _, err := readFrame(b); err == nil {
			t.Fatalf("bit flip at byte %d bit %d went undetected", i/8, i%8)
		}
	}
	for cut := range len(f) {
		if _, _, _, err := readFrame(f[:cut]); err == nil {
			t.Fatalf("frame cut to %d bytes decoded", cut)
		}
	}
}
