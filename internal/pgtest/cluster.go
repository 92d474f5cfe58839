package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// Options shapes a throwaway cluster. The zero value is a logical-decoding
// ready server of the newest installed major with fsync on.
type Options struct {
	// Major selects a PostgreSQL major version; 0 means the preferred one.
	Major int
	// Settings are appended to postgresql.conf after the defaults, so they
	// override them. Values are written single-quoted; a list setting is
	// one comma-separated string ("pgoutput,test_decoding").
	Settings map[string]string
	// NoFsync turns fsync off. Off is faster but a crash test would then
	// prove nothing about durability, so it is opt-in.
	NoFsync bool
	// HBA lines are placed before the default trust rules, so a test can
	// demand a password for one role.
	HBA []string
}

// Cluster is one running (or stopped) throwaway server. Methods fail the
// test that started it on error; they are safe for use from that test's
// goroutine and its cleanups.
type Cluster struct {
	t     testing.TB
	inst  installation
	opts  Options
	base  string
	data  string
	sock  string
	log   string
	port  int
	cred  *syscall.Credential
	owner *user.User

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error
}

const (
	// startTimeout bounds crash recovery as well as a cold start.
	startTimeout = 60 * time.Second
	// stopTimeout bounds a fast shutdown before Stop escalates to SIGKILL.
	stopTimeout = 30 * time.Second
	// childGrace bounds the wait for SIGKILLed backends to disappear.
	childGrace = 10 * time.Second
	// logTailLines is how much server log a failed test prints.
	logTailLines = 80
)

// Require skips t when no PostgreSQL server binary is installed at all, and
// fails it instead when TRELLARA_REQUIRE_PG=1 so CI cannot pass by skipping.
func Require(t testing.TB) {
	t.Helper()
	if _, err := pick(0); err != nil {
		skipOrFail(t, err)
	}
}

func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("TRELLARA_REQUIRE_PG") == "1" {
		t.Fatalf("%v (TRELLARA_REQUIRE_PG=1 forbids skipping)", err)
	}
	t.Skip(err)
}

// Start initialises and starts a fresh cluster, and registers its teardown
// with t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	inst, err := pick(opts.Major)
	if err != nil {
		skipOrFail(t, err)
	}
	c := &Cluster{t: t, inst: inst, opts: opts}
	c.launch(c.initdb)
	return c
}

// StartStandby makes a streaming hot standby of c with pg_basebackup
// (standby.signal and primary_conninfo via -R) and starts it. opts.Major is
// ignored: a standby runs the primary's binaries.
//
// Some server builds (the embedded 16–18 builds the PostgreSQL matrix uses)
// ship no pg_basebackup, and an older major's cannot copy a newer server:
// there the test is skipped with that reason, because a standby cannot be
// made with what is installed — not because a server is missing.
func (c *Cluster) StartStandby(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if _, err := os.Stat(filepath.Join(c.inst.binDir, "pg_basebackup")); err != nil {
		t.Skipf("pgtest: no pg_basebackup in %s (PostgreSQL %d): a standby cannot be made with this server build", c.inst.binDir, c.inst.major)
	}
	opts.Major = c.inst.major
	s := &Cluster{t: t, inst: c.inst, opts: opts}
	s.launch(func() error {
		cmd := s.command("pg_basebackup", "-D", s.data, "-R", "-X", "stream", "-c", "fast", "--no-sync",
			"-d", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres", c.port))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("pgtest: pg_basebackup from port %d: %w\n%s", c.port, err, out)
		}
		return nil
	})
	return s
}

// launch creates the directories, fills the data directory with populate,
// configures and starts the server, failing t on error.
func (c *Cluster) launch(populate func() error) {
	t := c.t
	t.Helper()
	if err := c.prepare(); err != nil {
		c.removeBase()
		t.Fatal(err)
	}
	t.Cleanup(c.teardown)
	if err := populate(); err != nil {
		t.Fatal(err)
	}
	// The port is chosen before the server binds it, so another process can
	// take it in between; a few attempts make that race harmless.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if c.port, lastErr = freePort(); lastErr != nil {
			continue
		}
		if lastErr = c.writeConfig(); lastErr != nil {
			t.Fatal(lastErr)
		}
		if lastErr = c.start(); lastErr == nil {
			return
		}
		if !strings.Contains(c.logTail(20), "could not bind") && !strings.Contains(c.logTail(20), "could not create any TCP/IP sockets") {
			break
		}
	}
	t.Fatal(lastErr)
}

// prepare creates the directory layout and, as root, resolves the server user.
func (c *Cluster) prepare() error {
	base, err := os.MkdirTemp(os.TempDir(), "trellara-pgtest-")
	if err != nil {
		return fmt.Errorf("pgtest: create cluster dir: %w", err)
	}
	c.base = base
	c.data = filepath.Join(base, "data")
	c.sock = filepath.Join(base, "sock")
	c.log = filepath.Join(base, "server.log")
	// MkdirTemp makes 0700; the server user must be able to traverse it.
	if err := os.Chmod(base, 0o755); err != nil {
		return fmt.Errorf("pgtest: chmod %s: %w", base, err)
	}
	if err := os.Mkdir(c.sock, 0o755); err != nil {
		return fmt.Errorf("pgtest: create socket dir: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("pgtest: running as root and PostgreSQL refuses root; need a \"postgres\" user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	c.owner = u
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	for _, d := range []string{base, c.sock} {
		if err := os.Chown(d, uid, gid); err != nil {
			return fmt.Errorf("pgtest: chown %s to postgres: %w", d, err)
		}
	}
	return nil
}

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.inst.binDir, name), args...)
	cmd.Dir = c.base
	// LC_ALL=C keeps messages and initdb's locale choice stable across hosts.
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if c.owner != nil {
		cmd.Env = append(cmd.Env, "HOME="+c.owner.HomeDir, "USER=postgres")
	}
	return cmd
}

func (c *Cluster) initdb() error {
	// --no-sync only skips initdb's own final fsync; the server still runs
	// with fsync on, and a SIGKILL of the process does not drop page cache.
	cmd := c.command("initdb", "-D", c.data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: initdb %s (%s): %w\n%s", c.data, c.inst.binDir, err, out)
	}
	return nil
}

// writeConfig (re)writes our block of postgresql.conf and pg_hba.conf.
// Running again after a port change replaces the block wholesale.
func (c *Cluster) writeConfig() error {
	const marker = "\n# --- pgtest ---\n"
	confPath := filepath.Join(c.data, "postgresql.conf")
	conf, err := os.ReadFile(confPath)
	if err != nil {
		return fmt.Errorf("pgtest: read %s: %w", confPath, err)
	}
	if i := bytes.Index(conf, []byte(marker)); i >= 0 {
		conf = conf[:i]
	}
	fsync := "on"
	if c.opts.NoFsync {
		fsync = "off"
	}
	settings := [][2]string{
		{"listen_addresses", "127.0.0.1"},
		{"port", strconv.Itoa(c.port)},
		{"unix_socket_directories", c.sock},
		{"wal_level", "logical"},
		{"max_replication_slots", "16"},
		{"max_wal_senders", "16"},
		{"fsync", fsync},
		// Small memory so several clusters fit on a 2-core CI machine.
		{"shared_buffers", "32MB"},
		{"max_connections", "40"},
		{"logging_collector", "off"},
		{"log_line_prefix", "%m [%p] "},
	}
	keys := make([]string, 0, len(c.opts.Settings))
	for k := range c.opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		settings = append(settings, [2]string{k, c.opts.Settings[k]})
	}
	var b bytes.Buffer
	b.Write(conf)
	b.WriteString(marker)
	for _, kv := range settings {
		fmt.Fprintf(&b, "%s = '%s'\n", kv[0], strings.ReplaceAll(kv[1], "'", "''"))
	}
	if err := os.WriteFile(confPath, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("pgtest: write %s: %w", confPath, err)
	}

	var hba bytes.Buffer
	for _, l := range c.opts.HBA {
		hba.WriteString(l + "\n")
	}
	hba.WriteString("local all all trust\nlocal replication all trust\n" +
		"host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n")
	hbaPath := filepath.Join(c.data, "pg_hba.conf")
	if err := os.WriteFile(hbaPath, hba.Bytes(), 0o600); err != nil {
		return fmt.Errorf("pgtest: write %s: %w", hbaPath, err)
	}
	if c.cred != nil {
		for _, p := range []string{confPath, hbaPath} {
			if err := os.Chown(p, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				return fmt.Errorf("pgtest: chown %s: %w", p, err)
			}
		}
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start launches the postmaster and waits until it accepts connections.
func (c *Cluster) start() error {
	logf, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: open server log: %w", err)
	}
	cmd := c.command("postgres", "-D", c.data)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Pdeathsig stops a server leaking when the test binary is killed by a
	// timeout before cleanups run; its backends follow on postmaster death.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgtest: start postgres (%s): %w", c.inst.binDir, err)
	}
	exited := make(chan struct{})
	c.mu.Lock()
	c.cmd, c.exited, c.waitErr = cmd, exited, nil
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		c.mu.Lock()
		c.waitErr = err
		c.mu.Unlock()
		close(exited)
	}()
	return c.waitReady(exited)
}

func (c *Cluster) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			c.mu.Lock()
			err := c.waitErr
			c.mu.Unlock()
			return fmt.Errorf("pgtest: postgres on port %d exited during startup: %v\n%s", c.port, err, c.logTail(30))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("pgtest: postgres on port %d not ready after %s: %v\n%s", c.port, startTimeout, lastErr, c.logTail(30))
}

// running returns the live process and its exit channel, or nil.
func (c *Cluster) running() (*exec.Cmd, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return nil, nil
	}
	select {
	case <-c.exited:
		return nil, nil
	default:
		return c.cmd, c.exited
	}
}

// Running reports whether the postmaster process is alive.
func (c *Cluster) Running() bool {
	cmd, _ := c.running()
	return cmd != nil
}

// Stop shuts the server down with a fast shutdown (SIGINT): sessions are
// terminated, a shutdown checkpoint is written. It escalates to Kill if the
// server does not exit in time.
func (c *Cluster) Stop() {
	c.t.Helper()
	cmd, exited := c.running()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		c.t.Errorf("pgtest: fast shutdown of port %d took over %s; killing", c.port, stopTimeout)
		c.Kill()
	}
}

// Kill SIGKILLs the postmaster and then every process it had started, the
// way power loss or the OOM killer ends a server, and waits until all are
// gone, so that a following Restart runs crash recovery instead of finding
// shared memory still attached. (Left alone, backends do exit on postmaster
// death, but the checkpointer can take seconds to notice.)
func (c *Cluster) Kill() {
	c.t.Helper()
	cmd, exited := c.running()
	if cmd == nil {
		return
	}
	kids := children(cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	reap(kids)
}

// children lists the direct children of pid by scanning /proc. PostgreSQL
// backends call setsid(), so a process group cannot be used to find them.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command name: state, ppid, ...
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie. Reparented backends
// are reaped by whatever PID 1 is, which in a container can take a second;
// a zombie has already released its shared memory.
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || !bytes.HasPrefix(bytes.TrimSpace(stat[i+1:]), []byte("Z"))
}

// reap SIGKILLs pids and waits until they are gone (they are reparented, so
// only polling can tell). A surviving backend keeps shared memory attached
// and the next start would refuse to run.
func reap(pids []int) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	deadline := time.Now().Add(childGrace)
	for _, p := range pids {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Restart stops a running server (fast) and starts it again on the same
// port and data directory; after Kill it starts the server, which then runs
// crash recovery.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.Stop()
	if err := c.start(); err != nil {
		c.t.Fatal(err)
	}
}

// CopyData copies the stopped server's data directory aside, as a
// file-level backup taken while the server is down, and returns the copy's
// path (inside the cluster's directory, removed with it). RestoreData puts
// it back.
func (c *Cluster) CopyData(t testing.TB) string {
	t.Helper()
	if c.Running() {
		t.Fatalf("pgtest: CopyData on port %d: stop the server first (a running server's files are not a consistent copy)", c.port)
	}
	for i := 0; ; i++ {
		dst := filepath.Join(c.base, fmt.Sprintf("data-copy-%d", i))
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		c.copyTree(t, c.data, dst)
		return dst
	}
}

// RestoreData replaces the stopped server's data directory with a copy
// made by CopyData: whatever was committed after the copy is gone, as after
// a restore from backup or a failover to an asynchronous standby.
func (c *Cluster) RestoreData(t testing.TB, copyDir string) {
	t.Helper()
	if c.Running() {
		t.Fatalf("pgtest: RestoreData on port %d: stop the server first", c.port)
	}
	if err := os.RemoveAll(c.data); err != nil {
		t.Fatalf("pgtest: remove %s: %v", c.data, err)
	}
	c.copyTree(t, copyDir, c.data)
}

// copyTree copies src to dst (which must not exist) with modes and, as
// root, ownership: cp -a does both.
func (c *Cluster) copyTree(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("pgtest: cp -a %s %s: %v\n%s", src, dst, err, out)
	}
}

// URL is a libpq URL for db as the superuser "postgres" over TCP.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// ReplicationURL is URL(db) opened as a logical replication connection.
func (c *Cluster) ReplicationURL(db string) string {
	return c.URL(db) + "&replication=database"
}

// Connect opens a superuser connection to database "postgres"; it is closed
// when the test ends.
func (c *Cluster) Connect(ctx context.Context) *pgx.Conn {
	c.t.Helper()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		c.t.Fatalf("pgtest: connect to port %d: %v", c.port, err)
	}
	c.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Exec runs each statement in order on database "postgres" as superuser,
// each in its own implicit transaction (so CREATE DATABASE works), and fails
// t on the first error.
func (c *Cluster) Exec(t testing.TB, sql ...string) {
	t.Helper()
	c.ExecDB(t, "postgres", sql...)
}

// ExecDB is Exec against database db.
func (c *Cluster) ExecDB(t testing.TB, db string, sql ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL(db))
	if err != nil {
		t.Fatalf("pgtest: connect to %s on port %d: %v", db, c.port, err)
	}
	defer conn.Close(context.Background())
	for _, s := range sql {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("pgtest: exec on %s: %v\n%s", db, err, s)
		}
	}
}

// CreateDB creates database name and returns its URL.
func (c *Cluster) CreateDB(t testing.TB, name string) string {
	t.Helper()
	c.Exec(t, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return c.URL(name)
}

// Port is the TCP port on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.data }

// SocketDir is the cluster's unix_socket_directories.
func (c *Cluster) SocketDir() string { return c.sock }

// LogPath is the server log (stderr of every postmaster run, appended).
func (c *Cluster) LogPath() string { return c.log }

// Major is the server's major version.
func (c *Cluster) Major() int { return c.inst.major }

// BinDir is the directory the server binaries came from.
func (c *Cluster) BinDir() string { return c.inst.binDir }

// logTail returns the last n lines of the server log.
func (c *Cluster) logTail(n int) string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// teardown kills whatever is still running and removes the cluster's
// directory; a failed test gets the log tail first, since the log is about
// to be deleted.
func (c *Cluster) teardown() {
	if c.t.Failed() {
		c.t.Logf("pgtest: last %d lines of %s (PostgreSQL %d, port %d):\n%s",
			logTailLines, c.log, c.inst.major, c.port, c.logTail(logTailLines))
	}
	if cmd, exited := c.running(); cmd != nil {
		shmid, haveShm := sysvSegment(c.data)
		kids := children(cmd.Process.Pid)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		reap(kids)
		if haveShm {
			removeSegment(shmid)
		}
	}
	c.removeBase()
}

// sysvSegment reads the System V shared memory id the postmaster of data
// records in postmaster.pid (line 7: key and id). A SIGKILLed postmaster
// leaves that segment behind, and its data directory is about to go, so
// nothing would ever reuse or remove it: a test run that tears many
// clusters down this way would fill the kernel's table of segments
// (SHMMNI), after which no server can start ("could not create shared
// memory segment: No space left on device").
func sysvSegment(data string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return 0, false
	}
	f := strings.Fields(lines[6])
	if len(f) != 2 {
		return 0, false
	}
	id, err := strconv.Atoi(f[1])
	return id, err == nil
}

// removeSegment removes System V shared memory segment id when no process
// is attached to it any more.
func removeSegment(id int) {
	var ds unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &ds); err != nil || ds.Nattch != 0 {
		return
	}
	_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
}

func (c *Cluster) removeBase() {
	if c.base == "" {
		return
	}
	if err := os.RemoveAll(c.base); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.t.Logf("pgtest: remove %s: %v", c.base, err)
	}
}
