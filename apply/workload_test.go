package apply

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// commerceDDL is the target schema of the generated workload. applied_log
// has no key on purpose: a transaction applied twice leaves two rows.
const commerceDDL = `
CREATE TABLE orders (id int PRIMARY KEY, total numeric(14,2) NOT NULL, status text NOT NULL);
CREATE TABLE line_items (order_id int, n int, amount numeric(14,2) NOT NULL, PRIMARY KEY (order_id, n));
CREATE TABLE applied_log (txn int NOT NULL);`

// commerce generates multi-table source transactions whose effects keep one
// invariant that only whole transactions satisfy: every order's total is
// the sum of its line items, and applied_log has one row per transaction.
type commerce struct {
	rng      *rand.Rand
	orders   map[int]map[int]int // order id → item n → amount in cents
	ids      []int               // live order ids, for random picks
	nextID   int
	txns     int
	rows     int
	lsn      uint64
	ord      *pb.Relation
	items    *pb.Relation
	log      *pb.Relation
	payloads [][]byte
}

func newCommerce(seed uint64) *commerce {
	return &commerce{
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		orders: map[int]map[int]int{},
		nextID: 1,
		lsn:    0x1000000,
		ord:    relation("public", "orders", 'd', "id*", "total", "status"),
		items:  relation("public", "line_items", 'd', "order_id*", "n*", "amount"),
		log:    relation("public", "applied_log", 'd', "txn"),
	}
}

func cents(c int) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

func (g *commerce) total(id int) int {
	s := 0
	for _, a := range g.orders[id] {
		s += a
	}
	return s
}

// next generates one transaction and returns its encoding.
func (g *commerce) next(tb testing.TB) []byte {
	g.txns++
	g.lsn += 64 + uint64(g.rng.IntN(4096))
	t := newTxn(g.lsn)
	key := pb.OldTuple_OLD_TUPLE_KEY
	none := pb.OldTuple_OLD_TUPLE_NONE
	switch r := g.rng.IntN(100); {
	case r < 50 || len(g.ids) < 5: // new order; items before or after the order row
		id := g.nextID
		g.nextID++
		g.orders[id] = map[int]int{}
		k := 1 + g.rng.IntN(5)
		for n := 1; n <= k; n++ {
			g.orders[id][n] = 100 + g.rng.IntN(100000)
		}
		orderRow := vals(strconv.Itoa(id), cents(g.total(id)), "new")
		if g.rng.IntN(2) == 0 {
			t.insert(g.ord, orderRow...)
		}
		for n := 1; n <= k; n++ {
			t.insert(g.items, vals(strconv.Itoa(id), strconv.Itoa(n), cents(g.orders[id][n]))...)
		}
		if len(t.e.Rows) == k {
			t.insert(g.ord, orderRow...)
		}
		g.ids = append(g.ids, id)
	case r < 85: // reprice one item, maybe add one, update the total
		id := g.ids[g.rng.IntN(len(g.ids))]
		its := g.orders[id]
		ns := make([]int, 0, len(its))
		for n := range its {
			ns = append(ns, n)
		}
		sort.Ints(ns)
		n := ns[g.rng.IntN(len(ns))]
		its[n] = 100 + g.rng.IntN(100000)
		t.update(g.items, none, nil, vals(strconv.Itoa(id), strconv.Itoa(n), cents(its[n])))
		if g.rng.IntN(3) == 0 {
			m := ns[len(ns)-1] + 1
			its[m] = 100 + g.rng.IntN(1000)
			t.insert(g.items, vals(strconv.Itoa(id), strconv.Itoa(m), cents(its[m]))...)
		}
		t.update(g.ord, none, nil, vals(strconv.Itoa(id), cents(g.total(id)), "changed"))
	default: // delete an order and its items
		i := g.rng.IntN(len(g.ids))
		id := g.ids[i]
		g.ids[i] = g.ids[len(g.ids)-1]
		g.ids = g.ids[:len(g.ids)-1]
		t.delete(g.ord, key, []*pb.Value{tv(strconv.Itoa(id)), null(), null()})
		for n := range g.orders[id] {
			t.delete(g.items, key, []*pb.Value{tv(strconv.Itoa(id)), tv(strconv.Itoa(n)), null()})
		}
		delete(g.orders, id)
	}
	t.insert(g.log, tv(strconv.Itoa(g.txns)))
	g.rows += len(t.e.Rows)
	b := t.encode(tb)
	g.payloads = append(g.payloads, b)
	return b
}

func (g *commerce) generate(tb testing.TB, n int) [][]byte {
	for range n {
		g.next(tb)
	}
	return g.payloads
}

// expected is the orders table the model says the target must hold.
func (g *commerce) expected() string {
	ids := make([]int, 0, len(g.orders))
	for id := range g.orders {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%d:%s;", id, cents(g.total(id)))
	}
	return b.String()
}

const actualOrdersSQL = `SELECT coalesce(string_agg(id || ':' || total, ';' ORDER BY id) || ';', '') FROM orders`

// invariantSQL counts violations visible in one statement snapshot. Every
// generated transaction keeps the sum of order totals equal to the sum of
// line items, and adds one applied_log row in the same target transaction
// as the checkpoint's txns_applied increment; any partly visible
// transaction breaks one of the two. Cheap enough to sample thousands of
// times during an apply.
const invariantSQL = `
SELECT
  ((SELECT coalesce(sum(total), 0) FROM orders) <> (SELECT coalesce(sum(amount), 0) FROM line_items))::int
  + (SELECT count(*) FROM trellara.checkpoints c
     WHERE c.flow = $1 AND c.txns_applied <> (SELECT count(*) FROM applied_log)),
  (SELECT count(*) FROM applied_log)`

// invariantFullSQL checks every order on its own, plus orphaned items.
const invariantFullSQL = `
SELECT
  (SELECT count(*) FROM orders o
     LEFT JOIN (SELECT order_id, sum(amount) AS s FROM line_items GROUP BY order_id) l ON l.order_id = o.id
     WHERE o.total <> coalesce(l.s, 0))
  + (SELECT count(*) FROM line_items l WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = l.order_id))
  + (SELECT count(*) FROM trellara.checkpoints c
     WHERE c.flow = $1 AND c.txns_applied <> (SELECT count(*) FROM applied_log))`

// pacedSource is memSource that releases burst units, then pauses, so that
// an apply spreads over time and batches vary in size.
type pacedSource struct {
	memSource
	burst int
	pause time.Duration
}

func (s *pacedSource) Next(ctx context.Context) (uint64, []byte, error) {
	if s.burst > 0 && s.pos > 0 && s.pos%s.burst == 0 && s.pos < len(s.payloads) {
		select {
		case <-time.After(s.pause):
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
	return s.memSource.Next(ctx)
}

// checkInvariant fails t if the invariant does not hold right now.
func checkInvariant(t testing.TB, conn *pgx.Conn) {
	t.Helper()
	var bad int64
	if err := conn.QueryRow(context.Background(), invariantFullSQL, testFlow).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("invariant broken: %d violations", bad)
	}
}
