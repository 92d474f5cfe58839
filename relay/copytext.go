package relay

import (
	"bufio"
	"fmt"
	"io"
)

// copyTextReader parses PostgreSQL's COPY TO text format: one row per line,
// columns separated by tab, \N for NULL, backslash escapes for the rest.
// What it yields is each value's text output form, byte for byte what
// pgoutput sends for the same value.
type copyTextReader struct {
	r    *bufio.Reader
	line int
}

func newCopyTextReader(r io.Reader) *copyTextReader {
	return &copyTextReader{r: bufio.NewReaderSize(r, 1<<20)}
}

// next returns the next row's values (nil entry = NULL), or io.EOF.
func (c *copyTextReader) next(ncols int) ([][]byte, int, error) {
	line, err := c.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		// A row longer than the buffer: collect it whole.
		buf := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			line, err = c.r.ReadSlice('\n')
			buf = append(buf, line...)
		}
		line = buf
	}
	if err == io.EOF && len(line) == 0 {
		return nil, 0, io.EOF
	}
	if err != nil && err != io.EOF {
		return nil, 0, err
	}
	c.line++
	size := len(line)
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	out := make([][]byte, 0, ncols)
	start := 0
	for i := 0; i <= len(line); i++ {
		if i == len(line) || line[i] == '\t' {
			out = append(out, unescapeCopy(line[start:i]))
			start = i + 1
		}
	}
	if len(out) != ncols {
		return nil, 0, fmt.Errorf("COPY row %d has %d columns, want %d", c.line, len(out), ncols)
	}
	return out, size, nil
}

// unescapeCopy decodes one COPY text field; \N alone is NULL (nil).
func unescapeCopy(f []byte) []byte {
	if len(f) == 2 && f[0] == '\\' && f[1] == 'N' {
		return nil
	}
	out := make([]byte, 0, len(f))
	for i := 0; i < len(f); i++ {
		b := f[i]
		if b != '\\' || i+1 == len(f) {
			out = append(out, b)
			continue
		}
		i++
		switch c := f[i]; c {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'v':
			out = append(out, '\v')
		case 'x':
			v, n := 0, 0
			for n < 2 && i+1 < len(f) && isHex(f[i+1]) {
				i++
				v = v*16 + hexVal(f[i])
				n++
			}
			if n == 0 {
				out = append(out, 'x')
			} else {
				out = append(out, byte(v))
			}
		default:
			if c >= '0' && c <= '7' {
				v := int(c - '0')
				for n := 1; n < 3 && i+1 < len(f) && f[i+1] >= '0' && f[i+1] <= '7'; n++ {
					i++
					v = v*8 + int(f[i]-'0')
				}
				out = append(out, byte(v))
			} else {
				out = append(out, c)
			}
		}
	}
	return out
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
