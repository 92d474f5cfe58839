package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgtest"
)

// `trellara check --config` checks the tables the configuration names: one
// the source lacks is a critical finding naming it, never "valid".
func TestCheckConfigNamesMissingTables(t *testing.T) {
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE public.present (id int PRIMARY KEY)`, `CREATE TABLE public."Mixed" (id int PRIMARY KEY)`,
		`CREATE VIEW public.a_view AS SELECT 1 AS id`)
	write := func(tables string) string {
		path := filepath.Join(t.TempDir(), "trellara.yml")
		body := fmt.Sprintf("version: 2\nflow: chk\nsource:\n  id: src\n  database_url: %q\n  tables: %s\ntransport:\n  local: {dir: %s}\n",
			src.URL("postgres"), tables, filepath.Join(t.TempDir(), "log"))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	cfg := write(`[public.present, public.absent, 'public."Mixed"', public.mixed, public.a_view]`)
	out, errOut, code := run(t, "check", "--config", cfg, "--format", "text")
	if code != ExitFindings {
		t.Errorf("exit %d with missing tables, want %d\n%s%s", code, ExitFindings, out, errOut)
	}
	if strings.Contains(out, " valid (") || !strings.Contains(out, "3 tables named by the configuration do not exist on the source") {
		t.Errorf("check calls a config with missing tables valid, or does not say so:\n%s", out)
	}
	for _, missing := range []string{"public.absent", "public.mixed", "public.a_view"} {
		if !strings.Contains(out, "configured table "+missing+" does not exist") {
			t.Errorf("output does not name %s:\n%s", missing, out)
		}
	}
	for _, present := range []string{"public.present", `public."Mixed"`} {
		if strings.Contains(out, "configured table "+present+" does not exist") {
			t.Errorf("output calls %s missing:\n%s", present, out)
		}
	}
	out, _, _ = run(t, "check", "--config", cfg, "--format", "json")
	if !strings.Contains(out, `"code": "configured_table_missing"`) && !strings.Contains(out, `"code":"configured_table_missing"`) {
		t.Errorf("the JSON report lacks the finding:\n%s", out)
	}

	out, _, _ = run(t, "check", "--config", write(`[public.present, 'public."Mixed"']`), "--format", "text")
	if !strings.Contains(out, " valid (flow chk, 2 tables)") || strings.Contains(out, "does not exist on the source") {
		t.Errorf("config with existing tables:\n%s", out)
	}
}

// weirdTable is a table the flow does not capture, named to break anything
// that pastes names into SQL or a shell: it must appear nowhere in a
// report scoped to the flow.
const weirdTable = `"we;ird"."ta""b'le; drop table x;--"`

// `trellara check --config` grades the flow, not the server: its tables
// and its slot. Other tables (a weird one without a key, which would lower
// the grade), another flow's slot and publication and another
// application's stalled slot (which would grade D) are only counted, so a
// healthy flow at rest exits 0; its own at-rest slot is a note whose fix
// is trellara run, never a drop.
func TestCheckConfigGradesTheFlowOnly(t *testing.T) {
	pg := pgtest.Start(t, pgtest.Options{NoFsync: true})
	pg.CreateDB(t, "shop")
	pg.CreateDB(t, "shop_copy")
	pg.ExecDB(t, "shop", `CREATE TABLE public.orders (id int PRIMARY KEY, v text)`,
		`INSERT INTO public.orders SELECT g, 'o' || g FROM generate_series(1, 50) g`,
		`CREATE SCHEMA "we;ird"`, `CREATE TABLE `+weirdTable+` (v text)`,
		`CREATE TABLE public.other_flows_table (id int PRIMARY KEY)`,
		`CREATE PUBLICATION trellara_other FOR TABLE public.other_flows_table`,
		`SELECT pg_create_logical_replication_slot('trellara_other', 'pgoutput')`,
		`SELECT pg_create_logical_replication_slot('some_app', 'pgoutput')`)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	if out, errOut, code := run(t, "init", "--source-database-url", pg.URL("shop"), "--target-database-url", pg.URL("shop_copy"),
		"--table", "public.orders", "--evaluate", "--output", cfg); code != 0 {
		t.Fatalf("init: %d %s%s", code, out, errOut)
	}
	if out, errOut, code := run(t, "run", "--config", cfg, "--local", "--verify"); code != 0 {
		t.Fatalf("run --local --verify: %d\n%s%s", code, out, errOut)
	}
	// WAL the other slots hold (and the flow's slot, now at rest).
	pg.ExecDB(t, "shop", `INSERT INTO public.other_flows_table SELECT generate_series(1, 20000)`)

	// check --config reads the flow's log and writes no byte of it.
	state := filepath.Join(dir, "trellara-data", "shop")
	before := treeState(t, state)

	v := newJSONValidator(t)
	js, errOut, code := run(t, "check", "--config", cfg, "--format", "json")
	if code != 0 {
		t.Errorf("check --config on a healthy flow at rest: exit %d, want 0\n%s%s", code, js, errOut)
	}
	rep := v.check(t, "check", js)
	text, _, tcode := run(t, "check", "--config", cfg)
	if tcode != code {
		t.Errorf("text exit %d, json exit %d", tcode, code)
	}
	for _, out := range []string{js, text} {
		for _, absent := range []string{"we;ird", `ta""b'le`, "some_app", "trellara_other", "other_flows_table", "pg_drop_replication_slot"} {
			if strings.Contains(out, absent) {
				t.Errorf("the flow's report names %q, which is not the flow's:\n%s", absent, out)
			}
		}
	}
	if after := treeState(t, state); after != before {
		t.Errorf("check --config changed the flow's state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if !strings.Contains(text, "consumer applier") {
		t.Errorf("the flow's log section does not list its consumer:\n%s", text)
	}
	var tables []string
	for _, tb := range rep["tables"].([]any) {
		m := tb.(map[string]any)
		tables = append(tables, m["schema"].(string)+"."+m["name"].(string))
	}
	var slots []string
	for _, s := range rep["slots"].([]any) {
		slots = append(slots, s.(map[string]any)["name"].(string))
	}
	if strings.Join(tables, ",") != "public.orders" || strings.Join(slots, ",") != "trellara_shop" {
		t.Errorf("graded tables %v and slots %v, want only the flow's: public.orders, trellara_shop", tables, slots)
	}
	sc, _ := rep["scope"].(map[string]any)
	if sc["flow"] != "shop" || sc["other_tables"] != float64(2) || sc["other_slots"] != float64(2) || sc["other_publications"] != float64(1) {
		t.Errorf("scope %v, want flow shop with 2 other tables, 2 other slots, 1 other publication", sc)
	}
	if !strings.Contains(text, "not graded and not listed: 2 other tables, 2 other slots, 1 other publication on this server") {
		t.Errorf("the text report does not count what it left out:\n%s", text)
	}
	if !strings.Contains(text, "Trellara flow shop's, at rest") || !strings.Contains(text, "trellara run --config "+cfg) {
		t.Errorf("the flow's own slot is not named as the flow's at rest, with trellara run as the fix:\n%s", text)
	}
}

// treeState lists every file under dir with its size and modification
// time, to prove a command wrote nothing there.
func treeState(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %s\n", path, fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
