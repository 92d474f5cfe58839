// Package lsn is Trellara's one representation of a PostgreSQL WAL position
// (log sequence number): a 64-bit byte position, written as PostgreSQL writes
// pg_lsn, two upper-case hex halves separated by a slash ("16/B374D848").
//
// Every package that prints or reads an LSN goes through String and Parse, so
// logs, errors, JSON reports, state files and SQL parameters agree byte for
// byte. In JSON an LSN is that string, never a number.
package lsn

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// LSN is a WAL position. The zero value is 0/0, the position before any WAL.
type LSN uint64

// ErrSyntax is wrapped by every Parse failure.
var ErrSyntax = errors.New("lsn: malformed LSN")

// String renders the LSN as PostgreSQL does: "%X/%X" of the high and low
// 32-bit halves.
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l))
}

// Format renders a raw uint64 position; the same as LSN(v).String().
func Format(v uint64) string { return LSN(v).String() }

// Parse reads the pg_lsn text form: two hex halves of at most 8 digits each,
// separated by one slash. Lower-case digits are accepted (PostgreSQL accepts
// them too); anything else, including surrounding space, is rejected.
func Parse(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || !isHalf(hi) || !isHalf(lo) {
		return 0, fmt.Errorf("%w %q (write it as X/X, e.g. 0/16B3748)", ErrSyntax, s)
	}
	h, _ := strconv.ParseUint(hi, 16, 32)
	l, _ := strconv.ParseUint(lo, 16, 32)
	return LSN(h<<32 | l), nil
}

// isHalf reports whether s is 1 to 8 hex digits.
func isHalf(s string) bool {
	if len(s) == 0 || len(s) > 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// MarshalText renders the LSN as String does; encoding/json uses it, so an
// LSN is a JSON string "X/X".
func (l LSN) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText parses the form MarshalText writes.
func (l *LSN) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
