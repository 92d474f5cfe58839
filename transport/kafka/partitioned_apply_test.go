package kafka

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/pgtest"
)

const unitRows = 8

// applyUntil applies through a new reader until the target's checkpoint
// reaches commit LSN upTo, and returns the reader (closed) for Held.
func applyUntil(ctx context.Context, conn *pgx.Conn, cfg Config, upTo uint64) (apply.Stats, *Reader, error) {
	a, err := apply.New(conn, apply.Config{Flow: cfg.Flow, SourceID: cfg.SourceID, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return apply.Stats{}, nil, err
	}
	r, err := NewReader(ctx, cfg)
	if err != nil {
		return apply.Stats{}, nil, err
	}
	defer r.Close()
	err = a.Run(ctx, r, r, func(cp apply.Checkpoint) bool { return cp.CommitLSN >= upTo })
	return a.Stats(), r, err
}

// salesTarget is a target database with public.sales, and a connection
// to it.
func salesTarget(t *testing.T) (*pgtest.Cluster, string, *pgx.Conn) {
	t.Helper()
	pgtest.Require(t)
	pg := pgtest.Start(t, pgtest.Options{})
	url := pg.CreateDB(t, "target")
	conn, err := pgx.Connect(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(testCtx(t), "CREATE TABLE public.sales (id text PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	return pg, url, conn
}

// watchWhole checks, on its own connection and until stop is called, that
// the target never shows a unit in part: every b<i> has unitRows rows or
// none. It returns how many times it looked and what it saw wrong.
func watchWhole(t *testing.T, url string) (stop func() (looks int64, bad []string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var looks atomic.Int64
	var mu sync.Mutex
	var bad []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			rows, err := conn.Query(ctx, "SELECT v || ':' || count(*) FROM public.sales GROUP BY v HAVING count(*) <> $1", unitRows)
			if err != nil {
				return
			}
			for rows.Next() {
				var s string
				if rows.Scan(&s) == nil {
					mu.Lock()
					bad = append(bad, s)
					mu.Unlock()
				}
			}
			rows.Close()
			looks.Add(1)
		}
	}()
	return func() (int64, []string) {
		cancel()
		<-done
		conn.Close(context.Background())
		mu.Lock()
		defer mu.Unlock()
		return looks.Load(), bad
	}
}

func salesCount(t *testing.T, conn *pgx.Conn) (rows, units, wrong int64) {
	t.Helper()
	if err := conn.QueryRow(testCtx(t), `SELECT count(*), count(DISTINCT v),
		count(*) FILTER (WHERE v <> 'b' || split_part(id, '-', 1)) FROM public.sales`).Scan(&rows, &units, &wrong); err != nil {
		t.Fatal(err)
	}
	return rows, units, wrong
}

// TestApplyPartitioned: units spanning the data partitions are applied
// whole, each in one target transaction, while a second connection reads
// the target throughout and never sees one in part; that includes units
// whose manifest is written before their chunks, chunks a stopped relay
// wrote without a manifest, a restarted relay's redeliveries, a restart of
// the applier (it resumes from the checkpoint's manifest offset, every
// data partition from that manifest's offsets) and a group offset ahead
// of the checkpoint. 0 lost, 0 applied twice.
func TestApplyPartitioned(t *testing.T) {
	_, url, conn := salesTarget(t)
	c := cluster(t)
	cfg, p1 := partitionedSetup(t, c)
	ctx := testCtx(t)
	units := func(from, to int) [][]byte {
		var out [][]byte
		for i := from; i < to; i++ {
			out = append(out, unitTxn(t, i, unitRows))
		}
		return out
	}
	stop := watchWhole(t, url)

	if err := p1.PublishBatch(ctx, units(0, 10)); err != nil {
		t.Fatal(err)
	}
	if st, _, err := applyUntil(ctx, conn, cfg, txnLSN(9)); err != nil || st.TxnsApplied != 10 {
		t.Fatalf("first run: applied %d, %v", st.TxnsApplied, err)
	}

	// The applier runs on while the relay stops after writing unit 10's
	// chunks (no manifest), restarts and resends from unit 5, and unit 20
	// arrives manifest first.
	type result struct {
		st  apply.Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, _, err := applyUntil(ctx, conn, cfg, txnLSN(20))
		done <- result{st, err}
	}()
	splitWrite(t, ctx, p1, unitTxn(t, 10, unitRows), chunksOnly, func(int32) bool { return true })
	p1.cl.Close()
	p2, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if err := p2.PublishBatch(ctx, units(5, 20)); err != nil {
		t.Fatal(err)
	}
	splitWrite(t, ctx, p2, unitTxn(t, 20, unitRows), manifestFirst, func(int32) bool { return true })
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.st.TxnsApplied != 11 || res.st.TxnsSkipped != 5 {
		t.Fatalf("second run applied %d and skipped %d; want 11 applied (10..20), 5 redelivered skipped (5..9)", res.st.TxnsApplied, res.st.TxnsSkipped)
	}

	// The group offset runs ahead of the checkpoint: the checkpoint wins.
	r, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(40); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := p2.PublishBatch(ctx, units(21, 25)); err != nil {
		t.Fatal(err)
	}
	st, _, err := applyUntil(ctx, conn, cfg, txnLSN(24))
	if err != nil || st.TxnsApplied != 4 {
		t.Fatalf("third run: applied %d, %v; want 4", st.TxnsApplied, err)
	}
	looks, bad := stop()
	if looks == 0 {
		t.Fatal("the concurrent reader never read the target")
	}
	if len(bad) > 0 {
		t.Fatalf("the concurrent reader saw units in part (unit:rows): %v", bad)
	}
	if n, u, w := salesCount(t, conn); n != 25*unitRows || u != 25 || w != 0 {
		t.Fatalf("target holds %d rows of %d units (%d wrong); want %d of 25", n, u, w, 25*unitRows)
	}
}

// TestBarrierIncompleteHolds: a unit whose manifest arrived with one of
// its chunks missing is held: the applier applies what comes before it,
// none of its rows, and the error it stops with (and Held) names the
// missing chunk.
func TestBarrierIncompleteHolds(t *testing.T) {
	_, url, conn := salesTarget(t)
	c := cluster(t)
	cfg, p := partitionedSetup(t, c)
	ctx := testCtx(t)
	if err := p.PublishBatch(ctx, [][]byte{unitTxn(t, 0, unitRows)}); err != nil {
		t.Fatal(err)
	}
	var first int32
	refs := splitWrite(t, ctx, p, unitTxn(t, 1, unitRows), chunksFirst, func(part int32) bool {
		if first == 0 {
			first = part
		}
		return part == first
	})
	var logged syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	defer func(d time.Duration) { HoldWarnAfter = d }(HoldWarnAfter)
	HoldWarnAfter = 0
	// The applier runs until the reader reports unit 1 held and unit 0 is
	// on the target (the applier commits what it holds when its source
	// goes quiet).
	check, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close(context.Background())
	held := untilLogged(ctx, &logged, "0/10100 (manifest offset 1) is held")
	runCtx, stopRun := context.WithCancel(ctx)
	go func() {
		<-held.Done()
		for runCtx.Err() == nil {
			var n int
			if check.QueryRow(runCtx, "SELECT count(*) FROM public.sales").Scan(&n) == nil && n >= unitRows {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		stopRun()
	}()
	st, r, err := applyUntil(runCtx, conn, cfg, txnLSN(1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("applier over an incomplete barrier: %v, want it waiting until stopped", err)
	}
	h, ok := r.Held()
	if !ok || h.CommitLSN != txnLSN(1) || len(h.Missing) != len(refs)-1 || h.Missing[0] != refs[1] {
		t.Fatalf("Held = %+v, %v; want commit LSN %x missing %v", h, ok, txnLSN(1), refs[1:])
	}
	if l := logged.String(); !strings.Contains(l, "held at the manifest barrier") || !strings.Contains(l, refs[1].String()) {
		t.Fatalf("the log does not report the held unit and its missing chunk %s:\n%s", refs[1], l)
	}
	// (A cancel mid-query closes the applier's connection: count on another.)
	if n, u, _ := salesCount(t, check); n != unitRows || u != 1 || st.TxnsApplied != 1 {
		t.Fatalf("target holds %d rows of %d units (applied %d); want unit 0 alone, nothing of the held unit", n, u, st.TxnsApplied)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// untilLogged returns a context cancelled once log holds want.
func untilLogged(ctx context.Context, log *syncBuffer, want string) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for ctx.Err() == nil && !strings.Contains(log.String(), want) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	return ctx
}
