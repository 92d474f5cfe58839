package segmentlog

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// The benchmarks come in pairs: the log, then a raw-disk baseline doing the
// same I/O without the log, in the same run and directory, so
// `go test -bench . ./segmentlog` prints them side by side. Every
// benchmark reports payload throughput (b.SetBytes(1024) per 1 KiB entry);
// the raw baselines write or read the log's 1056-byte frame per entry
// (32-byte header + 1 KiB), so the bytes that reach the disk are the same.

const (
	benchPayloadBytes = 1 << 10
	benchRecordBytes  = frameHeaderSize + benchPayloadBytes
	benchWriters      = 8
)

// rawAppendFile opens a fresh file for the raw baselines the way the log
// opens a segment.
func rawAppendFile(b *testing.B) *os.File {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw"), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkAppendGroupCommit8Writers1KiB: 8 goroutines append 1 KiB
// payloads with fsync always; they share fdatasyncs through group commit.
func BenchmarkAppendGroupCommit8Writers1KiB(b *testing.B) {
	l := mustOpen(b, b.TempDir(), Options{})
	defer l.Close()
	payload := make([]byte, benchPayloadBytes)
	b.SetBytes(benchPayloadBytes)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range benchWriters {
		n := b.N / benchWriters
		if w < b.N%benchWriters {
			n++
		}
		wg.Go(func() {
			for range n {
				if _, err := l.Append(payload); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkRawWriteFdatasyncPer8x1KiB is the baseline for group commit: 8
// records per write, one fdatasync per 8 records (what group commit
// achieves at best with 8 writers).
func BenchmarkRawWriteFdatasyncPer8x1KiB(b *testing.B) {
	f := rawAppendFile(b)
	batch := make([]byte, benchWriters*benchRecordBytes)
	b.SetBytes(benchPayloadBytes)
	b.ResetTimer()
	for done := 0; done < b.N; done += benchWriters {
		n := min(benchWriters, b.N-done)
		if _, err := f.Write(batch[:n*benchRecordBytes]); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendSingleWriter1KiB: one writer, fsync always: every
// Append pays one fdatasync.
func BenchmarkAppendSingleWriter1KiB(b *testing.B) {
	l := mustOpen(b, b.TempDir(), Options{})
	defer l.Close()
	payload := make([]byte, benchPayloadBytes)
	b.SetBytes(benchPayloadBytes)
	b.ResetTimer()
	for range b.N {
		if _, err := l.Append(payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawWriteFdatasync1KiB is the baseline for the single writer: a
// write+fdatasync loop of the same record size.
func BenchmarkRawWriteFdatasync1KiB(b *testing.B) {
	f := rawAppendFile(b)
	rec := make([]byte, benchRecordBytes)
	b.SetBytes(benchPayloadBytes)
	b.ResetTimer()
	for range b.N {
		if _, err := f.Write(rec); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
	}
}

// benchReadEntries is the size of the log the read benchmarks cycle over
// (32 MiB of payload, in the page cache after the fill).
const benchReadEntries = 32 << 10

var benchReadLog struct {
	once sync.Once
	dir  string
	err  error
}

// readBenchDir fills a log once per process for both read benchmarks.
func readBenchDir(b *testing.B) string {
	benchReadLog.once.Do(func() {
		dir, err := os.MkdirTemp("", "segmentlog-bench-read-")
		if err != nil {
			benchReadLog.err = err
			return
		}
		benchReadLog.dir = dir
		l, _, err := Open(dir, Options{})
		if err != nil {
			benchReadLog.err = err
			return
		}
		batch := make([][]byte, 1024)
		for i := range batch {
			batch[i] = make([]byte, benchPayloadBytes)
		}
		for range benchReadEntries / len(batch) {
			if _, err := l.AppendBatch(batch); err != nil {
				benchReadLog.err = err
				break
			}
		}
		if err := l.Close(); err != nil && benchReadLog.err == nil {
			benchReadLog.err = err
		}
	})
	if benchReadLog.err != nil {
		b.Fatal(benchReadLog.err)
	}
	return benchReadLog.dir
}

// BenchmarkReadSequential1KiB reads 1 KiB entries in order, checksums
// verified, each returned as a fresh slice.
func BenchmarkReadSequential1KiB(b *testing.B) {
	l := mustOpen(b, readBenchDir(b), Options{})
	defer l.Close()
	ctx := context.Background()
	r := l.NewReader(0)
	b.SetBytes(benchPayloadBytes)
	b.ResetTimer()
	for range b.N {
		if r.Offset() == benchReadEntries {
			r.Close()
			r = l.NewReader(0)
		}
		if _, _, err := r.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
	r.Close()
}

// benchSink keeps the raw read baseline's copies on the heap, as the
// reader's are (Next returns a slice the caller owns).
var benchSink []byte

// BenchmarkRawReadSequential1KiB is the read baseline: the same segment
// bytes through 256 KiB pread calls, each 1 KiB payload copied into a new
// heap slice, no decoding or checksums.
func BenchmarkRawReadSequential1KiB(b *testing.B) {
	f, err := os.Open(filepath.Join(readBenchDir(b), segmentName(0)))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	buf := make([]byte, windowBytes)
	var pos int64
	n, off := 0, 0
	b.SetBytes(benchPayloadBytes)
	b.ResetTimer()
	for range b.N {
		if off+benchRecordBytes > n {
			if pos+benchRecordBytes > st.Size() {
				pos = 0
			}
			n, _ = f.ReadAt(buf, pos)
			pos += int64(n)
			off = 0
		}
		out := make([]byte, benchPayloadBytes)
		copy(out, buf[off+frameHeaderSize:off+benchRecordBytes])
		benchSink = out
		off += benchRecordBytes
	}
}
