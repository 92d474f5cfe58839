//go:build full

package lake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/obs"
	"github.com/trellara/trellara/segmentlog"
)

// appendTxn appends to log l one transaction of source src at commit LSN
// lsn that inserts rows rows into public.t, as its relay would.
func appendTxn(t *testing.T, l *segmentlog.Log, src string, lsn uint64, rows int) {
	t.Helper()
	e := &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: src, Xid: uint32(lsn), CommitLsn: lsn, EndLsn: lsn + 8,
		CommitTimeUnixMicros: 1_700_000_000_000_000 + int64(lsn),
		Boundary:             &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION, TotalRows: uint64(rows)},
		Relations: []*pb.Relation{{Oid: 16384, Schema: "public", Name: "t", ReplicaIdentity: 'd',
			Columns: []*pb.RelationColumn{{Name: "id", TypeOid: 20, TypeModifier: -1, Key: true}, {Name: "v", TypeOid: 25, TypeModifier: -1}}}}}
	for i := range rows {
		e.Rows = append(e.Rows, &pb.Row{Seq: uint64(i), Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{
			{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: fmt.Appendf(nil, "%d", lsn*1000+uint64(i))},
			{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(src)}}})
	}
	envelope.Seal(e)
	b, err := envelope.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(b); err != nil {
		t.Fatal(err)
	}
}

// TestLaggingSourceDoesNotStallCommits (issue 34): while one source's
// probe waits for its slot (its relay reconnecting: the slot is not
// confirmed), the commit loop keeps committing the two healthy sources'
// rows; only the epoch record waits, and it is written after them, with
// the laggard not caught up. The laggard's probe is held by the test, so
// the order is exact: every healthy row below is committed while the
// epoch is pending, and no epoch record exists until the probe answers.
// Mutation: the loop's epoch tick calls CloseEpoch (the wait back in the
// loop) — no row is committed while the probe is held, red.
func TestLaggingSourceDoesNotStallCommits(t *testing.T) {
	dir := t.TempDir()
	ids := []string{"db1", "db2", "db3"}
	var srcs strings.Builder
	for i, id := range ids {
		writeFlow(t, dir, id, fmt.Sprintf("127.0.0.1:%d", 19501+2*i), fmt.Sprintf("127.0.0.1:%d", 19502+2*i))
		fmt.Fprintf(&srcs, "  - config: %s.yml\n", id)
	}
	if err := os.MkdirAll(filepath.Join(dir, "lake"), 0o700); err != nil {
		t.Fatal(err)
	}
	fy := filepath.Join(dir, "fleet.yml")
	body := "version: 1\nfleet: f\nsources:\n" + srcs.String() +
		"lake:\n  catalog: {kind: sql-sqlite, uri: lake/c.db}\n  warehouse: file://lake/wh\n" +
		"epochs: {close_interval: 100ms, max_lag: 1m}\nrun: {listen: \"127.0.0.1:0\", commit_every: 50ms}\n"
	if err := os.WriteFile(fy, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := LoadFleet(fy)
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string]*segmentlog.Log{}
	for _, s := range f.Sources {
		l, _, err := segmentlog.Open(s.Flow.Transport.Local.LogDir(), segmentlog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		logs[s.ID] = l
		appendTxn(t, l, s.ID, 0x100, 2)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lk, err := Open(ctx, f.Lake)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := NewCommitter(ctx, lk, f, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// db1 and db2 are confirmed at once; db3's probe is held until the
	// test releases it, then answers: reachable, slot not confirmed.
	held := make(chan struct{})
	release := make(chan struct{})
	var heldOnce sync.Once
	c.Probe = func(ctx context.Context, s FleetSource, wait time.Duration) Probe {
		if s.ID != "db3" {
			return Probe{Reachable: true, WALPos: 0x200, Confirmed: true}
		}
		heldOnce.Do(func() { close(held) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return Probe{Reachable: true, WALPos: 0x200}
	}
	done := make(chan error, 1)
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { done <- c.loop(loopCtx, obs.NewHealth(), newLakeMetrics(f)) }()

	select {
	case <-held:
	case err := <-done:
		t.Fatalf("the commit loop stopped before the first epoch's probes: %v", err)
	case <-ctx.Done():
		t.Fatal("no epoch was started")
	}
	// The epoch is pending. The healthy relays write on; their rows must
	// reach the lake now.
	before := c.Stats()
	const txns = 5
	for i := range txns {
		for _, id := range []string{"db1", "db2"} {
			appendTxn(t, logs[id], id, 0x300+uint64(i)*0x10, 3)
		}
	}
	want := int64(2 + txns*3)
	deadline := time.Now().Add(30 * time.Second)
	var during CommitterStats
	for {
		during = c.Stats()
		if during.Rows["db1"] >= want && during.Rows["db2"] >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with db3's probe held, the healthy sources' rows were not committed: rows %v, want %d each (commits %d, %d before the wait): one lagging source stalls every source's commits",
				during.Rows, want, during.Commits, before.Commits)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if during.Commits <= before.Commits {
		t.Fatalf("no table commit while the epoch was pending (commits %d, %d before)", during.Commits, before.Commits)
	}
	eps, err := lk.Epochs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 0 || during.LastEpoch.ID != 0 {
		t.Fatalf("an epoch record (%d, last %d) was written while db3's probe was held", len(eps), during.LastEpoch.ID)
	}

	close(release)
	for c.Stats().LastEpoch.ID == 0 {
		select {
		case err := <-done:
			t.Fatalf("the commit loop stopped before the pending epoch was written: %v", err)
		case <-ctx.Done():
			t.Fatal("the pending epoch was never written")
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("commit loop: %v", err)
	}
	eps, err = lk.Epochs(ctx)
	if err != nil || len(eps) == 0 {
		t.Fatalf("epochs after the wait: %d, %v", len(eps), err)
	}
	e := eps[0]
	if e.ID != 1 || e.Status != StatusGaps {
		t.Fatalf("epoch %d is %s, want epoch 1 complete_with_gaps: %+v", e.ID, e.Status, e.Sources)
	}
	for _, id := range []string{"db1", "db2"} {
		if s, _ := e.Source(id); !s.Included || s.ThroughLSN != 0x200 {
			t.Errorf("epoch 1 %s: %+v, want included through 0/200", id, s)
		}
	}
	if s, _ := e.Source("db3"); s.Included {
		t.Errorf("epoch 1 includes db3, whose slot was not confirmed: %+v", s)
	}
	chs, _, err := lk.ReadChanges(ctx, "public__t")
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int64{}
	for _, ch := range chs {
		per[ch.SourceID]++
	}
	if per["db1"] != want || per["db2"] != want || per["db3"] != 2 {
		t.Fatalf("changelog rows per source %v, want db1 %d, db2 %d, db3 2", per, want, want)
	}
}
