package flow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/lsn"
)

// newSchemasFlow is a schemaFlow capturing schema app whole under policy.
func newSchemasFlow(t *testing.T, src, dst *pgtest.Cluster, policy string) *schemaFlow {
	t.Helper()
	f := newSchemaFlow(t, src, dst, "x.placeholder")
	b, err := os.ReadFile(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(string(b), "  tables: [x.placeholder]\n", "  schemas: [app]\n", 1)
	body += "schema:\n  unknown_table_policy: " + policy + "\n"
	if err := os.WriteFile(f.cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// verifiedTables runs the flow to the source's position with its verify
// and returns the verdict and the tables verify compared.
func (f *schemaFlow) verifiedTables() (string, []string) {
	f.t.Helper()
	out, code := f.run("run", "--local", "--verify", "--format", "json")
	// The output interleaves JSON log lines with the result.
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var r struct {
			Verify *struct {
				Verdict string `json:"verdict"`
				Tables  []struct {
					Table string `json:"table"`
				} `json:"tables"`
			} `json:"verify"`
		}
		if err := dec.Decode(&r); err != nil {
			f.t.Fatalf("run --verify: exit %d, no verify result: %v\n%s", code, err, out)
		}
		if r.Verify == nil {
			continue
		}
		var ts []string
		for _, t := range r.Verify.Tables {
			ts = append(ts, t.Table)
		}
		return r.Verify.Verdict, ts
	}
}

// With source.schemas and allow_compatible, a table created at the source
// while a workload runs joins the flow: the snapshot copied the schema's
// two tables, the new table reaches the target through an add_table DDL
// barrier — created in the same target transaction as its first rows (a
// reader polling the target never sees it without them, and the table's
// catalog row and its first row carry the same target xid) — and verify
// covers it and reports CONVERGED. A table created in a transaction of its
// own and written by later ones (app.later) joins as well: it was created
// after the flow's stream horizon, untouched since, in a schema published
// before.
func TestSchemasCaptureAddsANewTable(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE SCHEMA app`, `CREATE TABLE app.a (id int PRIMARY KEY, v text)`, `CREATE TABLE app.b (id int PRIMARY KEY, n bigint NOT NULL)`,
		`INSERT INTO app.a SELECT g, 'a' || g FROM generate_series(1, 40) g`, `INSERT INTO app.b SELECT g, g FROM generate_series(1, 10) g`)
	f := newSchemasFlow(t, src, dst, "allow_compatible")
	if out, code := f.run("preflight"); code != 0 || !strings.Contains(out, "app captured whole: 2 tables") {
		t.Fatalf("preflight: exit %d\n%s", code, out)
	}
	f.mustConverge("first run")
	if v, ts := f.verifiedTables(); v != "CONVERGED" || strings.Join(ts, ",") != "app.a,app.b" {
		t.Fatalf("verify after the snapshot: %s over %v", v, ts)
	}

	const firstRows = 10 // rows written by the transaction that creates the table
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg     sync.WaitGroup
		reader targetReader
		werr   error
	)
	reader.start(ctx, &wg, dst, func(conn *pgx.Conn) (string, bool) {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM app.new_t WHERE id <= $1`, firstRows).Scan(&n); err != nil {
			return "", false // not there yet (or locked by the barrier)
		}
		if n != firstRows {
			return fmt.Sprintf("app.new_t exists with %d of the %d rows of the transaction that created it", n, firstRows), true
		}
		return "", true
	})
	wg.Add(1)
	go func() { // the source workload: writes before, the new table, writes after
		defer wg.Done()
		conn := src.Connect(context.Background())
		defer conn.Close(context.Background())
		exec := func(sql string, args ...any) {
			if werr == nil {
				_, werr = conn.Exec(context.Background(), sql, args...)
			}
		}
		for i := 41; i < 300; i++ {
			exec(`INSERT INTO app.a VALUES ($1, 'w')`, i)
			exec(`UPDATE app.b SET n = n + 1 WHERE id = $1`, i%10+1)
			if i == 120 {
				exec(fmt.Sprintf(`BEGIN; CREATE TABLE app.new_t (id int PRIMARY KEY, v text NOT NULL, at timestamptz DEFAULT now());
					INSERT INTO app.new_t (id, v) SELECT g, 'first ' || g FROM generate_series(1, %d) g; COMMIT`, firstRows))
			}
			if i > 120 {
				exec(`INSERT INTO app.new_t (id, v) VALUES ($1, 'later')`, i)
				if i%7 == 0 {
					exec(`UPDATE app.new_t SET v = 'updated' WHERE id = $1`, i-3)
				}
			}
			if i == 150 {
				// The usual migration: the table is created on its own,
				// and later transactions write it.
				exec(`CREATE TABLE app.later (id int PRIMARY KEY, v text)`)
			}
			if i > 160 {
				exec(`INSERT INTO app.later VALUES ($1, 'l')`, i)
				if i%5 == 0 {
					exec(`UPDATE app.later SET v = 'updated' WHERE id = $1`, i-2)
				}
				if i%11 == 0 {
					exec(`DELETE FROM app.later WHERE id = $1`, i-4)
				}
			}
		}
	}()
	for i := 0; i < 3; i++ {
		if out, code := f.run("run", "--local"); code != 0 {
			cancel()
			wg.Wait()
			t.Fatalf("run %d during the workload: exit %d\n%s", i, code, out)
		}
	}
	for extra := 0; reader.observations.Load() == 0 && extra < 5; extra++ {
		// The workload may still be ahead of the runs: one more run.
		if out, code := f.run("run", "--local"); code != 0 {
			cancel()
			wg.Wait()
			t.Fatalf("run: exit %d\n%s", code, out)
		}
	}
	cancel()
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	f.mustConverge("run after the workload")
	if v := reader.violation.Load(); v != nil {
		t.Fatalf("a target reader saw the new table apart from its first rows: %v", v)
	}
	tc := dst.Connect(context.Background())
	defer tc.Close(context.Background())
	var sameTxn bool
	var rows int
	if err := tc.QueryRow(context.Background(), `SELECT (SELECT xmin FROM pg_class WHERE oid = 'app.new_t'::regclass)::text =
		(SELECT xmin FROM app.new_t WHERE id = 1)::text, (SELECT count(*) FROM app.new_t)`).Scan(&sameTxn, &rows); err != nil {
		t.Fatal(err)
	}
	if !sameTxn {
		t.Fatal("the target table app.new_t was created in another target transaction than its first rows")
	}
	if rows != firstRows+179 {
		t.Fatalf("target app.new_t holds %d rows, want %d", rows, firstRows+179)
	}
	var later int
	if err := tc.QueryRow(context.Background(), `SELECT count(*) FROM app.later`).Scan(&later); err != nil || later == 0 {
		t.Fatalf("target app.later holds %d rows (%v): the table created before its first write did not join", later, err)
	}
	if v, ts := f.verifiedTables(); v != "CONVERGED" || strings.Join(ts, ",") != "app.a,app.b,app.later,app.new_t" {
		t.Fatalf("verify after the new tables: %s over %v, want CONVERGED over app.a, app.b, app.later and app.new_t", v, ts)
	}
	if out, code := f.run("status"); code != 0 || !strings.Contains(out, "app.new_t") || !strings.Contains(out, "app.later") {
		t.Fatalf("status does not list the new tables: exit %d\n%s", code, out)
	}
	t.Logf("%d target observations", reader.observations.Load())
}

// Under the default policy (block) a table created in a captured schema
// stops capture at the transaction that first writes it, at its real
// commit LSN, with the plan; the snapshot's tables keep what came before.
// Under allow_compatible a table whose rows may predate the stream blocks
// too, the plan naming the condition that failed: created before the
// flow's stream horizon (a), moved into the schema later (b) or by the
// transaction that created it, in a schema added to the publication after
// it was created and written (c); and so does a table without a replica
// identity.
func TestSchemasDefaultPolicyBlocksANewTable(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE SCHEMA app`, `CREATE TABLE app.a (id int PRIMARY KEY, v text)`, `INSERT INTO app.a VALUES (1, 'a')`)
	for _, tc := range []struct {
		policy string
		// before runs on the source before the flow's first run; with
		// addSchema the config then captures that schema too.
		before            []string
		addSchema         string
		setup             []string // each statement its own transaction
		write, table, why string
	}{
		// Created in the transaction that writes it: only the policy blocks it.
		{"block", nil, "", nil, `CREATE TABLE app.new_t (id int PRIMARY KEY); INSERT INTO app.new_t VALUES (1)`, "app.new_t", "does not admit it"},
		// (b): created, written, then moved in by later transactions.
		{"allow_compatible", nil, "", []string{`CREATE TABLE public.moved (id int PRIMARY KEY)`, `INSERT INTO public.moved VALUES (-1)`,
			`ALTER TABLE public.moved SET SCHEMA app`},
			`INSERT INTO app.moved VALUES (1)`, "app.moved", "(b) its pg_class row was rewritten after its creation"},
		// Moved in by the transaction that created and wrote it.
		{"allow_compatible", nil, "", []string{`CREATE TABLE public.moved1 (id int PRIMARY KEY); INSERT INTO public.moved1 VALUES (-1); ALTER TABLE public.moved1 SET SCHEMA app`},
			`INSERT INTO app.moved1 VALUES (1)`, "app.moved1", "moved into its schema or renamed by the transaction that created it"},
		// (c): the schema left the publication and came back after the
		// table was created and written.
		{"allow_compatible", nil, "", []string{`ALTER PUBLICATION trellara_ddl DROP TABLES IN SCHEMA app`, `CREATE TABLE app.late (id int PRIMARY KEY)`,
			`INSERT INTO app.late VALUES (-1)`, `ALTER PUBLICATION trellara_ddl ADD TABLES IN SCHEMA app`},
			`INSERT INTO app.late VALUES (1)`, "app.late", "(c) its schema joined the publication"},
		// (a): created and written before the flow's snapshot, in a schema
		// published since but captured only from later on.
		{"allow_compatible", []string{`CREATE SCHEMA app2`, `CREATE PUBLICATION trellara_ddl FOR TABLES IN SCHEMA app, app2`,
			`CREATE TABLE app2.old (id int PRIMARY KEY)`, `INSERT INTO app2.old VALUES (-1)`}, "app2", nil,
			`INSERT INTO app2.old VALUES (1)`, "app2.old", "(a) it was created before the flow's stream horizon"},
		// Keyless: the identity gate refuses it, as at the snapshot.
		{"allow_compatible", nil, "", nil, `CREATE TABLE app.nokey (v text); INSERT INTO app.nokey VALUES ('x')`, "app.nokey",
			"has no primary key and no replica identity"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			src.Exec(t, `DELETE FROM app.a WHERE id > 1`)
			dst.Exec(t, `DROP SCHEMA IF EXISTS app CASCADE`, `DROP SCHEMA IF EXISTS trellara CASCADE`)
			f := newSchemasFlow(t, src, dst, tc.policy)
			src.Exec(t, tc.before...)
			f.mustConverge("first run")
			if tc.addSchema != "" {
				b, err := os.ReadFile(f.cfg)
				if err != nil {
					t.Fatal(err)
				}
				body := strings.Replace(string(b), "  schemas: [app]\n", "  schemas: [app, "+tc.addSchema+"]\n", 1)
				if err := os.WriteFile(f.cfg, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			src.Exec(t, `INSERT INTO app.a VALUES (2, 'before')`)
			src.Exec(t, tc.setup...)
			before := walLSN(t, src)
			src.Exec(t, tc.write)
			after := walLSN(t, src)
			src.Exec(t, `INSERT INTO app.a VALUES (3, 'after')`)
			out, code := f.run("run", "--local")
			if code == 0 || !strings.Contains(out, "add_table") || !strings.Contains(out, tc.table) ||
				!strings.Contains(out, "blocked-by-policy") || !strings.Contains(out, "trellara schema ddl-plan --config") || !strings.Contains(out, "--cleanup") {
				t.Fatalf("run: exit %d, want a stop at add_table of %s with the plan\n%s", code, tc.table, out)
			}
			m := lsnRE.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no LSN in\n%s", out)
			}
			at, err := lsn.Parse(m[1])
			if err != nil || uint64(at) <= before || uint64(at) > after {
				t.Fatalf("stopped at LSN %s, want the blocked transaction's commit in (%s, %s]", m[1], pglogrepl.LSN(before), pglogrepl.LSN(after))
			}
			plan, code := f.run("schema", "ddl-plan")
			if code != 1 || !strings.Contains(plan, "add_table") || !strings.Contains(plan, m[1]) || !strings.Contains(plan, tc.why) ||
				strings.Contains(plan, "trellara reseed") {
				t.Fatalf("ddl-plan: exit %d\n%s", code, plan)
			}
			conn := dst.Connect(context.Background())
			defer conn.Close(context.Background())
			var ids string
			if err := conn.QueryRow(context.Background(), `SELECT string_agg(id::text, ',' ORDER BY id) FROM app.a`).Scan(&ids); err != nil || ids != "1,2" {
				t.Fatalf("target app.a holds %q (%v), want 1,2: the whole flow holds at the new table", ids, err)
			}
			var exists bool
			if err := conn.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, tc.table).Scan(&exists); err != nil || exists {
				t.Fatalf("target table %s exists (%v) though its change is blocked", tc.table, err)
			}
			if out, code := f.run("run", "--cleanup"); code != 0 {
				t.Fatalf("cleanup: exit %d\n%s", code, out)
			}
			src.Exec(t, `DROP TABLE `+tc.table)
			if tc.addSchema != "" {
				src.Exec(t, `DROP SCHEMA `+tc.addSchema)
			}
		})
	}
}

// A publication that exists already must publish the listed schemas
// whole: preflight and run stop naming the ALTER PUBLICATION to run, and
// after it the flow starts and converges.
func TestSchemasExistingPublicationMustCoverThem(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE SCHEMA app`, `CREATE TABLE app.a (id int PRIMARY KEY)`, `INSERT INTO app.a VALUES (1)`,
		`CREATE PUBLICATION trellara_ddl FOR TABLE app.a`)
	f := newSchemasFlow(t, src, dst, "block")
	const fix = `ALTER PUBLICATION "trellara_ddl" ADD TABLES IN SCHEMA "app"`
	if out, code := f.run("preflight"); code == 0 || !strings.Contains(out, "does not publish schema app whole") || !strings.Contains(out, "fix: "+fix) {
		t.Fatalf("preflight: exit %d, want the publication refused with its fix\n%s", code, out)
	}
	if out, code := f.run("run", "--local"); code == 0 || !strings.Contains(out, fix) || !strings.Contains(out, "nothing was created on the source") {
		t.Fatalf("run: exit %d, want a refusal naming %s\n%s", code, fix, out)
	}
	src.Exec(t, `ALTER PUBLICATION trellara_ddl DROP TABLE app.a`, fix)
	f.mustConverge("run after the fix")
}
