package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/schemachange"
)

// The simulated source: a seeded generator of committed history, rendered
// as the pgoutput byte stream a PostgreSQL walsender would send from any
// start position. The history holds multi-table transactions, streamed
// transactions interleaved with others (with rolled-back
// subtransactions), transactions aborted while streaming, UPDATEs that
// leave a TOASTed column unchanged, TRUNCATEs, logical decoding messages,
// empty transactions, large transactions, and optionally a schema change
// and rows the target will refuse. The generator applies each committed
// transaction to a model, in commit order, so the harness knows the state
// after every prefix of history.

// Workload shapes a simulation's history.
type Workload struct {
	// Txns is the number of committed transactions.
	Txns int
	// BigEvery makes every n-th transaction large (BigRows event inserts):
	// it spills and is chunked when the relay's bounds are small.
	BigEvery, BigRows int
	// StreamEvery streams every n-th transaction in two blocks with other
	// transactions committing between them and a subtransaction rolled
	// back in the second block.
	StreamEvery int
	// AbortEvery adds, after every n-th committed transaction, a
	// transaction aborted while it was being streamed.
	AbortEvery int
	// EmptyEvery, TruncateEvery, MessageEvery: empty transactions,
	// TRUNCATE of events, transactional logical messages.
	EmptyEvery, TruncateEvery, MessageEvery int
	// Snapshot starts from existing rows copied by an initial snapshot.
	Snapshot bool
	// DriftAt is the transaction (1-based) before which accounts gains a
	// column: its change arrives under a shape that differs from the pin.
	DriftAt int
	// DriftInStream places the first change under the new shape inside a
	// stream block.
	DriftInStream bool
	// DriftCompatible makes the change a compatible one (the added column
	// is nullable, the table configured): it flows through a DDL barrier,
	// and the rows under the new shape carry a value in it.
	DriftCompatible bool
	// Change, when set, is the kind of the schema change of accounts at
	// DriftAt (changeSpecs): compatible kinds flow through a DDL barrier,
	// the others stop capture until a reseed takes them over.
	Change schemachange.Kind
	// Renames are the flow's schema.renames entries for accounts: with
	// the one a rename_column Change makes, the rename flows through a
	// DDL barrier instead of stopping capture.
	Renames []schemachange.ColumnRename
	// Incompatible lists transactions (1-based) that write a value the
	// target refuses (a CHECK constraint, a too-long value).
	Incompatible []int
	// IncompatibleBig makes those transactions large, the refused row
	// last, so it lands in the final chunk of a chunk sequence.
	IncompatibleBig bool
}

// htxn is one source transaction of the history.
type htxn struct {
	id        int // 1-based commit order; 0 for an aborted one
	xid       uint32
	commitLSN uint64
	endLSN    uint64
	kind      string
	streamed  bool
	// rows counts the published row changes; 0 means no envelope (empty).
	rows int
	// incompatible: the target refuses one of its rows.
	incompatible bool
	// hashIndex is k such that the model after this transaction has
	// hash hashes[k].
	hashIndex int
	apply     []func(*state)
	commit    *wire
	aborted   bool
	last      *wire // the transaction's last message
}

// wire is one pgoutput message at its WAL position.
type wire struct {
	msg   pgoutput.Message
	owner *htxn
	pos   uint64
	end   uint64
	data  []byte
	// drift marks the first change under the drifted shape.
	drift bool
}

// history is a generated source history.
type history struct {
	wires    []*wire
	txns     []*htxn // committed, in commit order
	initial  *state  // the rows before the first transaction (snapshot)
	cp       uint64  // consistent point: where streaming starts
	hashes   []uint64
	driftPos uint64 // position of the first change under the drifted shape; 0 if none
	// compatible: the drift flows through a DDL barrier (Workload.DriftCompatible).
	compatible bool
	driftTxn   *htxn // the transaction that first uses the drifted shape
	byLSN      map[uint64]*htxn
	// spec is the schema change (Workload.Change, or the legacy
	// DriftCompatible one); nil without a classified change.
	spec *changeSpec
	// recover: the change is blocked and a reseed of its table takes it
	// over (Workload.Change of a kind that does not flow).
	recover bool
	// defs are the tables as the source publishes them first (accounts
	// in the spec's old shape).
	defs []*tableDef
	// final is the source's state after its last transaction; tHashes
	// the changed table's hash after every prefix (as hashes).
	final   *state
	tHashes []uint64
	// ddlPos is the position of the changed shape's first transaction:
	// the source catalog answers with the new shape once capture has
	// reached it.
	ddlPos uint64
}

// spec is the workload's classified schema change, if any.
func (w Workload) spec() *changeSpec {
	switch {
	case w.Change != "":
		return changeSpecs[w.Change]
	case w.DriftCompatible:
		return changeSpecs[schemachange.AddNullableColumn]
	}
	return nil
}

// policy is the flow's classification policy for relation: every
// simulated table is configured (strict mode), and accounts has the
// workload's renames.
func (w Workload) policy(relation string) schemachange.Policy {
	p := simPolicy
	if relation == tAccounts.name {
		p.Renames = slices.Clone(w.Renames)
	}
	return p
}

// plan is the real classification of the workload's schema change under
// its policy (nil without a classified change).
func (w Workload) plan() *schemachange.Plan {
	sp := w.spec()
	if sp == nil {
		return nil
	}
	return sp.plan(w.policy(tAccounts.name))
}

// tables are the source's tables at the start of w's history.
func (w Workload) tables() []*tableDef {
	sp := w.spec()
	if sp == nil {
		return simTables
	}
	out := slices.Clone(simTables)
	out[slices.Index(out, tAccounts)] = sp.before
	return out
}

const (
	lsnBase     = 0x16000000
	commitTime0 = 1_790_000_000_000_000 // µs: a fixed epoch for commit times
)

type gen struct {
	rng     *rand.Rand
	w       Workload
	model   *state
	wires   []*wire
	txns    []*htxn
	hashes  []uint64
	tHashes []uint64
	spec    *changeSpec
	xid     uint32
	order   int64
	event   int64
	orders  []int64 // live orders, ascending
	lines   map[int64]int
	drifted bool
	incomp  map[int]bool
}

// generate builds the history for w from seed.
func generate(seed uint64, w Workload) *history {
	g := &gen{rng: rand.New(rand.NewPCG(seed, seed^0x5eed5eed5eed5eed)), w: w, model: newStateOf(w.tables()),
		xid: 700, lines: map[int64]int{}, incomp: map[int]bool{}, spec: w.spec()}
	for _, i := range w.Incompatible {
		g.incomp[i] = true
	}
	if w.Snapshot {
		g.seed()
	}
	initial := cloneState(g.model)
	g.hashes = append(g.hashes, g.model.hash)
	g.tHashes = append(g.tHashes, g.model.tableHash(tAccounts.name))
	for len(g.txns) < w.Txns {
		next := len(g.txns) + 1
		if w.AbortEvery > 0 && next > 1 && (next-1)%w.AbortEvery == 0 && !g.lastWasAbort() {
			g.abortedStream()
		}
		if w.StreamEvery > 0 && next%w.StreamEvery == 0 && next+2 <= w.Txns && !g.nearDrift(next) {
			g.streamed()
			continue
		}
		g.normal()
	}
	h := &history{wires: g.wires, txns: g.txns, initial: initial, hashes: g.hashes, cp: lsnBase, byLSN: map[uint64]*htxn{}, compatible: w.DriftCompatible,
		spec: g.spec, defs: w.tables(), final: g.model, tHashes: g.tHashes}
	if w.Change != "" {
		// Whether the change flows is schemachange's decision.
		h.compatible = w.plan().AutoApplies()
		h.recover = !h.compatible
	}
	h.layout()
	for _, w := range h.wires {
		if w.owner == h.driftTxn && h.driftTxn != nil {
			h.ddlPos = w.pos
			break
		}
	}
	return h
}

func (g *gen) lastWasAbort() bool {
	return len(g.wires) > 0 && g.wires[len(g.wires)-1].owner != nil && g.wires[len(g.wires)-1].owner.aborted
}

// nearDrift keeps streams from spanning the schema change.
func (g *gen) nearDrift(next int) bool {
	return g.w.DriftAt > 0 && next <= g.w.DriftAt && next+3 >= g.w.DriftAt && !g.w.DriftInStream
}

// seed fills the model with the rows an initial snapshot copies.
func (g *gen) seed() {
	for id := int64(1); id <= 8; id++ {
		g.model.insert(tAccounts, []val{num(id), num(1000), text(fmt.Sprintf("acct-%d", id))})
	}
	for range 3 {
		g.order++
		id := g.order
		g.model.insert(tOrders, []val{num(id), text("new"), num(30), text(doc(id))})
		for n := int64(1); n <= 2; n++ {
			g.model.insert(tLines, []val{num(id), num(n), num(1), num(15)})
		}
		g.orders = append(g.orders, id)
		g.lines[id] = 2
	}
	for range 5 {
		g.event++
		g.model.insert(tEvents, []val{num(g.event), text("seed"), text(payload(g.event, 40))})
	}
}

func cloneState(s *state) *state {
	c := &state{tables: map[string]*tableData{}}
	for name, t := range s.tables {
		ct := &tableData{def: t.def, rows: map[string][]val{}, rowID: t.rowID}
		c.tables[name] = ct
		for k, r := range t.rows {
			ct.rows[k] = slices.Clone(r)
		}
	}
	c.hash = s.hash
	return c
}

// doc is an orders.doc value: large enough to be TOASTed at the source,
// so UPDATEs that do not touch it send it as unchanged.
func doc(id int64) string { return fmt.Sprintf("doc-%d-%s", id, strings.Repeat("d", 300)) }

func payload(id int64, n int) string {
	s := fmt.Sprintf("payload-%d-", id)
	return s + strings.Repeat("p", max(0, n-len(s)))
}

// body is one transaction's changes while it is being generated.
type body struct {
	t     *htxn
	xid   uint32 // xid on streamed changes (the subtransaction's, or the top-level one)
	block map[*tableDef]bool
	out   []*wire
}

func (b *body) add(m pgoutput.Message) *wire {
	w := &wire{msg: m, owner: b.t}
	b.out = append(b.out, w)
	return w
}

// relation emits the Relation message before the first change to d in this
// transaction (or stream block).
func (b *body) relation(d *tableDef) {
	if b.block[d] {
		return
	}
	b.block[d] = true
	b.add(pgRelation(d, b.xid))
}

func cols(row []val) []pgoutput.Column {
	out := make([]pgoutput.Column, len(row))
	for i, v := range row {
		if v.null {
			out[i] = pgoutput.Column{Kind: pgoutput.ColumnNull}
		} else {
			out[i] = pgoutput.Column{Kind: pgoutput.ColumnText, Data: []byte(v.s)}
		}
	}
	return out
}

// insert emits an INSERT of row into d and records it for the model.
func (b *body) insert(d *tableDef, row []val) *wire {
	b.relation(d)
	b.t.rows++
	b.t.apply = append(b.t.apply, func(s *state) { s.insert(d, row) })
	return b.add(&pgoutput.Insert{Xid: pgoutput.XID(b.xid), RelationID: pgoutput.OID(d.oid), New: cols(row)})
}

func (g *gen) newTxn(kind string) *htxn {
	g.xid++
	return &htxn{xid: g.xid, kind: kind}
}

// commitNow appends a transaction's wires, assigns its id and applies it
// to the model.
func (g *gen) commitNow(t *htxn, out []*wire) {
	t.id = len(g.txns) + 1
	for _, f := range t.apply {
		f(g.model)
	}
	g.hashes = append(g.hashes, g.model.hash)
	g.tHashes = append(g.tHashes, g.model.tableHash(tAccounts.name))
	t.hashIndex = len(g.hashes) - 1
	g.txns = append(g.txns, t)
	g.wires = append(g.wires, out...)
	t.last = out[len(out)-1]
}

// normal generates and commits one Begin..Commit transaction.
func (g *gen) normal() {
	id := len(g.txns) + 1
	kind := g.pickKind(id)
	t := g.newTxn(kind)
	b := &body{t: t, block: map[*tableDef]bool{}}
	b.add(&pgoutput.Begin{Xid: pgoutput.XID(t.xid), CommitTime: pgoutput.Timestamp(commitTime0 + int64(id)*1000)})
	if sp := g.spec; sp != nil && g.w.Change != "" && id == g.w.DriftAt {
		// The DDL commits before this transaction: the source's rows of
		// accounts take the new shape (a dropped column's values go, an
		// added column's default fills in).
		t.apply = append(t.apply, func(s *state) {
			rows := s.tables[tAccounts.name].rows
			for k, r := range rows {
				s.put(tAccounts.name, k, sp.reshape(r))
			}
		})
	}
	g.fill(b, id, kind)
	if kind != "empty" {
		b.insert(tTxnLog, []val{num(int64(id))})
	}
	t.commit = b.add(&pgoutput.Commit{CommitTime: pgoutput.Timestamp(commitTime0 + int64(id)*1000)})
	g.commitNow(t, b.out)
}

func (g *gen) pickKind(id int) string {
	w := g.w
	switch {
	case !w.Snapshot && id == 1:
		return "init"
	case w.DriftAt > 0 && id == w.DriftAt && !w.DriftInStream:
		return "transfer"
	case g.incomp[id] && w.IncompatibleBig:
		return "big-bad-status"
	case g.incomp[id]:
		if id%2 == 0 {
			return "order-bad-status"
		}
		return "account-bad-note"
	case w.BigEvery > 0 && id%w.BigEvery == 0:
		return "big"
	case w.EmptyEvery > 0 && id%w.EmptyEvery == 0:
		return "empty"
	case w.TruncateEvery > 0 && id%w.TruncateEvery == 0:
		return "truncate"
	}
	kinds := []string{"transfer", "order", "order", "status", "cancel", "events"}
	if len(g.orders) == 0 {
		return "order"
	}
	return kinds[g.rng.IntN(len(kinds))]
}

// accounts is the accounts shape for transaction id.
func (g *gen) accounts(id int) *tableDef {
	if sp := g.spec; sp != nil {
		if id >= g.w.DriftAt {
			return sp.after
		}
		return sp.before
	}
	if g.w.DriftAt > 0 && id >= g.w.DriftAt {
		return tAccountsDrifted
	}
	return tAccounts
}

// transferChanged is one half of a transfer under a Workload.Change: the
// account's row under the shape of transaction id, a value past the old
// shape where the change allows one.
func (g *gen) transferChanged(b *body, id int, account, delta int64) {
	sp := g.spec
	cur := sp.before // the shape the model's rows have when read
	if id > g.w.DriftAt {
		cur = sp.after
	}
	d := g.accounts(id)
	key := keyOf(tAccounts, []val{num(account)})
	v := sp.named(cur, g.model.tables[tAccounts.name].rows[key])
	v["balance"] = num(parseNum(v["balance"]) + delta)
	if _, ok := v["tier"]; ok || d.col("tier") >= 0 {
		v["tier"] = text(fmt.Sprintf("tier-%d", id))
	}
	if d == sp.after && sp.wide != nil {
		sp.wide(id, v)
	}
	row := rowOf(d, v)
	b.relation(d)
	b.t.rows++
	b.t.apply = append(b.t.apply, func(s *state) { s.put(tAccounts.name, key, row) })
	w := b.add(&pgoutput.Update{Xid: pgoutput.XID(b.xid), RelationID: pgoutput.OID(d.oid), OldKind: pgoutput.TupleNone, New: cols(row)})
	if d == sp.after && !g.drifted {
		g.drifted, w.drift = true, true
	}
}

// fill writes the changes of a transaction of kind.
func (g *gen) fill(b *body, id int, kind string) {
	t := b.t
	switch kind {
	case "init":
		for a := int64(1); a <= 8; a++ {
			b.insert(g.accounts(id), []val{num(a), num(1000), text(fmt.Sprintf("acct-%d", a))})
		}
	case "transfer":
		from, to := int64(1+g.rng.IntN(8)), int64(1+g.rng.IntN(8))
		if from == to {
			to = from%8 + 1
		}
		amount := int64(1 + g.rng.IntN(50))
		for _, x := range []struct {
			id    int64
			delta int64
		}{{from, -amount}, {to, amount}} {
			if g.w.Change != "" {
				g.transferChanged(b, id, x.id, x.delta)
				continue
			}
			d := g.accounts(id)
			key := keyOf(tAccounts, []val{num(x.id)})
			old := g.model.tables[tAccounts.name].rows[key]
			n, _ := strconv.ParseInt(old[1].s, 10, 64)
			row := []val{num(x.id), num(n + x.delta), old[2]}
			wireRow := row
			switch {
			case d == tAccountsDrifted && g.w.DriftCompatible:
				row = append(row, text(fmt.Sprintf("tier-%d", id)))
				wireRow = row
			case d == tAccountsDrifted:
				wireRow = append(slices.Clone(row), val{null: true})
			}
			b.relation(d)
			t.rows++
			t.apply = append(t.apply, func(s *state) { s.put(tAccounts.name, key, row) })
			w := b.add(&pgoutput.Update{Xid: pgoutput.XID(b.xid), RelationID: pgoutput.OID(d.oid), OldKind: pgoutput.TupleNone, New: cols(wireRow)})
			if d == tAccountsDrifted && !g.drifted {
				g.drifted, w.drift = true, true
			}
		}
	case "order", "order-bad-status":
		g.order++
		oid := g.order
		n := 1 + g.rng.IntN(4)
		total := int64(0)
		status := "new"
		if kind == "order-bad-status" {
			status = fmt.Sprintf("incompatible-%d", id)
			t.incompatible = true
		}
		var lines [][]val
		for i := 1; i <= n; i++ {
			amt := int64(5 + g.rng.IntN(95))
			total += amt
			lines = append(lines, []val{num(oid), num(int64(i)), num(int64(1 + g.rng.IntN(3))), num(amt)})
		}
		b.insert(tOrders, []val{num(oid), text(status), num(total), text(doc(oid))})
		for _, l := range lines {
			b.insert(tLines, l)
		}
		g.orders = append(g.orders, oid)
		g.lines[oid] = n
	case "account-bad-note":
		// A note longer than the target's varchar(40).
		a := int64(1 + g.rng.IntN(8))
		key := keyOf(tAccounts, []val{num(a)})
		old := g.model.tables[tAccounts.name].rows[key]
		row := []val{num(a), old[1], text(fmt.Sprintf("incompatible-%d-%s", id, strings.Repeat("n", 60)))}
		d := g.accounts(id)
		b.relation(d)
		t.rows++
		t.incompatible = true
		t.apply = append(t.apply, func(s *state) { s.put(tAccounts.name, key, row) })
		b.add(&pgoutput.Update{Xid: pgoutput.XID(b.xid), RelationID: pgoutput.OID(d.oid), OldKind: pgoutput.TupleNone, New: cols(row)})
	case "status":
		oid := g.orders[g.rng.IntN(len(g.orders))]
		key := keyOf(tOrders, []val{num(oid)})
		old := g.model.tables[tOrders.name].rows[key]
		status := []string{"paid", "shipped", "held"}[g.rng.IntN(3)]
		row := []val{num(oid), text(status), old[2], old[3]}
		b.relation(tOrders)
		t.rows++
		t.apply = append(t.apply, func(s *state) { s.put(tOrders.name, key, row) })
		// doc did not change: pgoutput sends it as unchanged TOAST.
		wireCols := cols(row)
		wireCols[3] = pgoutput.Column{Kind: pgoutput.ColumnUnchangedToast}
		b.add(&pgoutput.Update{Xid: pgoutput.XID(b.xid), RelationID: pgoutput.OID(tOrders.oid), OldKind: pgoutput.TupleNone, New: wireCols})
	case "cancel":
		oid := g.orders[g.rng.IntN(len(g.orders))]
		for n := 1; n <= g.lines[oid]; n++ {
			lk := keyOf(tLines, []val{num(oid), num(int64(n))})
			b.relation(tLines)
			t.rows++
			t.apply = append(t.apply, func(s *state) { s.del(tLines.name, lk) })
			b.add(&pgoutput.Delete{Xid: pgoutput.XID(b.xid), RelationID: pgoutput.OID(tLines.oid), OldKind: pgoutput.TupleKey,
				Old: cols([]val{num(oid), num(int64(n)), {null: true}, {null: true}})})
		}
		g.lines[oid] = 0
		key := keyOf(tOrders, []val{num(oid)})
		old := g.model.tables[tOrders.name].rows[key]
		row := []val{num(oid), text("cancelled"), num(0), old[3]}
		b.relation(tOrders)
		t.rows++
		t.apply = append(t.apply, func(s *state) { s.put(tOrders.name, key, row) })
		wireCols := cols(row)
		wireCols[3] = pgoutput.Column{Kind: pgoutput.ColumnUnchangedToast}
		b.add(&pgoutput.Update{Xid: pgoutput.XID(b.xid), RelationID: pgoutput.OID(tOrders.oid), OldKind: pgoutput.TupleNone, New: wireCols})
	case "events":
		for range 1 + g.rng.IntN(3) {
			g.event++
			b.insert(tEvents, []val{num(g.event), text("click"), text(payload(g.event, 40))})
		}
		if g.w.MessageEvery > 0 && id%g.w.MessageEvery == 0 {
			t.rows++
			b.add(&pgoutput.LogicalMessage{Xid: pgoutput.XID(b.xid), Transactional: true, Prefix: "sim.note", Content: []byte(fmt.Sprintf("note %d", id))})
		}
	case "truncate":
		b.relation(tEvents)
		t.rows++
		t.apply = append(t.apply, func(s *state) { s.truncate(tEvents.name) })
		b.add(&pgoutput.Truncate{Xid: pgoutput.XID(b.xid), Cascade: g.rng.IntN(2) == 0, RestartIdentity: g.rng.IntN(2) == 0,
			RelationIDs: []pgoutput.OID{pgoutput.OID(tEvents.oid)}})
	case "big", "big-bad-status":
		for range g.w.BigRows {
			g.event++
			b.insert(tEvents, []val{num(g.event), text("bulk"), text(payload(g.event, 100))})
		}
		if kind == "big-bad-status" {
			g.order++
			t.incompatible = true
			b.insert(tOrders, []val{num(g.order), text(fmt.Sprintf("incompatible-%d", id)), num(0), text(doc(g.order))})
			g.orders = append(g.orders, g.order)
		}
	case "empty":
	}
}

// streamed generates a transaction streamed in two blocks, with one or two
// transactions committing between them, a rolled-back subtransaction in
// the second block, and the commit after both.
func (g *gen) streamed() {
	t := g.newTxn("streamed")
	t.streamed = true
	xid := t.xid
	sub := xid + 500000
	block := func(first bool, n int, withSub bool) []*wire {
		b := &body{t: t, xid: xid, block: map[*tableDef]bool{}}
		b.add(&pgoutput.StreamStart{Xid: pgoutput.XID(xid), FirstSegment: first})
		for range n {
			g.event++
			b.insert(tEvents, []val{num(g.event), text("stream"), text(payload(g.event, 60))})
		}
		if withSub {
			// Changes of the subtransaction carry its xid; they vanish
			// with its StreamAbort and must never reach the target.
			b.xid = sub
			for range 3 {
				g.event++
				row := []val{num(g.event), text("rolled-back"), text(payload(g.event, 60))}
				b.relation(tEvents)
				b.add(&pgoutput.Insert{Xid: pgoutput.XID(sub), RelationID: pgoutput.OID(tEvents.oid), New: cols(row)})
			}
		}
		b.add(&pgoutput.StreamStop{})
		return b.out
	}
	b1 := block(true, 2+g.rng.IntN(6), false)
	g.wires = append(g.wires, b1...)
	for range 1 + g.rng.IntN(2) {
		g.normal()
	}
	b2 := block(false, 2+g.rng.IntN(6), true)
	id := len(g.txns) + 1
	if g.w.DriftInStream && g.w.DriftAt > 0 && id >= g.w.DriftAt && !g.drifted {
		// The schema change lands inside this stream block.
		d := tAccountsDrifted
		b := &body{t: t, xid: xid, block: map[*tableDef]bool{}}
		key := keyOf(tAccounts, []val{num(1)})
		old := g.model.tables[tAccounts.name].rows[key]
		row := append(slices.Clone(old), val{null: true})
		b.relation(d)
		t.rows++
		w := b.add(&pgoutput.Update{Xid: pgoutput.XID(xid), RelationID: pgoutput.OID(d.oid), OldKind: pgoutput.TupleNone, New: cols(row)})
		w.drift, g.drifted = true, true
		b2 = append(b2[:len(b2)-1], append(b.out, b2[len(b2)-1])...)
	}
	end := &body{t: t, block: map[*tableDef]bool{}}
	end.add(&pgoutput.StreamAbort{Xid: pgoutput.XID(xid), SubXid: pgoutput.XID(sub)})
	// txn_log row in a last block, so the streamed transaction is counted.
	lb := &body{t: t, xid: xid, block: map[*tableDef]bool{}}
	lb.add(&pgoutput.StreamStart{Xid: pgoutput.XID(xid)})
	lb.insert(tTxnLog, []val{num(int64(id))})
	lb.add(&pgoutput.StreamStop{})
	t.commit = &wire{msg: &pgoutput.StreamCommit{Xid: pgoutput.XID(xid), CommitTime: pgoutput.Timestamp(commitTime0 + int64(id)*1000)}, owner: t}
	out := append(append(append(b2, end.out...), lb.out...), t.commit)
	// The first block is already in g.wires; commitNow appends the rest.
	g.commitNow(t, out)
}

// abortedStream generates a transaction that streams one block and then
// aborts entirely: nothing of it may reach the target.
func (g *gen) abortedStream() {
	t := g.newTxn("aborted")
	t.aborted = true
	b := &body{t: t, xid: t.xid, block: map[*tableDef]bool{}}
	b.add(&pgoutput.StreamStart{Xid: pgoutput.XID(t.xid), FirstSegment: true})
	for range 2 {
		g.event++
		b.insert(tEvents, []val{num(g.event), text("aborted"), text(payload(g.event, 40))})
	}
	b.add(&pgoutput.StreamStop{})
	b.add(&pgoutput.StreamAbort{Xid: pgoutput.XID(t.xid), SubXid: pgoutput.XID(t.xid)})
	t.apply = nil
	g.wires = append(g.wires, b.out...)
	t.last = b.out[len(b.out)-1]
}

// layout assigns WAL positions, fills in the LSNs the messages carry and
// encodes them.
func (h *history) layout() {
	pos := uint64(lsnBase) + 0x100
	for _, w := range h.wires {
		w.data = pgoutput.Append(nil, w.msg) // LSN fields are fixed width
		w.pos = pos
		w.end = pos + uint64(len(w.data)) + 0x18
		pos = w.end + 0x8
	}
	for _, t := range h.txns {
		t.commitLSN, t.endLSN = t.commit.pos, t.commit.end
		h.byLSN[t.commitLSN] = t
	}
	for _, w := range h.wires {
		switch m := w.msg.(type) {
		case *pgoutput.Begin:
			m.FinalLSN = pgoutput.LSN(w.owner.commitLSN)
		case *pgoutput.Commit:
			m.CommitLSN, m.EndLSN = pgoutput.LSN(w.owner.commitLSN), pgoutput.LSN(w.owner.endLSN)
		case *pgoutput.StreamCommit:
			m.CommitLSN, m.EndLSN = pgoutput.LSN(w.owner.commitLSN), pgoutput.LSN(w.owner.endLSN)
		case *pgoutput.LogicalMessage:
			m.LSN = pgoutput.LSN(w.pos)
		}
		w.data = pgoutput.Append(w.data[:0], w.msg)
		if w.drift && h.driftPos == 0 {
			h.driftPos, h.driftTxn = w.pos, w.owner
		}
	}
}

// expected reports whether the pipeline must deliver t: it has data and,
// when the schema drifts incompatibly, it committed before the first change
// under the new shape (capture stops there).
func (h *history) expected(t *htxn) bool {
	if t.rows == 0 {
		return false
	}
	return h.driftPos == 0 || h.compatible || h.recover || h.beforeDrift(t)
}

// beforeDrift reports whether t committed before the first change under
// the drifted shape.
func (h *history) beforeDrift(t *htxn) bool { return t.commitLSN < h.driftPos }

// stream returns the messages a walsender sends to a session that starts
// at position from: those of every transaction committing at or after it
// (a streamed one whole, from its first block), and of transactions
// aborted while streaming whose abort lies after it.
func (h *history) stream(from uint64) []*wire {
	var out []*wire
	for _, w := range h.wires {
		t := w.owner
		switch {
		case t.aborted && t.last.pos >= from:
		case !t.aborted && t.commitLSN >= from:
		default:
			continue
		}
		out = append(out, w)
	}
	return out
}

// xlogData frames pgoutput bytes as a CopyData XLogData message.
func xlogData(walStart, serverEnd uint64, now int64, data []byte) []byte {
	b := make([]byte, 0, 25+len(data))
	b = append(b, 'w')
	b = binary.BigEndian.AppendUint64(b, walStart)
	b = binary.BigEndian.AppendUint64(b, serverEnd)
	b = binary.BigEndian.AppendUint64(b, uint64(now))
	return append(b, data...)
}

// keepalive frames a primary keepalive that asks for no reply.
func keepalive(serverEnd uint64, now int64) []byte {
	b := make([]byte, 0, 18)
	b = append(b, 'k')
	b = binary.BigEndian.AppendUint64(b, serverEnd)
	b = binary.BigEndian.AppendUint64(b, uint64(now))
	return append(b, 0)
}
