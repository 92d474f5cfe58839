package lakeread

import (
	"bytes"
	"compress/flate"
	"io"
)

// checkOCF walks the framing of an Avro object container file before
// hamba/avro decodes it, because hamba allocates a block's size as the
// file states it (a corrupt size is a multi-gigabyte allocation or a
// panic) and inflates a block without a bound. The framing
// (https://avro.apache.org/docs/1.11.1/specification/#object-container-files):
//
//	+------------+------------------------------+---------+
//	| "Obj" 0x01 | metadata: map<bytes>         | sync    |
//	| 4 bytes    | (avro.schema, avro.codec...) | 16 bytes|
//	+------------+------------------------------+---------+
//	then blocks, each:
//	+-------------+-------------+----------------+---------+
//	| count: long | size: long  | data: size     | sync    |
//	| zigzag      | zigzag      | bytes, codec'd | 16 bytes|
//	+-------------+-------------+----------------+---------+
//
// Longs are zig-zag varints. Every size is checked against what is left
// of the file, every count against manifestRecordsMax, the codec is null
// or deflate (what Iceberg writers use; others are refused), and a
// deflate block must inflate to at most ocfBlockBytesMax.
func checkOCF(b []byte) error {
	r := &ocfReader{b: b}
	if len(b) < 4 || string(b[:4]) != "Obj\x01" {
		return corrupt("no Avro object container magic")
	}
	r.off = 4
	codec := "null"
	for {
		n, err := r.long()
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if n < 0 {
			if n = -n; n < 0 {
				return corrupt("metadata block count out of range")
			}
			if _, err := r.long(); err != nil { // the block's byte size
				return err
			}
		}
		if n > 1024 {
			return corrupt("%d metadata entries", n)
		}
		for range n {
			k, err := r.bytes()
			if err != nil {
				return err
			}
			v, err := r.bytes()
			if err != nil {
				return err
			}
			if string(k) == "avro.codec" {
				codec = string(v)
			}
		}
	}
	switch codec {
	case "null", "", "deflate":
	default:
		return unsupported("Avro codec %q (this reader reads null and deflate)", codec)
	}
	sync, err := r.take(16)
	if err != nil {
		return err
	}
	var records int64
	for r.off < len(b) {
		count, err := r.long()
		if err != nil {
			return err
		}
		data, err := r.bytes()
		if err != nil {
			return err
		}
		if count < 0 || count > manifestRecordsMax-records {
			return corrupt("block at offset %d: %d records", r.off, count)
		}
		records += count
		if codec == "deflate" {
			n, err := io.Copy(io.Discard, io.LimitReader(flate.NewReader(bytes.NewReader(data)), ocfBlockBytesMax+1))
			if err != nil {
				return corrupt("block at offset %d: deflate: %v", r.off, err)
			}
			if n > ocfBlockBytesMax {
				return unsupported("block at offset %d inflates to more than %d bytes", r.off, ocfBlockBytesMax)
			}
		}
		s, err := r.take(16)
		if err != nil {
			return err
		}
		if !bytes.Equal(s, sync) {
			return corrupt("block at offset %d: sync marker does not match the header's", r.off)
		}
	}
	return nil
}

// ocfBlockBytesMax bounds one decoded block.
const ocfBlockBytesMax = 16 << 20

type ocfReader struct {
	b   []byte
	off int
}

func (r *ocfReader) long() (int64, error) {
	var u uint64
	for shift := uint(0); ; shift += 7 {
		if shift >= 64 {
			return 0, corrupt("varint at offset %d too long", r.off)
		}
		if r.off >= len(r.b) {
			return 0, corrupt("truncated at offset %d", r.off)
		}
		c := r.b[r.off]
		r.off++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	return int64(u>>1) ^ -int64(u&1), nil
}

func (r *ocfReader) bytes() ([]byte, error) {
	n, err := r.long()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > int64(len(r.b)-r.off) {
		return nil, corrupt("length %d at offset %d, %d bytes left", n, r.off, len(r.b)-r.off)
	}
	return r.take(int(n))
}

func (r *ocfReader) take(n int) ([]byte, error) {
	if n > len(r.b)-r.off {
		return nil, corrupt("truncated at offset %d: want %d bytes, %d left", r.off, n, len(r.b)-r.off)
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}
