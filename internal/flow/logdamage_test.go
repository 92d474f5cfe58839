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
	src.Exec(t, `INSERT INTO items VALUES (777777, 'acknowledged')`)
	end := walLSN(t, src)
	ctx := context.Background()
	sconn := src.Connect(ctx)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var done bool
		if err := sconn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn, '0/0') >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = 'trellara_ddl'`,
			fmt.Sprintf("%X/%X", end>>32, uint32(end))).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(f.dir, "relay.log"))
			t.Fatalf("the relay did not confirm the row\n%s", b)
		}
	}
	sconn.Close(ctx)
	_ = relay.Process.Signal(syscall.SIGTERM)
	_ = relay.Wait()

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
