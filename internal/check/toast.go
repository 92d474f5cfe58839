package check

import "fmt"

// Which columns the unchanged-TOAST note lists.
//
// pgoutput sends a column as "unchanged TOAST" when an UPDATE leaves alone a
// value that is stored out of line. A column can hold such a value only if
// all three hold:
//
//  1. its type is variable-length (pg_attribute.attlen = -1);
//  2. its storage lets PostgreSQL move it out of line: extended, external or
//     main (attstorage <> 'p', plain never leaves the row);
//  3. one value can be larger than the TOAST threshold on its own
//     (TOAST_TUPLE_THRESHOLD: 2032 bytes with 8 kB pages). PostgreSQL only
//     starts moving values out of line once a row passes that size.
//
// Rule 3 leaves out the variable-length types whose values are always small
// (inet and cidr: at most 23 bytes; numeric: a value needs about 4,000
// digits to reach the threshold, and a declared precision is at most 1000)
// and the length-limited types declared short enough: varchar(n) and
// char(n) take at most n × the encoding's longest character + 4 bytes,
// bit(n) and varbit(n) n/8 + 8 bytes. A narrower value can still leave the
// row when many wide columns share it; the note does not predict that.

// Built-in type OIDs (fixed in pg_type.dat, the same on every version).
const (
	oidBit     = 1560
	oidVarbit  = 1562
	oidBpchar  = 1042
	oidVarchar = 1043
	oidNumeric = 1700
	oidInet    = 869
	oidCidr    = 650
)

// smallVarlena are the variable-length types whose values never reach the
// threshold on their own.
var smallVarlena = map[int64]string{oidNumeric: "numeric", oidInet: "inet", oidCidr: "cidr"}

// toastColumn is a variable-length column whose storage is not plain, as the
// tables query returns it: its base type (domains resolved) and typmod.
type toastColumn struct {
	name   string
	typ    int64
	typmod int32
}

// toastThreshold is TOAST_TUPLE_THRESHOLD for a block size: a quarter of the
// page after the page header and four line pointers, rounded down to the
// 8-byte alignment (heaptoast.h, MaximumBytesPerTuple(4)).
func toastThreshold(blockSize int64) int64 {
	const pageHeader, linePointer, align = 24, 4, 8
	const used = (pageHeader + 4*linePointer + align - 1) / align * align
	return (blockSize - used) / 4 / align * align
}

// maxValueBytes is the largest value a column can hold, in bytes; ok is false
// when its type sets no bound.
func maxValueBytes(c toastColumn, charBytes int64) (n int64, ok bool) {
	const varhdr = 4
	switch c.typ {
	case oidInet, oidCidr:
		return 23, true
	case oidVarchar, oidBpchar:
		if c.typmod > varhdr { // typmod is n + 4
			return int64(c.typmod-varhdr)*charBytes + varhdr, true
		}
	case oidBit, oidVarbit:
		if c.typmod > 0 { // typmod is n bits
			return (int64(c.typmod)+7)/8 + 8, true
		}
	}
	return 0, false
}

// mayToast applies the rule above to one column (rules 1 and 2 are in the
// query).
func mayToast(c toastColumn, threshold, charBytes int64) bool {
	if _, small := smallVarlena[c.typ]; small {
		return false
	}
	if n, ok := maxValueBytes(c, charBytes); ok && n <= threshold {
		return false
	}
	return true
}

// toastRule explains the rule with this server's numbers, for the note.
func toastRule(threshold, charBytes int64) string {
	return fmt.Sprintf("Listed are the columns a value can leave the row from: variable-length, storage extended, external or main (not plain), "+
		"and able to exceed the TOAST threshold (%d bytes on this server) on their own. Left out: numeric, inet and cidr, "+
		"varchar(n) and char(n) up to n = %d, and bit(n) up to n = %d.",
		threshold, (threshold-4)/max(charBytes, 1), (threshold-8)*8)
}
