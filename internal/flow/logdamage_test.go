package flow_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// TestAcknowledgedLogDamageIsRefused is issue 29's repro with a real
// server: the relay captures a row and is stopped with SIGTERM (the slot
// confirmed past the row), 8 bytes near the end of the newest segment are
// flipped, and then status, verify, stream locate-local and preflight
// change nothing in the log directory, and `run --local --verify` refuses
// with the lost offsets and LSN instead of cutting the row aside and
// ending DIVERGED. The printed re-snapshot, typed as printed, ends
// CONVERGED with the row at the target.
//
// Mutation tried: segmentlog checkDurable returning nil turns it red
// (run --local moves the bytes to .seg.torn-1 and goes on).
func TestAcknowledgedLogDamageIsRefused(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v text NOT NULL)`, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 100) g`)
	f := newSchemaFlow(t, src, dst, "public.items")
	f.mustConverge("first run")

	relayCapturesRow(t, f, src, nil, false)

	logDir := filepath.Join(f.dir, "data", "log")
	seg := filepath.Join(logDir, "00000000000000000000.seg")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) - 20; i < len(b)-12; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before := dirListing(t, logDir)
	for _, args := range [][]string{{"status"}, {"verify"}, {"stream", "locate-local", "--offset", "0"}, {"preflight"}, {"repair-plan"}} {
		cmd := exec.Command(f.bin, append(append([]string{}, args...), "--config", f.cfg)...)
		cmd.Dir = f.dir
		out, _ := cmd.CombinedOutput()
		if after := dirListing(t, logDir); after != before {
			t.Fatalf("%s changed the damaged log:\nbefore:\n%s\nafter:\n%s\n%s", strings.Join(args, " "), before, after, out)
		}
	}
	out, code := f.run("run", "--local", "--verify")
	if after := dirListing(t, logDir); after != before {
		t.Fatalf("run --local changed the damaged log:\nbefore:\n%s\nafter:\n%s\n%s", before, after, out)
	}
	for _, want := range []string{"corruption", "are lost", "committing after LSN", "--cleanup"} {
		if code != 2 || !strings.Contains(out, want) {
			t.Fatalf("run --local on damaged acknowledged data: exit %d, want 2 naming %q\n%s", code, want, out)
		}
	}
	// The recovery, as printed: run --cleanup, then run --local.
	if out, code := f.run("run", "--cleanup"); code != 0 {
		t.Fatalf("run --cleanup: exit %d\n%s", code, out)
	}
	f.mustConverge("after the re-snapshot")
	ctx := context.Background()
	var v string
	dconn := dst.Connect(ctx)
	defer dconn.Close(ctx)
	if err := dconn.QueryRow(ctx, `SELECT v FROM items WHERE id = 777777`).Scan(&v); err != nil || v != "acknowledged" {
		t.Fatalf("after the re-snapshot the target has %q (%v) for the acknowledged row", v, err)
	}
}

// dirListing is every file under dir with its size and contents' hash.
func dirListing(t *testing.T, dir string) string {
	t.Helper()
	var sb strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			fmt.Fprintf(&sb, "%s/\n", rel)
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&sb, "%s %d %x\n", rel, len(b), sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// relayCapturesRow runs the relay alone, calls beforeInsert once it runs,
// inserts row 777777, waits until the slot is confirmed past it and stops
// the relay with SIGTERM.
func relayCapturesRow(t *testing.T, f *schemaFlow, src *pgtest.Cluster, beforeInsert func(), idleAfter bool) {
	t.Helper()
	relay := exec.Command(f.bin, "run", "--config", f.cfg, "--role", "relay")
	relay.Dir = f.dir
	rlog, err := os.Create(filepath.Join(f.dir, "relay.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer rlog.Close()
	relay.Stdout, relay.Stderr = rlog, rlog
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sconn := src.Connect(ctx)
	defer sconn.Close(ctx)
	waitConfirmed := func(end uint64) {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var done bool
			if err := sconn.QueryRow(ctx, `SELECT coalesce(bool_and(active AND confirmed_flush_lsn >= $1::pg_lsn), false) FROM pg_replication_slots WHERE slot_name = 'trellara_ddl'`,
				fmt.Sprintf("%X/%X", end>>32, uint32(end))).Scan(&done); err != nil {
				t.Fatal(err)
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(f.dir, "relay.log"))
				t.Fatalf("the relay did not confirm %X/%X\n%s", end>>32, uint32(end), b)
			}
		}
	}
	if beforeInsert != nil {
		waitConfirmed(walLSN(t, src))
		beforeInsert()
	}
	src.Exec(t, `INSERT INTO items VALUES (777777, 'acknowledged')`)
	waitConfirmed(walLSN(t, src))
	if idleAfter {
		// WAL of a table outside the publication: the relay advances the
		// slot past it with no unit behind it, recorded in the ack store.
		src.Exec(t, `CREATE TABLE IF NOT EXISTS outside (id int)`, `INSERT INTO outside SELECT generate_series(1, 100)`)
		waitConfirmed(walLSN(t, src))
	}
	_ = relay.Process.Signal(syscall.SIGTERM)
	_ = relay.Wait()
}

// TestResumeRefusedWhenTheLogLostAcknowledgedTransactions: the state a
// stale DURABLE after a power loss can leave (docs/LOG-FORMAT.md): the
// log's tail, holding an acknowledged row, is gone and DURABLE names the
// log without it, so Open sees nothing wrong. The slot is confirmed past
// the row; the next start must refuse as a gap (capture.CheckResume),
// naming the recovery, instead of streaming on without the row. The ack
// store may hold an idle advance past the row: it must not cover the gap.
//
// Mutation tried: capture.AckedFor returning the record regardless of its
// basis turns it red when the relay recorded an idle advance after the
// row (the run streams on and ends DIVERGED).
func TestResumeRefusedWhenTheLogLostAcknowledgedTransactions(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v text NOT NULL)`, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 100) g`)
	f := newSchemaFlow(t, src, dst, "public.items")
	f.mustConverge("first run")
	logDir := filepath.Join(f.dir, "data", "log")
	var durable []byte
	relayCapturesRow(t, f, src, func() {
		var err error
		if durable, err = os.ReadFile(filepath.Join(logDir, "DURABLE")); err != nil {
			t.Fatal(err)
		}
	}, true)
	// Drop what the log gained after the saved record (the row's
	// transaction) and put the record back.
	size := int64(durable[16]) | int64(durable[17])<<8 | int64(durable[18])<<16 | int64(durable[19])<<24
	seg := filepath.Join(logDir, "00000000000000000000.seg")
	if st, err := os.Stat(seg); err != nil || st.Size() <= size {
		t.Fatalf("the row's transaction is not in %s after byte %d (%v, %v)", seg, size, st, err)
	}
	if err := os.Truncate(seg, size); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logDir, "DURABLE"), durable, 0o644); err != nil {
		t.Fatal(err)
	}
	acks, err := os.ReadFile(filepath.Join(f.dir, "data", "acks.basis"))
	if err != nil || len(strings.Fields(string(acks))) != 2 {
		t.Fatalf("the relay recorded no idle advance over the row (acks %q, %v): the test would not exercise the ack store", acks, err)
	}
	out, code := f.run("run", "--local", "--verify")
	if code == 0 || !strings.Contains(out, "resuming would silently skip") || !strings.Contains(out, "--cleanup") {
		t.Fatalf("run --local on a log without an acknowledged row: exit %d (acks %q), want the gap refused\n%s", code, acks, out)
	}
	t.Logf("acks %q; refused: %s", acks, out[strings.LastIndex(out, "relay: slot"):])
}
