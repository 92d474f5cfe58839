package segmentlog

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"
)

// File naming. A segment is named by its base offset in 20 decimal digits
// (wide enough for any uint64) so that lexical order is offset order.
const (
	segmentSuffix = ".seg"
	indexSuffix   = ".idx"
	tmpSuffix     = ".tmp"
	tornInfix     = ".seg.torn-"
	cursorDirName = "cursors"
	cursorSuffix  = ".cursor"
	lockFileName  = "LOCK"
)

func segmentName(base uint64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }
func indexName(base uint64) string   { return fmt.Sprintf("%020d%s", base, indexSuffix) }

// parseBaseName parses "<20 digits><suffix>".
func parseBaseName(name, suffix string) (uint64, bool) {
	stem, ok := strings.CutSuffix(name, suffix)
	if !ok || len(stem) != 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(stem, 10, 64)
	return v, err == nil
}

// segment is the in-memory state of one segment file. Fields other than
// base, path and created change only under Log.mu, written by the flusher
// goroutine (active segment) or by Open.
type segment struct {
	base    uint64
	path    string
	created int64 // unix nanoseconds from the segment header

	// size is the number of committed (fsynced) bytes, header included.
	size int64
	// end is the offset after the last committed entry.
	end uint64
	// index is the sparse offset index. Elements are only ever appended,
	// so a reader may keep using a prefix it copied under the lock.
	index []indexEntry
	// lastIndexed is the position of the last indexed entry (or the
	// header size), from which the next index point is spaced.
	lastIndexed int64
}

// floorEntry returns the index point at or before offset: where a seek starts
// scanning. With no such point the scan starts after the header.
func floorEntry(entries []indexEntry, base, offset uint64) indexEntry {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].offset > offset })
	if i == 0 {
		return indexEntry{offset: base, pos: segmentHeaderSize}
	}
	return entries[i-1]
}

// window is a read buffer over an io.ReaderAt limited to [0, limit). It
// turns the many small header reads of a scan into few large reads.
type window struct {
	ra    io.ReaderAt
	limit int64
	buf   []byte
	start int64 // file position of buf[0]
	n     int   // valid bytes in buf
}

const windowBytes = 256 << 10

func newWindow(ra io.ReaderAt, limit int64) *window {
	return &window{ra: ra, limit: limit, buf: make([]byte, windowBytes)}
}

func (w *window) reset(ra io.ReaderAt, limit int64) {
	w.ra, w.limit, w.n, w.start = ra, limit, 0, 0
}

// peek returns up to n bytes at pos (fewer only at limit). The slice is
// valid until the next call. n larger than the buffer grows it, so callers
// keep n bounded (a header, or a payload up to the frame limit).
func (w *window) peek(pos int64, n int) ([]byte, error) {
	if pos >= w.limit {
		return nil, nil
	}
	if rem := w.limit - pos; int64(n) > rem {
		n = int(rem)
	}
	if pos >= w.start && pos+int64(n) <= w.start+int64(w.n) {
		off := int(pos - w.start)
		return w.buf[off : off+n], nil
	}
	if n > len(w.buf) {
		w.buf = make([]byte, n)
	}
	want := len(w.buf)
	if rem := w.limit - pos; int64(want) > rem {
		want = int(rem)
	}
	got, err := w.ra.ReadAt(w.buf[:want], pos)
	if err != nil && !(errors.Is(err, io.EOF) && got >= n) {
		if errors.Is(err, io.EOF) {
			// The file is shorter than the limit we were told; hand back
			// what there is and let the frame decoder call it truncated.
			w.start, w.n = pos, got
			return w.buf[:got], nil
		}
		w.n = 0
		return nil, err
	}
	w.start, w.n = pos, got
	return w.buf[:n], nil
}

// scanDamage describes the first frame of a segment that failed to decode.
type scanDamage struct {
	cut        int64  // start of the incomplete entry: where a repair truncates
	pos        int64  // position of the failing frame
	expect     uint64 // offset the failing frame should have carried
	searchFrom int64  // where to look for intact frames after the damage
	reason     string
}

// scanResult is what a full scan of a segment learned.
type scanResult struct {
	header      segmentHeader
	size        int64 // end of the last whole entry
	end         uint64
	index       []indexEntry
	lastIndexed int64
	damage      *scanDamage
}

// scanSegment reads a segment from the header to fileSize, validating every
// frame, and stops at the first frame that does not decode. Frames that
// decode but break the log's own rules (an offset out of sequence, a
// manifest that does not match its chunks) cannot come from an interrupted
// write, so they are reported as a *CorruptionError immediately.
func scanSegment(ra io.ReaderAt, path string, base uint64, fileSize, interval, payloadMax int64) (scanResult, error) {
	w := newWindow(ra, fileSize)
	hb, err := w.peek(0, segmentHeaderSize)
	if err != nil {
		return scanResult{}, fmt.Errorf("segmentlog: read %s: %w", path, err)
	}
	hdr, err := decodeSegmentHeader(hb)
	if err != nil {
		return scanResult{}, &CorruptionError{Path: path, Position: 0, Reason: err.Error()}
	}
	if hdr.base != base {
		return scanResult{}, &CorruptionError{Path: path, Position: 8,
			Reason: fmt.Sprintf("header base offset %d does not match the file name", hdr.base)}
	}
	res := scanResult{header: hdr, size: segmentHeaderSize, end: base, lastIndexed: segmentHeaderSize}
	pos := int64(segmentHeaderSize)
	var ch chunkState
	for pos < fileSize {
		entryStart := pos
		if ch.active {
			entryStart = ch.start
		}
		damage := func(reason string, searchFrom int64) {
			res.damage = &scanDamage{cut: entryStart, pos: pos, expect: res.end, searchFrom: searchFrom, reason: reason}
		}
		hb, err := w.peek(pos, frameHeaderSize)
		if err != nil {
			return scanResult{}, fmt.Errorf("segmentlog: read %s at %d: %w", path, pos, err)
		}
		h, err := decodeFrameHeader(hb)
		if err != nil {
			damage(err.Error(), pos+1)
			break
		}
		if pos+h.frameSize() > fileSize {
			damage(fmt.Sprintf("frame of %d bytes extends past the end of the file (%d)", h.frameSize(), fileSize), pos+1)
			break
		}
		fb, err := w.peek(pos, int(h.frameSize()))
		if err != nil {
			return scanResult{}, fmt.Errorf("segmentlog: read %s at %d: %w", path, pos, err)
		}
		_, payload, _, err := readFrame(fb)
		if err != nil {
			damage(err.Error(), pos+1)
			break
		}
		done, err := ch.add(h, payload, res.end, pos, payloadMax)
		if err != nil {
			return scanResult{}, &CorruptionError{Path: path, Position: pos, Offset: h.offset, HasOffset: true, Reason: err.Error()}
		}
		pos += h.frameSize()
		if done {
			if entryStart-res.lastIndexed >= interval {
				res.index = append(res.index, indexEntry{offset: res.end, pos: entryStart})
				res.lastIndexed = entryStart
			}
			res.end++
			res.size = pos
		}
	}
	if res.damage == nil && ch.active {
		res.damage = &scanDamage{cut: ch.start, pos: ch.start, expect: res.end, searchFrom: fileSize,
			reason: fmt.Sprintf("chunked entry at offset %d has %d chunks and no manifest", res.end, ch.chunks)}
	}
	return res, nil
}

// chunkState tracks a chunked entry while its frames are read in order.
// The same rules apply in scans and in readers.
type chunkState struct {
	active bool
	start  int64 // position of the first chunk
	chunks uint32
	bytes  uint64
	hash   *xxh3.Hasher // of the reassembled payload, checked against the manifest
}

// add checks frame h (whose payload is valid) against the entry expected
// at offset next and reports whether it completes that entry.
func (c *chunkState) add(h frameHeader, payload []byte, next uint64, pos int64, payloadMax int64) (bool, error) {
	if h.offset != next {
		return false, fmt.Errorf("%s frame carries offset %d where offset %d was expected", h.typ, h.offset, next)
	}
	switch h.typ {
	case frameFull:
		if c.active {
			return false, fmt.Errorf("full frame inside the chunked entry at offset %d", next)
		}
		return true, nil
	case frameChunk:
		if !c.active {
			*c = chunkState{active: true, start: pos, hash: xxh3.New()}
		}
		_, _ = c.hash.Write(payload) // never fails
		c.chunks++
		c.bytes += uint64(len(payload))
		if c.bytes > uint64(payloadMax) {
			return false, fmt.Errorf("chunked entry grows past %d bytes", payloadMax)
		}
		return false, nil
	case frameManifest:
		m, err := decodeManifest(payload)
		if err != nil {
			return false, err
		}
		if !c.active || m.chunks != c.chunks || m.totalBytes != c.bytes {
			return false, fmt.Errorf("manifest names %d chunks of %d bytes but %d chunks of %d bytes precede it",
				m.chunks, m.totalBytes, c.chunks, c.bytes)
		}
		if c.hash.Sum64() != m.payloadSum {
			return false, fmt.Errorf("reassembled payload checksum %#x does not match the manifest's %#x", c.hash.Sum64(), m.payloadSum)
		}
		*c = chunkState{}
		return true, nil
	}
	return false, fmt.Errorf("unknown frame type %d", h.typ)
}

// findLaterGroup looks for intact frames after a damaged one, and returns
// the first whose commit group started after offset expect, if any. Such
// a frame proves that the damaged bytes had been fsynced (the log fsyncs a
// commit group before it writes the next), so the damage is not a torn
// write. Frames of the damaged entry's own group were never acknowledged
// and prove nothing. The search tries every byte position because a
// damaged length cannot be trusted to find the next frame.
func findLaterGroup(ra io.ReaderAt, from, fileSize int64, expect uint64) (int64, bool, error) {
	w := newWindow(ra, fileSize)
	for pos := from; pos+frameHeaderSize <= fileSize; pos++ {
		hb, err := w.peek(pos, frameHeaderSize)
		if err != nil {
			return 0, false, err
		}
		if len(hb) < frameHeaderSize {
			break
		}
		// Cheap filters before hashing: type byte, flags and reserved
		// bytes, and an offset that could follow the damage.
		if t := hb[24]; t < byte(frameFull) || t > byte(frameManifest) || hb[25] != 0 || hb[26] != 0 || hb[27] != 0 {
			continue
		}
		if le.Uint64(hb[8:]) < expect {
			continue
		}
		h, err := decodeFrameHeader(hb)
		if err != nil || pos+h.frameSize() > fileSize || h.groupStart() <= expect {
			continue
		}
		fb, err := w.peek(pos, int(h.frameSize()))
		if err != nil {
			return 0, false, err
		}
		if _, _, _, err := readFrame(fb); err == nil {
			return pos, true, nil
		}
	}
	return 0, false, nil
}
