package sidecar

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/relay/pgoutput"
)

// tpcbStream is n TPC-B-like transactions as the extension sends them:
// per transaction a begin, three updates (accounts, tellers, branches), an
// insert into history and a commit, each frame in one 'F' chunk.
func tpcbStream(n int) (stream []byte, frames int) {
	filler := strings.Repeat(" ", 84)
	var f []byte
	add := func(m pgoutput.Message) {
		f = appendFrame(f[:0], m)
		stream = append(stream, msgFrame, 0)
		stream = binary.BigEndian.AppendUint32(stream, uint32(len(f)))
		stream = append(stream, f...)
		frames++
	}
	for i := 0; i < n; i++ {
		lsn := pgoutput.LSN(0x3000000 + 512*i)
		aid, tid, bid, delta := fmt.Sprint(1+i%100000), fmt.Sprint(1+i%10), "1", fmt.Sprint(i%5000-2500)
		add(&pgoutput.Begin{Xid: pgoutput.XID(1000 + i), FinalLSN: lsn, CommitTime: 1})
		add(&pgoutput.Update{RelationID: 16390, New: []pgoutput.Column{text(aid), text(bid), text(delta), text(filler)}})
		add(&pgoutput.Update{RelationID: 16393, New: []pgoutput.Column{text(tid), text(bid), text(delta), {Kind: pgoutput.ColumnNull}}})
		add(&pgoutput.Update{RelationID: 16396, New: []pgoutput.Column{text(bid), text(delta), {Kind: pgoutput.ColumnNull}}})
		add(&pgoutput.Insert{RelationID: 16399, New: []pgoutput.Column{text(tid), text(bid), text(aid), text(delta),
			text("2026-12-01 13:22:09.123456"), {Kind: pgoutput.ColumnNull}}})
		add(&pgoutput.Commit{CommitLSN: lsn, EndLSN: lsn + 48, CommitTime: 1})
	}
	return stream, frames
}

// loopConn is a net.Conn whose reads return stream over and over, at most
// readMax bytes per read (a socket's receive buffer).
type loopConn struct {
	net.Conn
	stream  []byte
	off     int
	readMax int
	reads   int
}

func (c *loopConn) Read(b []byte) (int, error) {
	c.reads++
	n := copy(b[:min(len(b), c.readMax)], c.stream[c.off:])
	c.off = (c.off + n) % len(c.stream)
	return n, nil
}

func (c *loopConn) SetReadDeadline(time.Time) error { return nil }

// BenchmarkReadFrames is the sidecar's own part of the extension path per
// frame: reading the socket, splitting chunks and decoding the frame, as
// the reader does before it hands the message to the assembler (which the
// relay path shares). Reads return at most 208 KiB, the default Unix
// socket buffer.
func BenchmarkReadFrames(b *testing.B) {
	stream, frames := tpcbStream(1000)
	conn := &loopConn{stream: stream, readMax: 208 << 10}
	c := newClient(conn, time.Minute, frameBytesMaxDefault)
	var r reader
	b.SetBytes(int64(len(stream) / frames))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := c.next(0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.dec.decode(m.frame, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(conn.reads)/float64(b.N), "reads/frame")
}
