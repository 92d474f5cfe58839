package segmentlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"
)

// The constants in this block are part of the on-disk format (version 1);
// do not change them. doc.go and docs/LOG-FORMAT.md describe every byte and
// TestGoldenFormat pins them.
const (
	segmentMagic  = "TRSG" // first four bytes of every segment file
	indexMagic    = "TRSI" // first four bytes of every index file
	cursorMagic   = "TRSC" // first four bytes of every cursor file
	formatVersion = 1

	segmentHeaderSize = 32
	frameHeaderSize   = 32
	manifestSize      = 24
	indexHeaderSize   = 40
	indexEntrySize    = 16
	indexTrailerSize  = 8
	cursorFileSize    = 24

	// frameBytesLimit caps the payload length of one frame in the format
	// itself, so that a decoder can refuse a length before allocating for
	// it even when it does not know the writer's FrameBytesMax.
	frameBytesLimit = 64 << 20
	// payloadBytesLimit caps the reassembled length of a chunked entry.
	payloadBytesLimit = 1 << 32

	cursorFlagPastRetention = 1 << 0
)

// frameType says how a frame's payload relates to the logical entry at
// the frame's offset. Part of the on-disk format; do not renumber.
type frameType uint8

const (
	frameFull     frameType = 1 // the whole entry in one frame
	frameChunk    frameType = 2 // one piece of an entry larger than FrameBytesMax
	frameManifest frameType = 3 // completes a chunked entry; only then is it visible
)

func (t frameType) String() string {
	switch t {
	case frameFull:
		return "full"
	case frameChunk:
		return "chunk"
	case frameManifest:
		return "manifest"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

var le = binary.LittleEndian

// sum32 is the 32-bit checksum used for fixed-size headers: the low 32 bits
// of XXH3-64 (seed 0).
func sum32(b []byte) uint32 { return uint32(xxh3.Hash(b)) }

// Frame decoding failures. They are internal: callers turn them into a
// *CorruptionError (committed data) or a torn tail (repair on open) because
// only the caller knows the path, the position and whether the bytes were
// ever acknowledged.
var (
	errFrameTruncated  = errors.New("frame is cut short by the end of the data")
	errHeaderChecksum  = errors.New("frame header checksum mismatch")
	errPayloadChecksum = errors.New("frame payload checksum mismatch")
	errFrameType       = errors.New("unknown frame type")
	errFrameFlags      = errors.New("unknown frame flags")
	errFrameReserved   = errors.New("reserved frame bytes are not zero")
	errFrameLength     = errors.New("frame length exceeds the format limit")
	errFrameGroup      = errors.New("frame commit-group delta exceeds its offset")
)

// frameHeader is the decoded form of the 32-byte frame header.
type frameHeader struct {
	length     uint32
	offset     uint64
	payloadSum uint64
	typ        frameType
	flags      uint8
	// groupDelta is offset minus the first offset of the commit group
	// (one write+fsync) that wrote the frame. Open uses it to tell bytes
	// that were never acknowledged from damage to acknowledged bytes.
	groupDelta uint32
}

func (h frameHeader) groupStart() uint64 { return h.offset - uint64(h.groupDelta) }

// frameSize is the number of bytes the frame occupies in the segment.
func (h frameHeader) frameSize() int64 { return frameHeaderSize + int64(h.length) }

// appendFrame encodes one frame onto dst.
func appendFrame(dst []byte, typ frameType, offset uint64, groupDelta uint32, payload []byte) []byte {
	var h [frameHeaderSize]byte
	le.PutUint32(h[4:], uint32(len(payload)))
	le.PutUint64(h[8:], offset)
	le.PutUint64(h[16:], xxh3.Hash(payload))
	h[24] = byte(typ)
	h[25] = 0 // flags: none defined in version 1
	// h[26:28] reserved, zero
	le.PutUint32(h[28:], groupDelta)
	le.PutUint32(h[0:], sum32(h[4:]))
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

// decodeFrameHeader validates and decodes a frame header. b must hold at
// least frameHeaderSize bytes or errFrameTruncated is returned. The header
// checksum is verified before any field is trusted, so a torn or damaged
// length is never used to size a read.
func decodeFrameHeader(b []byte) (frameHeader, error) {
	if len(b) < frameHeaderSize {
		return frameHeader{}, errFrameTruncated
	}
	if le.Uint32(b[0:]) != sum32(b[4:frameHeaderSize]) {
		return frameHeader{}, errHeaderChecksum
	}
	h := frameHeader{
		length:     le.Uint32(b[4:]),
		offset:     le.Uint64(b[8:]),
		payloadSum: le.Uint64(b[16:]),
		typ:        frameType(b[24]),
		flags:      b[25],
		groupDelta: le.Uint32(b[28:]),
	}
	switch {
	case h.typ != frameFull && h.typ != frameChunk && h.typ != frameManifest:
		return frameHeader{}, errFrameType
	case h.flags != 0:
		return frameHeader{}, errFrameFlags
	case b[26] != 0 || b[27] != 0:
		return frameHeader{}, errFrameReserved
	case h.length > frameBytesLimit:
		return frameHeader{}, errFrameLength
	case uint64(h.groupDelta) > h.offset:
		return frameHeader{}, errFrameGroup
	}
	return h, nil
}

// readFrame decodes the frame at the start of b and returns its header,
// its payload (aliasing b) and the number of bytes it occupies. It never
// reads outside b and never panics, whatever b holds (see FuzzReadFrame).
func readFrame(b []byte) (frameHeader, []byte, int, error) {
	h, err := decodeFrameHeader(b)
	if err != nil {
		return frameHeader{}, nil, 0, err
	}
	end := int64(frameHeaderSize) + int64(h.length)
	if int64(len(b)) < end {
		return frameHeader{}, nil, 0, errFrameTruncated
	}
	payload := b[frameHeaderSize:end]
	if xxh3.Hash(payload) != h.payloadSum {
		return frameHeader{}, nil, 0, errPayloadChecksum
	}
	return h, payload, int(end), nil
}

// manifest is the payload of a frameManifest frame.
type manifest struct {
	totalBytes uint64
	chunks     uint32
	payloadSum uint64 // XXH3-64 of the reassembled payload
}

func appendManifest(dst []byte, m manifest) []byte {
	var b [manifestSize]byte
	le.PutUint64(b[0:], m.totalBytes)
	le.PutUint32(b[8:], m.chunks)
	// b[12:16] reserved, zero
	le.PutUint64(b[16:], m.payloadSum)
	return append(dst, b[:]...)
}

func decodeManifest(b []byte) (manifest, error) {
	if len(b) != manifestSize {
		return manifest{}, fmt.Errorf("manifest payload is %d bytes, want %d", len(b), manifestSize)
	}
	if le.Uint32(b[12:]) != 0 {
		return manifest{}, errors.New("manifest reserved bytes are not zero")
	}
	m := manifest{totalBytes: le.Uint64(b[0:]), chunks: le.Uint32(b[8:]), payloadSum: le.Uint64(b[16:])}
	if m.totalBytes > payloadBytesLimit {
		return manifest{}, fmt.Errorf("manifest total %d exceeds the format limit %d", m.totalBytes, uint64(payloadBytesLimit))
	}
	if m.chunks < 2 {
		return manifest{}, fmt.Errorf("manifest names %d chunks; a chunked entry has at least 2", m.chunks)
	}
	return m, nil
}

// segmentHeader is the decoded 32-byte header at the start of a segment.
type segmentHeader struct {
	base    uint64
	created int64 // unix nanoseconds, from Options.Clock
}

func encodeSegmentHeader(h segmentHeader) []byte {
	b := make([]byte, segmentHeaderSize)
	copy(b, segmentMagic)
	le.PutUint16(b[4:], formatVersion)
	// b[6:8] flags, zero in version 1
	le.PutUint64(b[8:], h.base)
	le.PutUint64(b[16:], uint64(h.created))
	// b[24:28] reserved, zero
	le.PutUint32(b[28:], sum32(b[:28]))
	return b
}

func decodeSegmentHeader(b []byte) (segmentHeader, error) {
	if len(b) < segmentHeaderSize {
		return segmentHeader{}, fmt.Errorf("segment header is %d bytes, want %d", len(b), segmentHeaderSize)
	}
	if string(b[:4]) != segmentMagic {
		return segmentHeader{}, fmt.Errorf("bad segment magic %q", b[:4])
	}
	if v := le.Uint16(b[4:]); v != formatVersion {
		return segmentHeader{}, fmt.Errorf("unsupported segment format version %d (this build reads version %d)", v, formatVersion)
	}
	if le.Uint32(b[28:]) != sum32(b[:28]) {
		return segmentHeader{}, errors.New("segment header checksum mismatch")
	}
	if le.Uint16(b[6:]) != 0 || le.Uint32(b[24:]) != 0 {
		return segmentHeader{}, errors.New("segment header reserved bytes are not zero")
	}
	return segmentHeader{base: le.Uint64(b[8:]), created: int64(le.Uint64(b[16:]))}, nil
}

// indexEntry maps the first frame of a logical entry to its file position.
type indexEntry struct {
	offset uint64
	pos    int64
}

// indexFile is the decoded form of a sealed segment's .idx file.
type indexFile struct {
	base     uint64
	end      uint64 // offset after the segment's last entry
	size     int64  // segment file size the index was built from
	interval uint32
	entries  []indexEntry
}

func encodeIndex(ix indexFile) []byte {
	n := indexHeaderSize + len(ix.entries)*indexEntrySize + indexTrailerSize
	b := make([]byte, indexHeaderSize, n)
	copy(b, indexMagic)
	le.PutUint16(b[4:], formatVersion)
	le.PutUint64(b[8:], ix.base)
	le.PutUint64(b[16:], ix.end)
	le.PutUint64(b[24:], uint64(ix.size))
	le.PutUint32(b[32:], uint32(len(ix.entries)))
	le.PutUint32(b[36:], ix.interval)
	for _, e := range ix.entries {
		b = le.AppendUint64(b, e.offset)
		b = le.AppendUint64(b, uint64(e.pos))
	}
	return le.AppendUint64(b, xxh3.Hash(b))
}

func decodeIndex(b []byte) (indexFile, error) {
	if len(b) < indexHeaderSize+indexTrailerSize {
		return indexFile{}, fmt.Errorf("index file is %d bytes, shorter than the minimum %d", len(b), indexHeaderSize+indexTrailerSize)
	}
	body := b[:len(b)-indexTrailerSize]
	if le.Uint64(b[len(body):]) != xxh3.Hash(body) {
		return indexFile{}, errors.New("index checksum mismatch")
	}
	if string(b[:4]) != indexMagic {
		return indexFile{}, fmt.Errorf("bad index magic %q", b[:4])
	}
	if v := le.Uint16(b[4:]); v != formatVersion {
		return indexFile{}, fmt.Errorf("unsupported index format version %d", v)
	}
	if le.Uint16(b[6:]) != 0 {
		return indexFile{}, errors.New("index reserved bytes are not zero")
	}
	count := le.Uint32(b[32:])
	if uint64(len(body)-indexHeaderSize) != uint64(count)*indexEntrySize {
		return indexFile{}, fmt.Errorf("index names %d entries but holds %d bytes of entries", count, len(body)-indexHeaderSize)
	}
	ix := indexFile{
		base:     le.Uint64(b[8:]),
		end:      le.Uint64(b[16:]),
		size:     int64(le.Uint64(b[24:])),
		interval: le.Uint32(b[36:]),
		entries:  make([]indexEntry, count),
	}
	for i := range ix.entries {
		p := body[indexHeaderSize+i*indexEntrySize:]
		ix.entries[i] = indexEntry{offset: le.Uint64(p), pos: int64(le.Uint64(p[8:]))}
	}
	return ix, nil
}

// cursorRecord is the decoded form of a cursor file.
type cursorRecord struct {
	offset        uint64
	pastRetention bool
}

func encodeCursor(c cursorRecord) []byte {
	b := make([]byte, cursorFileSize)
	copy(b, cursorMagic)
	le.PutUint16(b[4:], formatVersion)
	var flags uint16
	if c.pastRetention {
		flags |= cursorFlagPastRetention
	}
	le.PutUint16(b[6:], flags)
	le.PutUint64(b[8:], c.offset)
	le.PutUint64(b[16:], xxh3.Hash(b[:16]))
	return b
}

func decodeCursor(b []byte) (cursorRecord, error) {
	if len(b) != cursorFileSize {
		return cursorRecord{}, fmt.Errorf("cursor file is %d bytes, want %d", len(b), cursorFileSize)
	}
	if le.Uint64(b[16:]) != xxh3.Hash(b[:16]) {
		return cursorRecord{}, errors.New("cursor checksum mismatch")
	}
	if string(b[:4]) != cursorMagic {
		return cursorRecord{}, fmt.Errorf("bad cursor magic %q", b[:4])
	}
	if v := le.Uint16(b[4:]); v != formatVersion {
		return cursorRecord{}, fmt.Errorf("unsupported cursor format version %d", v)
	}
	flags := le.Uint16(b[6:])
	if flags&^cursorFlagPastRetention != 0 {
		return cursorRecord{}, fmt.Errorf("unknown cursor flags %#x", flags)
	}
	return cursorRecord{offset: le.Uint64(b[8:]), pastRetention: flags&cursorFlagPastRetention != 0}, nil
}
