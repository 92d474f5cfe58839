package sim

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/mutation"
)

var update = flag.Bool("update", false, "rewrite docs/correctness/report.json and testdata/report.golden.html from this run")

// reportPath is the committed report, relative to this package.
var reportPath = filepath.Join("..", "..", "docs", "correctness", "report.json")

var (
	catalogueOnce    sync.Once
	catalogueResults []*Result
	catalogueTime    time.Duration
)

// runCatalogue runs the whole catalogue once per test binary.
func runCatalogue() ([]*Result, time.Duration) {
	catalogueOnce.Do(func() {
		scs, sims := Catalogue()
		start := time.Now()
		catalogueResults = RunAll(scs, sims, Options{}, nil)
		catalogueTime = time.Since(start)
	})
	return catalogueResults, catalogueTime
}

func TestCatalogueShape(t *testing.T) {
	scs, sims := Catalogue()
	if len(scs) < 63 {
		t.Errorf("%d scenarios, the matrix promises at least 63", len(scs))
	}
	used := map[string]bool{}
	ids := map[string]bool{}
	fams := map[string]int{}
	for _, sc := range scs {
		if ids[sc.ID] {
			t.Errorf("duplicate scenario id %s", sc.ID)
		}
		ids[sc.ID] = true
		fams[sc.Family]++
		used[sc.Simulation] = true
		if sims[sc.Simulation] == nil {
			t.Errorf("%s: unknown simulation %q", sc.ID, sc.Simulation)
		}
		if InvariantText[sc.Invariant] == "" {
			t.Errorf("%s: invariant %q is not one the checker knows", sc.ID, sc.Invariant)
		}
		if !strings.Contains(sc.Reproduce, sc.ID) || sc.Recovery == "" || sc.Title == "" {
			t.Errorf("%s: reproduce %q, recovery %q, title %q", sc.ID, sc.Reproduce, sc.Recovery, sc.Title)
		}
		for _, f := range sc.Faults {
			if f.Nth < 1 || f.Point == "" || f.Action == "" {
				t.Errorf("%s: fault %+v", sc.ID, f)
			}
		}
	}
	if len(used) < 28 {
		t.Errorf("%d simulations in use, the matrix promises at least 28", len(used))
	}
	for _, name := range SimulationNames() {
		if !used[name] {
			t.Errorf("simulation %s has no scenario", name)
		}
	}
	for _, f := range Families {
		if fams[f] == 0 {
			t.Errorf("family %s has no scenario", f)
		}
	}
	if len(fams) != len(Families) {
		t.Errorf("families %v, want exactly %v", fams, Families)
	}
}

// TestCatalogue runs every scenario: each must exercise its fault and keep
// every invariant.
func TestCatalogue(t *testing.T) {
	results, took := runCatalogue()
	t.Logf("%d scenarios in %s", len(results), took.Round(time.Millisecond))
	for _, r := range results {
		if !r.Fired {
			t.Errorf("%s: a fault point was never reached", r.Scenario.ID)
		}
		for _, v := range r.Violations {
			t.Errorf("%s (seed %d): %s: %s", r.Scenario.ID, r.Scenario.Seed, v.Invariant, v.Detail)
		}
		if r.Scenario.Expect.Stop == "" && r.Outcome != "converged" {
			t.Errorf("%s: outcome %s", r.Scenario.ID, r.Outcome)
		}
	}
}

// TestReportUpToDate is the CI gate: the committed report must be what the
// code produces now. Regenerate with `make chaos-check UPDATE=1` (or
// go test ./internal/sim -run TestReportUpToDate -update).
func TestReportUpToDate(t *testing.T) {
	results, _ := runCatalogue()
	_, sims := Catalogue()
	got, err := BuildReport(results, sims, "").JSON()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(reportPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(reportPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatalf("%v: generate it with `make chaos-check UPDATE=1`", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s no longer matches what the simulations produce (first difference at byte %d): "+
			"the report would claim what the code does not do; regenerate with `make chaos-check UPDATE=1` and review the diff",
			reportPath, firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestDeterministicTrace: the same seed gives a byte-identical event trace;
// another seed gives another one.
func TestDeterministicTrace(t *testing.T) {
	for _, id := range []string{"relay.crash.mixed.before-publish", "storage.torn-tail.mid-append",
		"transport.chunk-barrier-incomplete", "schema.incompatible-row.in-chunk", "swarm.relay-mixed.4242"} {
		sc, s, err := Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		a := Run(sc, s, Options{Trace: true})
		b := Run(sc, s, Options{Trace: true})
		if len(a.Trace) < 1000 || !bytes.Equal(a.Trace, b.Trace) {
			t.Errorf("%s: two runs with seed %d differ (%d and %d trace bytes)", id, sc.Seed, len(a.Trace), len(b.Trace))
		}
		other := *sc
		other.Seed++
		c := Run(&other, s, Options{Trace: true})
		if bytes.Equal(a.Trace, c.Trace) {
			t.Errorf("%s: seeds %d and %d give the same trace", id, sc.Seed, other.Seed)
		}
	}
}

// TestMutations: each test flips one protection; the matrix must notice,
// through the invariant that protection exists for.
func TestMutations(t *testing.T) {
	cases := []struct {
		name      string
		m         Mutations
		scenarios []string
		want      []string // any of these invariants must be violated
	}{
		{"relay acknowledges before the publish is durable", Mutations{AckBeforeDurable: true},
			[]string{"relay.crash.after-publish-before-ack", "storage.power-loss.mid-append"}, []string{InvAckDurable}},
		{"applier moves the cursor before the target commit", Mutations{Apply: mutation.CursorBeforeCommit},
			[]string{"applier.crash.before-commit", "applier.crash.mid-transaction"}, []string{InvNoLoss}},
		{"applier skips the redelivery check", Mutations{Apply: mutation.SkipDedupe},
			[]string{"applier.crash.after-commit-before-cursor", "transport.duplicate-replay-storm"}, []string{InvExactlyOnce, InvAtomic, InvQuarantine}},
		{"applier commits a chunk sequence chunk by chunk", Mutations{Apply: mutation.SplitChunks},
			[]string{"applier.crash.mid-chunk-sequence", "transport.chunk-barrier-incomplete"}, []string{InvAtomic}},
		{"relay ignores schema drift", Mutations{IgnoreDrift: true},
			[]string{"schema.pinned-drift"}, []string{InvSchemaPinned}},
		{"relay lets a blocked change's transaction through", Mutations{IgnoreDrift: true},
			[]string{"schema.drop-column.relay-crash-before-barrier", "schema.primary-key-change.reply-lost-after-commit"}, []string{InvSchemaPinned}},
		{"target DDL commits apart from its rows", Mutations{DDLApart: true},
			[]string{"schema.rename-column-mapped.applier-crash-between-ddl-and-data", "schema.widen-type.applier-crash-between-ddl-and-data"}, []string{InvAtomic}},
		{"flow ignores the schema.renames mapping", Mutations{IgnoreRenames: true},
			[]string{"schema.rename-column-mapped.relay-crash-before-barrier"}, []string{InvExpectedError}},
		{"applier passes over refused transactions", Mutations{Apply: mutation.DropRefused},
			[]string{"schema.incompatible-row.quarantine"}, []string{InvAtomic, InvNoLoss, InvQuarantine}},
		{"storage acknowledges fsync without persisting", Mutations{StorageLies: true},
			[]string{"storage.power-loss.mid-append", "storage.torn-tail.mid-append"}, []string{InvAckDurable, InvNoLoss}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, id := range tc.scenarios {
				sc, s, err := Lookup(id)
				if err != nil {
					t.Fatal(err)
				}
				r := Run(sc, s, Options{Mutations: tc.m})
				for _, v := range r.Violations {
					got = append(got, v.Invariant)
				}
				t.Logf("%s: pass=%v, violated %v", id, r.Pass, invariants(r.Violations))
			}
			for _, w := range tc.want {
				for _, g := range got {
					if g == w {
						return
					}
				}
			}
			t.Errorf("the matrix did not catch it: violations %v, want one of %v", got, tc.want)
		})
	}
}

func invariants(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Invariant)
	}
	return out
}

func TestSwarmIDs(t *testing.T) {
	_, sims := Catalogue()
	a := SwarmSeeds(sims, 3, 7)
	b := SwarmSeeds(sims, 3, 7)
	if len(a) != 3*len(sims) {
		t.Fatalf("%d swarm scenarios", len(a))
	}
	for i := range a {
		if a[i].ID != b[i].ID || len(a[i].Faults) == 0 {
			t.Fatalf("swarm scenario %d: %s vs %s, %d faults", i, a[i].ID, b[i].ID, len(a[i].Faults))
		}
		name, seed, ok := ParseSwarmID(a[i].ID)
		if !ok || name != a[i].Simulation || seed != a[i].Seed {
			t.Fatalf("ParseSwarmID(%s) = %s %d %v", a[i].ID, name, seed, ok)
		}
		again, _, err := Lookup(a[i].ID)
		if err != nil || len(again.Faults) != len(a[i].Faults) || again.Faults[0] != a[i].Faults[0] {
			t.Fatalf("Lookup(%s) does not rebuild the same scenario: %v", a[i].ID, err)
		}
	}
	if _, _, err := Lookup("swarm.no-such-simulation.1"); err == nil {
		t.Error("unknown simulation accepted")
	}
	if _, _, err := Lookup("relay.crash.nope"); err == nil {
		t.Error("unknown scenario accepted")
	}
}

// TestSwarmSmoke runs a few random fault mixes per simulation. Failures
// are logged with their reproduce command; only the known finding above
// may appear.
func TestSwarmSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("swarm runs are long")
	}
	_, sims := Catalogue()
	for _, r := range RunAll(SwarmSeeds(sims, 2, 99), sims, Options{}, nil) {
		known := false
		for _, v := range r.Violations {
			known = known || strings.Contains(v.Detail, "GapError")
		}
		if known {
			t.Logf("%s: the known idle-acknowledgement finding", r.Scenario.ID)
			continue
		}
		for _, v := range r.Violations {
			t.Errorf("%s: %s: %s (reproduce: trellara chaos run --scenario %s)", r.Scenario.ID, v.Invariant, v.Detail, r.Scenario.ID)
		}
	}
}

// TestDocListsEveryScenario: docs/CORRECTNESS.md's catalogue table names
// every scenario and nothing else.
func TestDocListsEveryScenario(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "CORRECTNESS.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	scs, _ := Catalogue()
	ids := map[string]bool{}
	for _, sc := range scs {
		ids[sc.ID] = true
		if !strings.Contains(doc, "| `"+sc.ID+"` |") {
			t.Errorf("docs/CORRECTNESS.md does not list %s", sc.ID)
		}
	}
	for _, line := range strings.Split(doc, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			if id, _, ok := strings.Cut(rest, "`"); ok && strings.Count(id, ".") >= 2 && !strings.Contains(id, " ") && !ids[id] &&
				(strings.HasPrefix(id, "relay.") || strings.HasPrefix(id, "applier.") || strings.HasPrefix(id, "storage.") ||
					strings.HasPrefix(id, "transport.") || strings.HasPrefix(id, "kafka.") || strings.HasPrefix(id, "schema.")) {
				t.Errorf("docs/CORRECTNESS.md lists %s, which is not in the catalogue", id)
			}
		}
	}
}
