package segmentlog

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is an injectable clock for retention by age.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fill appends n entries of size bytes and returns the segment count.
func fill(t *testing.T, l *Log, n, size int) int {
	t.Helper()
	for i := range n {
		mustAppend(t, l, payloadFor(3, i, size))
	}
	return l.Stats().Segments
}

func TestRetentionByBytes(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts()
	opts.Retention.MaxBytes = 10 << 10
	l := mustOpen(t, dir, opts)
	defer l.Close()
	if segs := fill(t, l, 100, 400); segs < 8 {
		t.Fatalf("only %d segments", segs)
	}
	before := l.Stats()
	rep, err := l.ApplyRetention(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	after := l.Stats()
	if after.RetainedBytes > opts.Retention.MaxBytes || len(rep.RemovedSegments) == 0 {
		t.Fatalf("retained %d bytes after removing %d segments; limit %d", after.RetainedBytes, len(rep.RemovedSegments), opts.Retention.MaxBytes)
	}
	if before.RetainedBytes-after.RetainedBytes != rep.RemovedBytes || after.FirstOffset != rep.FirstOffset || after.FirstOffset == 0 {
		t.Fatalf("report %+v inconsistent with stats %+v -> %+v", rep, before, after)
	}
	for _, p := range rep.RemovedSegments {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s still exists", p)
		}
	}
	// An anonymous reader below the new start gets PastRetentionError.
	r := l.NewReader(0)
	defer r.Close()
	if _, _, err := nextCtx(r); !errors.As(err, new(*PastRetentionError)) {
		t.Fatalf("reader below retention = %v", err)
	}
	readAll(t, l, after.FirstOffset)
	l.Close()
	l2 := mustOpen(t, dir, opts)
	defer l2.Close()
	if l2.FirstOffset() != after.FirstOffset || l2.NextOffset() != 100 {
		t.Fatalf("after reopen first=%d next=%d", l2.FirstOffset(), l2.NextOffset())
	}
}

func TestRetentionByAge(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	opts := smallOpts()
	opts.Clock = clock.Now
	opts.Retention.MaxAge = time.Hour
	l := mustOpen(t, t.TempDir(), opts)
	defer l.Close()
	t0 := clock.Now()
	old := fill(t, l, 40, 400)      // segments created at t0
	clock.Advance(30 * time.Minute) // later segments are created at t0+30m
	fill(t, l, 40, 400)

	// At t0+59m no segment's newest entry can be an hour old.
	rep, err := l.ApplyRetention(t0.Add(59 * time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RemovedSegments) != 0 {
		t.Fatalf("removed %d segments before any was an hour old", len(rep.RemovedSegments))
	}
	// At t0+1h every segment sealed by a segment created at t0 has
	// expired; the last t0 segment was sealed at t0+30m and stays.
	rep, err = l.ApplyRetention(t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RemovedSegments) != old-1 {
		t.Fatalf("removed %d segments, want %d", len(rep.RemovedSegments), old-1)
	}
	// Much later everything but the active segment goes.
	if _, err = l.ApplyRetention(clock.Now().Add(10 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Segments != 1 || st.NextOffset != 80 {
		t.Fatalf("stats after full expiry %+v", st)
	}
}

func TestRetentionKeepsWhatCursorsNeed(t *testing.T) {
	opts := smallOpts()
	opts.Retention.MaxBytes = 1 // keep as little as possible
	l := mustOpen(t, t.TempDir(), opts)
	defer l.Close()
	fill(t, l, 60, 400)
	if err := l.CommitCursor("slow", 12); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ApplyRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	if first := l.FirstOffset(); first > 12 {
		t.Fatalf("retention removed offset 12 that cursor slow still needs (first=%d)", first)
	}
	r, err := l.NewCursorReader("slow")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if off, _, err := nextCtx(r); err != nil || off != 12 {
		t.Fatalf("slow consumer resumes at %d, %v", off, err)
	}
	// Once the cursor moves on, its segments can go.
	if err := l.CommitCursor("slow", 55); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ApplyRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	if first := l.FirstOffset(); first <= 12 || first > 55 {
		t.Fatalf("after the cursor advanced first offset is %d", first)
	}
}

func TestRetentionExpireMarksCursor(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts()
	opts.Retention = Retention{MaxBytes: 1, Expire: true}
	l := mustOpen(t, dir, opts)
	fill(t, l, 60, 400)
	if err := l.CommitCursor("laggard", 3); err != nil {
		t.Fatal(err)
	}
	if err := l.CommitCursor("current", 60); err != nil {
		t.Fatal(err)
	}
	r, err := l.NewCursorReader("laggard")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := l.ApplyRetention(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ExpiredCursors) != 1 || rep.ExpiredCursors[0] != "laggard" {
		t.Fatalf("expired cursors %v, want [laggard]", rep.ExpiredCursors)
	}
	checkPast := func(err error) {
		t.Helper()
		var pe *PastRetentionError
		if !errors.As(err, &pe) || pe.Consumer != "laggard" {
			t.Fatalf("got %v, want *PastRetentionError for laggard", err)
		}
		if want := `consumer "laggard" needs offset`; !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name the consumer", err)
		}
		// The log names no command; the caller's recovery ends the message.
		if strings.Contains(err.Error(), "trellara ") {
			t.Fatalf("error %q names a command; the caller adds its recovery", err)
		}
		const recovery = "start over with a full snapshot"
		if got := AddRecovery(err, recovery).Error(); !strings.HasSuffix(got, "cannot continue: "+recovery) {
			t.Fatalf("with the caller's recovery: %q", got)
		}
	}
	_, _, err = nextCtx(r)
	checkPast(err)
	_, _, err = l.CursorOffset("laggard")
	checkPast(err)
	checkPast(l.CommitCursor("laggard", 59))
	_, err = l.NewCursorReader("laggard")
	checkPast(err)
	st := l.Stats()
	for _, c := range st.Cursors {
		if c.Name == "laggard" && !c.PastRetention {
			t.Fatal("Stats does not show laggard past retention")
		}
	}
	l.Close()

	// The mark is durable, and reseeding (ResetCursor) clears it.
	l = mustOpen(t, dir, opts)
	defer l.Close()
	_, _, err = l.CursorOffset("laggard")
	checkPast(err)
	if err := l.ResetCursor("laggard", 2); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("ResetCursor below the first offset = %v", err)
	}
	if err := l.ResetCursor("laggard", l.FirstOffset()); err != nil {
		t.Fatal(err)
	}
	r2, err := l.NewCursorReader("laggard")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if off, _, err := nextCtx(r2); err != nil || off != l.FirstOffset() {
		t.Fatalf("after reseed: %d %v", off, err)
	}
}

func TestStatsLag(t *testing.T) {
	l := mustOpen(t, t.TempDir(), smallOpts())
	defer l.Close()
	fill(t, l, 30, 400)
	l.CommitCursor("zero", 0)
	l.CommitCursor("mid", 10)
	l.CommitCursor("end", 30)
	fill(t, l, 5, 400) // 5 more after "end" committed
	st := l.Stats()
	if st.NextOffset != 35 || st.FirstOffset != 0 || st.Segments < 2 {
		t.Fatalf("stats %+v", st)
	}
	var sum int64
	for _, s := range l.segs {
		sum += s.size
	}
	if st.RetainedBytes != sum {
		t.Fatalf("retained %d, want %d", st.RetainedBytes, sum)
	}
	byName := map[string]CursorStats{}
	for _, c := range st.Cursors {
		byName[c.Name] = c
	}
	entry := int64(frameHeaderSize + 400)
	if c := byName["zero"]; c.LagOffsets != 35 || c.LagBytes != st.RetainedBytes-segmentHeaderSize {
		t.Fatalf("zero: %+v", c)
	}
	if c := byName["end"]; c.LagOffsets != 5 || c.LagBytes < 5*entry || c.LagBytes > 5*entry+int64(st.Segments)*segmentHeaderSize {
		t.Fatalf("end: %+v (an entry is %d bytes)", c, entry)
	}
	if c := byName["mid"]; c.LagOffsets != 25 || c.LagBytes < 25*entry || c.LagBytes > 25*entry+int64(st.Segments)*segmentHeaderSize {
		t.Fatalf("mid: %+v", c)
	}
}

// A cursor retention expired, reset by another process (a reseed of every
// table), is readable again in the writer at once, without waiting for its
// next retention pass to reload the cursors.
func TestWriterSeesACursorResetElsewhere(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts()
	opts.Retention = Retention{MaxBytes: 1, Expire: true}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	fill(t, l, 60, 400)
	if err := l.CommitCursor("laggard", 3); err != nil {
		t.Fatal(err)
	}
	if err := l.CommitCursor("current", 60); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ApplyRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	var pe *PastRetentionError
	if _, err := l.NewCursorReader("laggard"); !errors.As(err, &pe) {
		t.Fatalf("NewCursorReader of an expired cursor = %v, want *PastRetentionError", err)
	}
	ro, err := OpenReadOnly(dir, Options{SegmentBytesMax: opts.SegmentBytesMax, IndexIntervalBytes: opts.IndexIntervalBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	first := l.FirstOffset()
	if err := ro.ResetCursor("laggard", first); err != nil {
		t.Fatal(err)
	}
	r, err := l.NewCursorReader("laggard")
	if err != nil {
		t.Fatalf("the writer after the reset elsewhere: %v", err)
	}
	defer r.Close()
	off, _, err := nextCtx(r)
	if err != nil || off != first {
		t.Fatalf("first entry read after the reset: offset %d, %v; want %d", off, err, first)
	}
	if got, _, err := l.CursorOffset("laggard"); err != nil || got != first {
		t.Fatalf("CursorOffset after the reset = %d, %v; want %d", got, err, first)
	}
}
