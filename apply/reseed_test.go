package apply

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/pgname"
)

// A reseed watermark is recognised by its prefix and a valid body only;
// a handoff makes its unit commit alone.
func TestParseWatermark(t *testing.T) {
	msg := func(prefix, body string) *pb.Row {
		return &pb.Row{Op: pb.Op_OP_MESSAGE, MessagePrefix: prefix, MessageContent: []byte(body)}
	}
	for _, tc := range []struct {
		row  *pb.Row
		ok   bool
		want Watermark
	}{
		{msg(ReseedPrefix, `{"id":3,"phase":"high","window":7,"upper":["41"],"last":false}`), true, Watermark{ID: 3, Phase: PhaseHigh, Window: 7, Upper: []string{"41"}}},
		{msg(ReseedPrefix, `{"id":1,"phase":"handoff"}`), true, Watermark{ID: 1, Phase: PhaseHandoff}},
		{msg("trellara.fence", `{"id":1,"phase":"handoff"}`), false, Watermark{}},
		{msg(ReseedPrefix, `not json`), false, Watermark{}},
		{msg(ReseedPrefix, `{"phase":"low"}`), false, Watermark{}}, // no id
		{&pb.Row{Op: pb.Op_OP_INSERT}, false, Watermark{}},
	} {
		got, ok := ParseWatermark(tc.row)
		if ok != tc.ok || got.ID != tc.want.ID || got.Phase != tc.want.Phase || got.Window != tc.want.Window ||
			strings.Join(got.Upper, ",") != strings.Join(tc.want.Upper, ",") || got.Last != tc.want.Last {
			t.Errorf("%s %q: got %+v %v, want %+v %v", tc.row.MessagePrefix, tc.row.MessageContent, got, ok, tc.want, tc.ok)
		}
	}
	handoff := &pb.Envelope{Rows: []*pb.Row{msg(ReseedPrefix, `{"id":1,"phase":"handoff"}`)}}
	low := &pb.Envelope{Rows: []*pb.Row{msg(ReseedPrefix, `{"id":1,"phase":"low","window":1}`)}}
	if !isHandoff(handoff) || isHandoff(low) {
		t.Fatal("isHandoff")
	}
}

// The shadow statements name the reseed's tables and key, and the merge
// leaves out the keys the stream touched (present in the shadow, or
// deleted).
func TestReseedStatements(t *testing.T) {
	r := newReseedRun("trellara", 4, `public."Orders"`, "public", "Orders", []string{"id", "k", "note"}, []string{"id", "k"})
	for _, want := range []string{
		`INSERT INTO "trellara"."reseed_4_shadow" ("id", "k", "note") SELECT "id", "k", "note" FROM "public"."Orders" WHERE ("id", "k") = ($1, $2) ON CONFLICT ("id", "k") DO UPDATE SET "note" = EXCLUDED."note"`,
	} {
		if r.upsertSQL != want {
			t.Errorf("upsert:\n got %s\nwant %s", r.upsertSQL, want)
		}
	}
	if !strings.Contains(r.mergeSQL, `NOT EXISTS (SELECT 1 FROM "trellara"."reseed_4_keys" k WHERE (k."id", k."k") = (s."id", s."k"))`) ||
		!strings.Contains(r.mergeSQL, `ON CONFLICT ("id", "k") DO NOTHING`) {
		t.Errorf("merge does not leave out the keys the stream touched:\n%s", r.mergeSQL)
	}
	if r.deleteSQL != `DELETE FROM "trellara"."reseed_4_shadow" WHERE ("id", "k") = ($1, $2)` {
		t.Errorf("delete: %s", r.deleteSQL)
	}
	rel := &pb.Relation{Columns: []*pb.RelationColumn{{Name: "id"}, {Name: "k"}, {Name: "note"}}}
	row := &pb.Row{Op: pb.Op_OP_UPDATE, NewTuple: []*pb.Value{
		{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte("1")}, {Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte("2")},
		{Kind: pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST}}}
	// An unchanged TOAST value: the shadow never gets a row without it;
	// the row waits in the toast table for its chunk's value.
	if _, _, unchanged := r.upsertValues(rel, row); !unchanged {
		t.Error("upsertValues does not report the unchanged TOAST value")
	}
	sts := r.toastValues(rel, row)
	if len(sts) != 1 || sts[0].sql != `INSERT INTO "trellara"."reseed_4_toast" ("id", "k", "trellara_unchanged") VALUES ($1, $2, $3) ON CONFLICT ("id", "k") DO UPDATE SET "trellara_unchanged" = array(SELECT unnest("trellara"."reseed_4_toast"."trellara_unchanged") INTERSECT SELECT unnest(EXCLUDED."trellara_unchanged"))` ||
		len(sts[0].args) != 3 {
		t.Errorf("toastValues: %+v", sts)
	}
	if !strings.Contains(r.mergeSQL, `NOT EXISTS (SELECT 1 FROM "trellara"."reseed_4_toast" p`) ||
		!strings.Contains(r.toastMergeSQL, `CASE WHEN 'note' = ANY(p.trellara_unchanged) THEN s."note" ELSE p."note" END`) {
		t.Errorf("merge of the rows waiting for a TOAST value:\n%s\n%s", r.mergeSQL, r.toastMergeSQL)
	}
}

// waitVisible waits for a commit that is in the WAL and not yet visible
// even when no transaction completed after it: its id is then at or past
// the snapshot's xmax, in no in-progress list. The commit waits for a
// synchronous standby that does not exist; waitVisible gives up within
// Wait naming it, and returns once the wait is cancelled. Mutation: wait
// only for the snapshot's in-progress list (xip): it returns at once (red).
func TestReseedWaitVisibleSeesCommitsAboveXmax(t *testing.T) {
	pgtest.Require(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true, Settings: map[string]string{
		"synchronous_standby_names": "ghost", "synchronous_commit": "local"}})
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v int)`, `INSERT INTO items VALUES (5, 5)`)
	ctx := context.Background()
	g := src.Connect(ctx)
	defer g.Close(ctx)
	if _, err := g.Exec(ctx, `SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	var xid string
	if err := g.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil { // autocommit: one xid used up
		t.Fatal(err)
	}
	pid := int(g.PgConn().PID())
	done := make(chan error, 1)
	go func() { _, err := g.Exec(ctx, `UPDATE items SET v = -999 WHERE id = 5`); done <- err }()
	c := src.Connect(ctx)
	defer c.Close(ctx)
	for ev := ""; ev != "SyncRep"; time.Sleep(10 * time.Millisecond) {
		_ = c.QueryRow(ctx, `SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&ev)
	}
	var inXip bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_snapshot_xip(pg_current_snapshot()) x
		WHERE x = (SELECT backend_xid::text::xid8 FROM pg_stat_activity WHERE pid = $1))`, pid).Scan(&inXip); err != nil || inXip {
		t.Fatalf("the waiting commit is in the in-progress list (%v): the case is not set up", err)
	}
	d := &reseedDriver{src: c, o: ReseedOptions{Table: pgname.Name{Schema: "public", Name: "items"}, Wait: time.Second, Command: "trellara reseed"},
		st: &ReseedState{ID: 1}}
	if err := d.waitVisible(ctx, PhaseLow); err == nil || !strings.Contains(err.Error(), "did not end within 1s") {
		t.Fatalf("waitVisible with a commit in progress above xmax: %v", err)
	}
	if _, err := c.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d.o.Wait = time.Minute
	if err := d.waitVisible(ctx, PhaseLow); err != nil {
		t.Fatalf("waitVisible once the commit is visible: %v", err)
	}
}
