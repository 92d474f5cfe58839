package relay

import (
	"bytes"
	"fmt"

	"github.com/trellara/trellara/envelope"
)

// copyRows parses PostgreSQL's COPY TO text format into a snapshot batch's
// rows: one row per line, columns separated by tab, \N for NULL, backslash
// escapes for the rest. Each value is its text output form, byte for byte
// what pgoutput sends for the same value.
//
// It is CopyTo's writer: Write takes the stream in pieces of any size (the
// server sends one row per CopyData message, but a line split across
// writes is joined) and writes each complete row into rows, in the
// envelope's wire form (envelope.InsertRows), then calls added with the
// row's size in the stream. There is no copy of the stream, no goroutine
// between the connection and the parser, and no allocation per row.
type copyRows struct {
	ncols   int
	line    int    // rows parsed
	pending []byte // a line not yet ended by '\n'
	scratch []byte // a field's decoded form, when it has escapes
	rows    *envelope.InsertRows
	added   func(size int) error
}

func newCopyRows(ncols int, added func(size int) error) *copyRows {
	return &copyRows{ncols: ncols, rows: envelope.NewInsertRows(ncols), added: added}
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

// row parses one line (without its '\n') into the next row.
func (c *copyRows) row(line []byte, size int) error {
	c.line++
	c.rows.Begin()
	cols := 0
	for {
		f, rest, more := line, []byte(nil), false
		if i := bytes.IndexByte(line, '\t'); i >= 0 {
			f, rest, more = line[:i], line[i+1:], true
		}
		switch {
		case len(f) == 2 && f[0] == '\\' && f[1] == 'N':
			c.rows.Null()
		case bytes.IndexByte(f, '\\') < 0:
			c.rows.Text(f)
		default:
			c.scratch = appendUnescapedCopy(c.scratch[:0], f)
			c.rows.Text(c.scratch)
		}
		cols++
		if !more {
			break
		}
		line = rest
	}
	if err := c.rows.End(); err != nil {
		return fmt.Errorf("COPY row %d has %d columns, want %d", c.line, cols, c.ncols)
	}
	return c.added(size)
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
