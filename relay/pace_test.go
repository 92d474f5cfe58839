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
// only after a read that returned at once with little data (the stream
// arriving in pieces, faster than it is read); after a read that waited
// for its data (a quiet stream, where latency matters) or one that took a
// large backlog, the next read goes straight to the socket. Mutations:
// wait before every read → red at "quiet"; never wait → red at "busy".
func TestPacedConnWaitsOnlyBehindABusyStream(t *testing.T) {
	small, large := bytes.Repeat([]byte{'s'}, 300), bytes.Repeat([]byte{'L'}, paceFull+1)
	clock := time.Unix(1000, 0)
	sc := &scriptedConn{clock: &clock, err: io.EOF, pieces: []scriptedRead{
		{small, 10 * time.Microsecond}, // busy: quick and small
		{small, 2 * time.Millisecond},  // read after the wait; it waited for data itself: quiet
		{small, 5 * time.Millisecond},  // quiet
		{large, 5 * time.Microsecond},  // quick, but a large backlog
		{small, 1 * time.Microsecond},  // busy
		{small, 20 * time.Microsecond}, // busy
	}}
	var slept []int // the index of each socket read that was preceded by a wait
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
	// Socket reads 0..5, and 6 returns the end; a wait precedes read k
	// when read k-1 was busy.
	if want := []int{1, 5, 6}; !slices.Equal(slept, want) {
		t.Errorf("waits before socket reads %v, want before %v (after the quick, small reads 0, 4 and 5)", slept, want)
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
