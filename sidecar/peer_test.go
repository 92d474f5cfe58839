package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// impostor serves the socket protocol convincingly (a valid hello reply and
// a committed transaction) and counts the bytes of the hellos it received.
func impostor(t *testing.T, ln net.Listener) *atomic.Int64 {
	t.Helper()
	var got atomic.Int64
	fs := &fakeServer{path: ln.Addr().String(), ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fc := &fakeConn{Conn: c, fs: fs}
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if !fc.hello("TRLA", 1, 0) { // reads the client's 7-byte hello first
					return
				}
				got.Add(7)
				fc.txn(7, 100)
				time.Sleep(time.Second)
			}()
		}
	}()
	return &got
}

func peerRefused(t *testing.T, err error, peerUID, want int) {
	t.Helper()
	var pe *PeerError
	if !errors.As(err, &pe) || pe.UID != peerUID || pe.WantUID != want || pe.PID == 0 {
		t.Fatalf("want a *PeerError for peer uid %d (expected %d), got %T: %v", peerUID, want, err, err)
	}
	if retryable(err) {
		t.Error("a foreign peer is retried")
	}
}

// A process of another uid serving the socket path is refused before a
// byte is exchanged (SO_PEERCRED), whatever it says.
func TestSidecarRefusesForeignPeer(t *testing.T) {
	// Expected uid set explicitly: the in-process server runs as this
	// process's uid, which is then "foreign".
	fs := newFakeServer(t, func(_ int, c *fakeConn) { c.hello("TRLA", 1, 0); c.txn(7, 100); time.Sleep(time.Second) })
	tr := &memTransport{}
	want := os.Geteuid() + 1
	_, err := runFake(t, fs, tr, nil, func(o *Options) { o.ServerUID = want })
	peerRefused(t, err, os.Geteuid(), want)
	if len(tr.snapshot()) != 0 {
		t.Fatalf("published %d units from a refused peer", len(tr.snapshot()))
	}

	// The default: a server of another OS user on the path (as root here:
	// user nobody, the position an attacker who created the path first
	// would be in) is refused, and receives not even the hello.
	if os.Geteuid() != 0 {
		t.Log("not root: a listener of another uid cannot be made here (CI runs as root); the explicit check above stands")
		return
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	nuid, _ := strconv.Atoi(nobody.Uid)
	ngid, _ := strconv.Atoi(nobody.Gid)
	path := filepath.Join(t.TempDir(), "trellara.sock")
	got := impostor(t, listenAs(t, path, nuid, ngid))
	tr = &memTransport{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = Run(ctx, Options{SocketPath: path, Transport: tr, SourceID: "peer"})
	peerRefused(t, err, nuid, 0)
	if n := got.Load(); n != 0 || len(tr.snapshot()) != 0 {
		t.Fatalf("exchanged with the impostor: sent %d bytes, published %d units", n, len(tr.snapshot()))
	}
}

// listenAs listens on path with the calling thread's effective uid and gid
// switched to uid/gid for the listen(2) alone: the kernel records the
// listener's credentials then, and reports them to every client as
// SO_PEERCRED. As dialAs, the switch is per thread and restored before the
// thread is released.
func listenAs(t *testing.T, path string, uid, gid int) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		setres := func(trap uintptr, id int) error {
			if _, _, e := syscall.RawSyscall(trap, ^uintptr(0), uintptr(id), ^uintptr(0)); e != 0 {
				return e
			}
			return nil
		}
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
			syscall.Close(fd)
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("bind: %w", err)}
			return
		}
		err = setres(syscall.SYS_SETRESGID, gid)
		if err == nil {
			err = setres(syscall.SYS_SETRESUID, uid)
		}
		if err == nil {
			err = syscall.Listen(fd, 4)
		}
		if setres(syscall.SYS_SETRESUID, 0) != nil || setres(syscall.SYS_SETRESGID, 0) != nil {
			select {} // keep this thread out of the scheduler for good
		}
		runtime.UnlockOSThread()
		if err != nil {
			syscall.Close(fd)
			ch <- result{err: fmt.Errorf("listen as uid %d: %w", uid, err)}
			return
		}
		f := os.NewFile(uintptr(fd), path)
		ln, err := net.FileListener(f)
		f.Close()
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.ln
}
