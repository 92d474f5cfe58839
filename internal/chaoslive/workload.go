package chaoslive

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/config"
)

// The built-in workload's tables. A transfer moves an amount between two
// accounts and records it in the history table, in one source
// transaction: the target may show a transfer whole or not at all.
var (
	AccountsTable = config.TableName{Schema: "public", Name: "trellara_chaos_accounts"}
	HistoryTable  = config.TableName{Schema: "public", Name: "trellara_chaos_history"}
)

// WorkloadName names the built-in workload in reports.
const WorkloadName = "transfers: 2 account updates + 1 history insert per transaction, 100 accounts, sum invariant"

const (
	accounts       = 100
	initialBalance = 1000
)

func qualified(t config.TableName) string {
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

// setupWorkload creates and seeds the workload's tables on the source
// (idempotent: a second run keeps the rows of the first) and returns the
// invariant's total balance.
func setupWorkload(ctx context.Context, sourceURL string) (int64, error) {
	conn, err := pgx.Connect(ctx, sourceURL)
	if err != nil {
		return 0, fmt.Errorf("chaos live: connect to the source for the workload: %w", err)
	}
	defer conn.Close(ctx)
	acc, hist := qualified(AccountsTable), qualified(HistoryTable)
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS " + acc + " (id int PRIMARY KEY, balance bigint NOT NULL, transfers_out bigint NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + hist + " (id bigserial PRIMARY KEY, src int NOT NULL, dst int NOT NULL, amount bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())",
		fmt.Sprintf("INSERT INTO %s SELECT g, %d, 0 FROM generate_series(1, %d) g ON CONFLICT (id) DO NOTHING", acc, initialBalance, accounts),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return 0, fmt.Errorf("chaos live: workload setup on the source: %s: %w", q, err)
		}
	}
	var total int64
	if err := conn.QueryRow(ctx, "SELECT sum(balance)::bigint FROM "+acc).Scan(&total); err != nil {
		return 0, fmt.Errorf("chaos live: read %s on the source: %w", acc, err)
	}
	return total, nil
}

// workload runs transfers on the source until stopped. Pause blocks new
// transactions (verify runs at a quiescent point) until Resume.
type workload struct {
	url     string
	workers int
	rate    int // transactions per second over all workers; 0 is unthrottled
	seed    uint64

	gate      sync.RWMutex
	committed atomic.Int64
	errs      atomic.Int64
	lastErr   atomic.Value // string
	wg        sync.WaitGroup
}

func (w *workload) start(ctx context.Context) {
	for i := 0; i < w.workers; i++ {
		w.wg.Add(1)
		go w.worker(ctx, i)
	}
}

func (w *workload) Pause()  { w.gate.Lock() }
func (w *workload) Resume() { w.gate.Unlock() }

func (w *workload) worker(ctx context.Context, i int) {
	defer w.wg.Done()
	rng := rand.New(rand.NewPCG(w.seed, uint64(i)+1))
	var interval time.Duration
	if w.rate > 0 {
		interval = time.Duration(w.workers) * time.Second / time.Duration(w.rate)
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	acc, hist := qualified(AccountsTable), qualified(HistoryTable)
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			c, err := pgx.Connect(ctx, w.url)
			if err != nil {
				w.fail(err)
				sleep(ctx, 250*time.Millisecond)
				continue
			}
			conn = c
		}
		a, b := 1+rng.IntN(accounts), 1+rng.IntN(accounts-1)
		if b >= a {
			b++
		}
		amount := 1 + rng.Int64N(10)
		w.gate.RLock()
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// Lower id first: two workers never wait on each other in a cycle.
			lo, hi := min(a, b), max(a, b)
			for _, id := range []int{lo, hi} {
				q := "UPDATE " + acc + " SET balance = balance + $1 WHERE id = $2"
				d := amount
				if id == a {
					q = "UPDATE " + acc + " SET balance = balance - $1, transfers_out = transfers_out + 1 WHERE id = $2"
				}
				if _, err := tx.Exec(ctx, q, d, id); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+hist+" (src, dst, amount) VALUES ($1, $2, $3)", a, b, amount)
			return err
		})
		w.gate.RUnlock()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.fail(err)
			conn.Close(context.Background())
			conn = nil
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		w.committed.Add(1)
		if interval > 0 {
			sleep(ctx, interval)
		}
	}
}

func (w *workload) fail(err error) {
	w.errs.Add(1)
	w.lastErr.Store(err.Error())
}

func (w *workload) wait() { w.wg.Wait() }

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Observation is what one read of the target saw.
type Observation struct {
	Accounts     int64 `json:"accounts"`
	Sum          int64 `json:"sum"`
	TransfersOut int64 `json:"transfers_out"`
	History      int64 `json:"history"`
}

// checkObservation returns the whole-transaction invariants obs breaks:
// every account present, the sum of balances unchanged (a transfer's two
// updates seen together), one history row per counted transfer (the
// updates and the insert seen together), and history never shrinking
// (the target does not go back in time). prev is the last observation.
func checkObservation(obs Observation, prev *Observation, total int64) []string {
	var out []string
	if obs.Accounts != accounts {
		out = append(out, fmt.Sprintf("%d accounts at the target, want %d", obs.Accounts, accounts))
	}
	if obs.Sum != total {
		out = append(out, fmt.Sprintf("sum of balances %d, want %d: a transfer is half applied", obs.Sum, total))
	}
	if obs.TransfersOut != obs.History {
		out = append(out, fmt.Sprintf("%d transfers counted on accounts but %d history rows: a transaction is split across tables", obs.TransfersOut, obs.History))
	}
	if prev != nil && obs.History < prev.History {
		out = append(out, fmt.Sprintf("history went back from %d to %d rows", prev.History, obs.History))
	}
	return out
}

// observe reads the target's workload tables in one snapshot.
func observe(ctx context.Context, conn *pgx.Conn) (Observation, error) {
	var o Observation
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT count(*), coalesce(sum(balance), 0)::bigint, coalesce(sum(transfers_out), 0)::bigint FROM "+qualified(AccountsTable)).
			Scan(&o.Accounts, &o.Sum, &o.TransfersOut); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT count(*) FROM "+qualified(HistoryTable)).Scan(&o.History)
	})
	return o, err
}

// reader polls the target and records invariant violations.
type reader struct {
	url   string
	total int64
	every time.Duration
	onBad func(detail string)

	observations atomic.Int64
	reconnects   atomic.Int64
	mu           sync.Mutex
	last         *Observation
	done         chan struct{}
}

func (r *reader) run(ctx context.Context) {
	defer close(r.done)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		if conn == nil {
			c, err := pgx.Connect(ctx, r.url)
			if err != nil {
				r.reconnects.Add(1)
				sleep(ctx, 250*time.Millisecond)
				continue
			}
			conn = c
		}
		o, err := observe(ctx, conn)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return
			}
			r.reconnects.Add(1)
			conn.Close(context.Background())
			conn = nil
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		r.check(o)
		sleep(ctx, r.every)
	}
}

// check records one observation.
func (r *reader) check(o Observation) {
	r.mu.Lock()
	bad := checkObservation(o, r.last, r.total)
	r.last = &o
	r.mu.Unlock()
	r.observations.Add(1)
	for _, b := range bad {
		r.onBad(b)
	}
}

func (r *reader) lastObservation() *Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}
