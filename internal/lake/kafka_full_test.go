//go:build full

package lake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/trellara/trellara/internal/lake"
	"github.com/trellara/trellara/internal/pgtest"
)

// kafkaFleet is a fleet whose sources publish to a three-broker kfake
// cluster living in the test process (so it outlives every child killed):
// each relay a `trellara-full run --role relay` process of its own, the
// lake committer a `trellara-full fleet run` process with relays:
// external, reading the topics.
type kafkaFleet struct {
	*fleetEnv
	kc     *kfake.Cluster
	cfgs   []string
	relays []*exec.Cmd
}

// newKafkaFleet writes n transport.kafka flows (db2 partitioned over 3
// data partitions, the others strict) and a fleet.yml naming them, with
// run.relays: external but for the sources inFleet (indexes), whose
// relays fleet run starts in its own process (relay: fleet). db1 (strict,
// external) is named in fleet.yml by its topic, with no flow config: its
// relay runs from db1.yml, which the committer never reads.
func newKafkaFleet(t *testing.T, n int, catalog *pgtest.Cluster, inFleet ...int) *kafkaFleet {
	kc, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	e := &kafkaFleet{fleetEnv: &fleetEnv{t: t, bin: buildFull(t), dir: t.TempDir()}, kc: kc}
	var srcs strings.Builder
	for i := range n {
		c := pgtest.Start(t, pgtest.Options{})
		c.Exec(t, schema)
		id := fmt.Sprintf("db%d", i+1)
		mode := ""
		if i == 1 {
			mode = "    mode: partitioned\n    partitions: 3\n"
		}
		cfg := filepath.Join(e.dir, id+".yml")
		writeSourceFlow(t, cfg, "development", id, c.URL("postgres"), fmt.Sprintf("  kafka:\n    brokers: [%s]\n    profile: development\n    state_dir: %s\n%s",
			strings.Join(kc.ListenAddrs(), ", "), filepath.Join(e.dir, id+"-state"), mode), freePort(t), freePort(t))
		switch {
		case slices.Contains(inFleet, i):
			fmt.Fprintf(&srcs, "  - {config: %s.yml, relay: fleet}\n", id)
		case i == 0:
			// db1 is named by its topic: the committer's fleet.yml has
			// no flow config for it, only what the committer needs.
			fmt.Fprintf(&srcs, "  - id: %s\n    environment: development\n    topic: trellara.%s\n    kafka: {brokers: [%s], profile: development}\n    database_url: %q\n    tables: [public.items, public.counters]\n",
				id, id, strings.Join(kc.ListenAddrs(), ", "), c.URL("postgres"))
		default:
			fmt.Fprintf(&srcs, "  - config: %s.yml\n", id)
		}
		e.sources, e.ids, e.cfgs = append(e.sources, c), append(e.ids, id), append(e.cfgs, cfg)
	}
	e.relays = make([]*exec.Cmd, n)
	t.Setenv("LAKE_CATALOG_URL", catalog.URL("postgres"))
	e.fleet = filepath.Join(e.dir, "fleet.yml")
	body := fmt.Sprintf(`version: 1
fleet: test
sources:
%slake:
  catalog: {kind: sql-postgres, uri: {env: LAKE_CATALOG_URL}}
  warehouse: file://%s
  namespace: fanin
epochs: {close_interval: 1s, max_lag: 3s}
run: {listen: "127.0.0.1:%d", commit_every: 2s, relays: external}
`, srcs.String(), filepath.Join(e.dir, "warehouse"), freePort(t))
	if err := os.WriteFile(e.fleet, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := lake.LoadFleet(e.fleet)
	if err != nil {
		t.Fatal(err)
	}
	e.f = f
	return e
}

// startRelay runs source i's relay as its own process.
func (e *kafkaFleet) startRelay(i int) {
	e.relays[i] = startLogged(e.t, filepath.Join(e.dir, e.ids[i]+"-relay.log"), nil, e.bin, "run", "--config", e.cfgs[i], "--role", "relay")
}

// killRelay SIGKILLs source i's relay.
func (e *kafkaFleet) killRelay(i int) {
	_ = e.relays[i].Process.Signal(syscall.SIGKILL)
	_ = e.relays[i].Wait()
}

// groupCommitted returns the committer's consumer-group offset on
// partition 0 of every source's topic (-1 where none is committed).
func (e *kafkaFleet) groupCommitted() map[string]int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kc.ListenAddrs()...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	got, err := kadm.NewClient(cl).FetchOffsets(context.Background(), e.f.KafkaGroup())
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, id := range e.ids {
		out[id] = -1
		if o, ok := got.Lookup("trellara."+id, 0); ok {
			out[id] = o.At
		}
	}
	return out
}

// TestFleetKafka: three real PostgreSQL sources publish through relays to
// a three-broker kfake cluster (db2's topic partitioned, the others
// strict): db1's and db2's relays each a separate `trellara-full run
// --role relay` process, db3's inside the `fleet run` process (relay:
// fleet; run.relays: external for the others). fleet run is the lake
// committer, reading the three topics through kafkaconsumer. Under a
// write workload:
//   - the fleet process and the external relays are SIGKILLed at random points (seeded,
//     the seed printed), and the committer once exactly between a table's
//     Iceberg commit and its consumer-group commit (after-table-commit:kill):
//     the restart re-reads from the group offset, which is behind;
//   - db1's topic unreadable by the committer (ListOffsets and Fetch
//     faulted, its relay up) makes an epoch complete_with_gaps naming db1,
//     and complete once the fault is removed;
//   - db2's relay stopped for longer than max_lag makes an epoch
//     complete_with_gaps naming db2 (lagging, not offline: the source is
//     up); restarted, it catches up and a later epoch is complete;
//   - at the end: every (source, commit LSN, position) is in the changelog
//     once; for every source and counter, its snapshot value plus its
//     update rows in the changelog equal the source's value (each
//     committed transaction counted exactly once); no epoch claims rows
//     not committed when it closed; the counters' net state equals each
//     source's; fanin verify is CONVERGED; and the group offsets (the
//     hint) are committed.
//
// commit_every (2s) is longer than close_interval (1s), so most rows reach
// the lake through the epoch's own drain: the path whose order matters.
//
// Mutations tried once each (2026-12-03), both red:
//   - no dedup on the Kafka path (takeGroup writes a group whatever
//     c.dedup.Accept says for a Kafka source): checkNoDuplicates,
//     "public__counters: duplicate row db1/22298592/2", after the
//     after-table-commit kill re-read from the group offset;
//   - the epoch written before the drain (FinishEpoch's Step moved after
//     WriteEpoch): checkNoOverclaim, "epoch 2 claims db1 through 1536F90
//     but public__items's row at commit 1536DE8 seq 0 was not committed
//     when it closed". With commit_every 300ms this mutation stayed green
//     (the loop's own Steps had committed the rows before each epoch).
func TestFleetKafka(t *testing.T) {
	pgtest.Require(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 34))
	catalog := pgtest.Start(t, pgtest.Options{})
	e := newKafkaFleet(t, 3, catalog, 2)
	l := e.openLake()
	for i := range 2 {
		e.startRelay(i)
	}
	fleet := e.start()
	w := startWorkload(t, e.sources)
	first := e.waitEpoch(l, 0, "complete", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	t.Logf("epoch %d complete", first.ID)

	// SIGKILLs at random points: the committer, then a relay, twice.
	for round := range 2 {
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
		_ = fleet.Process.Signal(syscall.SIGKILL)
		_ = fleet.Wait()
		fleet = e.start()
		i := rng.IntN(2)
		time.Sleep(time.Duration(200+rng.IntN(1000)) * time.Millisecond)
		e.killRelay(i)
		e.startRelay(i)
		t.Logf("round %d: committer and %s's relay SIGKILLed and restarted", round, e.ids[i])
	}
	// Between the Iceberg commit and the group offset.
	_ = fleet.Process.Signal(syscall.SIGKILL)
	_ = fleet.Wait()
	cmd := e.start("TRELLARA_LAKE_FAILPOINT=after-table-commit:kill")
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("fleet run with failpoint after-table-commit:kill ended with %v, want SIGKILL at the failpoint", err)
	}
	fleet = e.start()
	after := e.waitEpoch(l, lastID(t, l), "complete after the kills", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	t.Logf("epoch %d complete after the kills", after.ID)

	// db2's relay down for longer than max_lag, its source still writing.
	e.killRelay(1)
	gapped := e.waitEpoch(l, lastID(t, l), "complete_with_gaps naming db2", func(ep lake.Epoch) bool {
		return ep.Status == lake.StatusGaps && strings.Join(ep.Missing(), ",") == "db2"
	})
	if se, _ := gapped.Source("db2"); se.Included || se.Offline || !se.Lagging {
		t.Fatalf("epoch %d line of db2 = %+v, want lagging, not offline, not included", gapped.ID, se)
	}
	t.Logf("epoch %d: %s", gapped.ID, gapped.Sources[1].Reason)
	e.startRelay(1)
	back := e.waitEpoch(l, gapped.ID, "complete again", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	t.Logf("epoch %d complete after db2's relay caught up", back.ID)

	// db1's topic unreadable by the committer (a lost partition: every
	// ListOffsets and Fetch of it fails) while its relay is up and its
	// slot confirmed: the committer cannot read to the end, so db1 lags,
	// then is a gap past max_lag; the fault removed, it catches up.
	lost := e.kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets, kmsg.Fetch}, Topic: "trellara.db1", Err: kerr.UnknownServerError, Count: -1})
	dark := e.waitEpoch(l, lastID(t, l), "complete_with_gaps naming db1", func(ep lake.Epoch) bool {
		return ep.Status == lake.StatusGaps && strings.Join(ep.Missing(), ",") == "db1"
	})
	if se, _ := dark.Source("db1"); se.Included || !se.Lagging || !strings.Contains(se.Reason, "trellara.db1") {
		t.Fatalf("epoch %d line of db1 with its topic unreadable = %+v, want lagging, not included, the topic named", dark.ID, se)
	}
	t.Logf("epoch %d: db1 %s", dark.ID, dark.Sources[0].Reason)
	lost.Remove()
	back = e.waitEpoch(l, dark.ID, "complete again", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	t.Logf("epoch %d complete after db1's topic is readable again", back.ID)

	w.end()
	e.waitEpoch(l, lastID(t, l), "complete after the workload", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	out, errOut, code := e.cli("fanin", "verify", "--wait", "60s")
	if code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("fanin verify: exit %d\n%s\n%s", code, out, errOut)
	}
	for i, n := range w.n {
		if n == 0 {
			t.Fatalf("source %d committed no workload transaction", i+1)
		}
	}
	t.Logf("workload transactions per source: %v\n%s", w.n, out)
	_ = fleet
	checkNoDuplicates(t, l)
	checkNoOverclaim(t, l)
	checkAgainstSource(t, l, e.fleetEnv)
	checkCounterUpdates(t, l, e.fleetEnv)
	hint := e.groupCommitted()
	for id, at := range hint {
		if at <= 0 {
			t.Fatalf("the committer's group %s has no offset on %s's topic: the hint is not committed", e.f.KafkaGroup(), id)
		}
	}
	// fleet report's positions come from the topics' metadata and the
	// group (no local log): each equal to what kadm reads on its own.
	var pos []lake.StreamPosition
	for _, s := range e.f.Sources {
		pos = append(pos, lake.ReadPosition(context.Background(), e.f, s))
	}
	later := e.groupCommitted()
	for i, p := range pos {
		id := e.ids[i]
		if p.Err != "" || !p.Registered || p.Where != "topic trellara."+id || p.NewestCommitLSN == 0 ||
			int64(p.Cursor) < hint[id] || int64(p.Cursor) > later[id] || p.DurableEnd < p.Cursor || p.UnitsBehind != p.DurableEnd-p.Cursor {
			t.Fatalf("%s: position %+v, want the group's offset (%d..%d) on topic trellara.%s, below the end", id, p, hint[id], later[id], id)
		}
	}
	out, errOut, code = e.cli("fleet", "report")
	if code != 0 || strings.Contains(out, "unreadable") || !strings.Contains(out, "topic trellara.db2") {
		t.Fatalf("fleet report: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("fleet report:\n%s", out)

	// lake plan reads what the committer has not committed from the topics
	// themselves, and moves nothing: the committer stopped, five more
	// transactions on db1 (strict) and db2 (partitioned), published by
	// their relays, are in the plan; the group offsets are unchanged.
	//
	// Mutation: planKafka not reading (the old "reads local logs only"
	// note) turns this red.
	_ = fleet.Process.Signal(syscall.SIGKILL)
	_ = fleet.Wait()
	for i := range 2 {
		conn := e.sources[i].Connect(context.Background())
		rng := rand.New(rand.NewPCG(uint64(i), 99))
		for k := range 5 {
			if err := txn(context.Background(), conn, 900000+k, rng); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close(context.Background())
	}
	stopped := e.groupCommitted()
	var plan struct{ Sources []lake.PlanSource }
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out, errOut, code := e.cli("lake", "plan", "--format", "json")
		if code != 0 || json.Unmarshal([]byte(out), &plan) != nil {
			t.Fatalf("lake plan: exit %d\n%s\n%s", code, out, errOut)
		}
		ok := len(plan.Sources) == 3
		for _, p := range plan.Sources[:min(2, len(plan.Sources))] {
			rows := 0
			for _, tb := range p.Tables {
				if tb.Table == "public.items" {
					rows = tb.Rows
				}
			}
			ok = ok && p.Note == "" && p.Transactions >= 5 && rows >= 5 && p.ToOffset > p.FromOffset
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lake plan does not show db1's and db2's five new transactions: %+v", plan.Sources)
		}
	}
	if got := e.groupCommitted(); fmt.Sprint(got) != fmt.Sprint(stopped) {
		t.Fatalf("lake plan moved the committer's group offsets: %v, then %v", stopped, got)
	}
	t.Logf("lake plan with the committer stopped: %+v", plan.Sources)
}

// TestFleetKafkaStreamErrors: the Kafka consumer's typed errors reach the
// epoch with the source's name. After a first complete epoch the
// committer is SIGKILLed and stays down while db1's topic (strict) loses
// its records below the end (DeleteRecords, as retention would): on
// restart its group offset is older than the topic holds,
// consumer.ErrPastRetention, so db1 is past_retention. db2's topic
// (partitioned) gets a record on its manifest partition that is no
// manifest (a foreign writer): consumer.ErrCorrupt, so db2 is
// quarantined, its reason naming the topic and offset. Neither is
// skipped: the epoch is complete_with_gaps naming both.
func TestFleetKafkaStreamErrors(t *testing.T) {
	pgtest.Require(t)
	catalog := pgtest.Start(t, pgtest.Options{})
	e := newKafkaFleet(t, 2, catalog)
	l := e.openLake()
	for i := range e.ids {
		e.startRelay(i)
	}
	w := startWorkload(t, e.sources)
	fleet := e.start()
	first := e.waitEpoch(l, 0, "complete", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	_ = fleet.Process.Signal(syscall.SIGKILL)
	_ = fleet.Wait()
	time.Sleep(time.Second) // more units the committer has not read
	w.end()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	group := e.groupCommitted()
	ends, err := adm.ListEndOffsets(ctx, "trellara.db1")
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	e1, _ := ends.Lookup("trellara.db1", 0)
	if e1.Offset <= group["db1"] {
		t.Fatalf("db1's topic ends at %d, the committer's group is at %d: no unread units to lose", e1.Offset, group["db1"])
	}
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "trellara.db1", Partition: 0, At: e1.Offset})
	if resp, err := adm.DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records of trellara.db1 below %d: %v %v", e1.Offset, err, resp.Error())
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trellara.db2", Partition: 0, Value: []byte("not a manifest")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.start()
	ep := e.waitEpoch(l, first.ID, "past_retention db1 and quarantined db2", func(ep lake.Epoch) bool {
		s1, _ := ep.Source("db1")
		s2, _ := ep.Source("db2")
		return s1.PastRetention && s2.Quarantined
	})
	s1, _ := ep.Source("db1")
	s2, _ := ep.Source("db2")
	t.Logf("epoch %d %s (group offsets before: %v, db1 records deleted below %d)\n  db1: %s\n  db2: %s", ep.ID, ep.Status, group, e1.Offset, s1.Reason, s2.Reason)
	if ep.Status != lake.StatusGaps || strings.Join(ep.Missing(), ",") != "db1,db2" {
		t.Fatalf("epoch %d: status %s, missing %v; want complete_with_gaps naming db1 and db2", ep.ID, ep.Status, ep.Missing())
	}
	if !strings.Contains(s1.Reason, "topic trellara.db1") || !strings.Contains(s2.Reason, `topic "trellara.db2" partition 0 offset`) {
		t.Fatalf("the reasons do not name the topics:\n  db1: %s\n  db2: %s", s1.Reason, s2.Reason)
	}
	checkNoDuplicates(t, l)
	checkNoOverclaim(t, l)
}

// checkCounterUpdates: every workload transaction bumps one counter by
// 1, so for every source and counter the snapshot's value plus the
// changelog's update rows of that counter equal the source's value,
// exactly: a lost transaction makes it smaller, one written twice larger
// (the net state alone would hide a lost or replayed update in the
// middle of the stream).
func checkCounterUpdates(t *testing.T, l *lake.Lake, e *fleetEnv) {
	t.Helper()
	changes, _, err := l.ReadChanges(context.Background(), "public__counters")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{} // source/id → snapshot n + updates
	updates := map[string]int{}
	for _, c := range changes {
		k := c.SourceID + "/" + *c.Cols["id"]
		switch c.Op {
		case "snapshot":
			var n int64
			if _, err := fmt.Sscan(*c.Cols["n"], &n); err != nil {
				t.Fatal(err)
			}
			got[k] += n
		case "update":
			got[k]++
			updates[c.SourceID]++
		default:
			t.Fatalf("counters: unexpected %s row %s", c.Op, k)
		}
	}
	for i, c := range e.sources {
		conn := c.Connect(context.Background())
		rows, err := conn.Query(context.Background(), "SELECT id::text, n FROM counters")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			var n int64
			if err := rows.Scan(&id, &n); err != nil {
				t.Fatal(err)
			}
			if k := e.ids[i] + "/" + id; got[k] != n {
				t.Fatalf("counter %s: snapshot plus %s's update rows in the changelog = %d, the source holds %d", k, e.ids[i], got[k], n)
			}
		}
		rows.Close()
		conn.Close(context.Background())
	}
	t.Logf("counter update rows per source, each counted once: %v", updates)
}
