package segmentlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/zeebo/xxh3"
)

// Reader reads entries in offset order from a starting offset, following
// the log as it grows. It only ever sees committed (fsynced) entries, so
// nothing it returns can disappear in a crash. A Reader is not safe for
// concurrent use; use one per goroutine.
type Reader struct {
	l    *Log
	name string // cursor name, for past-retention errors; "" if anonymous
	next uint64 // offset Next returns next

	seg   *segment // segment holding next, or nil before positioning
	f     File
	pos   int64 // position of the first frame of entry next in seg
	win   *window
	err   error // sticky corruption error
	done  bool
	limit int64
}

// NewReader returns a Reader whose first Next returns the entry at
// offset from. from == NextOffset waits for the next append.
func (l *Log) NewReader(from uint64) *Reader {
	return &Reader{l: l, next: from}
}

// NewCursorReader returns a Reader that starts at cursor name's committed
// offset and whose retention errors name the consumer. The reader does not
// move the cursor: commit with CommitCursor after processing.
func (l *Log) NewCursorReader(name string) (*Reader, error) {
	if err := l.refreshExpiredCursor(name); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usableLocked(); err != nil {
		return nil, err
	}
	c, ok := l.cursors[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownCursor, name)
	}
	if c.pastRetention {
		return nil, &PastRetentionError{Consumer: name, Offset: c.offset, FirstOffset: l.segs[0].base}
	}
	return &Reader{l: l, name: name, next: c.offset}, nil
}

// Offset returns the offset the next call to Next will return.
func (r *Reader) Offset() uint64 { return r.next }

// Close releases the reader's file handle.
func (r *Reader) Close() error {
	r.done = true
	if r.f != nil {
		err := r.f.Close()
		r.f = nil
		return err
	}
	return nil
}

// Next returns the next entry, blocking until one is appended, ctx is
// done (ctx.Err()) or the log is closed (ErrClosed). The payload belongs
// to the caller. Errors: *PastRetentionError when retention removed the
// offset, *CorruptionError when stored bytes fail validation (sticky),
// ErrOutOfRange when the reader started beyond the end of the log.
func (r *Reader) Next(ctx context.Context) (uint64, []byte, error) {
	if r.done {
		return 0, nil, ErrClosed
	}
	if r.err != nil {
		return 0, nil, r.err
	}
	l := r.l
	for {
		l.mu.Lock()
		if err := l.usableLocked(); err != nil {
			l.mu.Unlock()
			return 0, nil, err
		}
		first := l.segs[0].base
		if c, ok := l.cursors[r.name]; ok && r.name != "" && c.pastRetention {
			l.mu.Unlock()
			return 0, nil, &PastRetentionError{Consumer: r.name, Offset: c.offset, FirstOffset: first}
		}
		if r.next < first {
			l.mu.Unlock()
			return 0, nil, &PastRetentionError{Consumer: r.name, Offset: r.next, FirstOffset: first}
		}
		if r.next > l.next {
			end := l.next
			l.mu.Unlock()
			return 0, nil, fmt.Errorf("%w: reader at offset %d, log ends at %d", ErrOutOfRange, r.next, end)
		}
		if r.next == l.next {
			wake := l.notify
			l.mu.Unlock()
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return 0, nil, ctx.Err()
			case <-l.closing:
				return 0, nil, ErrClosed
			}
		}
		var start indexEntry
		reposition := r.seg == nil || r.next < r.seg.base || r.next >= r.seg.end
		if reposition {
			r.seg = l.segmentForLocked(r.next)
			start = floorEntry(r.seg.index, r.seg.base, r.next)
		}
		seg := r.seg
		r.limit = seg.size
		l.mu.Unlock()

		if reposition {
			if err := r.open(seg, start); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					// Retention removed the segment after we looked it
					// up; the next pass reports PastRetentionError.
					l.mu.Lock()
					gone := r.next < l.segs[0].base
					l.mu.Unlock()
					if gone {
						r.seg = nil
						continue
					}
				}
				return 0, nil, err
			}
		}
		r.win.limit = r.limit
		payload, end, err := readEntry(r.win, seg.path, r.pos, r.next, l.opts.PayloadBytesMax)
		if err != nil {
			if IsCorruption(err) {
				r.err = err
			}
			return 0, nil, err
		}
		off := r.next
		r.next++
		r.pos = end
		return off, payload, nil
	}
}

// open switches the reader to seg and positions it at r.next, starting
// from index point start.
func (r *Reader) open(seg *segment, start indexEntry) error {
	if r.f != nil {
		_ = r.f.Close()
		r.f = nil
	}
	f, err := r.l.fs.OpenFile(seg.path, os.O_RDONLY, 0)
	if err != nil {
		r.seg = nil
		return err
	}
	r.f = f
	if r.win == nil {
		r.win = newWindow(f, r.limit)
	} else {
		r.win.reset(f, r.limit)
	}
	pos, err := seekEntry(r.win, seg.path, start, r.next)
	if err != nil {
		r.seg = nil
		if IsCorruption(err) {
			r.err = err
		}
		return err
	}
	r.pos = pos
	return nil
}

// seekEntry walks frame headers from index point start to the first frame
// of entry target and returns its position. It reads headers only: the
// payloads it skips are verified when they are read.
func seekEntry(w *window, path string, start indexEntry, target uint64) (int64, error) {
	pos := start.pos
	for {
		hb, err := w.peek(pos, frameHeaderSize)
		if err != nil {
			return 0, fmt.Errorf("segmentlog: read %s at byte %d: %w", path, pos, err)
		}
		h, err := decodeFrameHeader(hb)
		if err != nil {
			return 0, &CorruptionError{Path: path, Position: pos, Offset: target, HasOffset: true, Reason: "seeking: " + err.Error()}
		}
		if h.offset == target {
			return pos, nil
		}
		if h.offset > target {
			return 0, &CorruptionError{Path: path, Position: pos, Offset: target, HasOffset: true,
				Reason: fmt.Sprintf("seeking: found offset %d before offset %d", h.offset, target)}
		}
		pos += h.frameSize()
	}
}

// largeFrameBytes is the payload size above which a frame is read straight
// into the caller's buffer instead of through the window.
const largeFrameBytes = windowBytes / 2

// readEntry reads the entry at offset whose first frame is at pos and
// returns its payload and the position after its last frame. Every
// failure here is on committed bytes and therefore corruption.
func readEntry(w *window, path string, pos int64, offset uint64, payloadMax int64) ([]byte, int64, error) {
	corrupt := func(at int64, reason string) error {
		return &CorruptionError{Path: path, Position: at, Offset: offset, HasOffset: true, Reason: reason}
	}
	var ch chunkState
	var out []byte
	for {
		hb, err := w.peek(pos, frameHeaderSize)
		if err != nil {
			return nil, 0, fmt.Errorf("segmentlog: read %s at byte %d: %w", path, pos, err)
		}
		h, err := decodeFrameHeader(hb)
		if err != nil {
			return nil, 0, corrupt(pos, err.Error())
		}
		if pos+h.frameSize() > w.limit {
			return nil, 0, corrupt(pos, fmt.Sprintf("frame of %d bytes runs past the committed end of the segment (%d)", h.frameSize(), w.limit))
		}
		var payload []byte
		if h.length > largeFrameBytes {
			// Read big payloads straight into their destination.
			dst := out
			if h.typ == frameFull {
				dst = nil
			}
			dst = slices.Grow(dst, int(h.length))
			payload = dst[len(dst) : len(dst)+int(h.length)]
			if _, err := w.ra.ReadAt(payload, pos+frameHeaderSize); err != nil {
				if errors.Is(err, io.EOF) {
					return nil, 0, corrupt(pos, "segment file is shorter than its committed size")
				}
				return nil, 0, fmt.Errorf("segmentlog: read %s at byte %d: %w", path, pos, err)
			}
			if xxh3.Hash(payload) != h.payloadSum {
				return nil, 0, corrupt(pos, errPayloadChecksum.Error())
			}
			if h.typ == frameChunk {
				out = dst[:len(dst)+int(h.length)]
			}
		} else {
			fb, err := w.peek(pos, int(h.frameSize()))
			if err != nil {
				return nil, 0, fmt.Errorf("segmentlog: read %s at byte %d: %w", path, pos, err)
			}
			_, payload, _, err = readFrame(fb)
			if err != nil {
				return nil, 0, corrupt(pos, err.Error())
			}
			if h.typ == frameChunk {
				out = append(out, payload...)
			}
		}
		done, err := ch.add(h, payload, offset, pos, payloadMax)
		if err != nil {
			return nil, 0, corrupt(pos, err.Error())
		}
		pos += h.frameSize()
		if !done {
			continue
		}
		if h.typ == frameFull {
			if h.length > largeFrameBytes {
				return payload, pos, nil
			}
			cp := make([]byte, len(payload))
			copy(cp, payload)
			return cp, pos, nil
		}
		if out == nil {
			out = []byte{}
		}
		return out, pos, nil
	}
}
