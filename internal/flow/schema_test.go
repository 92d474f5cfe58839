package flow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/lsn"
)

// schemaFlow is a flow over src and dst run through the CLI binary.
type schemaFlow struct {
	t   *testing.T
	bin string
	dir string
	cfg string
}

func newSchemaFlow(t *testing.T, src, dst *pgtest.Cluster, tables ...string) *schemaFlow {
	t.Helper()
	f := &schemaFlow{t: t, bin: buildCLI(t), dir: t.TempDir()}
	f.cfg = filepath.Join(f.dir, "trellara.yml")
	body := fmt.Sprintf(`version: 2
flow: ddl
source:
  id: src1
  database_url: %q
  owns_slot: true
  tables: [%s]
transport:
  local: {dir: %s}
target:
  database_url: %q
  create_tables: true
run:
  evaluate: true
  listen: {relay: "127.0.0.1:%d", applier: "127.0.0.1:%d"}
`, src.URL("postgres"), strings.Join(tables, ", "), filepath.Join(f.dir, "data"), dst.URL("postgres"), freePort(t), freePort(t))
	if err := os.WriteFile(f.cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *schemaFlow) run(args ...string) (string, int) {
	f.t.Helper()
	cmd := exec.Command(f.bin, append(args[:1:1], append([]string{"--config", f.cfg}, args[1:]...)...)...)
	if args[0] == "schema" {
		cmd = exec.Command(f.bin, append(args, "--config", f.cfg)...)
	}
	cmd.Dir = f.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatal(err)
	}
	return out.String(), code
}

func (f *schemaFlow) mustConverge(what string) {
	f.t.Helper()
	if out, code := f.run("run", "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		f.t.Fatalf("%s: exit %d\n%s", what, code, out)
	}
}

// targetReader polls the target in a loop until ctx ends: each check reads
// one snapshot (ok false: nothing to observe yet, e.g. the table is locked
// by a barrier) and returns what it saw wrong, "" for nothing. The test
// reads the observation count and the last violation after wg.Wait.
type targetReader struct {
	observations atomic.Int64
	violation    atomic.Value
}

func (r *targetReader) start(ctx context.Context, wg *sync.WaitGroup, dst *pgtest.Cluster, check func(*pgx.Conn) (bad string, ok bool)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn := dst.Connect(context.Background())
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			bad, ok := check(conn)
			if !ok {
				continue
			}
			r.observations.Add(1)
			if bad != "" {
				r.violation.Store(bad)
			}
		}
	}()
}

func walLSN(t *testing.T, c *pgtest.Cluster) uint64 {
	t.Helper()
	ctx := context.Background()
	conn := c.Connect(ctx)
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := lsn.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(l)
}

// ADD COLUMN (nullable) while a workload commits: the column and its values
// reach the target through a DDL barrier, the flow converges, and a target
// reader polling throughout never sees the new column without its first
// rows, nor those rows without the column.
func TestAddNullableColumnFlowsThroughBarrier(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE orders (id int PRIMARY KEY, qty int NOT NULL)`, `CREATE TABLE other (id int PRIMARY KEY, v text)`,
		`INSERT INTO orders SELECT g, g FROM generate_series(1, 50) g`, `INSERT INTO other VALUES (1, 'a')`)
	f := newSchemaFlow(t, src, dst, "public.orders", "public.other")
	f.mustConverge("first run")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const firstNew = 1000 // the first row written under the new shape
	var (
		wg     sync.WaitGroup
		reader targetReader
		werr   error
	)
	reader.start(ctx, &wg, dst, func(conn *pgx.Conn) (string, bool) {
		var col, newRows int
		// One statement, one snapshot: the catalog and the rows.
		err := conn.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass('public.orders') AND attname = 'note' AND NOT attisdropped),
			(SELECT count(*) FROM orders WHERE id >= $1)`, firstNew).Scan(&col, &newRows)
		if err != nil {
			return "", false // the table may be locked by the barrier; try again
		}
		if (col == 1) != (newRows > 0) {
			return fmt.Sprintf("column present %v with %d rows of the new shape", col == 1, newRows), true
		}
		return "", true
	})
	wg.Add(1)
	go func() { // the source workload: before, the change, after
		defer wg.Done()
		conn := src.Connect(context.Background())
		defer conn.Close(context.Background())
		exec := func(sql string, args ...any) {
			if werr == nil {
				_, werr = conn.Exec(context.Background(), sql, args...)
			}
		}
		for i := 51; i < 200; i++ {
			exec(`INSERT INTO orders VALUES ($1, $1)`, i)
			exec(`UPDATE other SET v = v || 'b' WHERE id = 1`)
		}
		exec(`ALTER TABLE orders ADD COLUMN note text`)
		for i := firstNew; i < firstNew+200; i++ {
			exec(`INSERT INTO orders VALUES ($1, $1, $2)`, i, fmt.Sprintf("note %d", i))
			if i%10 == 0 {
				exec(`UPDATE orders SET note = 'updated' WHERE id = $1`, i-5)
			}
		}
	}()
	// The pipeline runs while the workload commits.
	for i := 0; i < 3; i++ {
		if out, code := f.run("run", "--local"); code != 0 {
			cancel()
			wg.Wait()
			t.Fatalf("run %d during the workload: exit %d\n%s", i, code, out)
		}
	}
	f.mustConverge("run after the change")
	cancel()
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	if v := reader.violation.Load(); v != nil {
		t.Fatalf("a target reader saw a half-applied DDL barrier: %v", v)
	}
	if reader.observations.Load() == 0 {
		t.Fatal("the target reader made no observation")
	}
	tc := dst.Connect(context.Background())
	defer tc.Close(context.Background())
	var notes int
	if err := tc.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE note = 'note ' || id OR note = 'updated'`).Scan(&notes); err != nil {
		t.Fatal(err)
	}
	if notes != 200 {
		t.Fatalf("%d target rows carry the new column's value, want 200", notes)
	}
	if out, code := f.run("schema", "ddl-plan"); code != 0 || !strings.Contains(out, "no pending schema change") {
		t.Fatalf("ddl-plan after a compatible change: exit %d\n%s", code, out)
	}
	checkBarrierContract(t, f, dst, "public.orders", "add_nullable_column", "orders", "note", firstNew)
	t.Logf("%d target observations", reader.observations.Load())
}

// Widening a varchar, a numeric and an integer flows: the target columns
// change type in the barrier and values only the new types hold arrive.
func TestWidenTypesFlow(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE prices (id int PRIMARY KEY, code varchar(8) NOT NULL, amount numeric(8,2) NOT NULL, n int NOT NULL)`,
		`INSERT INTO prices VALUES (1, 'abc', 1.50, 1)`)
	f := newSchemaFlow(t, src, dst, "public.prices")
	f.mustConverge("first run")
	// In one bounded run: a row under the old shape (its statements are
	// prepared), the change, rows only the new types hold.
	src.Exec(t, `INSERT INTO prices VALUES (2, 'def', 2.50, 2)`,
		`ALTER TABLE prices ALTER COLUMN code TYPE varchar(32), ALTER COLUMN amount TYPE numeric(14,2), ALTER COLUMN n TYPE bigint`,
		`INSERT INTO prices VALUES (3, 'a much longer code', 123456789.25, 3000000000)`,
		`UPDATE prices SET n = 4000000000, code = 'another long code' WHERE id = 2`)
	f.mustConverge("run over the widening")
	tc := dst.Connect(context.Background())
	defer tc.Close(context.Background())
	var types string
	if err := tc.QueryRow(context.Background(), `SELECT string_agg(format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
		FROM pg_attribute WHERE attrelid = 'public.prices'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&types); err != nil {
		t.Fatal(err)
	}
	if types != "integer, character varying(32), numeric(14,2), bigint" {
		t.Fatalf("target column types %s", types)
	}
}

var lsnRE = regexp.MustCompile(`at LSN ([0-9A-F]+/[0-9A-F]+)`)

// DROP COLUMN and a primary-key change each stop capture at the barrier
// with the plan and the real LSN; the whole flow holds (another table's
// later rows wait too), ddl-plan and repair-plan show the change, and the
// recovery the plan names converges. SET NOT NULL changes nothing pgoutput
// describes: it is not a schema change to the stream and flows on.
func TestBlockedSchemaChangesStopWithPlan(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, k int NOT NULL, extra text)`, `CREATE TABLE other (id int PRIMARY KEY, v text)`,
		`INSERT INTO a SELECT g, g, 'x' FROM generate_series(1, 20) g`, `INSERT INTO other VALUES (1, 'a')`)
	f := newSchemaFlow(t, src, dst, "public.a", "public.other")
	f.mustConverge("first run")

	src.Exec(t, `ALTER TABLE a ALTER COLUMN extra SET NOT NULL`, `INSERT INTO a VALUES (21, 21, 'y')`)
	f.mustConverge("run over SET NOT NULL")

	for i, tc := range []struct {
		kind, ddl string
		fixTarget string // brings the target table to the source's shape for the recovery
	}{
		{"drop_column", `ALTER TABLE a DROP COLUMN extra`, `ALTER TABLE a DROP COLUMN extra`},
		{"primary_key_change", `ALTER TABLE a DROP CONSTRAINT a_pkey, ADD PRIMARY KEY (id, k)`, `ALTER TABLE a DROP CONSTRAINT a_pkey, ADD PRIMARY KEY (id, k)`},
	} {
		src.Exec(t, `INSERT INTO other VALUES (2, 'before')`, tc.ddl)
		before := walLSN(t, src)
		src.Exec(t, fmt.Sprintf(`INSERT INTO a (id, k) VALUES (%d, 100)`, 100+i))
		after := walLSN(t, src)
		src.Exec(t, `INSERT INTO other VALUES (3, 'after')`)
		out, code := f.run("run", "--local")
		if code == 0 || !strings.Contains(out, tc.kind) || !strings.Contains(out, "public.a") ||
			!strings.Contains(out, "trellara schema ddl-plan --config") || !strings.Contains(out, "whole flow holds") ||
			!strings.Contains(out, "schema.on_blocked: hold_table") {
			t.Fatalf("%s: run: exit %d, want a stop naming the table, kind and plan\n%s", tc.kind, code, out)
		}
		m := lsnRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: no LSN in\n%s", tc.kind, out)
		}
		at, err := lsn.Parse(m[1])
		if err != nil || uint64(at) <= before || uint64(at) > after {
			t.Fatalf("%s: stopped at LSN %s, want the blocked transaction's commit in (%s, %s]", tc.kind, m[1],
				pglogrepl.LSN(before), pglogrepl.LSN(after))
		}
		// The whole flow holds: the other table has what came before the
		// change, not what came after.
		var others []int
		conn := dst.Connect(context.Background())
		rows, err := conn.Query(context.Background(), `SELECT id FROM other ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		others, err = pgx.CollectRows(rows, pgx.RowTo[int])
		conn.Close(context.Background())
		if err != nil || fmt.Sprint(others) != "[1 2]" {
			t.Fatalf("%s: target other holds %v (%v), want [1 2]", tc.kind, others, err)
		}
		plan, code := f.run("schema", "ddl-plan")
		if code != 1 || !strings.Contains(plan, tc.kind) || !strings.Contains(plan, m[1]) || !strings.Contains(plan, "destructive-or-ambiguous") ||
			!strings.Contains(plan, "run --config") || !strings.Contains(plan, "pinned columns:") {
			t.Fatalf("%s: ddl-plan: exit %d\n%s", tc.kind, code, plan)
		}
		rp, code := f.run("repair-plan")
		if code != 1 || !strings.Contains(rp, "schema change on public.a") {
			t.Fatalf("%s: repair-plan: exit %d\n%s", tc.kind, code, rp)
		}
		// The recovery the plan names: start over with a full snapshot.
		if out, code := f.run("run", "--cleanup"); code != 0 {
			t.Fatalf("%s: cleanup: exit %d\n%s", tc.kind, code, out)
		}
		dst.Exec(t, tc.fixTarget)
		f.mustConverge(tc.kind + " recovery")
		src.Exec(t, `DELETE FROM other WHERE id > 1`)
		f.mustConverge(tc.kind + " after recovery")
	}
}

// A column rename stops capture without a schema.renames entry, at the
// real LSN, with the entry to add in the plan; with the entry (the YAML the
// plan prints, appended to the config) the rename reaches the target
// through a DDL barrier, rows after it land in the renamed column, and a
// target reader polling throughout never sees a row of the new shape
// without the renamed column, nor the renamed column without its first
// rows. A barrier that reaches the target again (the relay stopped after
// the target committed it and before its pin moved: the old pin is put
// back) is applied again without harm.
func TestRenameNeedsAMapping(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE orders (id int PRIMARY KEY, qty int NOT NULL, note text)`, `CREATE TABLE other (id int PRIMARY KEY, v text)`,
		`INSERT INTO orders SELECT g, g, 'n' || g FROM generate_series(1, 50) g`, `INSERT INTO other VALUES (1, 'a')`)
	f := newSchemaFlow(t, src, dst, "public.orders", "public.other")
	f.mustConverge("first run")
	pinsPath := filepath.Join(f.dir, "data", "pins.json")
	oldPins, err := os.ReadFile(pinsPath)
	if err != nil {
		t.Fatal(err)
	}

	const firstNew = 1000 // the first row written under the new shape
	src.Exec(t, `INSERT INTO other VALUES (2, 'before')`, `ALTER TABLE orders RENAME COLUMN note TO remark`)
	before := walLSN(t, src)
	src.Exec(t, fmt.Sprintf(`INSERT INTO orders (id, qty, remark) VALUES (%d, 1, 'r %d')`, firstNew, firstNew))
	after := walLSN(t, src)
	src.Exec(t, `INSERT INTO other VALUES (3, 'after')`)

	// Without the mapping: stopped at the rename's transaction, the plan
	// naming the entry to add.
	out, code := f.run("run", "--local")
	if code == 0 || !strings.Contains(out, "rename_column") || !strings.Contains(out, "public.orders") ||
		!strings.Contains(out, "renames:") || !strings.Contains(out, "from: note") || !strings.Contains(out, "to: remark") {
		t.Fatalf("run without the mapping: exit %d, want a stop naming the rename and its mapping\n%s", code, out)
	}
	m := lsnRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no LSN in\n%s", out)
	}
	if at, err := lsn.Parse(m[1]); err != nil || uint64(at) <= before || uint64(at) > after {
		t.Fatalf("stopped at LSN %s, want the rename's first transaction's commit in (%s, %s]", m[1], pglogrepl.LSN(before), pglogrepl.LSN(after))
	}
	plan, code := f.run("schema", "ddl-plan")
	if code != 1 || !strings.Contains(plan, "rename_column from note text to remark text") || !strings.Contains(plan, "requires-mapping · decision manual-review") ||
		!strings.Contains(plan, "recovery: map the rename") || !strings.Contains(plan, "- table: public.orders") ||
		!strings.Contains(plan, "trellara run --config") || !strings.Contains(plan, m[1]) {
		t.Fatalf("ddl-plan without the mapping: exit %d\n%s", code, plan)
	}
	if rp, code := f.run("repair-plan"); code != 1 || !strings.Contains(rp, "schema change on public.orders") || !strings.Contains(rp, "from: note") {
		t.Fatalf("repair-plan without the mapping: exit %d\n%s", code, rp)
	}
	// The mapping, as the plan's recovery writes it, appended to the config.
	jp, _ := f.run("schema", "ddl-plan", "--format", "json")
	var doc struct {
		Pending []struct{ Commands []string } `json:"pending"`
	}
	if err := json.Unmarshal([]byte(jp), &doc); err != nil || len(doc.Pending) != 1 || len(doc.Pending[0].Commands) == 0 {
		t.Fatalf("ddl-plan --format json: %v\n%s", err, jp)
	}
	rec := doc.Pending[0].Commands[0]
	start, end := strings.Index(rec, "\nschema:\n"), strings.Index(rec, "\nthen ")
	if start < 0 || end < start {
		t.Fatalf("the first recovery holds no schema.renames block:\n%s", rec)
	}
	cfg, err := os.OpenFile(f.cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.WriteString(rec[start+1 : end+1]); err != nil {
		t.Fatal(err)
	}
	cfg.Close()

	// With the mapping, while the workload goes on writing under the new
	// name, a reader polls the target.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg, writer sync.WaitGroup
		reader     targetReader
		werr       error
	)
	reader.start(ctx, &wg, dst, func(conn *pgx.Conn) (string, bool) {
		var col, newRows int
		// One statement, one snapshot: the catalog and the rows.
		err := conn.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass('public.orders') AND attname = 'remark' AND NOT attisdropped),
			(SELECT count(*) FROM orders WHERE id >= $1)`, firstNew).Scan(&col, &newRows)
		if err != nil {
			return "", false // the table may be locked by the barrier; try again
		}
		if (col == 1) != (newRows > 0) {
			return fmt.Sprintf("column remark present %v with %d rows of the new shape", col == 1, newRows), true
		}
		return "", true
	})
	writer.Add(1)
	go func() { // the source workload, under the new name
		defer writer.Done()
		conn := src.Connect(context.Background())
		defer conn.Close(context.Background())
		for i := firstNew + 1; i < firstNew+200 && werr == nil; i++ {
			_, werr = conn.Exec(context.Background(), `INSERT INTO orders (id, qty, remark) VALUES ($1::int, 1, 'r ' || $1::int)`, i)
			if werr == nil && i%10 == 0 {
				_, werr = conn.Exec(context.Background(), `UPDATE orders SET remark = 'updated' WHERE id = $1`, i-5)
			}
		}
	}()
	for i := 0; i < 2; i++ {
		if out, code := f.run("run", "--local"); code != 0 {
			cancel()
			writer.Wait()
			wg.Wait()
			t.Fatalf("run %d with the mapping: exit %d\n%s", i, code, out)
		}
	}
	writer.Wait()
	f.mustConverge("run after the mapping")
	cancel()
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	if v := reader.violation.Load(); v != nil {
		t.Fatalf("a target reader saw a half-applied rename barrier: %v", v)
	}
	if reader.observations.Load() == 0 {
		t.Fatal("the target reader made no observation")
	}
	tc := dst.Connect(context.Background())
	defer tc.Close(context.Background())
	var cols string
	var renamed, kept int
	if err := tc.QueryRow(context.Background(), `SELECT
		(SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'public.orders'::regclass AND attnum > 0 AND NOT attisdropped),
		(SELECT count(*) FROM orders WHERE id >= 1000 AND (remark = 'r ' || id OR remark = 'updated')),
		(SELECT count(*) FROM orders WHERE id <= 50 AND remark = 'n' || id)`).Scan(&cols, &renamed, &kept); err != nil {
		t.Fatal(err)
	}
	if cols != "id, qty, remark" || renamed != 200 || kept != 50 {
		t.Fatalf("target orders: columns %s, %d rows after the rename carry remark (want 200), %d before it kept their value (want 50)", cols, renamed, kept)
	}
	if out, code := f.run("schema", "ddl-plan"); code != 0 || !strings.Contains(out, "no pending schema change") {
		t.Fatalf("ddl-plan after the mapped rename: exit %d\n%s", code, out)
	}

	// The barrier again, on a target that already has remark and no note:
	// the old pin put back, the next transaction carries the rename again.
	if err := os.WriteFile(pinsPath, oldPins, 0o600); err != nil {
		t.Fatal(err)
	}
	src.Exec(t, `INSERT INTO orders (id, qty, remark) VALUES (5000, 1, 'again')`)
	f.mustConverge("the rename barrier again")
	if err := tc.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE id = 5000 AND remark = 'again'`).Scan(&renamed); err != nil || renamed != 1 {
		t.Fatalf("row after the repeated barrier: %d (%v)", renamed, err)
	}
	t.Logf("%d target observations", reader.observations.Load())
}
