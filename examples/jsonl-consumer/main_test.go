package main

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/envelope/envelopetest"
	"github.com/trellara/trellara/segmentlog"
)

// TestExampleRuns builds the example and runs it as its own process
// against a log this test writes (and keeps open as the writer): every
// row of every envelope lands in the file once, also across a second run
// after more units arrived.
func TestExampleRuns(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "jsonl-consumer")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(tmp, "log")
	l, _, err := segmentlog.Open(dir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rng := rand.New(rand.NewPCG(3, 3))
	var envs []*pb.Envelope
	appendN := func(n int) {
		for range n {
			e := envelopetest.Random(rng, "src", uint64(0x1000+len(envs)*0x10))
			b, err := envelope.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(b); err != nil {
				t.Fatal(err)
			}
			envs = append(envs, e)
		}
	}
	out := filepath.Join(tmp, "changes.jsonl")
	runExample := func() {
		cmd := exec.Command(bin, "--log-dir", dir, "--consumer", "jsonl", "--out", out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("jsonl-consumer: %v\n%s", err, b)
		}
	}
	check := func() {
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var want []change
		for off, e := range envs {
			for _, r := range e.Rows {
				want = append(want, change{Offset: uint64(off), Seq: r.Seq, CommitLSN: envelope.FormatLSN(e.CommitLsn)})
			}
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<24)
		i := 0
		for ; sc.Scan(); i++ {
			var got change
			if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if i >= len(want) || got.Offset != want[i].Offset || got.Seq != want[i].Seq || got.CommitLSN != want[i].CommitLSN {
				t.Fatalf("line %d: %+v, want %+v", i, got, want[min(i, len(want)-1)])
			}
		}
		if i != len(want) {
			t.Fatalf("%d lines, want %d row changes", i, len(want))
		}
		if off, ok, err := l.CursorOffset("jsonl"); err != nil || !ok || off != uint64(len(envs)) {
			// The writer sees the consumer's cursor after reading the
			// cursor files, as its retention does.
			if _, rerr := l.ApplyRetention(time.Now()); rerr != nil {
				t.Fatal(rerr)
			}
			if off, ok, err = l.CursorOffset("jsonl"); err != nil || !ok || off != uint64(len(envs)) {
				t.Fatalf("cursor jsonl at %d (registered %v, %v), want %d", off, ok, err, len(envs))
			}
		}
	}
	appendN(10)
	runExample()
	check()
	appendN(5)
	runExample()
	check()
}
