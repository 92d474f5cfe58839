package flow_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// partitionSchema is a blog's comments partitioned by year (RANGE) and
// its tags partitioned by language (LIST, with a DEFAULT partition).
const partitionSchema = `
CREATE TABLE comments (id bigint NOT NULL, created date NOT NULL, body text, PRIMARY KEY (id, created)) PARTITION BY RANGE (created);
CREATE TABLE comments_2024 PARTITION OF comments FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE comments_2025 PARTITION OF comments FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE comments_2026 PARTITION OF comments FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
INSERT INTO comments SELECT g, date '2024-01-01' + (g * 3), 'c' || g FROM generate_series(1, 300) g;
CREATE TABLE tags (id int NOT NULL, lang text NOT NULL, name text, PRIMARY KEY (id, lang)) PARTITION BY LIST (lang);
CREATE TABLE tags_en PARTITION OF tags FOR VALUES IN ('en');
CREATE TABLE tags_de PARTITION OF tags FOR VALUES IN ('de', 'at');
CREATE TABLE tags_other PARTITION OF tags DEFAULT;
INSERT INTO tags SELECT g, (ARRAY['en','de','at','fr'])[1 + g % 4], 't' || g FROM generate_series(1, 100) g;
`

// partitionFlow creates a source with partitionSchema, a flow over
// comments and tags, and returns the runner, config path and clusters.
func partitionFlow(t *testing.T, name string, targetSQL ...string) (func(args ...string) (string, int), string, *pgtest.Cluster, *pgtest.Cluster) {
	t.Helper()
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, partitionSchema)
	if len(targetSQL) > 0 {
		dst.Exec(t, targetSQL...)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	run := cliRunner(t, bin, dir)
	if out, code := run("init", "--source-database-url", src.URL("postgres"), "--target-database-url", dst.URL("postgres"),
		"--table", "public.comments", "--table", "public.tags", "--flow", name, "--evaluate", "--output", cfg); code != 0 {
		t.Fatalf("init: %s", out)
	}
	return run, cfg, src, dst
}

// sameRows fails unless source and target hold the same rows of table,
// compared row by row through the root (all partitions).
func sameRows(t *testing.T, src, dst *pgtest.Cluster, table string) {
	t.Helper()
	ctx := context.Background()
	q := `SELECT coalesce(string_agg(t::text, ',' ORDER BY t::text), '') FROM ` + table + ` t`
	var s, d string
	if err := src.Connect(ctx).QueryRow(ctx, q).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if err := dst.Connect(ctx).QueryRow(ctx, q).Scan(&d); err != nil {
		t.Fatal(err)
	}
	if s != d {
		t.Fatalf("%s differs: source %d bytes, target %d bytes", table, len(s), len(d))
	}
}

// RANGE and LIST partitioned tables: preflight agrees with what run does,
// the publication publishes via the partition root, the snapshot copies
// the rows of every partition, and inserts, updates (one moving a row to
// another partition) and deletes stream through the root: verify says
// CONVERGED and the rows match. The applier writes the target's table,
// whatever its partitioning: comments is created plain by init, tags is
// the operator's own HASH-partitioned table.
func TestPartitionedTablesEndToEnd(t *testing.T) {
	run, cfg, src, dst := partitionFlow(t, "blog",
		`CREATE TABLE tags (id int NOT NULL, lang text NOT NULL, name text, PRIMARY KEY (id, lang)) PARTITION BY HASH (id)`,
		`CREATE TABLE tags_h0 PARTITION OF tags FOR VALUES WITH (MODULUS 2, REMAINDER 0)`,
		`CREATE TABLE tags_h1 PARTITION OF tags FOR VALUES WITH (MODULUS 2, REMAINDER 1)`)
	// check promises the publication run creates.
	out, _ := run("check", "--config", cfg, "--format", "json")
	if !strings.Contains(out, `"partitioned_table"`) || !strings.Contains(out, "WITH (publish_via_partition_root = true)") {
		t.Fatalf("check does not state that the publication publishes via the partition root:\n%s", out)
	}
	out, code := run("preflight", "--config", cfg)
	if code != 0 || !strings.Contains(out, "partitioned (3 leaf partitions), copied and streamed through public.comments") {
		t.Fatalf("preflight: exit %d\n%s", code, out)
	}
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	ctx := context.Background()
	var viaRoot bool
	if err := src.Connect(ctx).QueryRow(ctx, `SELECT pubviaroot FROM pg_publication`).Scan(&viaRoot); err != nil || !viaRoot {
		t.Fatalf("the flow's publication does not publish via the partition root (pubviaroot %v, %v)", viaRoot, err)
	}
	sameRows(t, src, dst, "comments")
	sameRows(t, src, dst, "tags")
	var kinds string
	if err := dst.Connect(ctx).QueryRow(ctx, `SELECT string_agg(relname || ':' || relkind::text, ',' ORDER BY relname) FROM pg_class
		WHERE relname IN ('comments', 'tags')`).Scan(&kinds); err != nil || kinds != "comments:r,tags:p" {
		t.Fatalf("target tables %q (%v), want comments plain and tags as the operator partitioned it", kinds, err)
	}

	src.Exec(t,
		`INSERT INTO comments SELECT g, date '2026-06-01' + (g - 1000), 'new' || g FROM generate_series(1001, 1050) g`,
		`UPDATE comments SET body = 'edited' WHERE id BETWEEN 10 AND 20`,
		// Moves rows from comments_2024 to comments_2026: at the source a
		// delete from one partition and an insert into another.
		`UPDATE comments SET created = date '2026-03-01' WHERE id BETWEEN 30 AND 35`,
		`DELETE FROM comments WHERE id BETWEEN 200 AND 220`,
		`INSERT INTO tags VALUES (500, 'en', 'x'), (501, 'es', 'y')`,
		`UPDATE tags SET lang = 'de' WHERE id = 4`, // fr (DEFAULT) to tags_de
		`UPDATE tags SET name = 'renamed' WHERE lang = 'en'`,
		`DELETE FROM tags WHERE id BETWEEN 50 AND 60`)
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run after the changes: exit %d\n%s", code, out)
	}
	sameRows(t, src, dst, "comments")
	sameRows(t, src, dst, "tags")
}

// The gates for a partitioned table hold what the source enforces. With
// publish_via_partition_root the source still checks each leaf
// partition's own replica identity on UPDATE and DELETE, and REPLICA
// IDENTITY FULL on the root does not reach its partitions: preflight and
// run refuse naming the partition's fix. An existing publication that
// does not publish via the root is refused with the exact ALTER
// PUBLICATION; followed literally, the flow converges through updates and
// deletes.
func TestPartitionedTableGates(t *testing.T) {
	run, cfg, src, dst := partitionFlow(t, "gates")
	src.Exec(t,
		`CREATE TABLE events (id int NOT NULL, kind text NOT NULL, v int) PARTITION BY LIST (kind)`,
		`CREATE TABLE events_a PARTITION OF events FOR VALUES IN ('a')`,
		`CREATE TABLE events_b PARTITION OF events FOR VALUES IN ('b')`,
		`INSERT INTO events SELECT g, (ARRAY['a','b'])[1 + g % 2], g FROM generate_series(1, 40) g`,
		`ALTER TABLE events REPLICA IDENTITY FULL`)
	ctx := context.Background()
	conn := src.Connect(ctx)
	// What PostgreSQL does: published via the root, whose identity is
	// FULL, an UPDATE is still refused on the leaf.
	src.Exec(t, `CREATE PUBLICATION probe FOR TABLE events WITH (publish_via_partition_root = true)`)
	if _, err := conn.Exec(ctx, `UPDATE events SET v = v WHERE id = 1`); err == nil || !strings.Contains(err.Error(), "replica identity") {
		t.Fatalf("the source accepted an UPDATE on a partition without a replica identity: %v", err)
	}
	src.Exec(t, `DROP PUBLICATION probe`)
	// Reconfigure the flow with events.
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgText := strings.Replace(string(b), "[public.comments, public.tags]", "[public.comments, public.tags, public.events]", 1)
	if cfgText == string(b) {
		t.Fatalf("config has no tables list to extend:\n%s", b)
	}
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	dst.Exec(t, `CREATE TABLE events (id int NOT NULL, kind text NOT NULL, v int)`)

	fix := `ALTER TABLE "public"."events_a" REPLICA IDENTITY FULL`
	out, code := run("preflight", "--config", cfg)
	if code != 1 || !strings.Contains(out, fix) {
		t.Fatalf("preflight: exit %d, want 1 naming %s\n%s", code, fix, out)
	}
	if out, code := run("run", "--config", cfg, "--local"); code == 0 || !strings.Contains(out, fix) {
		t.Fatalf("run: exit %d, want a refusal naming %s\n%s", code, fix, out)
	}
	src.Exec(t, `ALTER TABLE events_a REPLICA IDENTITY FULL`, `ALTER TABLE events_b REPLICA IDENTITY FULL`)

	// A publication the operator created, without publish_via_partition_root.
	src.Exec(t, `CREATE PUBLICATION trellara_gates FOR TABLE comments, tags, events`)
	alter := `ALTER PUBLICATION "trellara_gates" SET (publish_via_partition_root = true)`
	if out, code := run("preflight", "--config", cfg); code != 1 || !strings.Contains(out, alter) {
		t.Fatalf("preflight over a publication without publish_via_partition_root: exit %d, want 1 naming %s\n%s", code, alter, out)
	}
	if out, code := run("run", "--config", cfg, "--local"); code == 0 || !strings.Contains(out, alter) {
		t.Fatalf("run over a publication without publish_via_partition_root: exit %d\n%s", code, out)
	}
	var slots int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("the refused run left %d slots (%v)", slots, err)
	}
	src.Exec(t, alter)
	if out, code := run("preflight", "--config", cfg); code != 0 {
		t.Fatalf("preflight after the fixes: exit %d\n%s", code, out)
	}
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run after the fixes: exit %d\n%s", code, out)
	}
	src.Exec(t, `UPDATE events SET v = -v WHERE id < 10`, `UPDATE events SET kind = 'b' WHERE id = 11`, `DELETE FROM events WHERE id > 35`)
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("updates and deletes of the FULL partitioned table: exit %d\n%s", code, out)
	}
	sameRows(t, src, dst, "events")
}

// ATTACH and DETACH PARTITION change which rows a partitioned table holds
// without a replicated change: pgoutput sends no insert for the rows an
// attached table brings, and no delete for the rows a detached partition
// takes away. The outcome is explicit: the target misses (an UPDATE of
// one is quarantined) or keeps those rows, repair-plan names the table,
// the partition and the recovery first, and the recovery, followed
// literally, ends CONVERGED with the source's rows. A partition attached
// empty changes no rows: verify converges and repair-plan has nothing.
func TestPartitionAttachDetach(t *testing.T) {
	run, cfg, src, dst := partitionFlow(t, "attach")
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	// recover follows repair-plan's first step literally: its commands
	// in backquotes, in order, then the verify it names (a bounded run that
	// verifies at a common watermark: a standalone verify of the stopped
	// pipeline would answer BEHIND).
	recover := func(want string) {
		t.Helper()
		plan, _ := run("repair-plan", "--config", cfg)
		first, _, _ := strings.Cut(plan, "\n2. ")
		if !strings.HasPrefix(first, "1. ") || !strings.Contains(first, want) || !strings.Contains(first, "not replicated") {
			t.Fatalf("repair-plan's first step does not name %q:\n%s", want, plan)
		}
		cmds := regexp.MustCompile("`trellara ([^`]+)`").FindAllStringSubmatch(first, -1)
		if len(cmds) != 2 {
			t.Fatalf("repair-plan's first step names %d commands, want cleanup and run:\n%s", len(cmds), first)
		}
		for _, c := range cmds {
			if out, code := run(strings.Fields(c[1])...); code != 0 {
				t.Fatalf("trellara %s: exit %d\n%s", c[1], code, out)
			}
		}
		then := regexp.MustCompile(`then: trellara (run --config \S+ --local --verify)`).FindStringSubmatch(first)
		if then == nil {
			t.Fatalf("repair-plan's first step names no verifying run:\n%s", first)
		}
		if out, code := run(strings.Fields(then[1])...); code != 0 || !strings.Contains(out, "CONVERGED") {
			t.Fatalf("trellara %s after the recovery: exit %d\n%s", then[1], code, out)
		}
		if plan, _ := run("repair-plan", "--config", cfg); !strings.Contains(plan, "nothing to repair") {
			t.Fatalf("repair-plan after the recovery:\n%s", plan)
		}
		sameRows(t, src, dst, "comments")
		sameRows(t, src, dst, "tags")
	}

	src.Exec(t,
		`CREATE TABLE comments_2027 (LIKE comments INCLUDING ALL)`,
		`INSERT INTO comments_2027 SELECT g, date '2027-01-01' + (g % 300), 'old' || g FROM generate_series(5001, 5040) g`,
		`ALTER TABLE comments ATTACH PARTITION comments_2027 FOR VALUES FROM ('2027-01-01') TO ('2028-01-01')`,
		`INSERT INTO comments VALUES (6000, '2027-05-05', 'streamed')`,
		`UPDATE comments SET body = 'after attach' WHERE id = 5001`)
	out, code := run("run", "--config", cfg, "--local", "--verify")
	if code == 0 || !strings.Contains(out, "UPDATE matched 0 target rows") {
		t.Fatalf("an UPDATE of a row that arrived by ATTACH: exit %d, want the quarantine\n%s", code, out)
	}
	recover("attached public.comments_2027")

	src.Exec(t, `ALTER TABLE tags DETACH PARTITION tags_en`, `INSERT INTO tags VALUES (700, 'fr', 'after detach')`)
	out, code = run("run", "--config", cfg, "--local", "--verify")
	if code == 0 || !strings.Contains(out, "DIVERGED") || !strings.Contains(out, "public.tags") {
		t.Fatalf("a detached partition's rows left at the target: exit %d, want DIVERGED naming public.tags\n%s", code, out)
	}
	recover("detached public.tags_en")

	src.Exec(t, `CREATE TABLE comments_2028 PARTITION OF comments FOR VALUES FROM ('2028-01-01') TO ('2029-01-01')`,
		`INSERT INTO comments VALUES (7000, '2028-02-02', 'in a new partition')`)
	if out, code := run("run", "--config", cfg, "--local", "--verify"); code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("a partition created empty: exit %d\n%s", code, out)
	}
	if plan, _ := run("repair-plan", "--config", cfg); !strings.Contains(plan, "nothing to repair") {
		t.Fatalf("repair-plan after an empty partition converged:\n%s", plan)
	}
	sameRows(t, src, dst, "comments")
}
