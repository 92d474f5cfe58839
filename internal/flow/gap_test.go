package flow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/segmentlog"
)

// A sink whose cursor retention expired (transport.local.
// expire_past_retention) lost part of the stream: inserts, updates and
// deletes it never applied. `reseed --all-tables` brings it back while the
// flow runs and the source keeps writing: every table is copied again, the
// applier reads on from the log's oldest transaction, and verify ends
// CONVERGED. The stream after the gap updates and deletes rows the gap
// inserted, which the target's old tables never had, so an applier that
// wrote those tables instead of the shadows would fail.
func TestReseedAllTablesRecoversASinkPastRetention(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`, `CREATE TABLE "Other" (id int PRIMARY KEY, v text)`,
		`INSERT INTO items SELECT g, g, repeat('x', 200) FROM generate_series(1, 2000) g`,
		`INSERT INTO "Other" SELECT g, 'o' || g FROM generate_series(1, 300) g`)
	f := newSchemaFlow(t, src, dst, "public.items", `public."Other"`)
	body, err := os.ReadFile(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(f.dir, "data")
	small := fmt.Sprintf("local: {dir: %s, segment_bytes_max: 1MiB, retention: {max_bytes: 1MiB}, expire_past_retention: true}", logDir)
	body = []byte(strings.Replace(string(body), fmt.Sprintf("local: {dir: %s}", logDir), small, 1))
	if err := os.WriteFile(f.cfg, body, 0o600); err != nil {
		t.Fatal(err)
	}
	f.mustConverge("first run")

	// The relay alone captures a gap of several segments: inserts, then
	// updates of every row (≈ 3 MB), while no applier runs.
	relay := exec.Command(f.bin, "run", "--config", f.cfg, "--role", "relay")
	relay.Dir = f.dir
	rlog, err := os.Create(filepath.Join(f.dir, "relay.log"))
	if err != nil {
		t.Fatal(err)
	}
	relay.Stdout, relay.Stderr = rlog, rlog
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	src.Exec(t, `INSERT INTO items SELECT g, g, repeat('y', 200) FROM generate_series(2001, 2500) g`,
		`INSERT INTO "Other" SELECT g, 'gap' || g FROM generate_series(301, 400) g`)
	for i := 0; i < 6; i++ {
		src.Exec(t, fmt.Sprintf(`UPDATE items SET v = v + 1, pad = repeat('%c', 250) WHERE id %% 2 = %d`, 'a'+i, i%2))
	}
	src.Exec(t, `DELETE FROM items WHERE id BETWEEN 1 AND 50`)
	end := walLSN(t, src)
	ctx := context.Background()
	sconn := src.Connect(ctx)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var confirmed string
		if err := sconn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = 'trellara_ddl'`).Scan(&confirmed); err != nil {
			t.Fatal(err)
		}
		var done bool
		if err := sconn.QueryRow(ctx, `SELECT $1::pg_lsn >= $2::pg_lsn`, confirmed, fmt.Sprintf("%X/%X", end>>32, uint32(end))).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(f.dir, "relay.log"))
			t.Fatalf("the relay did not publish up to %X/%X (confirmed %s)\n%s", end>>32, uint32(end), confirmed, b)
		}
	}
	sconn.Close(ctx)
	_ = relay.Process.Signal(syscall.SIGTERM)
	_ = relay.Wait()
	rlog.Close()

	// Retention, as the service runs it, expires the sink's cursor.
	lg, _, err := segmentlog.Open(filepath.Join(logDir, "log"), segmentlog.Options{SegmentBytesMax: 1 << 20,
		Retention: segmentlog.Retention{MaxBytes: 1 << 20, Expire: true}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := lg.ApplyRetention(time.Now())
	lg.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ExpiredCursors) != 1 || rep.ExpiredCursors[0] != "applier" {
		t.Fatalf("retention expired %v, want the sink's cursor [applier] (report %+v)", rep.ExpiredCursors, rep)
	}

	// repair-plan names the recovery; so does the applier once the flow
	// runs again and stops on the gap. The source keeps writing, rows
	// from the gap among them.
	want := "trellara reseed --config " + f.cfg + " --all-tables"
	if plan, _ := f.runStdout("repair-plan", "--format", "json"); !strings.Contains(plan, `"command": "`+want+`"`) {
		t.Fatalf("repair-plan does not name %s:\n%s", want, plan)
	}
	stopService := f.startService()
	waitUntil(t, "the applier to name the recovery", func() bool { return strings.Contains(f.serviceLog(), want) }, f.serviceLog)
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var werr error
	writes := 0
	wg.Add(1)
	go func() {
		// The workload runs through the gap's acceptance and the first
		// table's copy, and stops once that copy is merged, so the verify
		// that ends each table's reseed compares quiet tables (as in
		// TestReseedUnderWritesResumesAfterKill).
		defer wg.Done()
		defer wcancel()
		conn := dst.Connect(ctx)
		defer conn.Close(ctx)
		for wctx.Err() == nil {
			var n int
			_ = conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'trellara' AND tablename = 'reseeds'`).Scan(&n)
			if n == 1 {
				_ = conn.QueryRow(ctx, `SELECT count(*) FROM trellara.reseeds WHERE relation = 'public.items' AND (copied OR status <> 'copying')`).Scan(&n)
				if n > 0 {
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn := src.Connect(ctx)
		defer conn.Close(ctx)
		for i := 0; wctx.Err() == nil; i++ {
			q := []string{
				fmt.Sprintf(`UPDATE items SET v = v + 100 WHERE id = %d`, 2001+i%500),
				fmt.Sprintf(`DELETE FROM "Other" WHERE id = %d`, 301+i%100),
				fmt.Sprintf(`INSERT INTO items VALUES (%d, 0, 'after') ON CONFLICT (id) DO UPDATE SET v = items.v - 1`, 3000+i%50),
			}[i%3]
			if _, err := conn.Exec(ctx, q); err != nil {
				werr = err
				return
			}
			writes++
			time.Sleep(5 * time.Millisecond)
		}
	}()
	out, code := f.runStdout("reseed", "--all-tables", "--chunk-rows", "300", "--wait", "2m", "--format", "json")
	wcancel()
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	t.Logf("%d source writes during the recovery", writes)
	var res struct {
		Tables []struct {
			Relation string `json:"relation"`
			Verdict  string `json:"verdict"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("reseed --all-tables: exit %d, %v\n%s\nservice:\n%s", code, err, out, tail(f.serviceLog(), 30))
	}
	if len(res.Tables) != 2 {
		t.Fatalf("reseed --all-tables copied %+v, want both tables", res.Tables)
	}
	for _, tb := range res.Tables {
		if tb.Verdict != "CONVERGED" {
			t.Fatalf("%s: %s\n%s", tb.Relation, tb.Verdict, out)
		}
	}
	// The whole flow, after the workload: every table.
	vout, vcode := f.runStdout("verify", "--format", "json")
	stopService()
	if vcode != 0 || !strings.Contains(vout, `"CONVERGED"`) {
		t.Fatalf("verify after the recovery: exit %d\n%s", vcode, vout)
	}
	// And row by row, independently of verify.
	for _, table := range []string{"items", `"Other"`} {
		if d := rowDiff(t, src, dst, table); d != "" {
			t.Fatalf("%s differs after the recovery:\n%s", table, d)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool, logs func() string) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, tail(logs(), 20))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// A target restored from a backup older than what the local log still
// holds: its checkpoint is behind the log, and the transactions between
// are gone. The applier stops and names `reseed --all-tables`, which
// brings the target back while the flow runs.
func TestReseedAllTablesRecoversATargetRestoredPastTheLog(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`,
		`INSERT INTO items SELECT g, g, repeat('x', 200) FROM generate_series(1, 2000) g`)
	f := newSchemaFlow(t, src, dst, "public.items")
	body, err := os.ReadFile(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(f.dir, "data")
	small := fmt.Sprintf("local: {dir: %s, segment_bytes_max: 1MiB, retention: {max_bytes: 1MiB}}", logDir)
	body = []byte(strings.Replace(string(body), fmt.Sprintf("local: {dir: %s}", logDir), small, 1))
	if err := os.WriteFile(f.cfg, body, 0o600); err != nil {
		t.Fatal(err)
	}
	f.mustConverge("first run")
	dst.Stop()
	saved := dst.CopyData(t)
	dst.Restart()

	// Several segments of inserts, updates and deletes, applied; the
	// bounded run's retention then drops what the cursor has passed.
	src.Exec(t, `INSERT INTO items SELECT g, g, repeat('y', 200) FROM generate_series(2001, 2500) g`)
	for i := 0; i < 6; i++ {
		src.Exec(t, fmt.Sprintf(`UPDATE items SET v = v + 1, pad = repeat('%c', 250) WHERE id %% 2 = %d`, 'a'+i, i%2))
	}
	src.Exec(t, `DELETE FROM items WHERE id BETWEEN 1 AND 50`)
	f.mustConverge("the run the backup misses")
	lg, err := segmentlog.OpenReadOnly(filepath.Join(logDir, "log"), segmentlog.Options{SegmentBytesMax: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	first := lg.FirstOffset()
	lg.Close()
	if first <= 2 {
		t.Fatalf("retention left the log from offset %d: the backup's checkpoint is still covered", first)
	}

	dst.Stop()
	dst.RestoreData(t, saved)
	dst.Restart()
	stopService := f.startService()
	want := "trellara reseed --config " + f.cfg + " --all-tables"
	waitUntil(t, "the applier to name the recovery", func() bool {
		l := f.serviceLog()
		return strings.Contains(l, "the target lost transactions") && strings.Contains(l, want)
	}, f.serviceLog)
	// Rows the backup never had are updated and deleted while the
	// recovery runs.
	src.Exec(t, `UPDATE items SET v = -v WHERE id BETWEEN 2001 AND 2100`, `DELETE FROM items WHERE id BETWEEN 2400 AND 2450`)
	out, code := f.runStdout("reseed", "--all-tables", "--chunk-rows", "400", "--wait", "2m", "--format", "json")
	if code != 0 || !strings.Contains(out, `"verdict": "CONVERGED"`) {
		t.Fatalf("reseed --all-tables: exit %d\n%s\nservice:\n%s", code, out, tail(f.serviceLog(), 30))
	}
	vout, vcode := f.runStdout("verify", "--format", "json")
	stopService()
	if vcode != 0 || !strings.Contains(vout, `"CONVERGED"`) {
		t.Fatalf("verify after the recovery: exit %d\n%s", vcode, vout)
	}
}
