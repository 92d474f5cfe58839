package relay

import (
	"bytes"
	"fmt"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// copyRows parses PostgreSQL's COPY TO text format into snapshot rows: one
// row per line, columns separated by tab, \N for NULL, backslash escapes
// for the rest. Each value is its text output form, byte for byte what
// pgoutput sends for the same value.
//
// It is CopyTo's writer: Write takes the stream in pieces of any size (the
// server sends one row per CopyData message, but a line split across
// writes is joined) and hands each complete row to add, with the row's size
// in the stream. There is no copy of the stream and no goroutine between
// the connection and the parser.
//
// The rows it builds live in slabs: their Row, Value and tuple structs are
// carved from arrays allocated copyRowsChunk rows at a time, and their
// bytes from an arena, so a row costs no allocation of its own. A row
// handed to add stays valid: slabs are only ever replaced, never reused.
type copyRows struct {
	ncols   int
	line    int    // rows parsed
	pending []byte // a line not yet ended by '\n'
	add     func(row *pb.Row, size int) error

	rows   []pb.Row
	vals   []pb.Value
	tuples []*pb.Value
	arena  []byte
}

const (
	copyRowsChunk = 1024      // rows per slab allocation
	copyArenaSize = 256 << 10 // bytes per arena allocation
)

func newCopyRows(ncols int, add func(row *pb.Row, size int) error) *copyRows {
	return &copyRows{ncols: ncols, add: add}
}

// Write implements io.Writer.
func (c *copyRows) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.pending = append(c.pending, p...)
			break
		}
		line := p[:i]
		if len(c.pending) > 0 {
			c.pending = append(c.pending, line...)
			line = c.pending
		}
		if err := c.row(line, len(line)+1); err != nil {
			return 0, err
		}
		c.pending = c.pending[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Close parses a last line the stream did not end with '\n'.
func (c *copyRows) Close() error {
	if len(c.pending) == 0 {
		return nil
	}
	line := c.pending
	c.pending = nil
	return c.row(line, len(line))
}

// row parses one line (without its '\n') into a row and hands it on.
func (c *copyRows) row(line []byte, size int) error {
	c.line++
	if len(c.rows) == 0 {
		c.rows = make([]pb.Row, copyRowsChunk)
		c.vals = make([]pb.Value, copyRowsChunk*c.ncols)
		c.tuples = make([]*pb.Value, copyRowsChunk*c.ncols)
	}
	r := &c.rows[0]
	vals, tuple := c.vals[:c.ncols:c.ncols], c.tuples[:c.ncols:c.ncols]
	col := 0
	for {
		f, rest, more := line, []byte(nil), false
		if i := bytes.IndexByte(line, '\t'); i >= 0 {
			f, rest, more = line[:i], line[i+1:], true
		}
		if col < c.ncols {
			v := &vals[col]
			if len(f) == 2 && f[0] == '\\' && f[1] == 'N' {
				v.Kind = pb.ValueKind_VALUE_KIND_NULL
			} else {
				v.Kind, v.Data = pb.ValueKind_VALUE_KIND_TEXT, c.field(f)
			}
			tuple[col] = v
		}
		col++
		if !more {
			break
		}
		line = rest
	}
	if col != c.ncols {
		return fmt.Errorf("COPY row %d has %d columns, want %d", c.line, col, c.ncols)
	}
	c.rows, c.vals, c.tuples = c.rows[1:], c.vals[c.ncols:], c.tuples[c.ncols:]
	r.Op, r.NewTuple = pb.Op_OP_INSERT, tuple
	return c.add(r, size)
}

// field decodes one COPY text field into the arena. The decoded form is
// never longer than the field.
func (c *copyRows) field(f []byte) []byte {
	if cap(c.arena)-len(c.arena) < len(f) {
		c.arena = make([]byte, 0, max(copyArenaSize, len(f)))
	}
	start := len(c.arena)
	if bytes.IndexByte(f, '\\') < 0 {
		c.arena = append(c.arena, f...)
	} else {
		c.arena = appendUnescapedCopy(c.arena, f)
	}
	return c.arena[start:len(c.arena):len(c.arena)]
}

// appendUnescapedCopy appends the decoded form of COPY text field f (not
// \N) to dst.
func appendUnescapedCopy(dst, f []byte) []byte {
	for i := 0; i < len(f); i++ {
		b := f[i]
		if b != '\\' || i+1 == len(f) {
			dst = append(dst, b)
			continue
		}
		i++
		switch c := f[i]; c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'v':
			dst = append(dst, '\v')
		case 'x':
			v, n := 0, 0
			for n < 2 && i+1 < len(f) && isHex(f[i+1]) {
				i++
				v = v*16 + hexVal(f[i])
				n++
			}
			if n == 0 {
				dst = append(dst, 'x')
			} else {
				dst = append(dst, byte(v))
			}
		default:
			if c >= '0' && c <= '7' {
				v := int(c - '0')
				for n := 1; n < 3 && i+1 < len(f) && f[i+1] >= '0' && f[i+1] <= '7'; n++ {
					i++
					v = v*8 + int(f[i]-'0')
				}
				dst = append(dst, byte(v))
			} else {
				dst = append(dst, c)
			}
		}
	}
	return dst
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

func hexVal(b byte) int {
	switch {
	case b >= '0' && b <= '9':
		return int(b - '0')
	case b >= 'a' && b <= 'f':
		return int(b-'a') + 10
	default:
		return int(b-'A') + 10
	}
}
