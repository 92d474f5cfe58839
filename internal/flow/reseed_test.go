package flow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/lsn"
)

// startService runs the flow (`trellara run`, no --local) until the test
// ends, and returns once it holds the flow.
func (f *schemaFlow) startService() func() {
	f.t.Helper()
	svc := exec.Command(f.bin, "run", "--config", f.cfg)
	svc.Dir = f.dir
	log, err := os.Create(filepath.Join(f.dir, "service.log"))
	if err != nil {
		f.t.Fatal(err)
	}
	svc.Stdout, svc.Stderr = log, log
	if err := svc.Start(); err != nil {
		f.t.Fatal(err)
	}
	// The service listens once it holds the flow's lock: from then on a
	// command runs beside it, never at rest in its place.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(f.serviceLog(), "listening"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			f.t.Fatalf("the service did not start listening:\n%s", f.serviceLog())
		}
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = svc.Process.Signal(syscall.SIGTERM)
			_ = svc.Wait()
			log.Close()
		})
	}
	f.t.Cleanup(stop)
	return stop
}

// runStdout is run with stdout alone (JSON output; progress and logs go
// to stderr).
func (f *schemaFlow) runStdout(args ...string) (string, int) {
	f.t.Helper()
	cmd := exec.Command(f.bin, append(args[:1:1], append([]string{"--config", f.cfg}, args[1:]...)...)...)
	cmd.Dir = f.dir
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	} else if err != nil {
		f.t.Fatal(err)
	}
	return out.String(), 0
}

func (f *schemaFlow) serviceLog() string {
	b, _ := os.ReadFile(filepath.Join(f.dir, "service.log"))
	return string(b)
}

// A reseed under a concurrent write workload on the table, killed with
// SIGKILL mid-copy and run again: it resumes from its last merged chunk,
// swaps the shadow table in, and ends CONVERGED — rows the target had
// lost, changed or gained are repaired, no row the workload wrote,
// changed or deleted during the copy is lost or comes back, and a reader
// polling the target throughout never sees a half-loaded table.
func TestReseedUnderWritesResumesAfterKill(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	const rows = 3000
	// Every tenth row carries an 8 kB body stored out of line: the
	// workload's updates leave it out of the stream (unchanged TOAST).
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text, body text)`, `CREATE TABLE other (id int PRIMARY KEY, v text)`,
		`ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL`,
		fmt.Sprintf(`INSERT INTO items SELECT g, g, 'n' || g, CASE WHEN g %% 10 = 0 THEN repeat(md5(g::text), 300) END FROM generate_series(1, %d) g`, rows),
		`INSERT INTO other SELECT g, 'o' || g FROM generate_series(1, 100) g`, `CREATE TABLE marks (id int PRIMARY KEY)`)
	f := newSchemaFlow(t, src, dst, "public.items", "public.other", "public.marks")
	f.mustConverge("first run")
	// Damage the target copy where the workload does not write: a lost
	// row, a changed row, a row the source never had.
	dst.Exec(t, `DELETE FROM items WHERE id IN (2901, 2902)`, `UPDATE items SET v = -1 WHERE id = 2950`, `INSERT INTO items VALUES (-7, 0, 'extra')`,
		`CREATE ROLE reader`, `GRANT SELECT ON items TO reader`)
	f.startService()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg           sync.WaitGroup
		observations atomic.Int64
		violation    atomic.Value
		deleted      atomic.Int64
		copying      atomic.Int64 // the last key merged: the next chunk starts after it
		werr         atomic.Value
	)
	const deletesMax, chunkRows = 200, 40
	// The workload runs through the whole copy and stops once the last
	// chunk is merged, so the verify that ends the reseed compares quiet
	// tables (a verify under a write workload on the same rows may need
	// more re-checks than it makes).
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer wcancel()
		conn := dst.Connect(context.Background())
		defer conn.Close(context.Background())
		for wctx.Err() == nil {
			var n int
			_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'trellara' AND tablename = 'reseeds'`).Scan(&n)
			if n == 1 {
				var at int64
				_ = conn.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE status <> 'copying' OR copied),
					coalesce(max(resume_key[1]::int), 0) FROM trellara.reseeds`).Scan(&n, &at)
				if n > 0 {
					return
				}
				copying.Store(at)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Add(1)
	go func() { // the source workload on the reseeded table, ids below 2900
		defer wg.Done()
		conn := src.Connect(context.Background())
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewSource(1))
		next := rows + 1
		for wctx.Err() == nil {
			var err error
			// Half the writes go to the chunk being copied: the rows a
			// chunk read and the stream change together.
			id := 1 + rng.Intn(2899)
			if at := copying.Load(); rng.Intn(2) == 0 && at+chunkRows < 2900 {
				id = int(at) + 1 + rng.Intn(chunkRows)
			}
			switch op := rng.Intn(10); {
			case op < 6:
				_, err = conn.Exec(context.Background(), `UPDATE items SET v = v + 1, note = 'u' || v WHERE id = $1`, id)
			case op < 7 && deleted.Load() < deletesMax:
				var tag int64
				ct, e := conn.Exec(context.Background(), `DELETE FROM items WHERE id = $1`, id)
				err, tag = e, ct.RowsAffected()
				deleted.Add(tag)
			case op < 8 && deleted.Load() < deletesMax: // a primary-key change, out of the reader's range
				var tag int64
				ct, e := conn.Exec(context.Background(), `UPDATE items SET id = $2, note = 'moved' WHERE id = $1`, id, next)
				err, tag = e, ct.RowsAffected()
				deleted.Add(tag)
				next++
			case op < 9: // DELETE and INSERT of the same key, in one transaction
				var tx pgx.Tx
				if tx, err = conn.Begin(context.Background()); err == nil {
					var ct pgconn.CommandTag
					if ct, err = tx.Exec(context.Background(), `DELETE FROM items WHERE id = $1`, id); err == nil && ct.RowsAffected() == 1 {
						_, err = tx.Exec(context.Background(), `INSERT INTO items VALUES ($1, -1, 'again', repeat(md5(random()::text), 300))`, id)
					}
					if err == nil {
						err = tx.Commit(context.Background())
					}
					_ = tx.Rollback(context.Background())
				}
			default:
				_, err = conn.Exec(context.Background(), `INSERT INTO items VALUES ($1, 0, 'new')`, next)
				next++
			}
			if err != nil {
				werr.Store(err)
				return
			}
			time.Sleep(3 * time.Millisecond) // a workload the applier keeps up with
		}
	}()
	wg.Add(1)
	go func() { // the target reader
		defer wg.Done()
		conn := dst.Connect(context.Background())
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			var n int64
			if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM items WHERE id <= $1`, rows).Scan(&n); err != nil {
				violation.Store(fmt.Sprintf("reading the target table failed: %v", err))
				continue
			}
			observations.Add(1)
			// At most deletesMax deleted and 2 lost before the handoff:
			// fewer rows is a half-loaded table.
			if n < rows-deletesMax-2 {
				violation.Store(fmt.Sprintf("the target table had %d rows with id <= %d", n, rows))
			}
		}
	}()

	// The first reseed process is killed once some chunks are merged.
	cmd := exec.Command(f.bin, "reseed", "--config", f.cfg, "--table", "public.items", "--chunk-rows", fmt.Sprint(chunkRows))
	cmd.Dir = f.dir
	var out1 bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out1, &out1
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tc := dst.Connect(context.Background())
	defer tc.Close(context.Background())
	deadline := time.Now().Add(3 * time.Minute)
	var chunks int64
	for chunks < 5 {
		select {
		case <-exited:
			time.Sleep(200 * time.Millisecond) // let the reader look at what the reseed left
			t.Fatalf("the reseed exited after %d chunks (%v; target reader: %v)\n%s\nservice:\n%s", chunks, cmd.ProcessState, violation.Load(), out1.String(), f.serviceLog())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("the reseed merged %d chunks in 3 minutes\n%s\nservice:\n%s", chunks, out1.String(), f.serviceLog())
		}
		_ = tc.QueryRow(context.Background(), `SELECT coalesce(max(chunks), 0) FROM trellara.reseeds`).Scan(&chunks)
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	var status string
	if err := tc.QueryRow(context.Background(), `SELECT status, chunks FROM trellara.reseeds WHERE id = 1`).Scan(&status, &chunks); err != nil {
		t.Fatal(err)
	}
	if status != "copying" || chunks >= rows/chunkRows {
		t.Fatalf("after SIGKILL: reseed %s with %d chunks merged, want copying and unfinished\n%s", status, chunks, out1.String())
	}
	out, code := f.run("repair-plan")
	if !strings.Contains(out, "reseed 1 of public.items is unfinished") || !strings.Contains(out, "trellara reseed --config") {
		t.Fatalf("repair-plan during an unfinished reseed: exit %d\n%s", code, out)
	}
	if out, code := f.run("status"); !strings.Contains(out, "reseed 1 of public.items in progress (copying") {
		t.Fatalf("status during an unfinished reseed: exit %d\n%s", code, out)
	}

	// Run again: it resumes and converges, while the workload goes on.
	out, code = f.run("reseed", "--table", "public.items", "--chunk-rows", fmt.Sprint(chunkRows))
	cancel()
	wg.Wait()
	if code != 0 || !strings.Contains(out, "CONVERGED public.items: reseed 1 resumed") {
		t.Fatalf("reseed after SIGKILL: exit %d\n%s\ndifferences now:\n%s\nservice:\n%s", code, out, rowDiff(t, src, dst, "items"), f.serviceLog())
	}
	if e := werr.Load(); e != nil {
		t.Fatal(e)
	}
	if v := violation.Load(); v != nil {
		t.Fatalf("a target reader saw a half-loaded table: %v", v)
	}
	if observations.Load() == 0 {
		t.Fatal("the target reader made no observation")
	}
	// After the workload: the service still applies to the new table.
	src.Exec(t, `UPDATE items SET note = 'after' WHERE id = 5`, `UPDATE other SET v = 'after' WHERE id = 1`)
	if out, code := f.run("verify", "--wait", "120s"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("verify after the reseed: exit %d\n%s\nservice:\n%s", code, out, f.serviceLog())
	}
	rowsEqual(t, src, dst, "items", "after the reseed and the workload")
	var reads bool
	if err := tc.QueryRow(context.Background(), `SELECT has_table_privilege('reader', 'public.items', 'SELECT')`).Scan(&reads); err != nil || !reads {
		t.Fatalf("after the handoff role reader may not read items (%v): the old table's grants were not carried over", err)
	}
	var left int
	if err := tc.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE (tablename LIKE 'reseed%' AND tablename <> 'reseeds') OR tablename LIKE 'trellara_reseed%'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d reseed tables left on the target (%v)", left, err)
	}
	if out, code := f.run("repair-plan"); code != 0 {
		t.Fatalf("repair-plan after the reseed: exit %d\n%s", code, out)
	}
	t.Logf("%d target observations, %d source rows deleted during the reseed", observations.Load(), deleted.Load())
}

// DROP COLUMN, SET NOT NULL (with a type change pgoutput shows) and a
// primary-key change each stop capture at the real commit LSN with a plan
// that names the reseed of the table; the reseed takes the change over
// beside the running service (TestReseedAtRestAfterDropColumn: at rest): the target table is replaced by a copy in the
// new shape, it verifies CONVERGED, and the other table kept its data and
// the changes after the block.
func TestReseedTakesOverBlockedSchemaChanges(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, k int NOT NULL, extra text)`, `CREATE TABLE other (id int PRIMARY KEY, v text)`,
		`INSERT INTO a SELECT g, g, 'x' FROM generate_series(1, 50) g`, `INSERT INTO other VALUES (1, 'a')`)
	f := newSchemaFlow(t, src, dst, "public.a", "public.other")
	f.mustConverge("first run")
	// A compatible change first: its barrier pins the shape with the
	// catalog's facts (NOT NULL), which set_not_null is classified by.
	src.Exec(t, `ALTER TABLE a ADD COLUMN note text`, `INSERT INTO a (id, k, extra, note) VALUES (51, 51, 'x', 'n')`)
	f.mustConverge("run over ADD COLUMN")
	tc := dst.Connect(context.Background())
	defer tc.Close(context.Background())

	for i, c := range []struct{ kind, ddl, insert string }{
		{"set_not_null", `ALTER TABLE a ALTER COLUMN extra SET NOT NULL, ALTER COLUMN k TYPE bigint`, `INSERT INTO a VALUES (100, 100, 'z')`},
		{"drop_column", `ALTER TABLE a DROP COLUMN extra`, `INSERT INTO a (id, k) VALUES (101, 100)`},
		{"primary_key_change", `ALTER TABLE a DROP CONSTRAINT a_pkey, ADD PRIMARY KEY (id, k)`, `INSERT INTO a (id, k) VALUES (102, 100)`},
	} {
		id := i + 1
		src.Exec(t, fmt.Sprintf(`INSERT INTO other VALUES (%d, 'before')`, 10*id), c.ddl)
		before := walLSN(t, src)
		src.Exec(t, c.insert, fmt.Sprintf(`UPDATE a SET k = k + 1000 WHERE id = %d`, id), fmt.Sprintf(`DELETE FROM a WHERE id = %d`, 10+id))
		after := walLSN(t, src)
		src.Exec(t, fmt.Sprintf(`INSERT INTO other VALUES (%d, 'after')`, 10*id+1))
		out, code := f.run("run", "--local")
		if code == 0 || !strings.Contains(out, c.kind) || !strings.Contains(out, "trellara reseed --config") {
			t.Fatalf("%s: run: exit %d, want a stop naming the kind and the reseed\n%s", c.kind, code, out)
		}
		m := lsnRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: no LSN in\n%s", c.kind, out)
		}
		if at, err := lsn.Parse(m[1]); err != nil || uint64(at) <= before || uint64(at) > after {
			t.Fatalf("%s: stopped at LSN %s, want the blocked transaction's commit in (%s, %s]", c.kind, m[1], pglogrepl.LSN(before), pglogrepl.LSN(after))
		}
		if rp, _ := f.run("repair-plan"); !strings.Contains(rp, "trellara reseed --config") {
			t.Fatalf("%s: repair-plan names no reseed\n%s", c.kind, rp)
		}

		// Beside the running service, which is stopped at the change:
		// its capture takes the change over once the reseed is recorded.
		stop := f.startService()
		cmd := exec.Command(f.bin, "reseed", "--config", f.cfg, "--table", "public.a", "--chunk-rows", "7", "--wait", "60s")
		cmd.Dir = f.dir
		var rout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &rout, &rout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for n := 0; n == 0; {
			_ = tc.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'trellara' AND tablename = $1`,
				fmt.Sprintf("reseed_%d_shadow", id)).Scan(&n)
			time.Sleep(10 * time.Millisecond)
		}
		// Writes during the copy, until the last chunk is merged (the
		// verify that ends the reseed then sees a quiet table): updates,
		// deletes, DELETE + INSERT of one key, primary-key changes.
		wdone := make(chan error, 1)
		go func() {
			ctx := context.Background()
			sc := src.Connect(ctx)
			defer sc.Close(ctx)
			for n := 0; ; n++ {
				var copying bool
				if err := tc.QueryRow(ctx, `SELECT count(*) > 0 FROM trellara.reseeds WHERE id = $1 AND status = 'copying' AND NOT copied`, id).Scan(&copying); err != nil || !copying {
					t.Logf("%s: %d writes during the copy", c.kind, n)
					wdone <- err
					return
				}
				k := 20 + n%30
				q := []string{
					fmt.Sprintf(`UPDATE a SET k = k + 1 WHERE id = %d`, k),
					fmt.Sprintf(`DELETE FROM a WHERE id = %d`, 200+n),
					fmt.Sprintf(`WITH d AS (DELETE FROM a WHERE id = %d RETURNING *) INSERT INTO a SELECT * FROM d`, k),
					fmt.Sprintf(`UPDATE a SET id = %d WHERE id = %d`, 200+n+1, k),
				}[n%4]
				if _, err := sc.Exec(ctx, q); err != nil {
					wdone <- fmt.Errorf("%s: %w", q, err)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		err := cmd.Wait()
		if werr := <-wdone; werr != nil {
			stop()
			t.Fatalf("%s: writes during the reseed: %v", c.kind, werr)
		}
		if err != nil || !strings.Contains(rout.String(), "CONVERGED public.a") || strings.Contains(rout.String(), "no pipeline holds the flow") {
			stop()
			t.Fatalf("%s: reseed beside the service: %v\n%s\nservice:\n%s", c.kind, err, rout.String(), f.serviceLog())
		}
		if out, code := f.run("verify", "--wait", "120s"); code != 0 {
			stop()
			t.Fatalf("%s: verify after the reseed: exit %d\n%s\nservice:\n%s", c.kind, code, out, f.serviceLog())
		}
		stop()
		if d := rowDiff(t, src, dst, "a"); d != "" {
			t.Fatalf("%s: a differs row by row after the reseed:\n%s", c.kind, d)
		}
		var status string
		var replace bool
		if err := tc.QueryRow(context.Background(), `SELECT status, replace FROM trellara.reseeds WHERE id = $1`, id).Scan(&status, &replace); err != nil ||
			status != "converged" || !replace {
			t.Fatalf("%s: reseed %d is %s, replace %v (%v); want converged, replacing the table", c.kind, id, status, replace, err)
		}
		var others string
		if err := tc.QueryRow(context.Background(), `SELECT string_agg(id::text, ' ' ORDER BY id) FROM other`).Scan(&others); err != nil {
			t.Fatal(err)
		}
		want := "1"
		for j := 1; j <= id; j++ {
			want += fmt.Sprintf(" %d %d", 10*j, 10*j+1)
		}
		if others != want {
			t.Fatalf("%s: target other holds %s, want %s", c.kind, others, want)
		}
		if plan, code := f.run("schema", "ddl-plan"); code != 0 {
			t.Fatalf("%s: ddl-plan after the reseed: exit %d\n%s", c.kind, code, plan)
		}
	}
	f.mustConverge("run after the three reseeds")

	// An ordinary reseed of the other table, with JSON output.
	f.startService()
	jout, code := f.runStdout("reseed", "--table", "public.other", "--format", "json")
	m := checkJSON(t, "reseed.schema.json", jout)
	if tables, _ := m["tables"].([]any); code != 0 || m["ok"] != true || len(tables) != 1 {
		t.Fatalf("reseed --format json: exit %d\n%s", code, jout)
	}
}

// semantics on a running flow: transactions writing two tables are
// committed at the source while the target is read many times; no read
// sees one table's part without the other's, and the probe's tables are
// gone afterwards on both sides. A production config is refused.
func TestSemanticsObservesNoHalfAppliedTransaction(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v int)`, `INSERT INTO items VALUES (1, 1)`)
	f := newSchemaFlow(t, src, dst, "public.items")
	f.mustConverge("first run")
	f.startService()
	out, code := f.run("semantics", "--duration", "4s")
	if code != 0 || !strings.Contains(out, "no half-applied transaction observed") || strings.Contains(out, " 0 target observations") {
		t.Fatalf("semantics: exit %d\n%s\nservice:\n%s", code, out, f.serviceLog())
	}
	for _, c := range []*pgtest.Cluster{src, dst} {
		conn := c.Connect(context.Background())
		var n int
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'trellara_semantics%'`).Scan(&n)
		conn.Close(context.Background())
		if err != nil || n != 0 {
			t.Fatalf("%d semantics tables left (%v)", n, err)
		}
	}
	t.Log(out)
	if out, code := f.run("verify", "--wait", "60s"); code != 0 {
		t.Fatalf("verify after semantics: exit %d\n%s", code, out)
	}
	jout, code := f.runStdout("semantics", "--duration", "1s", "--format", "json")
	if m := checkJSON(t, "semantics.schema.json", jout); code != 0 || m["ok"] != true || m["violations"] != float64(0) {
		t.Fatalf("semantics --format json: exit %d\n%s", code, jout)
	}

	b, err := os.ReadFile(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	prod := filepath.Join(f.dir, "prod.yml")
	if err := os.WriteFile(prod, []byte(strings.Replace(string(b), "run:\n", "environment: production\nrun:\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(f.bin, "semantics", "--config", prod)
	pout, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(pout), "production") {
		t.Fatalf("semantics on a production config: exit %d\n%s", cmd.ProcessState.ExitCode(), pout)
	}
}

// checkJSON validates a command's --format json output against its schema
// in docs/json (docs/json/envelope.schema.json for the shared parts).
func checkJSON(t *testing.T, schemaFile, out string) map[string]any {
	t.Helper()
	dir := filepath.Join("..", "..", "docs", "json")
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	for _, name := range []string{"envelope.schema.json", schemaFile} {
		fh, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.AddResource("https://trellara.dev/json/"+name, doc); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Compile("https://trellara.dev/json/" + schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("output does not match docs/json/%s: %v\n%s", schemaFile, err, out)
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(out), &m)
	return m
}
