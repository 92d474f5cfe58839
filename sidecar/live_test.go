package sidecar

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/capture"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

func TestMain(m *testing.M) {
	if os.Getenv("TRELLARA_SIDECAR_CHILD") == "1" {
		os.Exit(sidecarChild())
	}
	os.Exit(m.Run())
}

// sidecarChild is the process TestKillBeforeAck kills: a sidecar publishing
// into a segment log that never sends an acknowledgement, printing each
// position it would have acknowledged once that position is durable.
func sidecarChild() int {
	log, _, err := segmentlog.Open(os.Getenv("TRELLARA_LOG_DIR"), segmentlog.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	uid, _ := strconv.Atoi(os.Getenv("TRELLARA_UID"))
	gid, _ := strconv.Atoi(os.Getenv("TRELLARA_GID"))
	o := Options{SocketPath: os.Getenv("TRELLARA_SOCK"), Transport: transport.Local{Log: log}, SourceID: "kill",
		Assembler: capture.AssemblerOptions{MemoryBytesMax: 64 << 10, ChunkBytesMax: 64 << 10, SpillDir: os.TempDir()},
		beforeAck: func(lsn uint64) bool {
			fmt.Printf("durable %d\n", lsn)
			return false
		}}
	if uid != 0 {
		o.Dial = dialAs(o.SocketPath, uid, gid)
		o.ServerUID = uid
	}
	if err := Run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	return 0
}

func serverUser(t *testing.T) (uid, gid int) {
	if os.Geteuid() != 0 {
		return 0, 0 // the server runs as this user: no switch needed
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// logTxns reads a segment log back as transactions (CHUNK units joined):
// their commit LSNs must be strictly increasing (each transaction once),
// and the ids inserted into table, each at most once.
func logTxns(t *testing.T, log *segmentlog.Log, table string) (txns int, ids map[string]int) {
	t.Helper()
	r := log.NewReader(log.FirstOffset())
	defer r.Close()
	ids = map[string]int{}
	var last uint64
	for off := log.FirstOffset(); off < log.NextOffset(); off++ {
		_, b, err := r.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		es := decodeAll(t, [][]byte{b})
		e := es[0]
		if e.Boundary.ChunkIndex == 0 {
			if e.CommitLsn <= last {
				t.Fatalf("transaction at %X after %X: duplicate or out of order", e.CommitLsn, last)
			}
			last = e.CommitLsn
			txns++
		}
		for _, row := range e.Rows {
			if row.Op == pb.Op_OP_INSERT && e.Relations[row.RelationIndex].Name == table {
				ids[string(row.NewTuple[0].Data)]++
			}
		}
	}
	return txns, ids
}

// A sidecar that made everything durable but was SIGKILLed before sending
// any acknowledgement: the slot has not moved; a new sidecar gets the whole
// history again, skips all of it as already durable, and acknowledges it.
func TestKillBeforeAck(t *testing.T) {
	t.Parallel()
	l := startLive(t, "postgres", nil)
	l.c.Exec(t, `CREATE TABLE k (id int PRIMARY KEY, v text)`)
	start := l.confirmed(t, "trellara")
	for i := 1; i <= 30; i++ {
		l.c.Exec(t, fmt.Sprintf(`INSERT INTO k VALUES (%d, 'single')`, i))
	}
	l.c.Exec(t, `INSERT INTO k SELECT g, 'large' FROM generate_series(1000, 3999) g`)
	fence := l.fence(t, "kill")

	dir := t.TempDir()
	uid, gid := serverUser(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TRELLARA_SIDECAR_CHILD=1", "TRELLARA_LOG_DIR="+dir, "TRELLARA_SOCK="+l.sock,
		"TRELLARA_UID="+strconv.Itoa(uid), "TRELLARA_GID="+strconv.Itoa(gid))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	durable := make(chan uint64, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, err := strconv.ParseUint(strings.TrimPrefix(sc.Text(), "durable "), 10, 64); err == nil && v > fence {
				durable <- v
				return
			}
		}
	}()
	select {
	case <-durable:
	case <-time.After(60 * time.Second):
		t.Fatal("the child sidecar did not make the history durable")
	}
	// Everything is durable in the child's log and nothing acknowledged:
	// the slot must stay where it was.
	for i := 0; i < 10; i++ {
		if c := l.confirmed(t, "trellara"); c != start {
			t.Fatalf("confirmed_flush_lsn moved from %X to %X without an acknowledgement", start, c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	log, _, err := segmentlog.Open(dir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	before, _ := logTxns(t, log, "k")
	if before != 32 {
		t.Fatalf("the killed sidecar made %d transactions durable, want 32", before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var acked atomic.Uint64
	s, err := New(Options{Dial: l.dialer(t), ServerUID: l.uid, SocketPath: l.sock, Transport: transport.Local{Log: log}, SourceID: "kill",
		Assembler: capture.AssemblerOptions{MemoryBytesMax: 64 << 10, ChunkBytesMax: 64 << 10, SpillDir: t.TempDir()}, ReconnectBackoffMax: 200 * time.Millisecond,
		OnDurable: func(e uint64) { acked.Store(e) }, Stop: func() bool { return acked.Load() > fence }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	txns, ids := logTxns(t, log, "k")
	if st.Skipped != 32 || st.Published != 0 || txns != 32 || len(ids) != 3030 {
		t.Fatalf("after restart: %+v; log holds %d transactions, %d ids", st, txns, len(ids))
	}
	l.waitFor(t, "the slot to advance past the fence", 10*time.Second, func() bool { return l.confirmed(t, "trellara") > fence })
}

// The sidecar runs throughout while the decoder worker is terminated, the
// server is restarted and then crashes, each time with transactions that
// were durable but not yet acknowledged: every replay is absorbed, nothing
// is lost, nothing is published twice, and the slot never moves ahead of
// acknowledgements.
func TestWorkerAndServerRestart(t *testing.T) {
	t.Parallel()
	l := startLive(t, "postgres", nil)
	l.c.Exec(t, `CREATE TABLE r (id int PRIMARY KEY, phase text)`)
	log, _, err := segmentlog.Open(t.TempDir(), segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var hold atomic.Bool
	s, err := New(Options{Dial: l.dialer(t), ServerUID: l.uid, SocketPath: l.sock, Transport: transport.Local{Log: log}, SourceID: "restart",
		Assembler: capture.AssemblerOptions{SpillDir: t.TempDir()}, ReconnectBackoffMax: 200 * time.Millisecond,
		beforeAck: func(uint64) bool { return !hold.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("sidecar: %v", err)
		}
	}()
	wait := func(what string, cond func(Stats) bool) {
		t.Helper()
		l.waitFor(t, what, 60*time.Second, func() bool {
			select {
			case err := <-done:
				t.Fatalf("sidecar stopped: %v", err)
			default:
			}
			return cond(s.Stats())
		})
	}
	next := 1
	phase := func(name string, singles int) uint64 {
		t.Helper()
		for i := 0; i < singles; i++ {
			l.c.Exec(t, fmt.Sprintf(`INSERT INTO r VALUES (%d, '%s')`, next, name))
			next++
		}
		l.c.Exec(t, fmt.Sprintf(`INSERT INTO r SELECT g, '%s large' FROM generate_series(%d, %d) g`, name, next, next+999))
		next += 1000
		return l.fence(t, name)
	}

	f := phase("steady", 10)
	wait("acknowledged steady state", func(st Stats) bool { return st.Acked > f })

	// Decoder terminated while transactions are durable and unacknowledged.
	hold.Store(true)
	held := l.confirmed(t, "trellara")
	f = phase("worker", 10)
	wait("durable", func(st Stats) bool { return st.Durable > f })
	time.Sleep(300 * time.Millisecond)
	if c := l.confirmed(t, "trellara"); c != held {
		t.Fatalf("slot moved from %X to %X while acknowledgements were withheld", held, c)
	}
	skipped := s.Stats().Skipped
	pid := l.query(t, `SELECT pid FROM pg_stat_activity WHERE backend_type = 'trellara decoder'`)
	l.c.Exec(t, "SELECT pg_terminate_backend("+pid+")")
	wait("the replay after the decoder restart", func(st Stats) bool { return st.Skipped >= skipped+12 })
	hold.Store(false)
	f2 := phase("after worker", 1)
	wait("acknowledged after the worker restart", func(st Stats) bool { return st.Acked > f2 })
	if c := l.confirmed(t, "trellara"); c <= f {
		t.Fatalf("slot at %X after acknowledging %X", c, f2)
	}

	// Fast server restart with durable, unacknowledged transactions.
	hold.Store(true)
	f = phase("restart", 10)
	wait("durable", func(st Stats) bool { return st.Durable > f })
	skipped = s.Stats().Skipped
	l.c.Restart()
	wait("the replay after the server restart", func(st Stats) bool { return st.Skipped >= skipped+12 })
	hold.Store(false)
	f = phase("after restart", 1)
	wait("acknowledged after the server restart", func(st Stats) bool { return st.Acked > f })

	// Crash: acknowledgements since the last checkpoint may be lost with
	// the slot's in-memory state; the replay is longer, never shorter.
	f = phase("before crash", 10)
	wait("acknowledged before the crash", func(st Stats) bool { return st.Acked > f })
	l.c.Kill()
	l.c.Restart()
	f = phase("after crash", 10)
	wait("acknowledged after the crash", func(st Stats) bool { return st.Acked > f })

	txns, ids := logTxns(t, log, "r")
	for id := 1; id < next; id++ {
		if n := ids[strconv.Itoa(id)]; n != 1 {
			t.Fatalf("id %d is in the log %d times", id, n)
		}
	}
	st := s.Stats()
	t.Logf("%d transactions, %d ids, each once; %+v", txns, len(ids), st)
	if st.Connections < 4 {
		t.Fatalf("expected reconnects after the decoder restart, the restart and the crash: %+v", st)
	}
}

// Two-phase decoding fails closed: the output plugin errors out at a
// PREPARE on a two-phase slot, the decoder worker refuses such a slot, and
// CheckServer says so and how to fix it, while a sidecar receives nothing
// and the slot does not move.
func TestTwoPhaseFailsClosed(t *testing.T) {
	t.Parallel()
	l := startLive(t, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l.c.Exec(t, `CREATE TABLE tp (id int PRIMARY KEY)`,
		`SELECT pg_create_logical_replication_slot('tp', 'trellara', false, true)`,
		`BEGIN; INSERT INTO tp VALUES (1); PREPARE TRANSACTION 'x'`)
	conn, err := pgx.Connect(ctx, l.c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `SELECT count(*) FROM pg_logical_slot_get_binary_changes('tp', NULL, NULL)`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, "two-phase commit is not supported by trellara") {
		t.Fatalf("decoding a PREPARE on a two-phase slot: %v", err)
	}
	l.c.Exec(t, `COMMIT PREPARED 'x'`)
	before := l.confirmed(t, "tp")

	l.configure(t, map[string]string{"trellara.database": "postgres", "trellara.slot_name": "tp"})
	conn2, err := pgx.Connect(ctx, l.c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(context.Background())
	_, err = CheckServer(ctx, conn2)
	var se *SlotError
	if !errors.As(err, &se) || se.Slot != "tp" || !strings.Contains(err.Error(), "two_phase = true") ||
		!strings.Contains(err.Error(), "pg_drop_replication_slot('tp')") {
		t.Fatalf("CheckServer: %v", err)
	}
	l.waitFor(t, "the decoder's refusal in the server log", 20*time.Second, func() bool {
		b, _ := os.ReadFile(l.c.LogPath())
		return strings.Contains(string(b), `replication slot "tp" was created with two_phase = true`)
	})
	rctx, rcancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer rcancel()
	tr := &memTransport{}
	s, err := New(Options{Dial: l.dialer(t), ServerUID: l.uid, SocketPath: l.sock, Transport: tr, SourceID: "tp"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(rctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("sidecar: %v", err)
	}
	if st := s.Stats(); st.Frames != 0 || len(tr.snapshot()) != 0 || st.Connections == 0 {
		t.Fatalf("frames from a refused slot: %+v", st)
	}
	if c := l.confirmed(t, "tp"); c != before {
		t.Fatalf("refused slot moved from %X to %X", before, c)
	}
}

// The socket is mode 0600 and owned by the server's user; another uid
// cannot connect at all, and root (who bypasses file modes) is refused by
// the server's peer-uid check. Both surface as non-retryable typed errors.
func TestSocketSecurity(t *testing.T) {
	t.Parallel()
	l := startLive(t, "postgres", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fi, err := os.Stat(l.sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want socket 0600", fi.Mode())
	}
	uid, _ := serverUser(t)
	if owner := fi.Sys().(*syscall.Stat_t).Uid; uid != 0 && int(owner) != uid {
		t.Fatalf("socket owned by uid %d, want the server's %d", owner, uid)
	}
	conn, err := pgx.Connect(ctx, l.c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	info, err := CheckServer(ctx, conn)
	if err != nil || info.SocketPath != l.sock || !info.SlotExists || info.DecoderPID == 0 || !info.IncludeMessages {
		t.Fatalf("CheckServer: %+v, %v", info, err)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: connections from other uids cannot be made here (CI runs as root)")
		return
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	nuid, _ := strconv.Atoi(nobody.Uid)
	ngid, _ := strconv.Atoi(nobody.Gid)
	o := Options{SocketPath: l.sock, Transport: &memTransport{}, SourceID: "sec", Dial: dialAs(l.sock, nuid, ngid), ServerUID: l.uid}
	err = Run(ctx, o)
	var de *DialError
	if !errors.As(err, &de) || !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), "run the sidecar as the PostgreSQL server's OS user") {
		t.Fatalf("connect as nobody: %v", err)
	}
	o.Dial = nil // as root
	err = Run(ctx, o)
	var se *ServerError
	if !errors.As(err, &se) || !strings.Contains(se.Message, "peer uid does not match") {
		t.Fatalf("connect as root: %v", err)
	}
}
