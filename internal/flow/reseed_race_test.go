package flow_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgtest"
)

// The reseed tests below copy public.items, whose rows carry an 8 kB body
// stored out of line (STORAGE EXTERNAL), so an UPDATE of another column
// reaches the stream with body as unchanged TOAST. public.marks is the
// catch-up marker: once a mark written at the source is on the target,
// the target has applied everything committed before it.
const reseedRaceRows = 300

func newReseedRace(t *testing.T, settings map[string]string) (src, dst *pgtest.Cluster, f *schemaFlow) {
	t.Helper()
	pgtest.Require(t)
	src = pgtest.Start(t, pgtest.Options{NoFsync: true, Settings: settings})
	dst = pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, title text, body text)`,
		`ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL`,
		`CREATE TABLE marks (id int PRIMARY KEY)`,
		fmt.Sprintf(`INSERT INTO items SELECT g, g, 't' || g, repeat(md5(g::text), 300) FROM generate_series(1, %d) g`, reseedRaceRows))
	f = newSchemaFlow(t, src, dst, "public.items", "public.marks")
	f.mustConverge("first run")
	return src, dst, f
}

// copyWriter writes to items while a reseed copies it, from a chunk's
// BeforeStage (between its snapshot and its staging, the widest window):
// updates of a non-TOAST column of rows with TOAST values (body then goes
// as unchanged TOAST), deletes, DELETE and INSERT of the same key in one
// transaction, and primary-key changes, on keys spread over the chunks
// still to come. Keys in spare are left alone.
type copyWriter struct {
	t     *testing.T
	conn  *pgx.Conn
	rng   *rand.Rand
	spare map[int]bool
	next  int
	ops   int
}

func newCopyWriter(t *testing.T, src *pgtest.Cluster, spare ...int) *copyWriter {
	seed := time.Now().UnixNano()
	t.Logf("copy writer seed %d", seed)
	w := &copyWriter{t: t, conn: src.Connect(context.Background()), rng: rand.New(rand.NewSource(seed)), spare: map[int]bool{}, next: 100000}
	for _, k := range spare {
		w.spare[k] = true
	}
	t.Cleanup(func() { w.conn.Close(context.Background()) })
	return w
}

func (w *copyWriter) write(n int) error {
	ctx := context.Background()
	for i := 0; i < n; i++ {
		id := 1 + w.rng.Intn(reseedRaceRows)
		if w.spare[id] {
			continue
		}
		var err error
		switch i % 5 {
		case 0, 1: // body unchanged: unchanged TOAST in the stream
			_, err = w.conn.Exec(ctx, `UPDATE items SET title = 'u' || v, v = v + 1 WHERE id = $1`, id)
		case 2:
			_, err = w.conn.Exec(ctx, `DELETE FROM items WHERE id = $1`, id)
		case 3:
			var tx pgx.Tx
			if tx, err = w.conn.Begin(ctx); err == nil {
				_, err = tx.Exec(ctx, `DELETE FROM items WHERE id = $1`, id)
				if err == nil {
					_, err = tx.Exec(ctx, `INSERT INTO items VALUES ($1, -1, 'again', repeat(md5(random()::text), 300))`, id)
				}
				if err == nil {
					err = tx.Commit(ctx)
				}
				_ = tx.Rollback(ctx)
			}
		case 4: // a primary-key change, above every chunk or below them all
			w.next++
			to := w.next
			if w.next%2 == 0 {
				to = -w.next
			}
			_, err = w.conn.Exec(ctx, `UPDATE items SET id = $2, title = 'moved' WHERE id = $1`, id, to)
		}
		if err != nil {
			return fmt.Errorf("copy writer: %w", err)
		}
		w.ops++
	}
	return nil
}

// reseedItems reseeds items in this process (apply.Reseed) beside the
// running service, so a test can hook into a chunk.
func reseedItems(ctx context.Context, src, dst *pgtest.Cluster, o apply.ReseedOptions) (*apply.ReseedResult, error) {
	s, d := src.Connect(ctx), dst.Connect(ctx)
	defer s.Close(context.Background())
	defer d.Close(context.Background())
	items := config.TableName{Schema: "public", Name: "items"}
	o.Flow, o.SourceID, o.Table, o.Target, o.Wait = "ddl", "src1", items, items, 2*time.Minute
	if o.ChunkRows == 0 {
		o.ChunkRows = 20
	}
	return apply.Reseed(ctx, s, d, o)
}

// ghost is a session whose commit waits for a synchronous standby that
// does not exist (synchronous_standby_names = 'ghost'): its commit record
// is in the WAL, so the stream carries it, but it stays invisible to other
// snapshots until cancel ends the wait.
type ghost struct {
	conn *pgx.Conn
	pid  uint32
	done chan error
}

func startGhost(t *testing.T, src *pgtest.Cluster, sql string) *ghost {
	t.Helper()
	ctx := context.Background()
	g := &ghost{conn: src.Connect(ctx), done: make(chan error, 1)}
	g.pid = g.conn.PgConn().PID()
	if _, err := g.conn.Exec(ctx, `SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	go func() { _, err := g.conn.Exec(ctx, sql); g.done <- err }()
	c := src.Connect(ctx)
	defer c.Close(ctx)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var ev string
		_ = c.QueryRow(ctx, `SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $1`, g.pid).Scan(&ev)
		if ev == "SyncRep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ghost commit never waited for the standby (wait event %q)", ev)
		}
	}
	t.Cleanup(func() { g.conn.Close(context.Background()) })
	return g
}

// cancel ends the wait: the commit becomes visible.
func (g *ghost) cancel(src *pgtest.Cluster) error {
	c := src.Connect(context.Background())
	defer c.Close(context.Background())
	if _, err := c.Exec(context.Background(), `SELECT pg_cancel_backend($1)`, int(g.pid)); err != nil {
		return err
	}
	if err := <-g.done; err != nil {
		return fmt.Errorf("ghost commit: %w", err)
	}
	return nil
}

// waitTarget waits until query returns true on the target.
func waitTarget(t *testing.T, dst *pgtest.Cluster, query string) {
	t.Helper()
	c := dst.Connect(context.Background())
	defer c.Close(context.Background())
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var ok bool
		_ = c.QueryRow(context.Background(), query).Scan(&ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target never answered true to %s", query)
		}
	}
}

var ghostSettings = map[string]string{"synchronous_standby_names": "ghost", "synchronous_commit": "local"}

// A change whose commit is in the WAL before the reseed's begin watermark
// but not yet visible (its commit waits for a synchronous standby) is
// applied to T by the stream before the reseed starts; the first chunk's
// snapshot must see it, or its old value is merged and handed off. The
// reseed waits for it (waitVisible, at the first chunk's low watermark,
// which follows begin), and the target ends equal to the source row by
// row. Mutation: no wait before a chunk's snapshot: the target keeps
// v = 5 for key 5 (red).
func TestReseedWaitsForCommitsInvisibleAtBegin(t *testing.T) {
	src, dst, f := newReseedRace(t, ghostSettings)
	f.startService()
	g := startGhost(t, src, `UPDATE items SET v = -999 WHERE id = 5`)
	waitTarget(t, dst, `SELECT v = -999 FROM items WHERE id = 5`)
	w := newCopyWriter(t, src, 5)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := reseedItems(ctx, src, dst, apply.ReseedOptions{BeforeStage: func(int64, []byte) {
			if err := w.write(6); err != nil {
				t.Error(err)
			}
		}})
		done <- err
	}()
	// Long enough for a reseed that does not wait to copy key 5's chunk.
	select {
	case err := <-done:
		done <- err
	case <-time.After(3 * time.Second):
	}
	if err := g.cancel(src); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("reseed: %v\nservice:\n%s", err, f.serviceLog())
	}
	rowsEqual(t, src, dst, "items", "after the reseed")
	t.Logf("%d writes during the copy", w.ops)
}

// The same at a later low watermark: a commit made after chunk 1 merged,
// in the WAL before chunk 2's low watermark and invisible until the test
// ends its wait, must be in chunk 2's rows (DBLog's rule: a chunk's
// snapshot sees every transaction committed before its low watermark).
// Mutation: no wait at the low watermark: chunk 2 carries key 30 with
// v = 30 (red).
func TestReseedWaitsForCommitsInvisibleAtLow(t *testing.T) {
	src, dst, f := newReseedRace(t, ghostSettings)
	f.startService()
	w := newCopyWriter(t, src, 30)
	var (
		mu    sync.Mutex
		g     *ghost
		seen  string
		ready = make(chan struct{})
	)
	_, err := reseedItems(context.Background(), src, dst, apply.ReseedOptions{
		Progress: func(p apply.ReseedProgress) {
			if p.Phase != "chunk" || p.Chunks != 1 {
				return
			}
			mu.Lock()
			g = startGhost(t, src, `UPDATE items SET v = -999 WHERE id = 30`)
			mu.Unlock()
			waitTarget(t, dst, `SELECT v = -999 FROM items WHERE id = 30`)
			go func() {
				time.Sleep(3 * time.Second) // for a reseed that does not wait to read chunk 2
				mu.Lock()
				if err := g.cancel(src); err != nil {
					t.Error(err)
				}
				mu.Unlock()
				close(ready)
			}()
		},
		BeforeStage: func(window int64, rows []byte) {
			if window == 2 {
				for _, l := range strings.Split(string(rows), "\n") {
					if strings.HasPrefix(l, "30\t") {
						seen = l[:min(len(l), 20)]
					}
				}
			}
			if err := w.write(6); err != nil {
				t.Error(err)
			}
		},
	})
	mu.Lock()
	started := g != nil
	mu.Unlock()
	if started {
		<-ready
	}
	if err != nil {
		t.Fatalf("reseed: %v\nservice:\n%s", err, f.serviceLog())
	}
	if !strings.HasPrefix(seen, "30\t-999\t") {
		t.Errorf("chunk 2 read key 30 as %q: its snapshot missed a commit that precedes its low watermark", seen)
	}
	rowsEqual(t, src, dst, "items", "after the reseed")
}

// In replace mode (a reseed taking over a blocked schema change, or
// --all-tables) the applier writes the table's stream rows only to the
// shadow. An UPDATE of title sends body as unchanged TOAST; for a row
// whose chunk is not merged yet the shadow must not invent body (NULL
// before the fix): the row waits for its chunk's body. Mutation: write
// such a row into the shadow without body (upsertValues leaving the column
// out, as before): bodies are NULL after the handoff (red).
func TestReseedReplaceKeepsUnchangedToast(t *testing.T) {
	src, dst, f := newReseedRace(t, nil)
	f.startService()
	w := newCopyWriter(t, src)
	c := src.Connect(context.Background())
	defer c.Close(context.Background())
	_, err := reseedItems(context.Background(), src, dst, apply.ReseedOptions{Replace: true,
		BeforeStage: func(window int64, _ []byte) {
			if window == 1 {
				// Every later chunk's rows get a stream change with body
				// unchanged before their chunk merges.
				if _, err := c.Exec(context.Background(), `UPDATE items SET title = 'v2' WHERE id % 7 = 0`); err != nil {
					t.Error(err)
				}
			}
			if err := w.write(8); err != nil {
				t.Error(err)
			}
		}})
	if err != nil {
		t.Fatalf("reseed: %v\nservice:\n%s", err, f.serviceLog())
	}
	rowsEqual(t, src, dst, "items", "after the replace reseed")
	d := dst.Connect(context.Background())
	defer d.Close(context.Background())
	var nulls int
	if err := d.QueryRow(context.Background(), `SELECT count(*) FROM items WHERE body IS NULL`).Scan(&nulls); err != nil || nulls != 0 {
		t.Fatalf("%d rows with a NULL body (%v)", nulls, err)
	}
	t.Logf("%d writes during the copy; handoffs deferred for rows waiting for a TOAST value: %d", w.ops, strings.Count(f.serviceLog(), "handoff deferred"))
}

// A TRUNCATE of the table while a chunk is between its snapshot and its
// staging (forced: the TRUNCATE is committed and applied from the chunk's
// BeforeStage): the chunk, read before the TRUNCATE and staged after the
// applier applied it, must not bring its rows back. The applier voids the
// window open at the TRUNCATE; the rows written after it reach the shadow
// through the stream. Mutation: no void (the high watermark merges the
// chunk): the target keeps chunk 3's old rows (red).
func TestReseedTruncateVoidsTheOpenChunk(t *testing.T) {
	src, dst, f := newReseedRace(t, nil)
	f.startService()
	w := newCopyWriter(t, src)
	c := src.Connect(context.Background())
	defer c.Close(context.Background())
	_, err := reseedItems(context.Background(), src, dst, apply.ReseedOptions{
		BeforeStage: func(window int64, _ []byte) {
			if window == 3 {
				for _, q := range []string{`TRUNCATE items`,
					`INSERT INTO items SELECT g, g, 'after', repeat(md5(g::text), 300) FROM generate_series(1, 300, 3) g`} {
					if _, err := c.Exec(context.Background(), q); err != nil {
						t.Error(err)
					}
				}
				caughtUp(t, src, dst)
			}
			if err := w.write(6); err != nil {
				t.Error(err)
			}
		}})
	if err != nil {
		t.Fatalf("reseed: %v\nservice:\n%s", err, f.serviceLog())
	}
	rowsEqual(t, src, dst, "items", "after a TRUNCATE during the reseed")
}
