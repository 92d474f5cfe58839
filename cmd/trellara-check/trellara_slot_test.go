package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/pgtest"
)

// A Trellara flow at rest: its slot (trellara_<flow>, pgoutput, with the
// publication of the same name) is inactive and holds the WAL written
// since the flow last ran. The grader names the flow, says that
// Trellara's log holds the data, and fixes it with trellara run, never a
// drop; a little WAL is a note (the grade stays passing), WAL close to
// max_slot_wal_keep_size still counts, with the same fix.
func TestTrellaraSlotAtRest(t *testing.T) {
	t.Parallel()
	c := pgtest.Start(t, pgtest.Options{NoFsync: true, Settings: map[string]string{"autovacuum": "off"}})
	c.Exec(t,
		"CREATE TABLE sales (id bigserial PRIMARY KEY, v text)",
		"CREATE PUBLICATION trellara_shop FOR TABLE sales",
		"SELECT pg_create_logical_replication_slot('trellara_shop', 'pgoutput')",
		"INSERT INTO sales (v) VALUES ('one'), ('two')",
	)
	noDrop := func(r result) {
		t.Helper()
		if strings.Contains(r.stdout, "pg_drop_replication_slot('trellara_shop')") {
			t.Errorf("the fix for a Trellara flow's slot drops it:\n%s", r.stdout)
		}
	}
	t.Run("little WAL", func(t *testing.T) {
		text, js := checkBoth(t, c.URL("postgres"))
		// B: max_slot_wal_keep_size = -1 is a notice of its own.
		expect(t, js, 0, "B", "trellara_slot_at_rest", "slot_wal_unbounded")
		f := findings(js.report)["trellara_slot_at_rest"]
		if f["severity"] != "info" {
			t.Errorf("a flow at rest with a little WAL is %v, want info", f["severity"])
		}
		for _, want := range []string{"Trellara flow shop's", "at rest"} {
			if !strings.Contains(fmt.Sprint(f["title"]), want) {
				t.Errorf("title lacks %q: %v", want, f["title"])
			}
		}
		if !strings.Contains(fmt.Sprint(f["detail"]), "Trellara's log holds every change") || !strings.Contains(fmt.Sprint(f["detail"]), "publication trellara_shop exists") {
			t.Errorf("detail: %v", f["detail"])
		}
		if a := fmt.Sprint(f["action"]); !strings.Contains(a, "trellara run --config") || !strings.Contains(a, "systemctl start trellara@shop") {
			t.Errorf("action: %s", a)
		}
		slot := js.report["slots"].([]any)[0].(map[string]any)
		if slot["trellara_flow"] != "shop" {
			t.Errorf("slots[0].trellara_flow = %v, want shop", slot["trellara_flow"])
		}
		if !strings.Contains(text.stdout, "1 Trellara flow at rest") {
			t.Errorf("the slots summary does not say the flow is at rest:\n%s", text.stdout)
		}
		noDrop(text)
		noDrop(js)
	})
	t.Run("near the cap", func(t *testing.T) {
		c.Exec(t, "INSERT INTO sales (v) SELECT repeat('x', 200) FROM generate_series(1, 60000)")
		conn, err := pgx.Connect(context.Background(), c.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		var retained int64
		err = conn.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint
			FROM pg_replication_slots WHERE slot_name = 'trellara_shop'`).Scan(&retained)
		conn.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// A cap the slot has used more than half of.
		capMB := retained*3/2>>20 + 1
		c.Exec(t, fmt.Sprintf("ALTER SYSTEM SET max_slot_wal_keep_size = '%dMB'", capMB), "SELECT pg_reload_conf()")
		text, js := checkBoth(t, c.URL("postgres"))
		f, ok := findings(js.report)["trellara_slot_retaining_wal"]
		if !ok || f["severity"] == "info" {
			t.Fatalf("a Trellara slot holding %d of a %d MB cap does not count: %v\n%s", retained, capMB, f, text.stdout)
		}
		if js.code != 1 {
			t.Errorf("exit %d, want 1", js.code)
		}
		if a := fmt.Sprint(f["action"]); !strings.Contains(a, "trellara run --config") {
			t.Errorf("action: %s", a)
		}
		noDrop(text)
		noDrop(js)
	})
}
