package sidecar

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/relay/pgoutput"
)

// fakeServer speaks the server side of the socket protocol from a script,
// one script call per accepted connection.
type fakeServer struct {
	path string
	ln   net.Listener

	mu   sync.Mutex
	acks []uint64
}

func newFakeServer(t *testing.T, script func(n int, c *fakeConn)) *fakeServer {
	t.Helper()
	fs := &fakeServer{path: filepath.Join(t.TempDir(), "s.sock")}
	ln, err := net.Listen("unix", fs.path)
	if err != nil {
		t.Fatal(err)
	}
	fs.ln = ln
	t.Cleanup(func() { ln.Close() })
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fc := &fakeConn{Conn: c, fs: fs}
			go func() {
				defer c.Close()
				script(n, fc)
			}()
		}
	}()
	return fs
}

type fakeConn struct {
	net.Conn
	fs *fakeServer
}

// hello reads the client's hello and answers with version v.
func (c *fakeConn) hello(magic string, v uint16, confirmed uint64) bool {
	var h [7]byte
	if _, err := io.ReadFull(c, h[:]); err != nil || h[0] != 'H' || string(h[1:5]) != "TRLA" {
		return false
	}
	b := []byte{'H'}
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint16(b, v)
	b = append(b, 1)
	b = binary.BigEndian.AppendUint32(b, 150020)
	b = binary.BigEndian.AppendUint64(b, 42)
	b = binary.BigEndian.AppendUint64(b, confirmed)
	_, err := c.Write(b)
	return err == nil
}

func (c *fakeConn) chunk(flags byte, payload []byte) {
	b := []byte{'F', flags}
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	_, _ = c.Write(append(b, payload...))
}

func (c *fakeConn) frame(m pgoutput.Message) { c.chunk(0, appendFrame(nil, m)) }

func (c *fakeConn) serverError(msg string) {
	b := []byte{'E'}
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	_, _ = c.Write(append(b, msg...))
}

// readAcks records acks until the connection closes or n arrived.
func (c *fakeConn) readAcks(n int) {
	for i := 0; i < n; i++ {
		var b [9]byte
		if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'A' {
			return
		}
		c.fs.mu.Lock()
		c.fs.acks = append(c.fs.acks, binary.BigEndian.Uint64(b[1:]))
		c.fs.mu.Unlock()
	}
}

func (fs *fakeServer) ackList() []uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]uint64(nil), fs.acks...)
}

// txn sends one committed single-insert transaction.
func (c *fakeConn) txn(xid uint32, commit uint64) {
	c.frame(&pgoutput.Begin{Xid: pgoutput.XID(xid), FinalLSN: pgoutput.LSN(commit), CommitTime: 1})
	c.frame(&pgoutput.Relation{RelationID: 1, Namespace: "public", Name: "t", ReplicaIdentity: 'd',
		Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 23, TypeModifier: -1}}})
	c.frame(&pgoutput.Insert{RelationID: 1, New: []pgoutput.Column{text("1")}})
	c.frame(&pgoutput.Commit{CommitLSN: pgoutput.LSN(commit), EndLSN: pgoutput.LSN(commit + 8), CommitTime: 1})
}

func runFake(t *testing.T, fs *fakeServer, tr relay.Transport, stop func(*Sidecar) bool, mod func(*Options)) (*Sidecar, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var s *Sidecar
	o := Options{SocketPath: fs.path, Transport: tr, SourceID: "fake", ReconnectBackoffMax: 100 * time.Millisecond,
		Stop: func() bool { return stop != nil && stop(s) }}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, s.Run(ctx)
}

func TestClientRefusals(t *testing.T) {
	big := make([]byte, chunkBytesMax)
	for _, tc := range []struct {
		name   string
		script func(c *fakeConn)
		check  func(error) bool
	}{
		{"peer uid refused", func(c *fakeConn) { c.serverError("peer uid does not match the server's uid") },
			func(err error) bool {
				var se *ServerError
				return errors.As(err, &se) && !se.Retryable() && strings.Contains(err.Error(), "run the sidecar as the PostgreSQL server's OS user")
			}},
		{"bad magic", func(c *fakeConn) { c.hello("XXXX", 1, 0) }, isProtocolError("magic")},
		{"protocol version", func(c *fakeConn) { c.hello("TRLA", 2, 0) }, isProtocolError("install matching versions")},
		{"unknown message", func(c *fakeConn) { c.hello("TRLA", 1, 0); _, _ = c.Write([]byte{'Z'}) }, isProtocolError("unknown message type")},
		{"oversized chunk", func(c *fakeConn) {
			c.hello("TRLA", 1, 0)
			_, _ = c.Write([]byte{'F', 0, 0, 1, 0, 1})
		}, isProtocolError("at most 65536")},
		{"chunk flags", func(c *fakeConn) { c.hello("TRLA", 1, 0); c.chunk(2, []byte{1, 'P'}) }, isProtocolError("flags")},
		{"keepalive inside a frame", func(c *fakeConn) {
			c.hello("TRLA", 1, 0)
			c.chunk(1, []byte{1})
			_, _ = c.Write(append([]byte{'K'}, make([]byte, 16)...))
		}, func(err error) bool {
			return isProtocolError("keepalive inside")(err)
		}},
		{"frame too large", func(c *fakeConn) {
			c.hello("TRLA", 1, 0)
			c.chunk(1, big)
			c.chunk(1, big)
		}, func(err error) bool {
			var fe *FrameTooLargeError
			return errors.As(err, &fe) && fe.Max == 2*chunkBytesMax-1
		}},
		{"malformed frame names the transaction", func(c *fakeConn) {
			c.hello("TRLA", 1, 0)
			c.frame(&pgoutput.Begin{Xid: 9, FinalLSN: 0xABCDEF, CommitTime: 1})
			c.chunk(0, []byte{1, 'I', 0})
		}, func(err error) bool {
			var fe *FrameError
			return errors.As(err, &fe) && fe.LSN == 0xABCDEF && strings.Contains(err.Error(), "0/ABCDEF")
		}},
		{"delete without old tuple", func(c *fakeConn) {
			c.hello("TRLA", 1, 0)
			c.frame(&pgoutput.Begin{Xid: 9, FinalLSN: 100, CommitTime: 1})
			c.frame(&pgoutput.Relation{RelationID: 5, Namespace: "s", Name: "nokey", ReplicaIdentity: 'n',
				Columns: []pgoutput.RelationColumn{{Name: "v", TypeOID: 25, TypeModifier: -1}}})
			c.frame(&pgoutput.Delete{RelationID: 5})
		}, func(err error) bool {
			var ue *UnsupportedChangeError
			return errors.As(err, &ue) && ue.Relation == "s.nokey" && ue.LSN == 100
		}},
		{"progress inside a transaction", func(c *fakeConn) {
			c.hello("TRLA", 1, 0)
			c.frame(&pgoutput.Begin{Xid: 9, FinalLSN: 100, CommitTime: 1})
			c.frame(&Progress{LSN: 50})
		}, isProtocolError("progress frame")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeServer(t, func(_ int, c *fakeConn) {
				tc.script(c)
				time.Sleep(time.Second) // keep the connection open
			})
			_, err := runFake(t, fs, &memTransport{}, nil, func(o *Options) { o.FrameBytesMax = 2*chunkBytesMax - 1 })
			if err == nil || !tc.check(err) {
				t.Fatalf("unexpected error %T: %v", err, err)
			}
		})
	}
}

func isProtocolError(reason string) func(error) bool {
	return func(err error) bool {
		var pe *ProtocolError
		return errors.As(err, &pe) && errors.Is(err, ErrMalformed) && strings.Contains(err.Error(), reason)
	}
}

// Publish, then acknowledge; a retryable refusal reconnects; the replay is
// deduplicated and acknowledged again; progress frames are acknowledged.
func TestClientReconnectDedupAndProgress(t *testing.T) {
	fs := newFakeServer(t, func(n int, c *fakeConn) {
		switch n {
		case 0:
			c.hello("TRLA", 1, 0)
			c.txn(700, 1000)
			c.readAcks(1)
			c.serverError("decoder restarted; reconnect to resume from the slot's confirmed position")
		case 1:
			c.serverError("another sidecar is connected")
		default:
			c.hello("TRLA", 1, 1008)
			c.txn(700, 1000) // replay of a durable transaction
			c.txn(701, 2000)
			c.frame(&Progress{LSN: 3000})
			c.readAcks(3)
			time.Sleep(time.Second)
		}
	})
	tr := &memTransport{}
	dir := t.TempDir()
	s, err := runFake(t, fs, tr, func(s *Sidecar) bool { return s.Stats().Acked >= 3000 },
		func(o *Options) { o.Acks = openAcks(t, dir) })
	if err != nil {
		t.Fatal(err)
	}
	envs := decodeAll(t, tr.snapshot())
	if len(envs) != 2 || envs[0].CommitLsn != 1000 || envs[1].CommitLsn != 2000 || envs[1].EndLsn != 2008 {
		t.Fatalf("published %v", envs)
	}
	st := s.Stats()
	if st.Skipped != 1 || st.Connections != 2 || st.Published != 2 {
		t.Fatalf("stats %+v", st)
	}
	// The fake server records acks on its own goroutine.
	var acks []uint64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if acks = fs.ackList(); acks[len(acks)-1] == 3000 {
			break
		}
	}
	// 1008 on the first connection; on the third the replay (1008) may be
	// acknowledged on its own or together with 2008.
	if acks[0] != 1008 || acks[len(acks)-1] != 3000 {
		t.Fatalf("acks %v", acks)
	}
	if p, err := openAcks(t, dir).Load(); err != nil || p != 3000 {
		t.Fatalf("progress %d, %v", p, err)
	}
}

// A slot confirmed past both the transport and the recorded progress is a
// gap: something else moved the slot, or the transport lost data.
func TestClientGap(t *testing.T) {
	fs := newFakeServer(t, func(n int, c *fakeConn) {
		if n == 0 {
			c.hello("TRLA", 1, 0)
			c.txn(700, 1000)
			c.readAcks(1)
			return
		}
		c.hello("TRLA", 1, 5000)
		time.Sleep(time.Second)
	})
	tr := &memTransport{}
	dir := t.TempDir()
	prog := func(o *Options) { o.Acks = openAcks(t, dir) }
	if _, err := runFake(t, fs, tr, func(s *Sidecar) bool { return s.Stats().Acked >= 1008 }, prog); err != nil {
		t.Fatal(err)
	}
	_, err := runFake(t, fs, tr, nil, prog)
	var ge *relay.GapError
	if !errors.As(err, &ge) || ge.SlotConfirmedLSN != 5000 || ge.TransportDurable != 1008 {
		t.Fatalf("got %v", err)
	}
}

// bigTxn sends one committed transaction of n 100-byte rows.
func (c *fakeConn) bigTxn(xid uint32, commit uint64, n int) {
	c.frame(&pgoutput.Begin{Xid: pgoutput.XID(xid), FinalLSN: pgoutput.LSN(commit), CommitTime: 1})
	c.frame(&pgoutput.Relation{RelationID: 2, Namespace: "public", Name: "big", ReplicaIdentity: 'd',
		Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 23, TypeModifier: -1}, {Name: "body", TypeOID: 25, TypeModifier: -1}}})
	for i := 0; i < n; i++ {
		c.frame(&pgoutput.Insert{RelationID: 2, New: []pgoutput.Column{text(fmt.Sprint(i)), text(strings.Repeat("x", 100))}})
	}
	c.frame(&pgoutput.Commit{CommitLSN: pgoutput.LSN(commit), EndLSN: pgoutput.LSN(commit + 8), CommitTime: 1})
}

// A crash in the middle of publishing a large transaction B leaves its
// first chunk after the whole transaction A before it. Back-to-back
// commits: A ends (1008) exactly where B's commit record starts, and the
// slot acknowledged through A is confirmed at 1008. The extension's decoder
// resends every transaction committing at or past the confirmed position,
// so that is no gap; the sidecar must publish B whole and go on.
func TestClientResumeAfterPartialChunksBackToBack(t *testing.T) {
	const rows = 100
	fs := newFakeServer(t, func(n int, c *fakeConn) {
		confirmed := uint64(0)
		if n > 0 {
			confirmed = 1008 // acknowledged through A
		}
		c.hello("TRLA", 1, confirmed)
		if n == 0 {
			c.txn(700, 1000)
		}
		c.bigTxn(701, 1008, rows)
		c.readAcks(2)
		time.Sleep(time.Second)
	})
	chunked := func(o *Options) { o.Assembler.ChunkBytesMax = 4 << 10 }
	full := &memTransport{}
	if _, err := runFake(t, fs, full, func(s *Sidecar) bool { return s.Stats().Acked >= 1016 }, chunked); err != nil {
		t.Fatal(err)
	}
	units := full.snapshot()
	if envs := decodeAll(t, units); len(envs) < 3 || envs[0].EndLsn != 1008 || envs[1].CommitLsn != 1008 {
		t.Fatalf("first run published %d units, want A ending at 1008 and B committing there in several chunks", len(envs))
	}
	// The crash: A and B's first chunk are durable, the rest is not.
	crashed := &memTransport{units: append([][]byte(nil), units[:2]...)}
	dir := t.TempDir()
	s, err := runFake(t, fs, crashed, func(s *Sidecar) bool { return s.Stats().Acked >= 1016 },
		func(o *Options) { chunked(o); o.Acks = openAcks(t, dir) })
	if err != nil {
		t.Fatalf("resume with the slot confirmed at A's end: %v", err)
	}
	got := crashed.snapshot()
	if len(got) != 2+len(units)-1 {
		t.Fatalf("%d units after the resend, want %d (A, B's partial chunk, B whole)", len(got), 2+len(units)-1)
	}
	for i, u := range got[2:] {
		if !bytes.Equal(u, units[1+i]) {
			t.Fatalf("resent unit %d differs from B's chunk %d", 2+i, i)
		}
	}
	if st := s.Stats(); st.Acked != 1016 {
		t.Fatalf("acknowledged %d, want B's end 1016", st.Acked)
	}
	// A slot confirmed past B's commit while B is not whole is a real gap.
	crashed = &memTransport{units: append([][]byte(nil), units[:2]...)}
	res, err := relay.ResumeFrom(context.Background(), crashed)
	if err != nil {
		t.Fatal(err)
	}
	side, err := New(Options{SocketPath: fs.path, Transport: crashed, SourceID: "fake", Acks: openAcks(t, t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		confirmed uint64
		gap       bool
	}{{1000, false}, {1008, false}, {1009, true}, {1016, true}} {
		err := side.checkGap(Hello{SlotConfirmedLSN: tc.confirmed}, res)
		var ge *relay.GapError
		if errors.As(err, &ge) != tc.gap {
			t.Errorf("slot confirmed at %d with B (commit 1008) partly durable: %v, want gap %v", tc.confirmed, err, tc.gap)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := Options{SocketPath: "/s", Transport: &memTransport{}, SourceID: "x"}
	for _, tc := range []struct {
		field string
		mod   func(*Options)
	}{
		{"Transport", func(o *Options) { o.Transport = nil }},
		{"SocketPath", func(o *Options) { o.SocketPath = "" }},
		{"SourceID", func(o *Options) { o.SourceID = "" }},
		{"Assembler.MemoryBytesMax", func(o *Options) { o.Assembler.MemoryBytesMax = -1 }},
		{"FrameBytesMax", func(o *Options) { o.FrameBytesMax = 2 << 30 }},
		{"DeadServerTimeout", func(o *Options) { o.DeadServerTimeout = time.Second }},
	} {
		o := ok
		tc.mod(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: got %v", tc.field, err)
		}
	}
	if _, err := New(ok); err != nil {
		t.Fatal(err)
	}
}

func openAcks(t *testing.T, dir string) *capture.FileAcks {
	t.Helper()
	a, err := capture.OpenFileAcks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
