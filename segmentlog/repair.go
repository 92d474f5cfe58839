package segmentlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// RepairReport describes the torn tail that Open cut off the newest
// segment. Open never cuts silently: when it returns a report the caller
// logs it, and the dropped bytes stay in TornPath for inspection.
type RepairReport struct {
	Segment      string // segment that was cut
	Position     int64  // byte position the segment now ends at
	BytesDropped int64
	TornPath     string // copy of the dropped bytes
	// NextOffset is the first offset the log will assign after the
	// repair; the last intact entry is NextOffset-1 (see LastGoodOffset).
	NextOffset uint64
	Reason     string // why the first dropped frame failed
}

// LastGoodOffset returns the offset of the last intact entry, or false if
// the log holds none.
func (r *RepairReport) LastGoodOffset() (uint64, bool) {
	if r.NextOffset == 0 {
		return 0, false
	}
	return r.NextOffset - 1, true
}

func (r *RepairReport) String() string {
	return fmt.Sprintf("segmentlog: repaired torn tail of %s: cut at byte %d, dropped %d bytes (copied to %s), next offset %d: %s",
		r.Segment, r.Position, r.BytesDropped, r.TornPath, r.NextOffset, r.Reason)
}

// errFileTooLarge is matched by readFileBounded's refusal: a metadata
// file larger than its format allows is damaged, not unreadable.
var errFileTooLarge = errors.New("larger than its format allows")

// readFileBounded reads a small metadata file whole, refusing files larger
// than max so a damaged size cannot make Open allocate without bound.
func readFileBounded(fsys FS, path string, max int64) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size > max {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d expected at most: %w", path, size, max, errFileTooLarge)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && size == 0) {
		return nil, err
	}
	return b, nil
}

// recover loads the directory: sealed segments through their indexes (or
// a verifying scan), the newest segment through a full scan with torn-tail
// repair, then the cursors.
func (l *Log) recover() (*RepairReport, error) {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("segmentlog: read directory %s: %w", l.dir, err)
	}
	var bases []uint64
	indexes := map[uint64]bool{}
	tornMax := map[uint64]int{}
	removed := false
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			// An interrupted segment creation or index write; never
			// acknowledged, never referenced.
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
				return nil, fmt.Errorf("segmentlog: remove %s: %w", filepath.Join(l.dir, name), err)
			}
			removed = true
		case strings.HasSuffix(name, segmentSuffix):
			base, ok := parseBaseName(name, segmentSuffix)
			if !ok {
				return nil, fmt.Errorf("segmentlog: %s: not a segment name this log writes; move it out of the log directory", filepath.Join(l.dir, name))
			}
			bases = append(bases, base)
		case strings.HasSuffix(name, indexSuffix):
			if base, ok := parseBaseName(name, indexSuffix); ok {
				indexes[base] = true
			}
		case strings.Contains(name, tornInfix):
			i := strings.Index(name, tornInfix)
			base, ok1 := parseBaseName(name[:i]+segmentSuffix, segmentSuffix)
			n, err := strconv.Atoi(name[i+len(tornInfix):])
			if ok1 && err == nil && n > tornMax[base] {
				tornMax[base] = n
			}
		}
	}
	if removed {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return nil, fmt.Errorf("segmentlog: sync directory %s: %w", l.dir, err)
		}
	}
	slices.Sort(bases)

	if len(bases) == 0 {
		seg, f, err := l.createSegment(0)
		if err != nil {
			return nil, err
		}
		l.segs, l.active, l.activeSeg = []*segment{seg}, f, seg
		return nil, l.loadCursors()
	}
	for i, base := range bases[:len(bases)-1] {
		seg, err := l.openSealed(base, bases[i+1], indexes[base])
		if err != nil {
			return nil, err
		}
		l.segs = append(l.segs, seg)
	}
	// Indexes without a segment are left over from retention; the newest
	// segment's index (from a roll that did not finish) would go stale as
	// it grows. Both are caches, so removing them needs no directory sync.
	newest := bases[len(bases)-1]
	for base := range indexes {
		if base == newest || !slices.Contains(bases, base) {
			if err := l.fs.Remove(filepath.Join(l.dir, indexName(base))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("segmentlog: remove stale index: %w", err)
			}
		}
	}
	rep, err := l.openNewest(newest, tornMax[newest])
	if err != nil {
		return nil, err
	}
	return rep, l.loadCursors()
}

// openSealed loads a segment that is not the newest. Its end must be the
// next segment's base. The index is trusted only if it matches the
// segment; otherwise the segment is scanned, and in a sealed segment any
// frame that fails to decode is corruption: everything in it was fsynced
// before the next segment was created.
func (l *Log) openSealed(base, nextBase uint64, hasIndex bool) (*segment, error) {
	path := filepath.Join(l.dir, segmentName(base))
	f, err := l.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("segmentlog: open %s: %w", path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("segmentlog: stat %s: %w", path, err)
	}
	hb := make([]byte, segmentHeaderSize)
	if _, err := f.ReadAt(hb, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &CorruptionError{Path: path, Position: 0, Reason: fmt.Sprintf("file of %d bytes is shorter than a segment header", size)}
		}
		return nil, fmt.Errorf("segmentlog: read %s: %w", path, err)
	}
	hdr, err := decodeSegmentHeader(hb)
	if err != nil {
		return nil, &CorruptionError{Path: path, Position: 0, Reason: err.Error()}
	}
	if hdr.base != base {
		return nil, &CorruptionError{Path: path, Position: 8, Reason: fmt.Sprintf("header base offset %d does not match the file name", hdr.base)}
	}
	seg := &segment{base: base, path: path, created: hdr.created}
	if hasIndex {
		ipath := filepath.Join(l.dir, indexName(base))
		b, err := readFileBounded(l.fs, ipath, indexHeaderSize+indexTrailerSize+indexEntrySize*(size/indexIntervalBytesMin+1))
		if err == nil {
			var ix indexFile
			if ix, err = decodeIndex(b); err == nil {
				err = validateIndex(ix, base, nextBase, size)
			}
			if err == nil {
				seg.size, seg.end, seg.index = size, ix.end, ix.entries
				return seg, nil
			}
		}
		l.logger.Info("segmentlog: rebuilding index", "path", ipath, "reason", err)
	}
	res, err := scanSegment(f, path, base, size, l.opts.IndexIntervalBytes, l.opts.PayloadBytesMax)
	if err != nil {
		return nil, err
	}
	if d := res.damage; d != nil {
		return nil, &CorruptionError{Path: path, Position: d.pos, Offset: d.expect, HasOffset: true,
			Reason: d.reason + " in a sealed segment (only the newest segment can have a torn tail)"}
	}
	if res.end != nextBase {
		return nil, &CorruptionError{Path: path, Position: size,
			Reason: fmt.Sprintf("segment ends at offset %d but the next segment starts at offset %d", res.end, nextBase)}
	}
	seg.size, seg.end, seg.index, seg.lastIndexed = res.size, res.end, res.index, res.lastIndexed
	l.writeIndex(seg)
	return seg, nil
}

func validateIndex(ix indexFile, base, nextBase uint64, size int64) error {
	switch {
	case ix.base != base:
		return fmt.Errorf("index base %d does not match segment base %d", ix.base, base)
	case ix.end != nextBase:
		return fmt.Errorf("index end %d does not match the next segment's base %d", ix.end, nextBase)
	case ix.size != size:
		return fmt.Errorf("index was built for %d bytes but the segment has %d", ix.size, size)
	}
	prev := indexEntry{offset: base, pos: segmentHeaderSize}
	for i, e := range ix.entries {
		if e.offset < prev.offset || e.offset >= ix.end || e.pos <= prev.pos || e.pos >= size || (i > 0 && e.offset == prev.offset) {
			return fmt.Errorf("index entry %d (offset %d, position %d) is out of order or out of range", i, e.offset, e.pos)
		}
		prev = e
	}
	return nil
}

// openNewest scans the newest segment and repairs a torn tail.
//
// A frame that fails to decode is a torn write only if nothing after it
// proves it had been acknowledged. The log fsyncs each commit group before
// writing the next, so an intact frame from a later commit group means the
// bad bytes were durable once: that is corruption, reported and left
// alone. Intact frames of the same (last) group after the damage can
// happen when a crash persists some pages of an unsynced write and not
// others; none of that group was acknowledged, so it is cut with the rest.
func (l *Log) openNewest(base uint64, tornMax int) (*RepairReport, error) {
	path := filepath.Join(l.dir, segmentName(base))
	f, err := l.fs.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("segmentlog: open %s: %w", path, err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = f.Close()
		}
	}()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("segmentlog: stat %s: %w", path, err)
	}
	res, err := scanSegment(f, path, base, size, l.opts.IndexIntervalBytes, l.opts.PayloadBytesMax)
	if err != nil {
		return nil, err
	}
	if n := len(l.segs); n > 0 && l.segs[n-1].end != base {
		return nil, &CorruptionError{Path: path, Position: 8,
			Reason: fmt.Sprintf("segment starts at offset %d but the previous segment ends at offset %d", base, l.segs[n-1].end)}
	}
	var rep *RepairReport
	if d := res.damage; d != nil {
		at, found, err := findLaterGroup(f, d.searchFrom, size, d.expect)
		if err != nil {
			return nil, fmt.Errorf("segmentlog: read %s: %w", path, err)
		}
		if found {
			return nil, &CorruptionError{Path: path, Position: d.pos, Offset: d.expect, HasOffset: true,
				Reason: fmt.Sprintf("%s, and intact frames of a later commit group follow at byte %d, so these bytes had been acknowledged", d.reason, at)}
		}
		if rep, err = l.cutTail(f, path, d, size, tornMax+1); err != nil {
			return nil, err
		}
		rep.NextOffset = res.end
	}
	seg := &segment{base: base, path: path, created: res.header.created, size: res.size, end: res.end,
		index: res.index, lastIndexed: res.lastIndexed}
	l.segs = append(l.segs, seg)
	l.next = seg.end
	l.active, l.activeSeg = f, seg
	keep = true
	return rep, nil
}

// cutTail copies the bytes from d.cut to the end of the segment aside into
// <segment>.torn-<n>, makes that copy durable, and only then truncates the
// segment, so a crash during repair loses nothing: the next Open repeats
// the repair with the next n.
func (l *Log) cutTail(f File, path string, d *scanDamage, size int64, n int) (*RepairReport, error) {
	tornPath := path + ".torn-" + strconv.Itoa(n)
	tf, err := l.fs.OpenFile(tornPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fileMode)
	if err != nil {
		return nil, fmt.Errorf("segmentlog: repair %s: %w", path, err)
	}
	buf := make([]byte, min(size-d.cut, 1<<20))
	for pos := d.cut; pos < size && err == nil; {
		var got int
		got, err = f.ReadAt(buf[:min(int64(len(buf)), size-pos)], pos)
		if err == nil || (errors.Is(err, io.EOF) && got > 0) {
			_, err = tf.Write(buf[:got])
		}
		pos += int64(got)
	}
	if err == nil {
		err = tf.Sync()
	}
	if cerr := tf.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fs.SyncDir(l.dir)
	}
	if err == nil {
		err = f.Truncate(d.cut)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return nil, fmt.Errorf("segmentlog: repair %s (cut at byte %d, copy to %s): %w", path, d.cut, tornPath, err)
	}
	return &RepairReport{Segment: path, Position: d.cut, BytesDropped: size - d.cut, TornPath: tornPath, Reason: d.reason}, nil
}
