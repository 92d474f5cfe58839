package segmentlog

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/trellara/trellara/internal/opts"
)

// FsyncMode says when appended bytes are forced to stable storage.
type FsyncMode string

// FsyncAlways makes Append return only after the frame and everything
// before it has been written and fdatasync'ed. Concurrent appends share
// one fdatasync (group commit). It is the only mode: a mode that
// acknowledges before the sync would also need a laxer repair rule than
// the one Open applies (see doc.go, "Repair"), and none is needed yet.
const FsyncAlways FsyncMode = "always"

// Defaults and limits. Named with units last; every limit is the answer to
// "what stops this from growing without bound".
const (
	DefaultSegmentBytesMax    = 64 << 20
	DefaultFrameBytesMax      = 4 << 20
	DefaultPayloadBytesMax    = 256 << 20
	DefaultIndexIntervalBytes = 16 << 10

	segmentBytesMin       = 256 // small values only make sense in tests
	frameBytesMin         = 16
	indexIntervalBytesMin = 64
)

// Retention bounds what the log keeps. Zero values disable a bound.
// Retention works in whole segments and never removes the segment being
// appended to.
type Retention struct {
	// MaxBytes removes the oldest segments while the retained total
	// exceeds it.
	MaxBytes int64
	// MaxAge removes a segment once everything in it is older than
	// MaxAge: a segment's newest entry was written before the next
	// segment was created, so that creation time bounds its age.
	MaxAge time.Duration
	// Expire lets retention remove segments that a registered cursor
	// still needs. Such cursors are marked past-retention (durably, before
	// the removal) and their readers get *PastRetentionError. Without
	// Expire, a lagging cursor holds its segments and disk use grows.
	Expire bool
}

// Options configure a Log. The zero value is usable: every field has a
// default.
type Options struct {
	// SegmentBytesMax is the size at which the log starts a new segment.
	// A single entry is never split across segments, so one entry larger
	// than this makes a segment of its own that exceeds it.
	SegmentBytesMax int64
	// FrameBytesMax is the largest payload written as one frame; larger
	// payloads are split into chunk frames plus a manifest frame. It bounds
	// the memory a reader needs per frame. At most 64 MiB (format limit).
	FrameBytesMax int
	// PayloadBytesMax is the largest payload Append accepts (at most 4 GiB).
	// A reader holds one whole payload in memory.
	PayloadBytesMax int64
	// Fsync must be FsyncAlways (the default).
	Fsync FsyncMode
	// IndexIntervalBytes is the spacing of the sparse offset index: a seek
	// reads at most about this many bytes after the binary search.
	IndexIntervalBytes int64
	// Retention is applied by ApplyRetention.
	Retention Retention
	// FS is the filesystem; nil means the operating system's. Tests and
	// the simulator inject faults through it.
	FS FS
	// Clock stamps new segments (used by Retention.MaxAge); nil means
	// time.Now.
	Clock func() time.Time
	// Logger receives the few events that are handled inside the log and
	// returned to nobody (a failed index write, which only costs a rebuild
	// on the next Open). nil discards them.
	Logger *slog.Logger

	// writeChunkBytes overrides how much encoded data the flusher buffers
	// per write call (default writeChunkBytes). Crash tests lower it so a
	// kill can fall between the write calls of one commit group.
	writeChunkBytes int
}

// withDefaults returns a copy of o with zero fields replaced by defaults,
// or an *OptionsError naming the first field outside its allowed range.
func (o Options) withDefaults() (Options, error) {
	if o.SegmentBytesMax == 0 {
		o.SegmentBytesMax = DefaultSegmentBytesMax
	}
	if o.FrameBytesMax == 0 {
		o.FrameBytesMax = DefaultFrameBytesMax
	}
	if o.PayloadBytesMax == 0 {
		o.PayloadBytesMax = DefaultPayloadBytesMax
	}
	if o.Fsync == "" {
		o.Fsync = FsyncAlways
	}
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.writeChunkBytes == 0 {
		o.writeChunkBytes = writeChunkBytes
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := opts.Check("segmentlog",
		opts.Rule{Field: "SegmentBytesMax", Bad: o.SegmentBytesMax < segmentBytesMin || o.SegmentBytesMax > 1<<40,
			Reason: fmt.Sprintf("is %d; allowed range is [%d, 2^40]", o.SegmentBytesMax, segmentBytesMin)},
		opts.Rule{Field: "FrameBytesMax", Bad: o.FrameBytesMax < frameBytesMin || o.FrameBytesMax > frameBytesLimit,
			Reason: fmt.Sprintf("is %d; allowed range is [%d, %d] (the format caps one frame at 64 MiB)", o.FrameBytesMax, frameBytesMin, frameBytesLimit)},
		opts.Rule{Field: "PayloadBytesMax", Bad: o.PayloadBytesMax < int64(o.FrameBytesMax) || o.PayloadBytesMax > payloadBytesLimit,
			Reason: fmt.Sprintf("is %d; allowed range is [FrameBytesMax, 2^32]", o.PayloadBytesMax)},
		opts.Rule{Field: "Fsync", Bad: o.Fsync != FsyncAlways,
			Reason: fmt.Sprintf("is %q; only %q is supported (an acknowledgement must mean the bytes are on stable storage)", o.Fsync, FsyncAlways)},
		opts.Rule{Field: "IndexIntervalBytes", Bad: o.IndexIntervalBytes < indexIntervalBytesMin || o.IndexIntervalBytes > o.SegmentBytesMax,
			Reason: fmt.Sprintf("is %d; allowed range is [%d, SegmentBytesMax]", o.IndexIntervalBytes, indexIntervalBytesMin)},
		opts.Rule{Field: "Retention.MaxBytes", Bad: o.Retention.MaxBytes < 0, Reason: "is negative"},
		opts.Rule{Field: "Retention.MaxAge", Bad: o.Retention.MaxAge < 0, Reason: "is negative"},
	); err != nil {
		return Options{}, err
	}
	return o, nil
}
