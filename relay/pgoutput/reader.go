package pgoutput

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// reader is a bounds-checked cursor over one message. The first failed read
// records its offset and reason; every later read returns a zero value, so
// decoders read a whole message straight through and check r.failed() once
// per loop or at the end, instead of after every field.
//
// Each read names the field it reads; the name only appears in the reason
// of a failure.
type reader struct {
	buf    []byte
	off    int
	reason string // first failure; "" while all reads succeeded
	errOff int    // offset of the first failure
}

func (r *reader) remaining() int { return len(r.buf) - r.off }

func (r *reader) failed() bool { return r.reason != "" }

// fail records a failure at the current offset unless one is recorded.
func (r *reader) fail(format string, args ...any) {
	r.failAt(r.off, format, args...)
}

func (r *reader) failAt(off int, format string, args ...any) {
	if r.reason != "" {
		return
	}
	r.reason = fmt.Sprintf(format, args...)
	r.errOff = off
}

// need reports whether n more bytes are readable, recording a truncation
// failure for field if not.
func (r *reader) need(n int, field string) bool {
	if r.reason != "" {
		return false
	}
	if n > r.remaining() {
		r.fail("truncated: %s needs %d bytes, %d remain", field, n, r.remaining())
		return false
	}
	return true
}

func (r *reader) u8(field string) uint8 {
	if !r.need(1, field) {
		return 0
	}
	v := r.buf[r.off]
	r.off++
	return v
}

func (r *reader) u16(field string) uint16 {
	if !r.need(2, field) {
		return 0
	}
	v := binary.BigEndian.Uint16(r.buf[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32(field string) uint32 {
	if !r.need(4, field) {
		return 0
	}
	v := binary.BigEndian.Uint32(r.buf[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64(field string) uint64 {
	if !r.need(8, field) {
		return 0
	}
	v := binary.BigEndian.Uint64(r.buf[r.off:])
	r.off += 8
	return v
}

// cstring reads a NUL-terminated string and consumes the NUL.
func (r *reader) cstring(field string) string {
	if r.reason != "" {
		return ""
	}
	n := bytes.IndexByte(r.buf[r.off:], 0)
	if n < 0 {
		r.fail("truncated: %s has no terminating NUL in the %d remaining bytes", field, r.remaining())
		return ""
	}
	s := string(r.buf[r.off : r.off+n])
	r.off += n + 1
	return s
}

// bytes returns the next n bytes without copying. The slice's capacity ends
// at its length so that a caller appending to it cannot overwrite the bytes
// that follow in the message.
func (r *reader) bytes(n int, field string) []byte {
	if n < 0 {
		r.fail("%s length %d is negative", field, n)
		return nil
	}
	if !r.need(n, field) {
		return nil
	}
	b := r.buf[r.off : r.off+n : r.off+n]
	r.off += n
	return b
}
