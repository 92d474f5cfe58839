package config

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// ByteSize is a count of bytes. In YAML it is an integer (bytes) or a string
// with a unit: B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB
// (powers of 1000). Units are case-insensitive; a fraction is allowed
// ("1.5GiB") and rounds down to a whole byte.
type ByteSize int64

// Byte size units.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

var byteUnits = []struct {
	name string
	mult int64
}{
	// Longest suffixes first so "MiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// ParseByteSize parses "64MiB", "50GiB", "1.5GB", "4096" or "4096B".
func ParseByteSize(s string) (ByteSize, error) {
	in := strings.TrimSpace(s)
	lower := strings.ToLower(in)
	mult := int64(1)
	num := lower
	for _, u := range byteUnits {
		if strings.HasSuffix(lower, u.name) {
			mult = u.mult
			num = strings.TrimSpace(lower[:len(lower)-len(u.name)])
			break
		}
	}
	if num == "" {
		return 0, fmt.Errorf("%q has no number; write e.g. 64MiB", in)
	}
	whole, frac, hasFrac := strings.Cut(num, ".")
	if whole == "" || !allDigits(whole) || (hasFrac && (frac == "" || !allDigits(frac))) {
		return 0, fmt.Errorf("%q is not a byte size; write a whole number of bytes or a number with a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", in)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", in)
	}
	n := w * mult
	if hasFrac && mult > 1 {
		// 13 fractional digits exceed the precision of the largest unit
		// (2^40 < 10^13), so the rest cannot change the whole-byte result.
		if len(frac) > 13 {
			frac = frac[:13]
		}
		f, _ := strconv.ParseUint(frac, 10, 64) // ≤ 13 digits, cannot fail
		scale := uint64(math.Pow10(len(frac)))
		// floor(f*mult/scale) in 128 bits: f < scale, so hi < scale and
		// Div64 cannot overflow.
		hi, lo := bits.Mul64(f, uint64(mult))
		add, _ := bits.Div64(hi, lo, scale)
		if add > uint64(math.MaxInt64-n) {
			return 0, fmt.Errorf("%q is too large", in)
		}
		n += int64(add)
	}
	return ByteSize(n), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String renders the size with the largest binary unit that divides it
// exactly ("64MiB"), else in bytes ("1000B"), so Marshal round-trips.
func (b ByteSize) String() string {
	for _, u := range []struct {
		name string
		mult ByteSize
	}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if b != 0 && b%u.mult == 0 {
			return strconv.FormatInt(int64(b/u.mult), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

const day = 24 * time.Hour

// ParseDuration accepts Go durations ("36h", "90m") and a leading whole
// number of days ("7d", "1d12h"), because retention is thought of in days
// and time.ParseDuration has no day unit.
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	rest := in
	var d time.Duration
	if i := strings.IndexByte(rest, 'd'); i > 0 && allDigits(rest[:i]) {
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil || n > int64(math.MaxInt64/day) {
			return 0, fmt.Errorf("%q is too long", in)
		}
		d = time.Duration(n) * day
		rest = rest[i+1:]
	}
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration; write e.g. 7d, 36h or 1d12h", in)
		}
		if r < 0 || d > math.MaxInt64-r {
			return 0, fmt.Errorf("%q is out of range", in)
		}
		d += r
	} else if d == 0 && in != "0d" {
		return 0, errors.New("empty duration; write e.g. 7d or 36h")
	}
	return d, nil
}

// formatDuration is ParseDuration's inverse, compact: "7d", "1d12h", "90m".
func formatDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	if days := d / day; days > 0 {
		fmt.Fprintf(&b, "%dd", days)
		d -= days * day
	}
	if d%time.Second != 0 {
		b.WriteString(d.String()) // sub-second precision: let Go spell it
		return b.String()
	}
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dm", m)
		d -= m * time.Minute
	}
	if s := d / time.Second; s > 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}
