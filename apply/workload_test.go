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
// has no key at the target on purpose: a transaction applied twice leaves
// two rows. At the source its txn column is the key (the relation says so),
// so batches of the workload fold (compact.go): the folded INSERT, UPDATE,
// DELETE, replace and TOAST merge all run against the server.
const commerceDDL = `
CREATE TABLE orders (id int PRIMARY KEY, total numeric(14,2) NOT NULL, status text NOT NULL, note text);
CREATE TABLE line_items (order_id int, n int, amount numeric(14,2) NOT NULL, PRIMARY KEY (order_id, n));
CREATE TABLE applied_log (txn int NOT NULL);`

// commerce generates multi-table source transactions whose effects keep one
// invariant that only whole transactions satisfy: every order's total is
// the sum of its line items, and applied_log has one row per transaction.
// Besides inserts it updates (the order's note mostly sent as unchanged
// TOAST), deletes, rewrites an order under the same keys (a replace when
// folded) and moves line items to another key (a key change, which makes
// its batch go row by row).
type commerce struct {
	rng      *rand.Rand
	orders   map[int]map[int]int // order id → item n → amount in cents
	notes    map[int]string      // order id → note
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
		notes:  map[int]string{},
		nextID: 1,
		lsn:    0x1000000,
		ord:    relation("public", "orders", 'd', "id*", "total", "status", "note"),
		items:  relation("public", "line_items", 'd', "order_id*", "n*", "amount"),
		log:    relation("public", "applied_log", 'd', "txn*"),
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

// pick returns a live order id and its index in ids. With recent, half of
// the time it is one of the newest, so that an order is often inserted and
// updated again within one batch (folded into one insert, TOAST merged).
func (g *commerce) pick(recent bool) (int, int) {
	i := g.rng.IntN(len(g.ids))
	if recent && g.rng.IntN(2) == 0 {
		i = len(g.ids) - 1 - g.rng.IntN(min(len(g.ids), 8))
	}
	return i, g.ids[i]
}

// itemsOf returns the item numbers of order id, sorted.
func (g *commerce) itemsOf(id int) []int {
	ns := make([]int, 0, len(g.orders[id]))
	for n := range g.orders[id] {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns
}

// newItems gives order id k fresh items and a new note, and adds their
// inserts to t (items before or after the order row).
func (g *commerce) newItems(t *txn, id int) {
	g.orders[id] = map[int]int{}
	k := 1 + g.rng.IntN(5)
	for n := 1; n <= k; n++ {
		g.orders[id][n] = 100 + g.rng.IntN(100000)
	}
	g.notes[id] = fmt.Sprintf("note %d of txn %d", id, g.txns)
	orderRow := vals(strconv.Itoa(id), cents(g.total(id)), "new", g.notes[id])
	before := len(t.e.Rows)
	if g.rng.IntN(2) == 0 {
		t.insert(g.ord, orderRow...)
	}
	for n := 1; n <= k; n++ {
		t.insert(g.items, vals(strconv.Itoa(id), strconv.Itoa(n), cents(g.orders[id][n]))...)
	}
	if len(t.e.Rows)-before == k {
		t.insert(g.ord, orderRow...)
	}
}

// deleteOrder adds the deletes of order id and its items to t.
func (g *commerce) deleteOrder(t *txn, id int) {
	key := pb.OldTuple_OLD_TUPLE_KEY
	t.delete(g.ord, key, []*pb.Value{tv(strconv.Itoa(id)), null(), null(), null()})
	for _, n := range g.itemsOf(id) {
		t.delete(g.items, key, []*pb.Value{tv(strconv.Itoa(id)), tv(strconv.Itoa(n)), null()})
	}
	delete(g.orders, id)
	delete(g.notes, id)
}

// next generates one transaction and returns its encoding.
func (g *commerce) next(tb testing.TB) []byte {
	g.txns++
	g.lsn += 64 + uint64(g.rng.IntN(4096))
	t := newTxn(g.lsn)
	none := pb.OldTuple_OLD_TUPLE_NONE
	switch r := g.rng.IntN(100); {
	case r < 40 || len(g.ids) < 5: // new order
		id := g.nextID
		g.nextID++
		g.newItems(t, id)
		g.ids = append(g.ids, id)
	case r < 72: // reprice one item, maybe add one, update the total
		_, id := g.pick(true)
		its := g.orders[id]
		ns := g.itemsOf(id)
		n := ns[g.rng.IntN(len(ns))]
		its[n] = 100 + g.rng.IntN(100000)
		t.update(g.items, none, nil, vals(strconv.Itoa(id), strconv.Itoa(n), cents(its[n])))
		if g.rng.IntN(3) == 0 {
			m := ns[len(ns)-1] + 1
			its[m] = 100 + g.rng.IntN(1000)
			t.insert(g.items, vals(strconv.Itoa(id), strconv.Itoa(m), cents(its[m]))...)
		}
		// The note is large at the source: unchanged, it is sent as
		// unchanged TOAST and the target must keep the stored value.
		note := toast()
		if g.rng.IntN(3) == 0 {
			g.notes[id] = fmt.Sprintf("note %d of txn %d", id, g.txns)
			note = tv(g.notes[id])
		}
		t.update(g.ord, none, nil, []*pb.Value{tv(strconv.Itoa(id)), tv(cents(g.total(id))), tv("changed"), note})
	case r < 85: // rewrite an order under the same keys: delete it all, insert it again
		_, id := g.pick(false)
		g.deleteOrder(t, id)
		g.newItems(t, id)
	case r < 99: // delete an order and its items
		i, id := g.pick(false)
		g.ids[i] = g.ids[len(g.ids)-1]
		g.ids = g.ids[:len(g.ids)-1]
		g.deleteOrder(t, id)
	default: // move the last item to a new number: a key change, rare because it sends its whole batch row by row
		_, id := g.pick(false)
		ns := g.itemsOf(id)
		n, m := ns[len(ns)-1], ns[len(ns)-1]+1
		its := g.orders[id]
		its[m] = its[n]
		delete(its, n)
		t.update(g.items, pb.OldTuple_OLD_TUPLE_KEY, []*pb.Value{tv(strconv.Itoa(id)), tv(strconv.Itoa(n)), null()},
			vals(strconv.Itoa(id), strconv.Itoa(m), cents(its[m])))
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
		fmt.Fprintf(&b, "%d:%s:%s;", id, cents(g.total(id)), g.notes[id])
	}
	return b.String()
}

const actualOrdersSQL = `SELECT coalesce(string_agg(id || ':' || total || ':' || coalesce(note, 'NULL'), ';' ORDER BY id) || ';', '') FROM orders`

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

// checkFolding fails t unless folded statements wrote part of the workload
// and the target refused none of them: on a target that mirrors the
// source, a refused fold (retried row by row, so the data still ends up
// right) means a folded statement is wrong.
func checkFolding(t testing.TB, s Stats) {
	t.Helper()
	if s.FoldedTxns == 0 {
		t.Errorf("no transaction was written folded (%+v): the test no longer exercises the folded statements", s)
	}
	if s.FoldsRefused != 0 {
		t.Errorf("the target refused %d folded batches of a workload it mirrors: a folded statement is wrong", s.FoldsRefused)
	}
}
