package lake

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

func TestDecideNeverClaimsPastCommitted(t *testing.T) {
	now := time.Unix(1000, 0)
	prev := SourceEpoch{SourceID: "a", Included: true, ThroughLSN: 100}
	cases := []struct {
		name     string
		o        Observation
		included bool
		through  uint64
	}{
		{"caught up", Observation{Reachable: true, WALPos: 200, CaughtUp: true}, true, 200},
		{"offline", Observation{Reachable: false, WALPos: 0, Err: "connection refused"}, false, 100},
		{"lagging within max_lag", Observation{Reachable: true, WALPos: 300, LastIncluded: now.Add(-time.Second)}, true, 100},
		{"lagging past max_lag", Observation{Reachable: true, WALPos: 300, LastIncluded: now.Add(-time.Hour)}, false, 100},
		{"quarantined", Observation{Reachable: true, WALPos: 300, CaughtUp: true, Quarantined: true}, false, 100},
		{"slot lost", Observation{Reachable: true, WALPos: 300, SlotLost: true}, false, 100},
	}
	for _, c := range cases {
		c.o.SourceID, c.o.Prev = "a", prev
		got := Decide(c.o, now, 10*time.Second)
		if got.Included != c.included || got.ThroughLSN != c.through {
			t.Errorf("%s: included %v through %d, want %v through %d (%+v)", c.name, got.Included, got.ThroughLSN, c.included, c.through, got)
		}
		if !got.Included && got.Reason == "" {
			t.Errorf("%s: an excluded source has no reason", c.name)
		}
	}
}

func TestStatusNeverRoundsAGapAway(t *testing.T) {
	in := SourceEpoch{SourceID: "a", Included: true}
	out := SourceEpoch{SourceID: "b"}
	if s := StatusOf([]SourceEpoch{in, in}); s != StatusComplete {
		t.Fatalf("all included: %s", s)
	}
	if s := StatusOf([]SourceEpoch{in, out}); s != StatusGaps {
		t.Fatalf("one missing: %s", s)
	}
	if s := StatusOf(nil); s != StatusGaps {
		t.Fatalf("no sources: %s", s)
	}
}

func TestGate(t *testing.T) {
	c := CloseEpoch(1, time.Now(), []SourceEpoch{{SourceID: "a", Included: true}, {SourceID: "b", Included: true}})
	g := CloseEpoch(2, time.Now(), []SourceEpoch{{SourceID: "a", Included: true}, {SourceID: "b", Offline: true, Reason: "offline: refused"}})
	_, err := Gate([]Epoch{g, c}, false)
	var ge *GateError
	if !errors.As(err, &ge) || !errors.Is(err, ErrGappedEpoch) || !strings.Contains(err.Error(), "missing sources b") || ge.LatestComplete != 1 {
		t.Fatalf("gapped latest without --allow-gaps: %v", err)
	}
	if e, err := Gate([]Epoch{c, g}, true); err != nil || e.ID != 2 {
		t.Fatalf("--allow-gaps: %v %v", e.ID, err)
	}
	if e, err := Gate([]Epoch{c}, false); err != nil || e.ID != 1 {
		t.Fatalf("complete: %v %v", e.ID, err)
	}
	if _, err := Gate(nil, true); err == nil {
		t.Fatal("no epochs: no error")
	}
}

func TestDedupSkipsReplayedGroups(t *testing.T) {
	d := NewDedup()
	d.Observe("t", "a", 50) // committed mark read from the table
	if d.Accept("t", "a", 50) || d.Accept("t", "a", 10) {
		t.Fatal("a group at or below the committed mark was accepted")
	}
	if !d.Accept("t", "a", 60) || d.Accept("t", "a", 60) {
		t.Fatal("a new group must be accepted once")
	}
	if !d.Accept("t", "b", 60) || !d.Accept("u", "a", 60) {
		t.Fatal("marks are per table and source")
	}
}

func TestEndsGroup(t *testing.T) {
	mk := func(k pb.UnitKind, i, n uint32) *pb.Envelope {
		return &pb.Envelope{Boundary: &pb.Boundary{Kind: k, ChunkIndex: i, ChunkCount: n}}
	}
	if !EndsGroup(mk(pb.UnitKind_UNIT_KIND_TRANSACTION, 0, 0)) || EndsGroup(mk(pb.UnitKind_UNIT_KIND_CHUNK, 0, 2)) ||
		!EndsGroup(mk(pb.UnitKind_UNIT_KIND_CHUNK, 1, 2)) || EndsGroup(mk(pb.UnitKind_UNIT_KIND_SNAPSHOT, 0, 0)) ||
		!EndsGroup(mk(pb.UnitKind_UNIT_KIND_SNAPSHOT_END, 0, 0)) {
		t.Fatal("group boundaries")
	}
}

func s(v string) *string { return &v }

func TestNetStateAndChanges(t *testing.T) {
	rel := &pb.Relation{Schema: "public", Name: "t", Columns: []*pb.RelationColumn{{Name: "id", Key: true}, {Name: "v"}}}
	txt := func(v string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(v)} }
	env := func(lsn uint64, rows ...*pb.Row) *pb.Envelope {
		return &pb.Envelope{SourceId: "a", CommitLsn: lsn, Relations: []*pb.Relation{rel}, Rows: rows,
			Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION}}
	}
	var all []Change
	for _, e := range []*pb.Envelope{
		env(10, &pb.Row{Seq: 0, Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{txt("1"), txt("x")}},
			&pb.Row{Seq: 1, Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{txt("2"), txt("y")}}),
		env(20, &pb.Row{Seq: 0, Op: pb.Op_OP_UPDATE, OldKind: pb.OldTuple_OLD_TUPLE_KEY, OldTuple: []*pb.Value{txt("1")},
			NewTuple: []*pb.Value{txt("3"), txt("x2")}}),
		env(30, &pb.Row{Seq: 0, Op: pb.Op_OP_DELETE, OldTuple: []*pb.Value{txt("2"), {Kind: pb.ValueKind_VALUE_KIND_NULL}}}),
	} {
		tcs, err := Changes(e)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, tcs[0].Changes...)
	}
	// Out of order on purpose: NetState sorts by commit LSN and position.
	all[0], all[3] = all[3], all[0]
	got := NetState(all, []string{"id"}, []string{"id", "v"})
	want := map[string]map[string]*string{`["3"]`: {"id": s("3"), "v": s("x2")}}
	if !NewDigest(got, []string{"id", "v"}).Equal(NewDigest(want, []string{"id", "v"})) {
		t.Fatalf("net state %v", got)
	}
	_, err := Changes(env(40, &pb.Row{Op: pb.Op_OP_TRUNCATE}))
	if !errors.Is(err, ErrTruncate) {
		t.Fatalf("truncate: %v", err)
	}
}

func TestDigestSeesAChangedValue(t *testing.T) {
	a := map[string]map[string]*string{`["1"]`: {"id": s("1"), "v": s("x")}}
	b := map[string]map[string]*string{`["1"]`: {"id": s("1"), "v": s("y")}}
	da, db := NewDigest(a, []string{"id", "v"}), NewDigest(b, []string{"id", "v"})
	if da.Equal(db) || da.KeySum != db.KeySum || len(da.Diff(db, 5)) != 1 {
		t.Fatalf("digests %+v %+v", da, db)
	}
}

func TestFleetConfigNamesFields(t *testing.T) {
	_, err := ParseFleet([]byte(`version: 1
fleet: f
sources:
  - config: /nonexistent/a.yml
lake:
  catalog: {kind: sql-oracle, uri: x}
  warehouse: ftp://x
  namespace: a.b
epochs: {close_interval: soon}
bogus: 1
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"sources[0].config", "lake.catalog.kind", "lake.warehouse", "lake.namespace", "epochs.close_interval", "bogus: unknown key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
}

func TestFleetRelativePathsFromTheFile(t *testing.T) {
	dir := t.TempDir()
	flow := `version: 2
flow: a
source: {id: a, database_url: "postgres://x@127.0.0.1:1/db", owns_slot: true, tables: [public.t]}
transport: {local: {dir: data}}
`
	if err := os.WriteFile(filepath.Join(dir, "a.yml"), []byte(flow), 0o600); err != nil {
		t.Fatal(err)
	}
	fy := filepath.Join(dir, "fleet.yml")
	body := "version: 1\nfleet: f\nsources:\n  - config: a.yml\nlake:\n  catalog: {kind: sql-sqlite, uri: lake/c.db}\n  warehouse: file://lake/wh\n"
	if err := os.WriteFile(fy, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := LoadFleet(fy)
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := f.Lake.Catalog.URI.Resolve()
	if sec.Reveal() != filepath.Join(dir, "lake/c.db") || f.Lake.Warehouse != "file://"+filepath.Join(dir, "lake/wh") {
		t.Fatalf("catalog %q warehouse %q, want both under %s", sec.Reveal(), f.Lake.Warehouse, dir)
	}
	if got := f.SourceIDs(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("sources %v", got)
	}
}
