package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

func TestStartStop(t *testing.T) {
	c := Start(t, Options{Settings: map[string]string{"application_name": "pgtest"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var walLevel, fsync, app string
	conn := c.Connect(ctx)
	if err := conn.QueryRow(ctx, "SELECT current_setting('wal_level'), current_setting('fsync'), current_setting('application_name')").Scan(&walLevel, &fsync, &app); err != nil {
		t.Fatal(err)
	}
	if walLevel != "logical" || fsync != "on" {
		t.Errorf("wal_level=%s fsync=%s, want logical/on", walLevel, fsync)
	}
	conn.Close(ctx)

	c.CreateDB(t, "app")
	c.ExecDB(t, "app", "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1)")

	c.Stop()
	if c.Running() {
		t.Fatal("server still running after Stop")
	}
	if conn, err := pgx.Connect(ctx, c.URL("postgres")); err == nil {
		conn.Close(ctx)
		t.Fatal("connected after Stop")
	}
	c.Restart()
	var n int
	conn2, err := pgx.Connect(ctx, c.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(ctx)
	if err := conn2.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("count=%d err=%v after restart", n, err)
	}
	if c.Major() < 10 || c.BinDir() == "" || c.LogPath() == "" {
		t.Errorf("Major=%d BinDir=%q LogPath=%q", c.Major(), c.BinDir(), c.LogPath())
	}
}

// TestSlotSurvivesKill is the harness's acceptance test: a pgoutput slot
// created through SQL is on disk, so a SIGKILLed server comes back with it.
func TestSlotSurvivesKill(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c.Exec(t,
		"CREATE TABLE t (id int PRIMARY KEY, v text)",
		"CREATE PUBLICATION p FOR TABLE t",
		"SELECT pg_create_logical_replication_slot('crash_slot', 'pgoutput')",
		"INSERT INTO t SELECT g, 'x' FROM generate_series(1, 100) g",
	)
	type slot struct {
		plugin, restartLSN, confirmed string
	}
	read := func() (slot, bool) {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var s slot
		err = conn.QueryRow(ctx, `SELECT plugin, restart_lsn::text, confirmed_flush_lsn::text
			FROM pg_replication_slots WHERE slot_name = 'crash_slot'`).Scan(&s.plugin, &s.restartLSN, &s.confirmed)
		if err == pgx.ErrNoRows {
			return s, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return s, true
	}
	before, ok := read()
	if !ok {
		t.Fatal("slot missing before kill")
	}

	c.Kill()
	if c.Running() {
		t.Fatal("postmaster alive after Kill")
	}
	c.Restart()

	after, ok := read()
	if !ok {
		t.Fatalf("slot crash_slot gone after SIGKILL + restart")
	}
	if after.plugin != "pgoutput" {
		t.Errorf("plugin = %q after restart, want pgoutput", after.plugin)
	}
	if after.restartLSN == "" || after.restartLSN != before.restartLSN {
		t.Errorf("restart_lsn %q -> %q; slot not intact", before.restartLSN, after.restartLSN)
	}
	// Decoding from the slot still works: the 100 inserts are there.
	var changes int
	conn := c.Connect(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes('crash_slot', NULL, NULL,
		'proto_version', '1', 'publication_names', 'p')`).Scan(&changes); err != nil {
		t.Fatal(err)
	}
	if changes < 100 {
		t.Errorf("peeked %d messages after restart, want >= 100", changes)
	}
}

func TestRequireDoesNotSkipWhenInstalled(t *testing.T) {
	if _, err := pick(0); err != nil {
		t.Skip(err)
	}
	ran := false
	t.Run("inner", func(t *testing.T) {
		Require(t)
		ran = true
	})
	if !ran {
		t.Fatal("Require skipped although a server is installed")
	}
}

func TestStandby(t *testing.T) {
	p := Start(t, Options{NoFsync: true})
	p.Exec(t, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1)")
	s := p.StartStandby(t, Options{NoFsync: true, Settings: map[string]string{"hot_standby_feedback": "on"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := s.Connect(ctx)
	var inRecovery bool
	var n int
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), (SELECT count(*) FROM t)").Scan(&inRecovery, &n); err != nil {
		t.Fatal(err)
	}
	if !inRecovery || n != 1 || s.Port() == p.Port() {
		t.Errorf("standby: in_recovery=%v rows=%d port=%d (primary %d)", inRecovery, n, s.Port(), p.Port())
	}
}

// TestCopyRestoreData: a restored copy of the data directory loses what was
// committed after the copy, as a restore from backup does.
func TestCopyRestoreData(t *testing.T) {
	c := Start(t, Options{NoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	count := func() int {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	c.Exec(t, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t SELECT generate_series(1, 10)")
	c.Stop()
	saved := c.CopyData(t)
	c.Restart()
	c.Exec(t, "INSERT INTO t SELECT generate_series(11, 30)")
	if n := count(); n != 30 {
		t.Fatalf("count = %d before the restore, want 30", n)
	}
	c.Stop()
	c.RestoreData(t, saved)
	c.Restart()
	if n := count(); n != 10 {
		t.Fatalf("count = %d after the restore, want the copy's 10", n)
	}
}

// Tearing a cluster down SIGKILLs its postmaster; the System V segment it
// leaves is removed with it, so a long test run cannot fill the kernel's
// segment table.
func TestTeardownRemovesSharedMemory(t *testing.T) {
	Require(t)
	var id int
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, Options{NoFsync: true})
		var ok bool
		if id, ok = sysvSegment(c.DataDir()); !ok {
			t.Fatal("no shared memory id in postmaster.pid")
		}
		var ds unix.SysvShmDesc
		if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &ds); err != nil {
			t.Fatalf("segment %d of the running server: %v", id, err)
		}
	})
	var ds unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &ds); err == nil {
		t.Fatalf("segment %d is still there after teardown (%d attached)", id, ds.Nattch)
	}
}
