package relay

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// scriptedConn returns its reads in the pieces given, each after the
// read's simulated duration on a clock the test owns.
type scriptedConn struct {
	net.Conn
	clock  *time.Time
	pieces []scriptedRead
	err    error // after the last piece
}

type scriptedRead struct {
	data []byte
	took time.Duration // how long the read waited for its data
}

func (s *scriptedConn) Read(p []byte) (int, error) {
	if len(s.pieces) == 0 {
		return 0, s.err
	}
	r := s.pieces[0]
	*s.clock = s.clock.Add(r.took)
	n := copy(p, r.data)
	if n == len(r.data) {
		s.pieces = s.pieces[1:]
	} else {
		s.pieces[0].data = r.data[n:]
	}
	return n, nil
}

// TestPacedConnWaitsOnlyBehindABusyStream: the wait before a read comes
// only once the reader is behind, paceAfter quick reads in a row (each
// returned at once: the data was there), and then only after a small
// read. A transaction's few messages read as they arrive, a read that
// waited for its data (a quiet stream, where latency matters), and a
// read that took a large backlog set no wait. Mutations: wait after
// every quick, small read → red at "a transaction's messages"; never
// wait → red at "behind".
func TestPacedConnWaitsOnlyBehindABusyStream(t *testing.T) {
	small, large := bytes.Repeat([]byte{'s'}, 300), bytes.Repeat([]byte{'L'}, paceFull+1)
	const quick, waited = 10 * time.Microsecond, 2 * time.Millisecond
	var script []scriptedRead
	var want []int // the socket reads a wait precedes
	add := func(data []byte, took time.Duration, waitBefore bool) {
		if waitBefore {
			want = append(want, len(script))
		}
		script = append(script, scriptedRead{data, took})
	}
	// A transaction's messages as they arrive: one read waited, the
	// rest quick, fewer than paceAfter in a row.
	for range 2 {
		add(small, waited, false)
		for range paceAfter - 2 {
			add(small, quick, false)
		}
	}
	// Behind: the quick reads go on; the paceAfter-th sets the wait.
	add(small, waited, false)
	for range paceAfter {
		add(small, quick, false)
	}
	add(small, quick, true)  // quick and small: the next waits too
	add(large, quick, true)  // a large backlog: the next does not wait
	add(small, quick, false) // still behind
	add(small, waited, true) // waited for its data: the run ends
	add(small, quick, false)
	clock := time.Unix(1000, 0)
	sc := &scriptedConn{clock: &clock, err: io.EOF, pieces: script}
	var slept []int
	reads := 0
	c := newPacedConn(sc)
	c.now = func() time.Time { return clock }
	c.sleep = func(d time.Duration) {
		if d != paceWait {
			t.Errorf("waited %s, want %s", d, paceWait)
		}
		slept = append(slept, reads)
		clock = clock.Add(d)
	}
	buf := make([]byte, 64<<10)
	for {
		before := c.r == c.w
		if _, err := c.Read(buf); err != nil {
			break
		}
		if before {
			reads++
		}
	}
	if !slices.Equal(slept, want) {
		t.Errorf("waits before socket reads %v, want before %v", slept, want)
	}
}

// TestPacedConnPassesTheStreamThrough: whatever the sizes of the socket's
// pieces and of the reads asking for them, pacedConn returns the bytes in
// order, none lost or repeated, and then the connection's error.
func TestPacedConnPassesTheStreamThrough(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	want := make([]byte, 3*paceBuffer+12345)
	rng.Read(want)
	var pieces []scriptedRead
	for rest := want; len(rest) > 0; {
		n := 1 + rng.Intn(min(len(rest), 40000))
		pieces = append(pieces, scriptedRead{data: rest[:n], took: time.Duration(rng.Intn(100)) * time.Microsecond})
		rest = rest[n:]
	}
	clock := time.Unix(1000, 0)
	c := newPacedConn(&scriptedConn{clock: &clock, pieces: pieces, err: os.ErrDeadlineExceeded})
	c.now = func() time.Time { return clock }
	c.sleep = func(d time.Duration) { clock = clock.Add(d) }
	var got []byte
	for {
		p := make([]byte, 1+rng.Intn(20000))
		n, err := c.Read(p)
		got = append(got, p[:n]...)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("error %v, want the connection's own", err)
			}
			break
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want the %d written, in order", len(got), len(want))
	}
}
