package flow

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgtest"
)

// On the extension capture path the decoder worker holds its slot, so a
// verify at rest counts through a temporary copy of it: the committed
// transactions with a change to trellara.tables, never the worker's own
// slot moved or released, and never a transaction of another table.
func TestPeekExtensionPending(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	pgtest.InstallExtension(t, src.BinDir())
	conf := map[string]string{
		"shared_preload_libraries":  "trellara",
		"trellara.database":         "postgres",
		"trellara.slot_name":        "ext",
		"trellara.socket_path":      filepath.Join(src.SocketDir(), "trellara.sock"),
		"trellara.include_messages": "on",
		"trellara.tables":           "public.t",
	}
	conn := src.Connect(t.Context())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_settings WHERE name = 'output_plugin_libraries'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	conn.Close(t.Context())
	if n == 1 {
		conf["output_plugin_libraries"] = "pgoutput, test_decoding, trellara"
	}
	fh, err := os.OpenFile(filepath.Join(src.DataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range conf {
		fmt.Fprintf(fh, "%s = '%s'\n", k, v)
	}
	fh.Close()
	src.Restart()
	conn = src.Connect(t.Context())
	defer conn.Close(t.Context())
	slot := func() (confirmed string, decoderHolds bool) {
		t.Helper()
		err := conn.QueryRow(t.Context(), `SELECT confirmed_flush_lsn::text, coalesce(active_pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'trellara decoder'), false)
			FROM pg_replication_slots WHERE slot_name = 'ext'`).Scan(&confirmed, &decoderHolds)
		if err != nil {
			confirmed, decoderHolds = "", false
		}
		return confirmed, decoderHolds
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, holds := slot(); holds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the trellara decoder did not take slot ext")
		}
	}
	src.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int)`, `CREATE TABLE other (id int PRIMARY KEY)`,
		`INSERT INTO t VALUES (1, 1)`, `INSERT INTO other VALUES (1)`, `UPDATE t SET v = 2 WHERE id = 1`, `SELECT pg_logical_emit_message(true, 'trellara', 'x')`)
	before, _ := slot()
	f := &Flow{Cfg: &config.Config{Flow: "ext", Source: config.Source{Slot: "ext", Capture: config.CaptureExtension}}, Logger: slog.Default()}
	got, end, atLeast, note, err := f.peekExtensionPending(t.Context(), conn, 0)
	if err != nil || got != 2 || end == 0 || atLeast || note != "" {
		t.Fatalf("pending on the extension's slot: %d (end %X, at least %v, note %q, err %v); want the INSERT and the UPDATE of t", got, end, atLeast, note, err)
	}
	if got, _, _, _, err := f.peekExtensionPending(t.Context(), conn, end); err != nil || got != 0 {
		t.Fatalf("pending past the newest transaction's end: %d (%v), want 0", got, err)
	}
	after, holds := slot()
	if after != before || !holds {
		t.Fatalf("slot ext after the peeks: confirmed %s (was %s), held by the decoder %v; a verify must not move or take it", after, before, holds)
	}
	var copies int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'trellara_verify_%'`).Scan(&copies); err != nil || copies != 0 {
		t.Fatalf("%d temporary copies left (%v)", copies, err)
	}
}
