package sidecar

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/trellara/trellara/envelope"
)

// Socket protocol constants. Part of the wire contract; do not change.
const (
	ProtocolVersion = 1

	protocolMagic  = "TRLA"
	msgHello       = 'H'
	msgAck         = 'A'
	msgFrame       = 'F'
	msgKeepalive   = 'K'
	msgError       = 'E'
	helloReplyLen  = 28
	keepaliveLen   = 17
	chunkBytesMax  = 64 << 10 // the extension's queue slot size
	chunkFlagMore  = 0x01
	chunkHeaderLen = 6       // 'F', flags, u32 length
	errorBytesMax  = 1 << 16 // u16 length
	readBufferSize = 1 << 20 // many small frames per read syscall
	// readBufferRoom is the least free space a read is given: a whole
	// chunk with its header, so that any message fits after compaction.
	readBufferRoom = chunkBytesMax + chunkHeaderLen
	// deadlineSlack is how stale the dead-server deadline may get: the
	// effective timeout is between DeadServerTimeout minus this and
	// DeadServerTimeout.
	deadlineSlack = time.Second
)

// Hello is the server's reply to the sidecar's hello.
type Hello struct {
	ProtocolVersion  uint16
	FrameVersion     uint8
	ServerVersionNum uint32
	SystemIdentifier uint64
	// SlotConfirmedLSN is the slot's confirmed position when the
	// connection was accepted (0 if the decoder has not created it yet):
	// replay starts after it.
	SlotConfirmedLSN uint64
}

// client is one connection to the extension's socket. Reads happen on one
// goroutine; acks may be written from another (the publisher), guarded by
// wmu.
//
// Reads go into one buffer, as much as the socket holds per read syscall
// (many frames), and a frame that arrives in one chunk is handed out in
// place: buf[r:w] is received and not yet consumed, and what next returns
// aliases buf until the next call. Only a frame of several chunks is
// copied, into frame.
type client struct {
	conn net.Conn
	wmu  sync.Mutex

	buf  []byte // readBufferSize
	r, w int

	deadTimeout time.Duration
	deadlineSet time.Time // when the read deadline was last moved
	frameMax    int64
	frame       []byte // frame being reassembled from chunks; reused
}

// dialUnix connects to path. A missing socket or a refused connection is
// the server (re)starting; both are retried by Run.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

// checkPeer verifies that the process at the other end of a Unix socket
// runs as the expected uid (want; 0 = this process's effective uid), using
// the kernel's record of the peer (SO_PEERCRED), which the peer cannot
// forge. Anyone who can create the socket path first could otherwise feed
// the sidecar transactions that never happened. A connection from a Dial
// hook that is not a Unix socket (a test pipe) has no peer to check.
func checkPeer(conn net.Conn, path string, want int) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil
	}
	if want == 0 {
		want = os.Geteuid()
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return &PeerError{Path: path, Err: err}
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		cerr = err
	}
	if cerr != nil {
		return &PeerError{Path: path, Err: cerr}
	}
	if int(cred.Uid) != want {
		return &PeerError{Path: path, UID: int(cred.Uid), PID: int(cred.Pid), WantUID: want}
	}
	return nil
}

func newClient(conn net.Conn, deadTimeout time.Duration, frameMax int64) *client {
	return &client{conn: conn, buf: make([]byte, readBufferSize), deadTimeout: deadTimeout, frameMax: frameMax}
}

// fill makes at least n bytes (at most readBufferRoom) available in
// buf[r:w], reading as much as the socket holds. It moves the unconsumed
// bytes to the front of buf when the room after them is short, which
// invalidates every slice of buf handed out before.
func (c *client) fill(n int) error {
	for c.w-c.r < n {
		if c.r == c.w {
			c.r, c.w = 0, 0
		} else if len(c.buf)-c.w < readBufferRoom {
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		}
		// Keep the dead-server deadline current before every read that
		// may block. Moved at most every deadlineSlack: a deadline update
		// is a timer operation.
		if now := time.Now(); now.Sub(c.deadlineSet) > deadlineSlack {
			_ = c.conn.SetReadDeadline(now.Add(c.deadTimeout))
			c.deadlineSet = now
		}
		k, err := c.conn.Read(c.buf[c.w:])
		c.w += k
		if err != nil && c.w-c.r < n {
			return err
		}
	}
	return nil
}

// take consumes n bytes that fill made available.
func (c *client) take(n int) []byte {
	b := c.buf[c.r : c.r+n : c.r+n]
	c.r += n
	return b
}

// handshake sends hello and reads the reply. A refusal arrives as an 'E'
// instead of the reply, possibly after the server closed its side: a failed
// write of the hello is ignored so the explanation can still be read.
func (c *client) handshake() (Hello, error) {
	var h [7]byte
	h[0] = msgHello
	copy(h[1:5], protocolMagic)
	binary.BigEndian.PutUint16(h[5:], ProtocolVersion)
	c.wmu.Lock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(c.deadTimeout))
	_, werr := c.conn.Write(h[:])
	c.wmu.Unlock()

	c.deadlineSet = time.Now()
	_ = c.conn.SetReadDeadline(c.deadlineSet.Add(c.deadTimeout))
	if err := c.fill(1); err != nil {
		if werr != nil {
			return Hello{}, fmt.Errorf("sidecar: send hello: %w", werr)
		}
		return Hello{}, fmt.Errorf("sidecar: read hello reply: %w", err)
	}
	switch typ := c.take(1)[0]; typ {
	case msgError:
		return Hello{}, c.readError()
	case msgHello:
	default:
		return Hello{}, &ProtocolError{Reason: fmt.Sprintf("expected a hello reply, got message type %q", rune(typ))}
	}
	if err := c.fill(helloReplyLen - 1); err != nil {
		return Hello{}, fmt.Errorf("sidecar: read hello reply: %w", readErrUnexpected(err))
	}
	b := c.take(helloReplyLen - 1)
	if string(b[0:4]) != protocolMagic {
		return Hello{}, &ProtocolError{Reason: fmt.Sprintf("hello reply magic %q, want %q: not a trellara socket", b[0:4], protocolMagic)}
	}
	hello := Hello{ProtocolVersion: binary.BigEndian.Uint16(b[4:]), FrameVersion: b[6],
		ServerVersionNum: binary.BigEndian.Uint32(b[7:]), SystemIdentifier: binary.BigEndian.Uint64(b[11:]),
		SlotConfirmedLSN: binary.BigEndian.Uint64(b[19:])}
	if hello.ProtocolVersion != ProtocolVersion || hello.FrameVersion != FrameVersion {
		return hello, &ProtocolError{Reason: fmt.Sprintf("server speaks protocol %d with frame version %d; this sidecar speaks protocol %d, frame version %d: install matching versions",
			hello.ProtocolVersion, hello.FrameVersion, ProtocolVersion, FrameVersion)}
	}
	return hello, nil
}

func (c *client) readError() error {
	if err := c.fill(2); err != nil {
		return &ServerError{Message: "(error message cut off: " + readErrUnexpected(err).Error() + ")"}
	}
	n := int(binary.BigEndian.Uint16(c.take(2)))
	if err := c.fill(n); err != nil {
		return &ServerError{Message: string(c.take(c.w-c.r)) + " (cut off)"}
	}
	return &ServerError{Message: string(c.take(n))}
}

// readErrUnexpected is fill's error for a message cut off: an EOF in the
// middle of a message is io.ErrUnexpectedEOF, as io.ReadFull says it.
func readErrUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// message is one server message after the handshake; frame aliases the
// client's buffers until the next call.
type message struct {
	typ         byte
	frame       []byte
	ackableLSN  uint64 // keepalive
	serverMicro int64  // keepalive
}

// next reads the next complete frame or keepalive; at names the position
// in errors. A frame sent in one chunk (nearly all) is returned in place,
// without a copy.
func (c *client) next(at uint64) (message, error) {
	c.frame = c.frame[:0]
	for {
		if err := c.fill(1); err != nil {
			return message{}, c.readErr(err, at)
		}
		switch typ := c.buf[c.r]; typ {
		case msgFrame:
			if err := c.fill(chunkHeaderLen); err != nil {
				return message{}, c.readErr(readErrUnexpected(err), at)
			}
			h := c.buf[c.r:]
			flags, n := h[1], binary.BigEndian.Uint32(h[2:])
			if n > chunkBytesMax {
				return message{}, &ProtocolError{LSN: at, Reason: fmt.Sprintf("frame chunk of %d bytes, at most %d allowed", n, chunkBytesMax)}
			}
			if flags&^chunkFlagMore != 0 {
				return message{}, &ProtocolError{LSN: at, Reason: fmt.Sprintf("frame chunk flags %#x: only bit 0 (more) is defined", flags)}
			}
			if int64(len(c.frame))+int64(n) > c.frameMax {
				return message{}, &FrameTooLargeError{LSN: at, Bytes: int64(len(c.frame)) + int64(n), Max: c.frameMax}
			}
			if err := c.fill(chunkHeaderLen + int(n)); err != nil {
				return message{}, c.readErr(readErrUnexpected(err), at)
			}
			c.r += chunkHeaderLen
			chunk := c.take(int(n))
			if flags&chunkFlagMore == 0 && len(c.frame) == 0 {
				return message{typ: msgFrame, frame: chunk}, nil
			}
			c.frame = append(c.frame, chunk...)
			if flags&chunkFlagMore == 0 {
				return message{typ: msgFrame, frame: c.frame}, nil
			}
		case msgKeepalive:
			if len(c.frame) > 0 {
				return message{}, &ProtocolError{LSN: at, Reason: "keepalive inside a chunked frame"}
			}
			if err := c.fill(keepaliveLen); err != nil {
				return message{}, c.readErr(readErrUnexpected(err), at)
			}
			b := c.take(keepaliveLen)[1:]
			return message{typ: msgKeepalive, ackableLSN: binary.BigEndian.Uint64(b),
				serverMicro: int64(binary.BigEndian.Uint64(b[8:]))}, nil
		case msgError:
			c.r++
			return message{}, c.readError()
		default:
			return message{}, &ProtocolError{LSN: at, Reason: fmt.Sprintf("unknown message type %q (0x%02x)", rune(typ), typ)}
		}
	}
}

// ConnectionError is a lost connection: EOF, reset, or no message within
// the dead-server timeout. Run reconnects; the server replays from the
// slot's confirmed position.
type ConnectionError struct {
	LSN uint64
	Err error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("sidecar: connection to the extension lost near LSN %s: %v", envelope.FormatLSN(e.LSN), e.Err)
}

func (e *ConnectionError) Unwrap() error { return e.Err }

func (c *client) readErr(err error, at uint64) error {
	if isTimeout(err) {
		err = fmt.Errorf("no message for %s (the server sends a keepalive every 10 s): %w", c.deadTimeout, err)
	}
	return &ConnectionError{LSN: at, Err: err}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// ack tells the server everything through lsn is durable.
func (c *client) ack(lsn uint64) error {
	var b [9]byte
	b[0] = msgAck
	binary.BigEndian.PutUint64(b[1:], lsn)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(c.deadTimeout))
	if _, err := c.conn.Write(b[:]); err != nil {
		return &ConnectionError{LSN: lsn, Err: fmt.Errorf("send acknowledgement: %w", err)}
	}
	return nil
}
