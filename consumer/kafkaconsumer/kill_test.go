package kafkaconsumer_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/consumer/kafkaconsumer"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/transport/kafka"
)

// killUnits is how many transactions TestPartitionedSIGKILL writes.
const killUnits = 120

// TestPartitionedSIGKILL: a consumer process reading a partitioned topic on
// three brokers (two-table transactions, every manifest ahead of its
// chunks, the chunks written last partition first and one partition's
// held back until the reader is running) is SIGKILLed up to three times
// at random moments and restarted (a run that read every unit before its
// kill landed is the last one: nothing is left for another). Each run records every unit it is handed,
// with its offset, commit LSN and whether it is byte for byte the unit the
// source committed, before it commits the unit. Required:
//   - every unit seen is whole;
//   - within a run, units come in commit order with no unit skipped;
//   - a restarted run begins at or before the unit after the last one its
//     predecessor recorded (at-least-once: a unit recorded but not
//     committed comes again; none is lost);
//   - together the runs hand out every unit.
//
// Mutation tried: kafka.Reader's tryAssemble handing out a partitioned
// unit once any of its chunks is there (not waiting for the last one):
// the envelope's own row count catches the short unit, the run stops on
// ErrCorrupt ("says 12 but the envelope holds 5 rows"), records it, and
// the test is red.
func TestPartitionedSIGKILL(t *testing.T) {
	if os.Getenv("TRELLARA_KC_CHILD") != "" {
		killChild(t)
		return
	}
	if testing.Short() {
		t.Skip("SIGKILLs a consumer process three times (about 10 s)")
	}
	c, ctx, cl := partitionedTopic(t, 6*time.Minute)
	var payloads [][]byte
	for i := range killUnits {
		payloads = append(payloads, txn(t, i))
	}
	rest := write(t, ctx, cl, payloads, func(first []kafka.ChunkRef) int32 { return first[len(first)-1].Partition })

	record := filepath.Join(t.TempDir(), "seen")
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPartitionedSIGKILL$", "-test.v")
		cmd.Env = append(os.Environ(), "TRELLARA_KC_CHILD="+strings.Join(c.ListenAddrs(), ","), "TRELLARA_KC_RECORD="+record)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			if t.Failed() {
				t.Logf("consumer pid %d:\n%s", cmd.Process.Pid, out.String())
			}
		})
		return cmd
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 34))
	finished := false
	for kill := range 3 {
		cmd := start()
		if kill == 0 {
			time.Sleep(500 * time.Millisecond) // the reader waits at the first unit's missing chunk
			rest()
		}
		time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Exited() && ws.ExitStatus() == 0 {
			// This run read and committed the last unit before its kill
			// landed: a further run would wait for a unit that never comes.
			finished = true
			break
		}
	}
	if !finished {
		final := start()
		if err := final.Wait(); err != nil {
			t.Fatalf("the last consumer run: %v", err)
		}
	}
	checkRuns(t, record, payloads)
}

// checkRuns reads the children's record (pid offset lsn whole per line)
// and applies the test's rules.
func checkRuns(t *testing.T, record string, payloads [][]byte) {
	t.Helper()
	f, err := os.Open(record)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lsns := make([]uint64, len(payloads))
	for i, p := range payloads {
		e, err := envelope.Decode(p)
		if err != nil {
			t.Fatal(err)
		}
		lsns[i] = e.GetCommitLsn()
	}
	type seen struct {
		pid   int
		index int
	}
	var runs [][]seen
	lastPid := -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var pid int
		var offset uint64
		var lsn, whole string
		if _, err := fmt.Sscan(sc.Text(), &pid, &offset, &lsn, &whole); err != nil {
			t.Fatalf("record line %q: %v", sc.Text(), err)
		}
		if whole == "error" {
			t.Fatalf("pid %d stopped on an error (its output is logged below)", pid)
		}
		if whole != "whole=true" {
			t.Fatalf("pid %d was handed the unit at offset %d (commit LSN %s) not whole: %s", pid, offset, lsn, whole)
		}
		idx := -1
		for i, l := range lsns {
			if envelope.FormatLSN(l) == lsn {
				idx = i
			}
		}
		if idx < 0 {
			t.Fatalf("pid %d was handed commit LSN %s, which no source transaction has", pid, lsn)
		}
		if pid != lastPid {
			runs = append(runs, nil)
			lastPid = pid
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], seen{pid, idx})
	}
	if len(runs) < 2 {
		t.Fatalf("%d consumer run(s) recorded units; the kills all landed before any unit", len(runs))
	}
	next := 0 // the first unit no run has recorded
	for r, run := range runs {
		if run[0].index > next {
			t.Fatalf("run %d (pid %d) began at unit %d; unit %d was never handed out (a gap after a SIGKILL)", r, run[0].pid, run[0].index, next)
		}
		for i := 1; i < len(run); i++ {
			if run[i].index != run[i-1].index+1 {
				t.Fatalf("run %d (pid %d) went from unit %d to unit %d", r, run[i].pid, run[i-1].index, run[i].index)
			}
		}
		next = max(next, run[len(run)-1].index+1)
	}
	if next != len(payloads) {
		t.Fatalf("the runs handed out units up to %d of %d", next, len(payloads))
	}
	t.Logf("%d runs (3 SIGKILLed), %d units, first unit of each run: %v", len(runs), len(payloads), func() []int {
		var s []int
		for _, r := range runs {
			s = append(s, r[0].index)
		}
		return s
	}())
}

// killChild is the consumer process: it reads the topic for group
// "killed", records each unit (fsynced) and then commits it, a little
// slowly so that the parent's kills land mid-stream, until it has the
// last unit.
func killChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kc, err := kafkaconsumer.Open(ctx, kafkaconsumer.Options{Brokers: strings.Split(os.Getenv("TRELLARA_KC_CHILD"), ","),
		Topic: topic, Group: "killed", Mode: kafka.ModePartitioned, Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	f, err := os.OpenFile(os.Getenv("TRELLARA_KC_RECORD"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[uint64][]byte{}
	for i := range killUnits {
		p := txn(t, i)
		e, _ := envelope.Decode(p)
		want[e.GetCommitLsn()] = p
	}
	last := uint64(0)
	for lsn := range want {
		last = max(last, lsn)
	}
	for {
		u, err := kc.Next(ctx)
		if err != nil {
			// Recorded, so that a run that stops on an error fails the
			// test even when a later run reads on.
			_, _ = fmt.Fprintf(f, "%d 0 - error\n", os.Getpid())
			_ = f.Sync()
			t.Fatal(err)
		}
		b, _ := envelope.Encode(proto.Clone(u.Envelope).(*pb.Envelope))
		whole := bytes.Equal(b, want[u.Envelope.GetCommitLsn()])
		line := strconv.Itoa(os.Getpid()) + " " + strconv.FormatUint(u.Offset, 10) + " " +
			envelope.FormatLSN(u.Envelope.GetCommitLsn()) + " whole=" + strconv.FormatBool(whole) + "\n"
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := kc.Commit(u); err != nil {
			t.Fatal(err)
		}
		if u.Envelope.GetCommitLsn() == last {
			return
		}
		time.Sleep(15 * time.Millisecond)
	}
}
