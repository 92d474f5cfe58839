package segmentlog

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// RetentionReport says what ApplyRetention removed.
type RetentionReport struct {
	RemovedSegments []string
	RemovedBytes    int64
	// ExpiredCursors were needed by removed segments and are now marked
	// past-retention (only with Retention.Expire).
	ExpiredCursors []string
	FirstOffset    uint64 // oldest retained offset afterwards
}

// ApplyRetention removes the oldest segments that Options.Retention no
// longer keeps, judged at now. Segments go oldest first and never the
// active one, so the log stays contiguous. A segment that a registered,
// unexpired cursor still needs (cursor offset below the segment's end)
// stops the removal, unless Retention.Expire is set: then the cursor is
// first marked past-retention on disk, and only then the segment removed,
// so a crash can never leave a cursor that looks valid over a gap.
//
// Cursors are read from disk first, so ones that consumers in other
// processes registered and moved count, and the cursor lock is held to
// the end, so none of them moves between the decision and the removal.
func (l *Log) ApplyRetention(now time.Time) (RetentionReport, error) {
	if l.readOnly {
		return RetentionReport{}, ErrReadOnly
	}
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	pol := l.opts.Retention
	if err := l.failure(); err != nil {
		return RetentionReport{}, err
	}
	unlock, err := l.lockCursors()
	if err != nil {
		return RetentionReport{}, err
	}
	defer unlock()
	if err := l.reloadCursors(); err != nil {
		return RetentionReport{}, err
	}

	l.mu.Lock()
	if err := l.usableLocked(); err != nil {
		l.mu.Unlock()
		return RetentionReport{}, err
	}
	// All but the last segment are sealed and immutable, so the snapshot
	// stays valid while the flusher keeps appending to the active one.
	segs := slices.Clone(l.segs)
	var total int64
	for _, s := range segs {
		total += s.size
	}
	type cur struct {
		name   string
		offset uint64
	}
	var live []cur
	for name, c := range l.cursors {
		if !c.pastRetention {
			live = append(live, cur{name, c.offset})
		}
	}
	l.mu.Unlock()
	slices.SortFunc(live, func(a, b cur) int { return strings.Compare(a.name, b.name) })

	var rep RetentionReport
	var remove []*segment
	expired := map[string]uint64{}
	for i := 0; i < len(segs)-1; i++ {
		s := segs[i]
		byBytes := pol.MaxBytes > 0 && total > pol.MaxBytes
		// Everything in s was written before segs[i+1] was created.
		byAge := pol.MaxAge > 0 && !time.Unix(0, segs[i+1].created).Add(pol.MaxAge).After(now)
		if !byBytes && !byAge {
			break
		}
		var needers []cur
		for _, c := range live {
			if _, gone := expired[c.name]; !gone && c.offset < s.end {
				needers = append(needers, c)
			}
		}
		if len(needers) > 0 && !pol.Expire {
			break
		}
		for _, c := range needers {
			expired[c.name] = c.offset
			rep.ExpiredCursors = append(rep.ExpiredCursors, c.name)
		}
		remove = append(remove, s)
		total -= s.size
	}
	if len(remove) == 0 {
		rep.FirstOffset = segs[0].base
		return rep, nil
	}
	for _, name := range rep.ExpiredCursors {
		if err := l.storeCursor(name, cursorRecord{offset: expired[name], pastRetention: true}); err != nil {
			return rep, err
		}
	}
	// Detach first so no reader opens a segment that is about to go.
	l.mu.Lock()
	l.segs = l.segs[len(remove):]
	rep.FirstOffset = l.segs[0].base
	l.mu.Unlock()
	for _, s := range remove {
		if err := l.fs.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rep, fmt.Errorf("segmentlog: retention: remove %s: %w", s.path, err)
		}
		if err := l.fs.Remove(filepath.Join(l.dir, indexName(s.base))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rep, fmt.Errorf("segmentlog: retention: remove index of %s: %w", s.path, err)
		}
		rep.RemovedSegments = append(rep.RemovedSegments, s.path)
		rep.RemovedBytes += s.size
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return rep, l.setFatal("directory fsync", l.dir, err)
	}
	return rep, nil
}
