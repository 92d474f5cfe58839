package segmentlog

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	crashIterations = flag.Int("crash-iterations", 0,
		"SIGKILL iterations for TestCrashRecovery (default 30, or $TRELLARA_CRASH_ITERATIONS)")
	crashSeed = flag.Uint64("crash-seed", 0, "seed for TestCrashRecovery (default: time-based, printed)")
)

// Environment of the crash child: the test binary re-executed by
// TestCrashRecovery runs crashChild instead of the tests.
const (
	crashChildDirEnv   = "TRELLARA_SEGMENTLOG_CRASH_DIR"
	crashChildSeedEnv  = "TRELLARA_SEGMENTLOG_CRASH_SEED"
	crashChildEpochEnv = "TRELLARA_SEGMENTLOG_CRASH_EPOCH"
	crashWriters       = 4
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildDirEnv); dir != "" {
		os.Exit(crashChild(dir))
	}
	if mode := os.Getenv(readerChildModeEnv); mode != "" {
		os.Exit(readerChild(mode, os.Getenv(readerChildDirEnv)))
	}
	code := m.Run()
	if benchReadLog.dir != "" {
		os.RemoveAll(benchReadLog.dir)
	}
	os.Exit(code)
}

func crashOptions() Options {
	// Small write calls make a kill land between the writes of one
	// commit group, leaving chunks without their manifest.
	return Options{SegmentBytesMax: 64 << 10, FrameBytesMax: 4 << 10, IndexIntervalBytes: 1 << 10, writeChunkBytes: 4 << 10}
}

// crashPayload is the deterministic payload of (epoch, writer, seq). Its
// first 16 bytes name them, so the parent can check any entry it finds,
// acknowledged or not. About one in five is chunked.
func crashPayload(seed uint64, epoch, writer, seq int) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(epoch)<<40|uint64(writer)<<32|uint64(seq)))
	size := 16 + r.IntN(2000)
	switch r.IntN(16) {
	case 0, 1:
		size = 4<<10 + r.IntN(36<<10)
	case 2:
		// Big enough to take many write calls (see crashOptions).
		size = 128<<10 + r.IntN(384<<10)
	}
	b := make([]byte, size)
	copy(b, "TRCP")
	le.PutUint32(b[4:], uint32(epoch))
	le.PutUint32(b[8:], uint32(writer))
	le.PutUint32(b[12:], uint32(seq))
	for i := 16; i < size; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// crashChild appends from several writers and prints every acknowledged
// append ("a <offset> <epoch> <writer> <seq>") and cursor commit
// ("c <offset>") only after the call returned, until it is killed.
func crashChild(dir string) int {
	seed, _ := strconv.ParseUint(os.Getenv(crashChildSeedEnv), 10, 64)
	epoch, _ := strconv.Atoi(os.Getenv(crashChildEpochEnv))
	l, rep, err := Open(dir, crashOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	if rep != nil {
		fmt.Fprintln(os.Stderr, "child:", rep)
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		// One unbuffered write per line: a kill loses whole lines only.
		os.Stdout.WriteString(fmt.Sprintf(format, args...))
	}
	say("ready\n")
	for w := range crashWriters {
		go func() {
			for seq := 0; ; seq++ {
				off, err := l.Append(crashPayload(seed, epoch, w, seq))
				if err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(3)
				}
				say("a %d %d %d %d\n", off, epoch, w, seq)
			}
		}()
	}
	go func() {
		for {
			time.Sleep(2 * time.Millisecond)
			off := l.NextOffset()
			if err := l.CommitCursor("crash", off); err != nil {
				fmt.Fprintln(os.Stderr, "child cursor:", err)
				os.Exit(4)
			}
			say("c %d\n", off)
		}
	}()
	// The parent kills us long before this; it only stops an orphan.
	time.Sleep(time.Minute)
	return 5
}

type crashAck struct{ epoch, writer, seq int }

func TestCrashRecovery(t *testing.T) {
	iterations := 30
	if s := os.Getenv("TRELLARA_CRASH_ITERATIONS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("TRELLARA_CRASH_ITERATIONS: %v", err)
		}
		iterations = v
	}
	if *crashIterations > 0 {
		iterations = *crashIterations
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("crash seed %d, %d iterations (replay with -crash-seed=%d -crash-iterations=%d)", seed, iterations, seed, iterations)
	rng := rand.New(rand.NewPCG(seed, 99))
	dir := t.TempDir()

	acked := map[uint64]crashAck{} // every acknowledged append so far
	var cursorFloor uint64         // highest acknowledged cursor commit
	repairs, killedBeforeReady := 0, 0
	for it := range iterations {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			crashChildDirEnv+"="+dir,
			crashChildSeedEnv+"="+strconv.FormatUint(seed, 10),
			crashChildEpochEnv+"="+strconv.Itoa(it))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			br := bufio.NewReader(stdout)
			for {
				s, err := br.ReadString('\n')
				if err != nil {
					return // a final fragment without '\n' was never acknowledged
				}
				lines <- s
			}
		}()
		// Usually kill while appends are in flight; sometimes during
		// Open, which may be in the middle of a repair.
		var all []string
		if rng.IntN(8) == 0 {
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			killedBeforeReady++
		} else {
			for s := range lines {
				all = append(all, s)
				if s == "ready\n" {
					break
				}
			}
			time.Sleep(time.Duration(1+rng.IntN(60)) * time.Millisecond)
		}
		_ = cmd.Process.Kill() // SIGKILL
		for s := range lines {
			all = append(all, s)
		}
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code > 0 {
			t.Fatalf("iteration %d: child failed (exit %d): %s", it, code, stderr.String())
		}
		for _, s := range all {
			f := strings.Fields(s)
			switch {
			case len(f) == 5 && f[0] == "a":
				off, _ := strconv.ParseUint(f[1], 10, 64)
				e, _ := strconv.Atoi(f[2])
				w, _ := strconv.Atoi(f[3])
				q, _ := strconv.Atoi(f[4])
				acked[off] = crashAck{e, w, q}
			case len(f) == 2 && f[0] == "c":
				off, _ := strconv.ParseUint(f[1], 10, 64)
				cursorFloor = max(cursorFloor, off)
			}
		}

		l, rep, err := Open(dir, crashOptions())
		if err != nil {
			t.Fatalf("iteration %d: Open after SIGKILL: %v", it, err)
		}
		if rep != nil {
			repairs++
			t.Logf("iteration %d: %v", it, rep)
		}
		verifyCrashLog(t, it, l, seed, acked, cursorFloor)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d iterations, %d acknowledged appends checked, %d repairs, %d kills during Open",
		iterations, len(acked), repairs, killedBeforeReady)
}

// verifyCrashLog checks, after a crash: every acknowledged append is
// present with identical bytes; every entry present is a whole payload
// (nothing half-visible); offsets are dense; each writer's entries form a
// gap-free prefix (a writer appends seq+1 only after seq was durable); the
// cursor is at least its last acknowledged commit.
func verifyCrashLog(t *testing.T, it int, l *Log, seed uint64, acked map[uint64]crashAck, cursorFloor uint64) {
	t.Helper()
	next := l.NextOffset()
	r := l.NewReader(0)
	defer r.Close()
	seqs := map[[2]int][]int{}
	found := map[uint64]crashAck{}
	for want := uint64(0); want < next; want++ {
		off, p, err := r.Next(context.Background())
		if err != nil {
			t.Fatalf("iteration %d: read offset %d: %v", it, want, err)
		}
		if off != want {
			t.Fatalf("iteration %d: offset %d where %d was expected: offsets are not dense", it, off, want)
		}
		if len(p) < 16 || string(p[:4]) != "TRCP" {
			t.Fatalf("iteration %d: offset %d holds %d bytes that are no payload", it, off, len(p))
		}
		a := crashAck{int(le.Uint32(p[4:])), int(le.Uint32(p[8:])), int(le.Uint32(p[12:]))}
		if !bytes.Equal(p, crashPayload(seed, a.epoch, a.writer, a.seq)) {
			t.Fatalf("iteration %d: offset %d (epoch %d writer %d seq %d) is damaged or partial", it, off, a.epoch, a.writer, a.seq)
		}
		found[off] = a
		k := [2]int{a.epoch, a.writer}
		seqs[k] = append(seqs[k], a.seq)
	}
	for off, a := range acked {
		if got, ok := found[off]; !ok || got != a {
			t.Fatalf("iteration %d: acknowledged offset %d (%+v) is missing or holds %+v", it, off, a, got)
		}
	}
	for k, s := range seqs {
		for i, q := range s {
			if q != i {
				t.Fatalf("iteration %d: epoch %d writer %d has seq %d at position %d: a gap or reorder", it, k[0], k[1], q, i)
			}
		}
	}
	c, ok, err := l.CursorOffset("crash")
	if err != nil || (cursorFloor > 0 && (!ok || c < cursorFloor)) || c > next {
		t.Fatalf("iteration %d: cursor at %d (registered %v, %v), acknowledged at least %d, log ends at %d", it, c, ok, err, cursorFloor, next)
	}
}
