package segmentlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zeebo/xxh3"
)

// The durable end is how the writer tells readers in other processes how
// far the log is committed. After every commit group's fdatasync (and
// once after Open's recovery) the writer replaces the file DURABLE in the
// log directory, by writing DURABLE.tmp and renaming it over DURABLE:
//
//	 0               4       6       8
//	+---------------+-------+-------+-------------------------------+
//	| magic "TRSD"  | ver=1 | 0     | active segment base offset    |
//	+---------------+-------+-------+-------------------------------+
//	16                              24                              32
//	+-------------------------------+-------------------------------+
//	| committed bytes of the active | next offset (every offset     |
//	| segment, header included      | below it is durable)          |
//	+-------------------------------+-------------------------------+
//	32                              40
//	+-------------------------------+
//	| XXH3-64 of bytes [0, 32)      |
//	+-------------------------------+
//
// Little-endian. The record only ever names bytes that were fsynced
// before it was written, so a reader that stops at it never sees a torn or
// unsynced tail, even when the writer's next fsync fails (the writer then
// stops publishing). The file itself is not fsynced: after a power loss it
// may be old (it names less than is durable) or damaged (a reader waits
// for the writer to publish again); the writer's next Open republishes it.
// Segments below the active one are sealed and committed in full.
const (
	durableMagic    = "TRSD"
	durableVersion  = 1
	durableFileSize = 40
	durableFileName = "DURABLE"
)

// durableRecord is the decoded DURABLE file.
type durableRecord struct {
	activeBase uint64
	activeSize int64
	next       uint64
}

func encodeDurable(d durableRecord) []byte {
	b := make([]byte, durableFileSize)
	copy(b, durableMagic)
	le.PutUint16(b[4:], durableVersion)
	le.PutUint64(b[8:], d.activeBase)
	le.PutUint64(b[16:], uint64(d.activeSize))
	le.PutUint64(b[24:], d.next)
	le.PutUint64(b[32:], xxh3.Hash(b[:32]))
	return b
}

func decodeDurable(b []byte) (durableRecord, error) {
	if len(b) != durableFileSize {
		return durableRecord{}, fmt.Errorf("durable-end file is %d bytes, want %d", len(b), durableFileSize)
	}
	if le.Uint64(b[32:]) != xxh3.Hash(b[:32]) {
		return durableRecord{}, errors.New("durable-end checksum mismatch")
	}
	if string(b[:4]) != durableMagic {
		return durableRecord{}, fmt.Errorf("bad durable-end magic %q", b[:4])
	}
	if v := le.Uint16(b[4:]); v != durableVersion {
		return durableRecord{}, fmt.Errorf("unsupported durable-end format version %d", v)
	}
	if r := le.Uint16(b[6:]); r != 0 {
		return durableRecord{}, fmt.Errorf("reserved durable-end bytes are %#x, want 0", r)
	}
	d := durableRecord{activeBase: le.Uint64(b[8:]), activeSize: int64(le.Uint64(b[16:])), next: le.Uint64(b[24:])}
	if d.activeSize < segmentHeaderSize || d.next < d.activeBase {
		return durableRecord{}, fmt.Errorf("inconsistent durable end: segment %d, %d bytes, next offset %d", d.activeBase, d.activeSize, d.next)
	}
	return d, nil
}

// publishDurable replaces DURABLE with the committed end of seg. Called by
// the flusher after a successful fsync (and by Open), never before: the
// record must not name a byte that is not yet durable. It is also never
// after: the flusher answers a group's appends only once the record names
// the group, so "acknowledged" implies "at or below DURABLE", which is
// what lets Open tell a torn tail (past it) from damaged acknowledged
// data (at or below it). A failure is returned, and the flusher makes it
// fatal: the group is durable but not acknowledged.
func (l *Log) publishDurable(seg *segment, next uint64) error {
	path := filepath.Join(l.dir, durableFileName)
	b := encodeDurable(durableRecord{activeBase: seg.base, activeSize: seg.size, next: next})
	tmp := path + tmpSuffix
	f, err := l.fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, fileMode)
	if err == nil {
		var n int
		n, err = f.Write(b)
		if err == nil && n < len(b) {
			err = fmt.Errorf("short write of %d bytes", n)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = l.fs.Rename(tmp, path)
	}
	if err != nil {
		_ = l.fs.Remove(tmp)
		return fmt.Errorf("publish the durable end at offset %d: %w", next, err)
	}
	return nil
}

// readDurable reads DURABLE.
func readDurable(fsys FS, dir string) (durableRecord, error) {
	path := filepath.Join(dir, durableFileName)
	b, err := readFileBounded(fsys, path, durableFileSize)
	if err != nil {
		return durableRecord{}, err
	}
	d, err := decodeDurable(b)
	if err != nil {
		return durableRecord{}, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}
