package flow_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// Every value kind the relay carries in text form survives the whole path
// — snapshot and stream — and verify agrees.
func TestTypesEndToEnd(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	ddl := []string{
		`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`,
		`CREATE DOMAIN positive AS int CHECK (VALUE > 0)`,
	}
	src.Exec(t, ddl...)
	dst.Exec(t, ddl...)
	src.Exec(t, `CREATE TABLE kinds (
		id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		arr int[], tarr text[], j json, jb jsonb, n numeric(20,6), b bytea, ts timestamptz, d date,
		iv interval, e mood, dom positive, t text, u uuid, f float8, r int4range,
		total int GENERATED ALWAYS AS (dom * 2) STORED)`,
		`INSERT INTO kinds (arr, tarr, j, jb, n, b, ts, d, iv, e, dom, t, u, f, r) VALUES
		 ('{1,2,NULL}', '{"a b","c,d","","NULL"}', '{"k": [1, "x"]}', '{"k": {"z": null}}', 12345.678901, '\x00ff10', '2024-02-29 12:34:56.789+05:30', '2024-01-01',
		  '1 day 02:03:04', 'happy', 7, E'tab\there\nnewline \\ backslash', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', -0.5, '[1,10)'),
		 (NULL, '{}', 'null', '[]', 0, '', NULL, NULL, NULL, 'sad', 1, '', NULL, 'NaN', 'empty')`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	run := mustRunner(t, bin, dir)
	run("init", "--source-database-url", src.URL("postgres"), "--target-database-url", dst.URL("postgres"),
		"--table", "public.kinds", "--flow", "kinds", "--evaluate", "--output", cfg)
	run("run", "--config", cfg, "--local")
	// The stream: the same values again, an update that touches some, a delete.
	src.Exec(t, `INSERT INTO kinds (arr, tarr, j, jb, n, b, ts, d, iv, e, dom, t, u, f, r)
		SELECT arr, tarr, j, jb, n, b, ts, d, iv, e, dom, t, u, f, r FROM kinds`,
		`UPDATE kinds SET e = 'ok', jb = jb || '{"more": true}', n = n + 1 WHERE id % 2 = 0`,
		`DELETE FROM kinds WHERE id = 1`)
	out := run("run", "--config", cfg, "--local", "--verify")
	if !strings.Contains(out, "CONVERGED") {
		t.Fatalf("not converged:\n%s", out)
	}
}
