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
	var tmps []string
	indexes := map[uint64]bool{}
	tornMax := map[uint64]int{}
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			// An interrupted segment creation or index write; never
			// acknowledged, never referenced. Removed once the segments
			// load: a log refused as corrupt is left exactly as it is.
			tmps = append(tmps, name)
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
	slices.Sort(bases)
	// The durable end the last writer published names every byte it
	// acknowledged (durable.go); damage at or below it is never a torn
	// write. A record that is missing or does not decode (a log written
	// before the record existed, or a power loss that kept the rename but
	// not the unsynced contents) leaves the older rule alone to decide.
	dur, derr := readDurable(l.fs, l.dir)
	var durable *durableRecord
	if derr == nil {
		durable = &dur
	} else if !errors.Is(derr, fs.ErrNotExist) {
		l.logger.Warn("segmentlog: durable end unreadable; only intact later commit groups can prove damage was acknowledged", "dir", l.dir, "err", derr)
	}

	if len(bases) == 0 {
		if durable != nil && durable.next > 0 {
			return nil, &CorruptionError{Path: filepath.Join(l.dir, segmentName(durable.activeBase)), HasOffset: true, Offset: 0,
				LostFrom: 0, LostTo: durable.next, HasLost: true,
				Reason: fmt.Sprintf("the log directory holds no segment but its durable end names offsets below %d", durable.next)}
		}
		if err := l.removeTemps(tmps); err != nil {
			return nil, err
		}
		seg, f, err := l.createSegment(0)
		if err != nil {
			return nil, err
		}
		l.segs, l.active, l.activeSeg = []*segment{seg}, f, seg
		return nil, l.loadCursors()
	}
	var rebuilt []*segment
	for i, base := range bases[:len(bases)-1] {
		seg, scanned, err := l.openSealed(base, bases[i+1], indexes[base])
		if err != nil {
			return nil, err
		}
		l.segs = append(l.segs, seg)
		if scanned {
			rebuilt = append(rebuilt, seg)
		}
	}
	newest := bases[len(bases)-1]
	rep, err := l.openNewest(newest, tornMax[newest], durable)
	if err != nil {
		return nil, err
	}
	// Every segment loaded: only now does Open change files that are not
	// the newest segment's torn tail.
	if err := l.removeTemps(tmps); err != nil {
		_ = l.active.Close()
		l.active = nil
		return nil, err
	}
	for _, seg := range rebuilt {
		l.writeIndex(seg)
	}
	// Indexes without a segment are left over from retention; the newest
	// segment's index (from a roll that did not finish) would go stale as
	// it grows. Both are caches, so removing them needs no directory sync.
	for base := range indexes {
		if base == newest || !slices.Contains(bases, base) {
			if err := l.fs.Remove(filepath.Join(l.dir, indexName(base))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				_ = l.active.Close()
				l.active = nil
				return nil, fmt.Errorf("segmentlog: remove stale index: %w", err)
			}
		}
	}
	return rep, l.loadCursors()
}

// removeTemps removes the temporary files an interrupted write left and
// makes their removal durable.
func (l *Log) removeTemps(names []string) error {
	for _, name := range names {
		if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
			return fmt.Errorf("segmentlog: remove %s: %w", filepath.Join(l.dir, name), err)
		}
	}
	if len(names) > 0 {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("segmentlog: sync directory %s: %w", l.dir, err)
		}
	}
	return nil
}

// openSealed loads a segment that is not the newest. Its end must be the
// next segment's base. The index is trusted only if it matches the
// segment; otherwise the segment is scanned, and in a sealed segment any
// frame that fails to decode is corruption: everything in it was fsynced
// before the next segment was created. scanned reports that the index has
// to be written again.
func (l *Log) openSealed(base, nextBase uint64, hasIndex bool) (seg *segment, scanned bool, err error) {
	path := filepath.Join(l.dir, segmentName(base))
	f, err := l.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, false, fmt.Errorf("segmentlog: open %s: %w", path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, false, fmt.Errorf("segmentlog: stat %s: %w", path, err)
	}
	hb := make([]byte, segmentHeaderSize)
	if _, err := f.ReadAt(hb, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, false, &CorruptionError{Path: path, Position: 0, Reason: fmt.Sprintf("file of %d bytes is shorter than a segment header", size)}
		}
		return nil, false, fmt.Errorf("segmentlog: read %s: %w", path, err)
	}
	hdr, err := decodeSegmentHeader(hb)
	if err != nil {
		return nil, false, &CorruptionError{Path: path, Position: 0, Reason: err.Error()}
	}
	if hdr.base != base {
		return nil, false, &CorruptionError{Path: path, Position: 8, Reason: fmt.Sprintf("header base offset %d does not match the file name", hdr.base)}
	}
	seg = &segment{base: base, path: path, created: hdr.created}
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
				return seg, false, nil
			}
		}
		l.logger.Info("segmentlog: rebuilding index", "path", ipath, "reason", err)
	}
	res, err := scanSegment(f, path, base, size, l.opts.IndexIntervalBytes, l.opts.PayloadBytesMax)
	if err != nil {
		return nil, false, err
	}
	if d := res.damage; d != nil {
		return nil, false, &CorruptionError{Path: path, Position: d.pos, Offset: d.expect, HasOffset: true,
			Reason: d.reason + " in a sealed segment (only the newest segment can have a torn tail)"}
	}
	if res.end != nextBase {
		return nil, false, &CorruptionError{Path: path, Position: size,
			Reason: fmt.Sprintf("segment ends at offset %d but the next segment starts at offset %d", res.end, nextBase)}
	}
	seg.size, seg.end, seg.index, seg.lastIndexed = res.size, res.end, res.index, res.lastIndexed
	return seg, true, nil
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
// Only bytes past the durable end the last writer published (DURABLE,
// durable.go) can be a torn write: the writer publishes it after each
// commit group's fsync and before it answers the group's appends, so every
// acknowledged byte is at or below it. Damage at or below it, or a segment
// that ends before it, is corruption of acknowledged data: refused, with
// the offsets it lost, and nothing is modified.
//
// Without a readable record (durable is nil) a frame that fails to decode
// is a torn write only if nothing after it proves it had been
// acknowledged. The log fsyncs each commit group before writing the next,
// so an intact frame from a later commit group means the bad bytes were
// durable once: that is corruption too. That check applies with a record
// as well, because a record that a power loss kept old names less than
// was acknowledged. Intact frames of the same (last) group after the
// damage can happen when a crash persists some pages of an unsynced write
// and not others; none of that group was acknowledged, so it is cut with
// the rest.
func (l *Log) openNewest(base uint64, tornMax int, durable *durableRecord) (*RepairReport, error) {
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
	if durable != nil {
		if err := checkDurable(path, base, res, durable); err != nil {
			return nil, err
		}
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

// checkDurable refuses a newest segment (base, scanned as res) that lost
// bytes the durable end names: damage at or below it, a segment shorter
// than it, or a durable end in a segment after this one.
func checkDurable(path string, base uint64, res scanResult, d *durableRecord) error {
	lost := func(pos int64, from uint64, reason string) error {
		return &CorruptionError{Path: path, Position: pos, Offset: from, HasOffset: true,
			LostFrom: from, LostTo: d.next, HasLost: true, Reason: reason}
	}
	switch {
	case d.activeBase > base:
		return lost(res.size, res.end, fmt.Sprintf("the durable end is at offset %d in segment %s, which is missing: this segment is the newest and ends at offset %d",
			d.next, segmentName(d.activeBase), res.end))
	case d.activeBase < base:
		return nil // nothing in this segment was published yet
	}
	if dm := res.damage; dm != nil && (dm.cut < d.activeSize || dm.expect < d.next) {
		return lost(dm.pos, dm.expect, fmt.Sprintf("%s; the damage is at or below the durable end (byte %d, offset %d), so those bytes had been acknowledged and are not a torn write",
			dm.reason, d.activeSize, d.next))
	}
	if res.damage == nil && (res.size < d.activeSize || res.end < d.next) {
		return lost(res.size, res.end, fmt.Sprintf("segment ends at byte %d (offset %d) but the durable end is byte %d (offset %d): acknowledged bytes are missing",
			res.size, res.end, d.activeSize, d.next))
	}
	return nil
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
