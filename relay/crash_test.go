package relay_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

func TestMain(m *testing.M) {
	if os.Getenv("TRELLARA_RELAY_CHILD") == "1" {
		os.Exit(relayChild())
	}
	os.Exit(m.Run())
}

// relayChild is the process the crash test kills: a relay session from the
// slot into a segment log, printing each acknowledgeable position before
// the relay may send it to the server.
func relayChild() int {
	ctx := context.Background()
	log, _, err := segmentlog.Open(os.Getenv("TRELLARA_LOG_DIR"), segmentlog.Options{SegmentBytesMax: 1 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	tr := transport.Local{Log: log}
	res, err := relay.ResumeFrom(ctx, tr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	conn, err := pgconn.Connect(ctx, os.Getenv("TRELLARA_REPL_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	out := bufio.NewWriter(os.Stdout)
	memMax, chunkMax := int64(64<<10), int64(128<<10)
	if v, err := strconv.ParseInt(os.Getenv("TRELLARA_MEM_MAX"), 10, 64); err == nil {
		memMax = v
	}
	if v, err := strconv.ParseInt(os.Getenv("TRELLARA_CHUNK_MAX"), 10, 64); err == nil {
		chunkMax = v
	}
	slot := os.Getenv("TRELLARA_SLOT")
	if slot == "" {
		slot = "crash"
	}
	s, err := relay.NewSession(conn, tr, res, relay.Options{SourceID: "src", Slot: slot, Publication: "pub", Streaming: true,
		StatusInterval: 50 * time.Millisecond,
		Assembler:      capture.AssemblerOptions{MemoryBytesMax: memMax, ChunkBytesMax: chunkMax, SpillDir: os.Getenv("TRELLARA_LOG_DIR")},
		OnDurable: func(end uint64) {
			fmt.Fprintf(out, "durable %d\n", end)
			out.Flush()
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	return 0
}

// The relay is SIGKILLed at random moments while a workload (including
// streamed large transactions) commits. Throughout, the slot's confirmed
// position never passes what the relay had made durable; afterwards the log
// holds every committed transaction, none twice.
func TestRelaySIGKILLNeverLosesOrAcksAhead(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	conn := c.Connect(ctx)
	c.Exec(t, schemaSQL)
	if _, err := relay.CreateSlot(ctx, replConn(t, c), "crash"); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TRELLARA_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (rerun with TRELLARA_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	dir := t.TempDir()

	var (
		mu     sync.Mutex
		acks   []ackAt // every durable position any child printed
		maxAck uint64
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Workload: ledger rows numbered 1..n, some inside large streamed
	// transactions with rolled-back savepoints.
	var wg sync.WaitGroup
	committed := 0
	workloadDone := make(chan struct{})
	go func() {
		defer close(workloadDone)
		w, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Error(err)
			return
		}
		defer w.Close(context.Background())
		wrng := rand.New(rand.NewPCG(seed, 4))
		for i := 1; i <= 400 && ctx.Err() == nil; i++ {
			var sql string
			if i%50 == 0 {
				sql = fmt.Sprintf(`BEGIN; INSERT INTO ledger VALUES (%d);
					INSERT INTO orders SELECT g, g, repeat('x', 80) FROM generate_series(%d, %d) g;
					SAVEPOINT a; INSERT INTO ledger VALUES (%d); ROLLBACK TO a; COMMIT`, i, i*10000, i*10000+1500, 100000+i)
			} else {
				sql = fmt.Sprintf(`INSERT INTO ledger VALUES (%d)`, i)
			}
			if _, err := w.Exec(ctx, sql); err != nil {
				t.Errorf("workload %d: %v", i, err)
				return
			}
			committed = i
			time.Sleep(time.Duration(wrng.IntN(3)) * time.Millisecond)
		}
	}()

	// Sampler: confirmed_flush_lsn must always be covered by an ack the
	// relay printed before it could have sent it.
	var samples []ackAt
	wg.Add(1)
	go func() {
		defer wg.Done()
		s, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			return
		}
		defer s.Close(context.Background())
		for ctx.Err() == nil {
			var lsn string
			if err := s.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'crash'`).Scan(&lsn); err == nil {
				v, _ := pglogrepl.ParseLSN(lsn)
				mu.Lock()
				samples = append(samples, ackAt{lsn: uint64(v), at: time.Now()})
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	runChild := func(after time.Duration) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TRELLARA_RELAY_CHILD=1", "TRELLARA_LOG_DIR="+dir, "TRELLARA_REPL_URL="+c.ReplicationURL("postgres"))
		stdout, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var v uint64
				if _, err := fmt.Sscanf(sc.Text(), "durable %d", &v); err == nil {
					mu.Lock()
					acks = append(acks, ackAt{lsn: v, at: time.Now()})
					maxAck = max(maxAck, v)
					mu.Unlock()
				}
			}
		}()
		time.Sleep(after)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		_ = cmd.Wait()
		waitInactive(t, conn, "crash")
	}
	kills := 12
	if testing.Short() {
		kills = 5
	}
	for k := 0; k < kills; k++ {
		runChild(time.Duration(50+rng.IntN(400)) * time.Millisecond)
	}
	<-workloadDone

	// A last run drains everything: stop it once the log holds the fence.
	fence, err := relay.EmitFence(context.Background(), conn, "crash-end")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		runChild(2 * time.Second)
		if logHasFence(t, dir, fence) || time.Now().After(deadline) {
			break
		}
	}
	cancel()
	wg.Wait()

	// Invariant 1: never acknowledged ahead of durability.
	mu.Lock()
	for _, s := range samples {
		covered := s.lsn == 0
		for _, a := range acks {
			if a.lsn >= s.lsn && a.at.Before(s.at.Add(500*time.Millisecond)) {
				covered = true
				break
			}
		}
		if !covered {
			mu.Unlock()
			t.Fatalf("slot confirmed at %s at %s, but the relay had not made that position durable",
				envelope.FormatLSN(s.lsn), s.at.Format(time.RFC3339Nano))
		}
	}
	t.Logf("%d slot samples, %d acknowledgements, %d kills, %d transactions", len(samples), len(acks), kills, committed)
	mu.Unlock()

	// Invariant 2: every committed transaction in the log, none twice, no
	// rolled-back savepoint rows.
	log, _, err := segmentlog.Open(dir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	seen := map[string]int{}
	commits := map[uint64]bool{}
	rd := log.NewReader(0)
	defer rd.Close()
	var partial map[string]int // rows of an unfinished chunk sequence
	for o := uint64(0); o < log.NextOffset(); o++ {
		_, b, err := rd.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		e, err := envelope.Decode(b)
		if err != nil {
			t.Fatalf("offset %d: %v", o, err)
		}
		bd := e.GetBoundary()
		if bd.GetKind() == pb.UnitKind_UNIT_KIND_CHUNK && bd.ChunkIndex == 0 {
			partial = map[string]int{}
		}
		target := seen
		if bd.GetKind() == pb.UnitKind_UNIT_KIND_CHUNK {
			target = partial
		}
		for _, r := range e.Rows {
			if r.Op == pb.Op_OP_INSERT && e.Relations[r.RelationIndex].Name == "ledger" {
				target[string(r.NewTuple[0].Data)]++
			}
		}
		if bd.GetKind() == pb.UnitKind_UNIT_KIND_CHUNK && bd.ChunkIndex+1 == bd.ChunkCount {
			for k, v := range partial {
				seen[k] += v
			}
			partial = nil
		}
		final := bd.GetKind() != pb.UnitKind_UNIT_KIND_CHUNK || bd.ChunkIndex+1 == bd.ChunkCount
		if final {
			if commits[e.CommitLsn] {
				t.Fatalf("transaction at %s is in the log twice", envelope.FormatLSN(e.CommitLsn))
			}
			commits[e.CommitLsn] = true
		}
	}
	for i := 1; i <= committed; i++ {
		if n := seen[strconv.Itoa(i)]; n != 1 {
			t.Fatalf("ledger %d appears %d times in the log", i, n)
		}
	}
	for k := range seen {
		if n, _ := strconv.Atoi(k); n > 100000 {
			t.Fatalf("rolled-back savepoint row %s reached the log", k)
		}
	}
}

type ackAt struct {
	lsn uint64
	at  time.Time
}

func waitInactive(t *testing.T, conn *pgx.Conn, slot string) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		si, err := relay.LookupSlot(context.Background(), conn, slot)
		if err != nil {
			t.Fatal(err)
		}
		if !si.Active {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("slot %s stayed active", slot)
}

func logHasFence(t *testing.T, dir string, fence uint64) bool {
	log, _, err := segmentlog.Open(dir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	res, err := relay.ResumeFrom(context.Background(), transport.Local{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return res.DurableEnd >= fence
}

// The relay's licence to acknowledge is a publish that returned after its
// fsync; a SIGKILL keeps the page cache, so the test above cannot tell an
// acknowledgement sent before the fsync from one sent after. Here the
// segment log's fsync starts failing in the middle of a workload (a fault
// injected under the real log, on real files). The relay must stop with
// the failure, and neither a position it reported acknowledgeable
// (OnDurable) nor the slot's confirmed position may pass what a power loss
// at that moment keeps: the segment files cut at their last successful
// fsync, read back by a fresh log and relay.ResumeFrom.
func TestRelayFsyncFailureNeverAcksAhead(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := c.Connect(ctx)
	c.Exec(t, schemaSQL)
	if _, err := relay.CreateSlot(ctx, replConn(t, c), "fsync"); err != nil {
		t.Fatal(err)
	}
	created, err := relay.LookupSlot(ctx, conn, "fsync")
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TRELLARA_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (rerun with TRELLARA_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	ffs := &faultFS{failFrom: 3 + rng.IntN(6), synced: map[string]int64{}}
	dir := t.TempDir()
	log, _, err := segmentlog.Open(dir, segmentlog.Options{FS: ffs, SegmentBytesMax: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	tr := transport.Local{Log: log}

	// Workload: small transactions and, every 40th, one large enough to
	// be published in chunks; then a fence the relay stops at if nothing
	// stops it first.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	workloadDone := make(chan struct{})
	go func() {
		defer close(workloadDone)
		w, err := pgx.Connect(wctx, c.URL("postgres"))
		if err != nil {
			return
		}
		defer w.Close(context.Background())
		for i := 1; i <= 300 && wctx.Err() == nil; i++ {
			sql := fmt.Sprintf(`INSERT INTO ledger VALUES (%d)`, i)
			if i%40 == 0 {
				sql = fmt.Sprintf(`BEGIN; INSERT INTO ledger VALUES (%d); INSERT INTO orders SELECT g, g, repeat('x', 80) FROM generate_series(%d, %d) g; COMMIT`,
					i, i*10000, i*10000+1500)
			}
			if _, err := w.Exec(wctx, sql); err != nil {
				return
			}
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
		_, _ = relay.EmitFence(wctx, w, "fsync-end")
	}()

	var (
		mu      sync.Mutex
		reports []uint64           // every position OnDurable reported
		acks    capture.MemoryAcks // as internal/flow records them, before they are sent
		fenced  bool
	)
	rc := replConn(t, c)
	res, err := relay.ResumeFrom(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	s, err := relay.NewSession(rc, tr, res, relay.Options{SourceID: "src", Slot: "fsync", Publication: "pub", Streaming: true,
		StatusInterval: 10 * time.Millisecond,
		Assembler:      capture.AssemblerOptions{ChunkBytesMax: 32 << 10, SpillDir: t.TempDir()},
		OnDurable:      func(end uint64) { mu.Lock(); reports = append(reports, end); mu.Unlock() },
		Acks:           &acks,
		OnFence:        func(string, uint64) { mu.Lock(); fenced = true; mu.Unlock() },
		Stop:           func() bool { mu.Lock(); defer mu.Unlock(); return fenced },
	})
	if err != nil {
		t.Fatal(err)
	}
	runErr := s.Run(ctx)
	wcancel()
	<-workloadDone
	rc.Close(context.Background())
	waitInactive(t, conn, "fsync")
	if !ffs.hasFailed() {
		t.Fatalf("the workload ended after %d fsyncs, before the injected failure at fsync %d", ffs.count(), ffs.failFrom)
	}

	// What a power loss right now would keep, read back as a restart would.
	image := ffs.powerLossImage(t, dir)
	after, _, err := segmentlog.Open(image, segmentlog.Options{})
	if err != nil {
		t.Fatalf("a power loss now would damage acknowledged data (or the image is unreadable): %v", err)
	}
	defer after.Close()
	durable, err := relay.ResumeFrom(ctx, transport.Local{Log: after})
	if err != nil {
		t.Fatal(err)
	}
	idleAck, _ := acks.Load()
	bound := max(durable.DurableEnd, idleAck)
	if durable.Empty {
		bound = max(created.ConfirmedFlush, idleAck)
	}
	si, err := relay.LookupSlot(ctx, conn, "fsync")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("fsync %d failed; %d positions reported; durable through %s after a power loss; slot confirmed at %s",
		ffs.failFrom, len(reports), envelope.FormatLSN(bound), envelope.FormatLSN(si.ConfirmedFlush))
	for _, r := range reports {
		if r > bound {
			t.Fatalf("the relay reported %s acknowledgeable, but a power loss keeps only what lies through %s: "+
				"it acknowledged before the fsync", envelope.FormatLSN(r), envelope.FormatLSN(bound))
		}
	}
	if si.ConfirmedFlush > bound {
		t.Fatalf("slot confirmed at %s, but a power loss keeps only what lies through %s", envelope.FormatLSN(si.ConfirmedFlush), envelope.FormatLSN(bound))
	}
	if !errors.Is(runErr, segmentlog.ErrMustReopen) || !errors.Is(runErr, syscall.EIO) {
		t.Fatalf("relay run = %v; want it stopped by the failed fsync (segmentlog.ErrMustReopen, EIO)", runErr)
	}
}

// faultFS is the operating system's filesystem under the segment log, with
// the fsync of segment files failing (EIO) from the failFrom-th on, like a
// disk gone bad. It remembers each segment's size at its last successful
// fsync: what a power loss keeps.
type faultFS struct {
	segmentlog.OSFS
	failFrom int

	mu     sync.Mutex
	syncs  int
	failed bool
	synced map[string]int64 // segment path → size at its last good fsync
}

type faultFile struct {
	segmentlog.File
	fs   *faultFS
	path string
}

func (f *faultFS) OpenFile(name string, flag int, perm iofs.FileMode) (segmentlog.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return file, err
	}
	return &faultFile{File: file, fs: f, path: name}, nil
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.fs.syncs++
	if f.fs.syncs >= f.fs.failFrom {
		f.fs.failed = true
		return &os.PathError{Op: "fsync", Path: f.path, Err: syscall.EIO}
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	n, err := f.File.Size()
	if err != nil {
		return err
	}
	f.fs.synced[f.path] = n
	return nil
}

func (f *faultFS) hasFailed() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.failed }
func (f *faultFS) count() int      { f.mu.Lock(); defer f.mu.Unlock(); return f.syncs }

// powerLossImage copies dir as a power loss would leave it: each segment
// cut at its last successful fsync (a segment never synced since it was
// created keeps its header, which creation synced), other files whole.
func (f *faultFS) powerLossImage(t *testing.T, dir string) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".seg") {
			keep, ok := f.synced[filepath.Join(dir, e.Name())]
			if !ok {
				keep = 32 // the segment header
			}
			b = b[:min(int64(len(b)), keep)]
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
