package sidecar

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/lsn"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
)

// live is a throwaway cluster with the extension preloaded.
type live struct {
	c    *pgtest.Cluster
	sock string
	uid  int // the server's OS user: Options.ServerUID for a sidecar that connects as it (dialer)
}

// startLive starts a cluster, installs the extension into its server and
// restarts it preloading trellara with the workers on database postgres
// (database "" starts no workers). Settings go through ALTER SYSTEM so the
// library can be installed after the cluster's binaries are known.
// extra adds or overrides settings.
func startLive(t testing.TB, database string, extra map[string]string) *live {
	t.Helper()
	pgtest.Require(t)
	settings := map[string]string{"logical_decoding_work_mem": "64kB", "max_prepared_transactions": "10"}
	c := pgtest.Start(t, pgtest.Options{Settings: settings, NoFsync: true})
	pgtest.InstallExtension(t, c.BinDir())
	l := &live{c: c, sock: filepath.Join(c.SocketDir(), "trellara.sock")}
	st, err := os.Stat(c.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	l.uid = int(st.Sys().(*syscall.Stat_t).Uid)
	conf := map[string]string{
		"shared_preload_libraries":    "trellara",
		"trellara.database":           database,
		"trellara.socket_path":        l.sock,
		"trellara.include_messages":   "on",
		"trellara.queue_wait_timeout": "200ms",
	}
	for k, v := range extra {
		conf[k] = v
	}
	var n int
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_settings WHERE name = 'output_plugin_libraries'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if n == 1 {
		// Newer minor releases refuse output plugins not listed; a list
		// keeps pgoutput (the relay) usable.
		conf["output_plugin_libraries"] = "pgoutput, test_decoding, trellara"
	}
	l.configure(t, conf)
	if database != "" {
		l.waitFor(t, "socket and slot", 30*time.Second, func() bool {
			_, err := os.Stat(l.sock)
			// A slot being created is listed before it has a
			// confirmed_flush_lsn: a test reading its start position
			// then would read none.
			return err == nil && l.query(t, `SELECT count(*) FROM pg_replication_slots
				WHERE slot_name = 'trellara' AND confirmed_flush_lsn IS NOT NULL`) == "1"
		})
	}
	return l
}

// configure appends settings to postgresql.conf (ALTER SYSTEM refuses
// trellara.* before the library is loaded; later lines override earlier
// ones) and restarts the server.
func (l *live) configure(t testing.TB, conf map[string]string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(l.c.DataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range conf {
		fmt.Fprintf(f, "%s = '%s'\n", k, strings.ReplaceAll(v, "'", "''"))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	l.c.Restart()
}

// query returns the first column of the first row as text ("" for none).
func (l *live) query(t testing.TB, sql string, args ...any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, l.c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var s *string
	err = conn.QueryRow(ctx, "SELECT ("+sql+")::text", args...).Scan(&s)
	if err == pgx.ErrNoRows || (err == nil && s == nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return *s
}

func (l *live) lsn(t testing.TB, sql string) uint64 {
	t.Helper()
	s := l.query(t, sql)
	if s == "" {
		return 0
	}
	v, err := lsn.Parse(s)
	if err != nil {
		t.Fatalf("%s: %q: %v", sql, s, err)
	}
	return uint64(v)
}

func (l *live) confirmed(t testing.TB, slot string) uint64 {
	return l.lsn(t, fmt.Sprintf(`SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '%s'`, slot))
}

// fence commits a transactional message and returns its LSN: the
// transaction's end lies beyond it, everything committed before it below.
func (l *live) fence(t testing.TB, token string) uint64 {
	return l.lsn(t, fmt.Sprintf(`SELECT pg_logical_emit_message(true, 'trellara.fence', '%s')`, token))
}

func (l *live) waitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialer connects to the socket as the server's OS user. A root test binary
// would be refused by the server's peer-uid check, so the connect runs on a
// locked OS thread whose effective uid and gid alone are switched to the
// server's and back (see dialAs).
func (l *live) dialer(t testing.TB) func(context.Context) (net.Conn, error) {
	if os.Geteuid() != 0 {
		return func(ctx context.Context) (net.Conn, error) { return dialUnix(ctx, l.sock) }
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return dialAs(l.sock, uid, gid)
}

// dialAs connects to path with effective uid/gid switched on this OS thread
// only (raw syscalls; syscall.Setresuid would switch every thread) and
// restored before the thread is unlocked. The thread must survive: pgtest
// starts servers with Pdeathsig, which fires when the forking thread exits,
// so letting a locked goroutine end (and take its thread with it) could
// kill a server. If restoring fails, the goroutine parks forever instead.
func dialAs(path string, uid, gid int) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		type result struct {
			c   net.Conn
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
			restore := func() {
				// Effective uid first: regaining root restores the right to
				// change the gid back.
				if setres(syscall.SYS_SETRESUID, 0) != nil || setres(syscall.SYS_SETRESGID, 0) != nil {
					select {} // keep this thread out of the scheduler for good
				}
				runtime.UnlockOSThread()
			}
			if err := setres(syscall.SYS_SETRESGID, gid); err != nil {
				restore()
				ch <- result{err: fmt.Errorf("setresgid: %w", err)}
				return
			}
			if err := setres(syscall.SYS_SETRESUID, uid); err != nil {
				restore()
				ch <- result{err: fmt.Errorf("setresuid: %w", err)}
				return
			}
			fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err == nil {
				if err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
					syscall.Close(fd)
					err = &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", err)}
				}
			}
			restore()
			if err != nil {
				ch <- result{err: err}
				return
			}
			f := os.NewFile(uintptr(fd), path)
			c, err := net.FileConn(f)
			f.Close()
			ch <- result{c, err}
		}()
		select {
		case r := <-ch:
			return r.c, r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// memTransport is an in-memory durable transport.
type memTransport struct {
	mu    sync.Mutex
	units [][]byte
}

func (m *memTransport) Publish(_ context.Context, b []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.units = append(m.units, append([]byte(nil), b...))
	return uint64(len(m.units) - 1), nil
}

func (m *memTransport) PublishBatch(ctx context.Context, bs [][]byte) error {
	for _, b := range bs {
		if _, err := m.Publish(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func (m *memTransport) Last(context.Context) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.units) == 0 {
		return nil, false, nil
	}
	return m.units[len(m.units)-1], true, nil
}

func (m *memTransport) snapshot() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.units...)
}

func decodeAll(t testing.TB, units [][]byte) []*pb.Envelope {
	t.Helper()
	out := make([]*pb.Envelope, len(units))
	for i, b := range units {
		e, err := envelope.Decode(b)
		if err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
		out[i] = e
	}
	return out
}
