package sidecar

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellara/trellara/relay/pgoutput"
)

// scriptConn is the server side of a connection as a list of messages:
// after the hello reply, reads return the messages in order, at most
// readMax bytes per read and, with perMessage, never more than the rest of
// one message. Once they are all read, reads block until Close. Writes
// (hello, acks) are accepted and dropped.
type scriptConn struct {
	net.Conn
	msgs       [][]byte
	readMax    int
	perMessage bool

	once   sync.Once
	closed chan struct{}
}

func (c *scriptConn) Read(b []byte) (int, error) {
	if len(c.msgs) == 0 {
		<-c.closed
		return 0, io.EOF
	}
	n := min(len(b), c.readMax)
	if c.perMessage {
		n = copy(b[:min(n, len(c.msgs[0]))], c.msgs[0])
		if c.msgs[0] = c.msgs[0][n:]; len(c.msgs[0]) == 0 {
			c.msgs = c.msgs[1:]
		}
		return n, nil
	}
	got := 0
	for got < n && len(c.msgs) > 0 {
		k := copy(b[got:n], c.msgs[0])
		got += k
		if c.msgs[0] = c.msgs[0][k:]; len(c.msgs[0]) == 0 {
			c.msgs = c.msgs[1:]
		}
	}
	return got, nil
}

func (c *scriptConn) Write(b []byte) (int, error) { return len(b), nil }
func (c *scriptConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// reuseScript is a stream that exercises every buffer the sidecar reuses:
// n transactions on one relation with distinct values of about 2 KiB (so
// that the stream is larger than the read buffer), updates with and
// without an old key, a value split over several chunks, a logical
// message, progress frames, the relation re-sent unchanged, and once
// changed to a shape whose frame has the same length (column v renamed
// w). want[i] is the i-th transaction's values and its relation's second
// column.
func reuseScript(n int) (msgs [][]byte, want []reuseTxn, endLSN uint64) {
	chunks := func(f []byte) {
		for {
			k := min(len(f), chunkBytesMax)
			var flags byte
			if k < len(f) {
				flags = chunkFlagMore
			}
			m := []byte{msgFrame, flags}
			m = binary.BigEndian.AppendUint32(m, uint32(k))
			msgs = append(msgs, append(m, f[:k]...))
			if f = f[k:]; len(f) == 0 {
				return
			}
		}
	}
	frame := func(m pgoutput.Message) { chunks(appendFrame(nil, m)) }
	rel := func(second string) *pgoutput.Relation {
		return &pgoutput.Relation{RelationID: 7, Namespace: "public", Name: "t", ReplicaIdentity: 'd',
			Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 23, TypeModifier: -1}, {Name: second, TypeOID: 25, TypeModifier: -1}}}
	}
	second := "v"
	for i := 0; i < n; i++ {
		lsn := uint64(0x1000000 + 0x1000*i)
		if i%7 == 3 {
			frame(&Progress{LSN: pgoutput.LSN(lsn - 8)})
		}
		frame(&pgoutput.Begin{Xid: pgoutput.XID(1000 + i), FinalLSN: pgoutput.LSN(lsn), CommitTime: 1})
		switch {
		case i == n/2:
			second = "w"
			frame(rel(second))
		case i == 0 || i%3 == 0:
			frame(rel(second)) // unchanged
		}
		id := fmt.Sprint(i)
		val := fmt.Sprintf("%d:%s", i, strings.Repeat(string(rune('a'+i%26)), 2000+i%50))
		if i == n/3 {
			val = strings.Repeat("z", 3*chunkBytesMax+5) // several chunks
		}
		t := reuseTxn{commit: lsn, second: second, values: []string{id, val}}
		frame(&pgoutput.Insert{RelationID: 7, New: []pgoutput.Column{text(id), text(val)}})
		if i%2 == 1 {
			next := fmt.Sprint(i + 1000000)
			frame(&pgoutput.Update{RelationID: 7, OldKind: pgoutput.TupleKey, Old: []pgoutput.Column{text(id), {Kind: pgoutput.ColumnNull}},
				New: []pgoutput.Column{text(next), {Kind: pgoutput.ColumnUnchangedToast}}})
			t.values = append(t.values, "old:"+id, next)
		} else {
			frame(&pgoutput.Update{RelationID: 7, New: []pgoutput.Column{text(id), text("u" + val)}})
			t.values = append(t.values, id, "u"+val)
		}
		if i%5 == 0 {
			frame(&pgoutput.LogicalMessage{Transactional: true, LSN: pgoutput.LSN(lsn - 16), Prefix: "p", Content: []byte(val[:10])})
			t.values = append(t.values, "msg:"+val[:10])
		}
		frame(&pgoutput.Commit{CommitLSN: pgoutput.LSN(lsn), EndLSN: pgoutput.LSN(lsn + 8), CommitTime: 1})
		want = append(want, t)
		endLSN = lsn + 8
	}
	return msgs, want, endLSN
}

type reuseTxn struct {
	commit uint64
	second string
	values []string
}

// The sidecar hands out its read buffer, decoded messages and column
// slices in place and overwrites them with the next frame: whatever it or
// the assembler keeps of frame N (values, relation frames, message
// contents) must be a copy. Every published value must be the one sent,
// however the stream is cut into reads: one message per read (each lands
// at the start of the buffer, so a kept alias always sees the newest
// frame), a few bytes per read (messages split across reads, the buffer
// compacted), and as much as the buffer holds.
func TestReadBufferReuse(t *testing.T) {
	for _, tc := range []struct {
		name       string
		readMax    int
		perMessage bool
	}{
		{"one message per read", readBufferSize, true},
		{"7 bytes per read", 7, false},
		{"whole buffer", readBufferSize, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, want, end := reuseScript(600)
			hello := []byte{msgHello}
			hello = append(hello, protocolMagic...)
			hello = binary.BigEndian.AppendUint16(hello, ProtocolVersion)
			hello = append(hello, FrameVersion)
			hello = binary.BigEndian.AppendUint32(hello, 150020)
			hello = binary.BigEndian.AppendUint64(hello, 42)
			hello = binary.BigEndian.AppendUint64(hello, 0)
			conn := &scriptConn{msgs: append([][]byte{hello}, msgs...), readMax: tc.readMax, perMessage: tc.perMessage,
				closed: make(chan struct{})}
			tr := &memTransport{}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var s *Sidecar
			s, err := New(Options{Dial: func(context.Context) (net.Conn, error) { return conn, nil }, SocketPath: "script",
				Transport: tr, SourceID: "reuse", Stop: func() bool { return s.Stats().Acked >= end }})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Run(ctx); err != nil {
				t.Fatal(err)
			}
			envs := decodeAll(t, tr.snapshot())
			if len(envs) != len(want) {
				t.Fatalf("published %d units, want %d", len(envs), len(want))
			}
			for i, e := range envs {
				var got []string
				for _, r := range e.Rows {
					if r.MessagePrefix != "" {
						got = append(got, "msg:"+string(r.MessageContent))
						continue
					}
					if len(r.OldTuple) > 0 {
						got = append(got, "old:"+string(r.OldTuple[0].Data))
					}
					for _, v := range r.NewTuple {
						if v.Data != nil {
							got = append(got, string(v.Data))
						}
					}
				}
				w := want[i]
				if e.CommitLsn != w.commit || !reflect.DeepEqual(got, w.values) {
					t.Fatalf("transaction %d: commit %x values %.60q, want commit %x values %.60q", i, e.CommitLsn, got, w.commit, w.values)
				}
				if cols := e.Relations[0].Columns; cols[1].Name != w.second {
					t.Fatalf("transaction %d: relation's second column %q, want %q", i, cols[1].Name, w.second)
				}
			}
		})
	}
}

// A decoder reused across frames gives each frame the message a fresh one
// gives: nothing of the previous frame survives in its messages or
// column slices (an update without an old tuple after one with, a narrow
// row after a wide one).
func TestFrameDecoderReuse(t *testing.T) {
	var frames [][]byte
	for _, tc := range validFrames {
		frames = append(frames, appendFrame(nil, tc.m))
	}
	frames = append(frames, loadFrames(t)...)
	var d frameDecoder
	for _, order := range [][][]byte{frames, reversed(frames)} {
		for i, b := range order {
			want, err := DecodeFrame(b, 1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.decode(b, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("frame %d (%c) decoded by a reused decoder:\n got %#v\nwant %#v", i, b[1], got, want)
			}
		}
	}
}

func reversed(s [][]byte) [][]byte {
	out := make([][]byte, len(s))
	for i, b := range s {
		out[len(s)-1-i] = b
	}
	return out
}

// TestFrameDecoderAllocations: once its column slices have grown, the
// per-connection decoder decodes the frames of every transaction (begin,
// row changes, commit) and progress frames without allocating.
func TestFrameDecoderAllocations(t *testing.T) {
	cols := make([]pgoutput.Column, 10)
	for i := range cols {
		cols[i] = text(fmt.Sprintf("value %d", i))
	}
	var frames [][]byte
	for _, m := range []pgoutput.Message{
		&pgoutput.Begin{Xid: 1, FinalLSN: 10},
		&pgoutput.Insert{RelationID: 1, New: cols},
		&pgoutput.Update{RelationID: 1, OldKind: pgoutput.TupleOld, Old: cols, New: cols},
		&pgoutput.Update{RelationID: 1, New: cols[:3]},
		&pgoutput.Delete{RelationID: 1, OldKind: pgoutput.TupleKey, Old: cols},
		&pgoutput.Commit{CommitLSN: 10, EndLSN: 20},
		&Progress{LSN: 30},
	} {
		frames = append(frames, appendFrame(nil, m))
	}
	var d frameDecoder
	n := testing.AllocsPerRun(100, func() {
		for _, b := range frames {
			if _, err := d.decode(b, 1); err != nil {
				t.Fatal(err)
			}
		}
	})
	if n != 0 {
		t.Errorf("decoding a transaction's frames allocates %.0f times, want 0", n)
	}
}
