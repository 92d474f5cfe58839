//go:build full

package lake_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/lake"
	"github.com/trellara/trellara/internal/pgtest"
)

// The lease tests run committers in the test process (lake.NewCommitter,
// Step), over one source whose relay is its own `trellara-full run
// --role relay` process: a committer that "pauses" is one the test stops
// calling.

// leaseEnv is one source with its relay running and a catalog.
type leaseEnv struct {
	*fleetEnv
	catalogYAML string
	rng         *rand.Rand
	n           int
}

func newLeaseEnv(t *testing.T, sqlite bool) *leaseEnv {
	pgtest.Require(t)
	catalog := pgtest.Start(t, pgtest.Options{})
	e := &leaseEnv{fleetEnv: newFleet(t, 1, catalog), rng: rand.New(rand.NewPCG(3, 4)),
		catalogYAML: "{kind: sql-postgres, uri: {env: LAKE_CATALOG_URL}}"}
	if sqlite {
		e.catalogYAML = fmt.Sprintf("{kind: sql-sqlite, uri: %s}", filepath.Join(e.dir, "catalog", "catalog.db"))
		if err := os.MkdirAll(filepath.Join(e.dir, "catalog"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	startLogged(t, filepath.Join(e.dir, "relay.log"), nil, e.bin, "run", "--config", filepath.Join(e.dir, e.ids[0]+".yml"), "--role", "relay")
	return e
}

// fleet writes and loads a fleet.yml for committer name owning tables
// (nil: every table), over the environment's source and catalog; the
// relay runs outside (relays: external).
func (e *leaseEnv) fleet(name string, tables ...string) *lake.Fleet {
	e.t.Helper()
	tl := ""
	if len(tables) > 0 {
		tl = "\n  tables: [" + strings.Join(tables, ", ") + "]"
	}
	p := filepath.Join(e.dir, "fleet-"+name+".yml")
	body := fmt.Sprintf(`version: 1
fleet: test
sources:
  - config: %s.yml
lake:
  catalog: %s
  warehouse: file://%s
  namespace: fanin
  committer: %s%s
epochs: {close_interval: 1s, max_lag: 3s}
run: {listen: "127.0.0.1:%d", commit_every: 300ms, relays: external}
`, e.ids[0], e.catalogYAML, filepath.Join(e.dir, "warehouse"), name, tl, freePort(e.t))
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		e.t.Fatal(err)
	}
	f, err := lake.LoadFleet(p)
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

// committer opens a lake and a committer for f; the error is
// NewCommitter's.
func (e *leaseEnv) committer(f *lake.Fleet) (*lake.Committer, *lake.Lake, error) {
	e.t.Helper()
	l, err := lake.Open(context.Background(), f.Lake)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(l.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("committer", f.Lake.Committer)
	}
	c, err := lake.NewCommitter(context.Background(), l, f, log)
	if err == nil {
		e.t.Cleanup(c.Close)
	}
	return c, l, err
}

// write commits n workload transactions on the source.
func (e *leaseEnv) write(n int) {
	e.t.Helper()
	conn := e.sources[0].Connect(context.Background())
	defer conn.Close(context.Background())
	for range n {
		if err := txn(context.Background(), conn, e.n, e.rng); err != nil {
			e.t.Fatal(err)
		}
		e.n++
	}
}

// rows is the number of rows of changelog table name.
func rows(t *testing.T, l *lake.Lake, name string) int {
	t.Helper()
	chs, _, err := l.ReadChanges(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return len(chs)
}

// stepUntil steps c until changelog table name has more than above rows.
func stepUntil(t *testing.T, c *lake.Committer, l *lake.Lake, name string, above int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if err := c.Step(context.Background()); err != nil {
			t.Fatalf("step: %v", err)
		}
		if rows(t, l, name) > above {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s has no more than %d rows after 60s", name, above)
}

func owners(t *testing.T, l *lake.Lake) string {
	t.Helper()
	m, err := l.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(m)
}

// TestLeaseOneOwnerPerTable: two committers of every table over one
// catalog: the first leases the tables and commits; the second is
// refused at its start, by the first's name, the table and the fix, and
// the first goes on committing without a conflict. After the first stops
// cleanly (its leases released) the second starts at once and commits,
// and no row is in the changelog twice.
//
// Red when: Acquire takes a table whatever its lease says (the ON
// CONFLICT ... WHERE dropped): the second committer starts and both own
// the tables.
func TestLeaseOneOwnerPerTable(t *testing.T) { leaseOneOwner(t, false) }

// TestLeaseOneOwnerPerTableSQLite is TestLeaseOneOwnerPerTable on a
// sql-sqlite catalog (the lease SQL's other dialect).
func TestLeaseOneOwnerPerTableSQLite(t *testing.T) { leaseOneOwner(t, true) }

func leaseOneOwner(t *testing.T, sqlite bool) {
	e := newLeaseEnv(t, sqlite)
	e.write(5)
	eu, lEU, err := e.committer(e.fleet("eu"))
	if err != nil {
		t.Fatal(err)
	}
	stepUntil(t, eu, lEU, "public__counters", 0)
	_, _, err = e.committer(e.fleet("us"))
	for _, want := range []string{`table fanin.public__`, `leased to committer "eu"`, "lake.tables", `stop "eu"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("second committer of the same tables: error %v, want one containing %q", err, want)
		}
	}
	if !errors.Is(err, lake.ErrLeaseHeld) {
		t.Fatalf("refusal is not ErrLeaseHeld: %v", err)
	}
	t.Logf("refused: %v", err)
	// The owner is undisturbed: no conflict, every step commits.
	before := rows(t, lEU, "public__counters")
	e.write(5)
	stepUntil(t, eu, lEU, "public__counters", before)
	if o := owners(t, lEU); o != "map[_trellara_epochs:eu public__counters:eu public__items:eu]" {
		t.Fatalf("leases = %s, want every table eu's", o)
	}

	// A clean stop releases the leases: the second takes them at once.
	eu.Close()
	us, lUS, err := e.committer(e.fleet("us"))
	if err != nil {
		t.Fatalf("after eu stopped cleanly: %v", err)
	}
	before = rows(t, lUS, "public__counters")
	e.write(5)
	stepUntil(t, us, lUS, "public__counters", before)
	if o := owners(t, lUS); o != "map[_trellara_epochs:us public__counters:us public__items:us]" {
		t.Fatalf("leases = %s, want every table us's", o)
	}
	checkNoDuplicates(t, lUS)
}

// TestLeaseExpiryTakeoverFencesThePausedCommitter: with a 1.5 s TTL, a
// committer that stops renewing (paused) loses its tables to a second
// one, which commits; when the first resumes, its next commit is refused
// by the fence (ErrLeaseLost, naming the new owner) and it commits
// nothing: no row is in the changelog twice.
//
// Red when: the fence is removed (leases.confirm, behind both the renewal
// at each step's start and the check before each commit, returns nil):
// the resumed committer commits the rows the second one already
// committed (duplicates); or the takeover is not allowed (expired leases
// kept): the second committer is refused.
func TestLeaseExpiryTakeoverFencesThePausedCommitter(t *testing.T) {
	defer lake.SetLeaseTTL(1500 * time.Millisecond)()
	e := newLeaseEnv(t, false)
	e.write(5)
	eu, lEU, err := e.committer(e.fleet("eu"))
	if err != nil {
		t.Fatal(err)
	}
	stepUntil(t, eu, lEU, "public__counters", 0)

	// eu pauses past its TTL; us takes the tables over.
	time.Sleep(2 * time.Second)
	us, lUS, err := e.committer(e.fleet("us"))
	if err != nil {
		t.Fatalf("taking over expired leases: %v", err)
	}
	e.write(5)
	before := rows(t, lUS, "public__counters")
	stepUntil(t, us, lUS, "public__counters", before)

	// eu resumes: it read the same changes and would commit them again.
	before = rows(t, lUS, "public__counters")
	err = eu.Step(context.Background())
	if n := rows(t, lUS, "public__counters"); n != before {
		checkNoDuplicates(t, lUS)
		t.Fatalf("the fenced committer committed: %d rows, were %d", n, before)
	}
	if !errors.Is(err, lake.ErrLeaseLost) || !strings.Contains(err.Error(), `committer "us"`) {
		t.Fatalf("the paused committer's step: %v, want ErrLeaseLost naming us", err)
	}
	t.Logf("fenced: %v", err)
	e.write(3)
	stepUntil(t, us, lUS, "public__counters", before)
	checkNoDuplicates(t, lUS)
}

// TestLeaseShardedPair: two committers with disjoint lake.tables both run
// and commit, each its own table (the leases say so); neither writes an
// epoch; a third that claims one of their tables is refused by the
// owner's name. Each shard reads the log with its own cursor, and the
// counters' net state in the lake is the source's.
//
// Red when: Owns ignores lake.tables (every committer commits every
// table): the second shard is refused, or the tables get both shards'
// rows.
func TestLeaseShardedPair(t *testing.T) {
	e := newLeaseEnv(t, false)
	e.write(10)
	a, la, err := e.committer(e.fleet("a", "public.items"))
	if err != nil {
		t.Fatal(err)
	}
	b, lb, err := e.committer(e.fleet("b", "public.counters"))
	if err != nil {
		t.Fatal(err)
	}
	stepUntil(t, a, la, "public__items", 0)
	stepUntil(t, b, lb, "public__counters", 0)
	if _, _, err := e.committer(e.fleet("c", "public.items")); err == nil || !strings.Contains(err.Error(), `leased to committer "a"`) {
		t.Fatalf("a third committer of public.items: %v, want a refusal naming a", err)
	}
	e.write(10)
	ia, cb := rows(t, la, "public__items"), rows(t, lb, "public__counters")
	stepUntil(t, a, la, "public__items", ia)
	stepUntil(t, b, lb, "public__counters", cb)
	if o := owners(t, la); o != "map[public__counters:b public__items:a]" {
		t.Fatalf("leases = %s, want items a's and counters b's", o)
	}
	if eps, err := la.Epochs(context.Background()); err != nil || len(eps) != 0 {
		t.Fatalf("shards wrote epochs: %v %v", eps, err)
	}
	if _, err := a.CloseEpoch(context.Background()); err == nil || !strings.Contains(err.Error(), "writes epoch records") {
		t.Fatalf("a shard closing an epoch: %v, want a refusal", err)
	}
	// Everything written, every shard stepped past it.
	for range 10 {
		if err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := b.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	checkNoDuplicates(t, la)
	checkAgainstSource(t, la, e.fleetEnv)
}

// TestFleetCommitterConfig: lake.committer defaults to the fleet name
// and keeps run.cursor; another name gets its own cursor; lake.tables
// entries that are not table names, repeated, or published by no source
// are refused by key, as are lake.tables on a rest catalog and a bad
// committer name.
func TestFleetCommitterConfig(t *testing.T) {
	dir := t.TempDir()
	flow := filepath.Join(dir, "db1.yml")
	if err := os.WriteFile(flow, []byte(`version: 2
flow: db1
source:
  id: db1
  database_url: postgres://localhost/db1
  tables: [public.items, public.counters]
transport:
  local: {dir: `+filepath.Join(dir, "db1")+`}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(lakeExtra string) (*lake.Fleet, error) {
		p := filepath.Join(dir, "fleet.yml")
		body := "version: 1\nfleet: pay\nsources:\n  - config: db1.yml\nlake:\n  catalog: {kind: sql-sqlite, uri: cat.db}\n  warehouse: file:///tmp/w\n" + lakeExtra
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return lake.LoadFleet(p)
	}
	f, err := load("")
	if err != nil {
		t.Fatal(err)
	}
	if f.Lake.Committer != "pay" || f.CommitterCursor() != "lake" || !f.Lake.EpochWriter() || !f.Lake.Owns(lake.TableRef{Schema: "public", Name: "x"}) {
		t.Fatalf("defaults: committer %q cursor %q epoch writer %v", f.Lake.Committer, f.CommitterCursor(), f.Lake.EpochWriter())
	}
	f, err = load("  committer: eu\n  tables: [public.items]\n")
	if err != nil {
		t.Fatal(err)
	}
	if f.CommitterCursor() != "lake.eu" || f.KafkaGroup() != "trellara.pay.lake.eu" || f.Lake.EpochWriter() ||
		f.Lake.Owns(lake.TableRef{Schema: "public", Name: "counters"}) || !f.Lake.Owns(lake.TableRef{Schema: "public", Name: "items"}) {
		t.Fatalf("shard eu: cursor %q group %q epoch writer %v", f.CommitterCursor(), f.KafkaGroup(), f.Lake.EpochWriter())
	}
	for extra, want := range map[string]string{
		"  tables: []\n": "lake.tables",
		"  tables: [public.items, public.items]\n": "lake.tables[1]",
		"  tables: [public.nope]\n":                "lake.tables[0]",
		"  tables: [\"a.b.c\"]\n":                  "lake.tables[0]",
		"  committer: \"e u\"\n":                   "lake.committer",
		"  committer: .hidden\n":                   "lake.committer",
	} {
		if _, err := load(extra); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", extra, err, want)
		}
	}
}

// TestLeaseFleetRunsHandOver: the same through `fleet run`: of two fleet
// processes over the same tables, the second logs the refusal naming the
// first and commits nothing; SIGTERM to the first releases its leases and
// the second, retrying on its backoff, takes the tables and commits.
//
// Red when: Close does not release the leases (a clean stop leaves them
// to expire): the second takes over only after the 30 s TTL, past this
// test's 20 s wait.
func TestLeaseFleetRunsHandOver(t *testing.T) {
	e := newLeaseEnv(t, false)
	e.write(5)
	run := func(f *lake.Fleet) (*exec.Cmd, string) {
		logPath := filepath.Join(e.dir, "fleet-"+f.Lake.Committer+".log")
		return startLogged(t, logPath, nil, e.bin, "fleet", "run", "--config", f.File(), "--verbose"), logPath
	}
	fEU, fUS := e.fleet("eu"), e.fleet("us")
	l := e.openLake()
	eu, _ := run(fEU)
	waitFor := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("not within %s: %s", d, what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitFor("eu leases every table", 60*time.Second, func() bool {
		m, _ := l.Leases(context.Background())
		return m["public__counters"] == "eu" && m["_trellara_epochs"] == "eu" && rows(t, l, "public__counters") > 0
	})
	_, usLog := run(fUS)
	waitFor("us logs the refusal naming eu", 30*time.Second, func() bool {
		b, _ := os.ReadFile(usLog)
		return strings.Contains(string(b), `leased to committer \"eu\"`)
	})
	if err := eu.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := eu.Wait(); err != nil {
		t.Fatalf("fleet run eu after SIGTERM: %v", err)
	}
	e.write(5)
	before := rows(t, l, "public__counters")
	waitFor("us takes the tables over and commits", 20*time.Second, func() bool {
		m, _ := l.Leases(context.Background())
		return m["public__counters"] == "us" && rows(t, l, "public__counters") > before
	})
	checkNoDuplicates(t, l)
}

// TestLeaseRaceForAFreeTable: eight committers start at once over an
// empty lake; they all want _trellara_epochs, which nobody holds: exactly
// one gets it, the seven others are refused (ErrLeaseHeld), on a
// PostgreSQL catalog and on SQLite.
//
// Red when: Acquire ignores the statement's rows affected (an upsert its
// WHERE refused counts as taken): several committers own the table.
func TestLeaseRaceForAFreeTable(t *testing.T) {
	pgtest.Require(t)
	catalog := pgtest.Start(t, pgtest.Options{})
	for _, kind := range []string{"sql-postgres", "sql-sqlite"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "db1.yml"), []byte("version: 2\nflow: db1\nsource:\n  id: db1\n  database_url: postgres://localhost/db1\n  tables: [public.items]\ntransport:\n  local: {dir: "+filepath.Join(dir, "db1")+"}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cat := fmt.Sprintf("{kind: sql-postgres, uri: %q}", catalog.URL("postgres"))
			if kind == "sql-sqlite" {
				cat = "{kind: sql-sqlite, uri: cat.db}"
			}
			fleets := make([]*lake.Fleet, 8)
			for i := range fleets {
				p := filepath.Join(dir, fmt.Sprintf("fleet%d.yml", i))
				body := fmt.Sprintf("version: 1\nfleet: race\nsources:\n  - config: db1.yml\nlake:\n  catalog: %s\n  warehouse: file://%s\n  namespace: race%d\n  committer: c%d\n",
					cat, filepath.Join(dir, "wh"), len(kind), i)
				if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				f, err := lake.LoadFleet(p)
				if err != nil {
					t.Fatal(err)
				}
				fleets[i] = f
			}
			lakes := make([]*lake.Lake, len(fleets))
			for i, f := range fleets {
				l, err := lake.Open(context.Background(), f.Lake)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(l.Close)
				lakes[i] = l
			}
			errs := make([]error, len(fleets))
			start := make(chan struct{})
			done := make(chan int)
			for i := range fleets {
				go func() {
					<-start
					c, err := lake.NewCommitter(context.Background(), lakes[i], fleets[i], slog.New(slog.NewTextHandler(io.Discard, nil)))
					if err == nil {
						t.Cleanup(c.Close)
					}
					errs[i] = err
					done <- i
				}()
			}
			close(start)
			for range fleets {
				<-done
			}
			won := 0
			for i, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, lake.ErrLeaseHeld):
					t.Errorf("committer c%d: %v, want ErrLeaseHeld or success", i, err)
				}
			}
			if won != 1 {
				t.Fatalf("%d committers took the epochs table's lease, want 1 (errors %v)", won, errs)
			}
		})
	}
}

// TestLeaseLateTakeoverRereadsMarks: committer us starts on an empty
// lake (nothing to lease yet); eu then creates and commits public.items
// and stops cleanly; us's first step leases the table and must skip what
// eu committed, though us read the table's marks before eu wrote them.
//
// Red when: a lease new to the committer does not re-read the table's
// marks: us commits eu's rows again (duplicates).
func TestLeaseLateTakeoverRereadsMarks(t *testing.T) {
	e := newLeaseEnv(t, false)
	us, lUS, err := e.committer(e.fleet("us", "public.items"))
	if err != nil {
		t.Fatal(err)
	}
	e.write(5)
	eu, lEU, err := e.committer(e.fleet("eu", "public.items"))
	if err != nil {
		t.Fatal(err)
	}
	stepUntil(t, eu, lEU, "public__items", 0)
	eu.Close()
	e.write(3)
	before := rows(t, lUS, "public__items")
	stepUntil(t, us, lUS, "public__items", before)
	checkNoDuplicates2(t, lUS, "public__items")
}

// checkNoDuplicates2 is checkNoDuplicates for the named tables only.
func checkNoDuplicates2(t *testing.T, l *lake.Lake, names ...string) {
	t.Helper()
	for _, name := range names {
		changes, _, err := l.ReadChanges(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range changes {
			k := fmt.Sprintf("%s/%d/%d", c.SourceID, c.CommitLSN, c.Seq)
			if seen[k] {
				t.Fatalf("%s: duplicate row %s (op %s)", name, k, c.Op)
			}
			seen[k] = true
		}
	}
}
