package sim

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/segmentlog"
)

// checker holds the invariants. It knows the history (what the source
// committed and the state after every prefix) and reads the target's
// committed state and the log's durable content, never the components'
// own bookkeeping.
type checker struct {
	h          *history
	db         *simDB
	violations []Violation
	seen       map[string]bool // violation details already reported

	// The log as the checker has read it: every complete transaction
	// unit by commit LSN, scanned incrementally; entries below the log's
	// first offset were removed by retention.
	scanned  []scanEntry
	scanNext uint64
	inLog    map[uint64]bool
	chunkRun *scanEntry      // open chunk sequence
	chunkEnd map[uint64]bool // offsets of final chunks
	pinned   map[string]uint64
	// moves are the pins DDL barriers in the log moved, in log order: from
	// a barrier's offset on, its relation's rows carry the new fingerprint.
	moves []pinMove

	rd    *segmentlog.Reader
	rdLog *segmentlog.Log

	// ackChecked is how far (in h.txns) the acknowledgement check got.
	ackChecked int
	quarKeys   map[string]bool
	snapTables int
	// unit turns a log entry into its unit: in Kafka partitioned mode the
	// entry is a manifest, durable with its chunks (written before it).
	unit func(entry []byte) ([]byte, error)
}

type scanEntry struct {
	offset    uint64
	commitLSN uint64
	chunk     uint32 // next chunk index expected, for chunk sequences
	complete  bool
}

func newChecker(h *history, db *simDB, snapshot bool) *checker {
	c := &checker{h: h, db: db, seen: map[string]bool{}, inLog: map[uint64]bool{}, chunkEnd: map[uint64]bool{}, pinned: map[string]uint64{}, quarKeys: map[string]bool{}}
	for _, d := range h.defs {
		c.pinned[d.name] = capture.RelationFromPgoutput(pgRelation(d, 0)).Fingerprint
	}
	if snapshot {
		c.snapTables = len(simTables)
	}
	return c
}

func pgRelation(d *tableDef, xid uint32) *pgoutput.Relation {
	m := &pgoutput.Relation{Xid: pgoutput.XID(xid), RelationID: pgoutput.OID(d.oid), Namespace: d.schema(), Name: d.rel(),
		ReplicaIdentity: pgoutput.ReplicaIdentityDefault}
	for _, c := range d.cols {
		m.Columns = append(m.Columns, pgoutput.RelationColumn{Key: c.key, Name: c.name, TypeOID: pgoutput.OID(c.typeOID), TypeModifier: c.typmod()})
	}
	return m
}

func (c *checker) fail(inv, format string, args ...any) {
	d := fmt.Sprintf(format, args...)
	if c.seen[inv+d] {
		return
	}
	c.seen[inv+d] = true
	c.violations = append(c.violations, Violation{Invariant: inv, Detail: d})
}

// afterCommit runs after every target commit. Once the initial snapshot
// is complete (before that the tables are reported not ready), the target
// must hold exactly the source's state as of the transaction its
// checkpoint names: a partly applied transaction, one applied twice, or a
// checkpoint that moved without its data (or data without its
// checkpoint) all break the equality.
func (c *checker) afterCommit() {
	db := c.db
	if c.snapTables > 0 && !db.snapshotsDone(c.snapTables) {
		return
	}
	k := 0
	if lsn := db.checkpoint.CommitLSN; lsn != 0 {
		t, ok := c.h.byLSN[lsn]
		if !ok {
			c.fail(InvAtomic, "the target checkpoint names commit LSN %s, which no source transaction has", envelope.FormatLSN(lsn))
			return
		}
		k = t.hashIndex
	}
	if c.changed(k) {
		return
	}
	if db.data.hash == c.h.hashes[k] {
		return
	}
	// Describe the difference through txn_log: which transactions are
	// visible beyond or short of the checkpoint.
	var extra, missing, twice []int
	for _, t := range c.h.txns {
		if t.rows == 0 {
			continue
		}
		n := db.data.count(tTxnLog.name, fmt.Sprint(t.id))
		want := 0
		if t.hashIndex <= k {
			want = 1
		}
		switch {
		case n > 1:
			twice = append(twice, t.id)
		case n > want:
			extra = append(extra, t.id)
		case n < want:
			missing = append(missing, t.id)
		}
	}
	if len(twice) > 0 {
		c.fail(InvExactlyOnce, "transactions %v are visible at the target more than once", twice)
	}
	c.fail(InvAtomic, "after target commit %d the target's tables do not equal the source as of its checkpoint (transaction %d): "+
		"beyond it %v, missing %v, applied twice %v; a reader can see a partial or inconsistent state", db.commits, k, extra, missing, twice)
}

// changed checks the target against a classified schema change of
// accounts after a commit that brought it to source transaction k, and
// reports whether it has checked the tables' contents too.
//
// A compatible change's target DDL commits together with the first rows
// of the new shape: the target's table has the new shape exactly when the
// transaction that first used it is applied. A blocked change lets
// nothing of that transaction or after it through until a reseed took it
// over; from then on the table keeps the rows it had before the change
// (its new rows go to the reseed's shadow table) and every other table
// flows, until the handoff puts the table in its new shape, with the
// source's rows, in place.
func (c *checker) changed(k int) bool {
	sp, t := c.h.spec, c.h.driftTxn
	if sp == nil || t == nil {
		return false
	}
	db := c.db
	applied := t.hashIndex <= k
	def := db.defs[tAccounts.name]
	if c.h.compatible {
		want := sp.before
		if applied {
			want = sp.after
		}
		if !sameShape(def, want) {
			c.fail(InvAtomic, "a reader of the target sees %s as (%s) while the transaction that first used its new shape (xid %d) is applied %v: want (%s)",
				tAccounts.name, describe(def), t.xid, applied, describe(want))
		}
		return false
	}
	rs := db.reseeds[tAccounts.name]
	handed := rs != nil && rs.handedOff
	want := sp.before
	if handed {
		want = sp.after
	}
	if !sameShape(def, want) {
		c.fail(InvSchemaPinned, "the target's %s is (%s), want (%s): its shape changed other than by the reseed's handoff", tAccounts.name, describe(def), describe(want))
	}
	if applied && (rs == nil || !rs.active && !rs.handedOff) {
		c.fail(InvSchemaPinned, "the target applied source transaction %d, at or past the blocked %s of %s (xid %d, commit LSN %s), before a reseed took the change over",
			k, sp.kind, tAccounts.name, t.xid, envelope.FormatLSN(t.commitLSN))
	}
	// The table as the source had it before the change (the shadow table
	// takes the rest), or at k once handed off; every other table at k.
	tk := min(k, t.hashIndex-1)
	if handed {
		tk = k
	}
	got := db.data.tableHash(tAccounts.name)
	if got != c.h.tHashes[tk] {
		c.fail(InvSchemaPinned, "after target commit %d the target's %s does not equal the source's as of transaction %d: rows of the new shape reached the old table, or rows were lost",
			db.commits, tAccounts.name, tk)
	}
	if db.data.hash-got != c.h.hashes[k]-c.h.tHashes[k] {
		return false // described by the caller
	}
	return true
}

// scan reads the log's new entries.
func (c *checker) scan(lg *segmentlog.Log) {
	first := lg.FirstOffset()
	if c.scanNext < first {
		c.scanNext = first
		c.chunkRun = nil
	}
	end := lg.NextOffset()
	if c.scanNext >= end {
		return
	}
	// One reader for the whole run (a reader holds a 256 KiB window).
	if c.rd == nil || c.rdLog != lg || c.rd.Offset() != c.scanNext {
		if c.rd != nil {
			_ = c.rd.Close()
		}
		c.rd, c.rdLog = lg.NewReader(c.scanNext), lg
	}
	for c.scanNext < end {
		off, b, err := c.rd.Next(context.Background())
		if err != nil {
			_ = c.rd.Close()
			c.rd = nil
			return // damage: the applier reports it
		}
		c.scanNext = off + 1
		c.entry(off, b)
	}
}

// rescan forgets what was read at or after the log's first offset (a
// crash and repair may have cut it) and reads it again.
func (c *checker) rescan(lg *segmentlog.Log) {
	first := lg.FirstOffset()
	kept := c.scanned[:0]
	for _, e := range c.scanned {
		if e.offset < first {
			kept = append(kept, e)
		}
	}
	c.scanned = kept
	moves := c.moves[:0]
	for _, m := range c.moves {
		if m.offset < first {
			moves = append(moves, m)
		}
	}
	c.moves = moves
	c.inLog = map[uint64]bool{}
	for _, e := range c.scanned {
		if e.complete {
			c.inLog[e.commitLSN] = true
		}
	}
	c.scanNext, c.chunkRun = first, nil
	c.scan(lg)
}

// pinMove is a DDL barrier seen in the log.
type pinMove struct {
	offset      uint64
	relation    string
	fingerprint uint64
}

// pin is the fingerprint relation's rows must carry at the log's current
// scan position: the first pin, or the last barrier's.
func (c *checker) pin(relation string) (uint64, bool) {
	fp, ok := c.pinned[relation]
	for _, m := range c.moves {
		if m.relation == relation {
			fp, ok = m.fingerprint, true
		}
	}
	return fp, ok
}

func (c *checker) entry(off uint64, b []byte) {
	if c.unit != nil {
		u, err := c.unit(b)
		if err != nil {
			return
		}
		b = u
	}
	e, err := envelope.Decode(b)
	if err != nil {
		return
	}
	for _, d := range e.DdlEvents {
		if (d.Column != "" || d.Kind == capture.ReseedKind) && d.NewFingerprint != 0 {
			c.moves = append(c.moves, pinMove{offset: off, relation: d.Relation, fingerprint: d.NewFingerprint})
		}
	}
	for _, r := range e.Relations {
		name := r.Schema + "." + r.Name
		if want, ok := c.pin(name); ok && r.Fingerprint != want {
			c.fail(InvSchemaPinned, "log offset %d (commit LSN %s) carries rows of %s under fingerprint %016x; pinned %016x",
				off, envelope.FormatLSN(e.CommitLsn), name, r.Fingerprint, want)
		}
	}
	bd := e.Boundary
	switch bd.Kind {
	case pb.UnitKind_UNIT_KIND_TRANSACTION:
		c.chunkRun = nil
		c.scanned = append(c.scanned, scanEntry{offset: off, commitLSN: e.CommitLsn, complete: true})
		c.inLog[e.CommitLsn] = true
	case pb.UnitKind_UNIT_KIND_CHUNK:
		switch {
		case bd.ChunkIndex == 0:
			c.chunkRun = &scanEntry{offset: off, commitLSN: e.CommitLsn, chunk: 1}
		case c.chunkRun != nil && c.chunkRun.commitLSN == e.CommitLsn && c.chunkRun.chunk == bd.ChunkIndex:
			c.chunkRun.chunk++
		default:
			c.chunkRun = nil
			return
		}
		if bd.ChunkIndex+1 == bd.ChunkCount {
			c.chunkEnd[off] = true
			c.scanned = append(c.scanned, scanEntry{offset: off, commitLSN: e.CommitLsn, complete: true})
			c.inLog[e.CommitLsn] = true
			c.chunkRun = nil
		}
	default:
		c.chunkRun = nil
	}
}

// acked checks the slot's confirmed position: every source transaction
// with data that committed below it must be durable in the log. full
// re-checks from the start (after a crash changed the log).
func (c *checker) acked(confirmed uint64, full bool) {
	if full {
		c.ackChecked = 0
	}
	for c.ackChecked < len(c.h.txns) {
		t := c.h.txns[c.ackChecked]
		if t.commitLSN >= confirmed {
			return
		}
		if t.rows > 0 && !c.inLog[t.commitLSN] {
			c.fail(InvAckDurable, "the slot is confirmed at %s but transaction %d (commit LSN %s) is not durable in the log: "+
				"a restart would never receive it", envelope.FormatLSN(confirmed), t.id, envelope.FormatLSN(t.commitLSN))
		}
		c.ackChecked++
	}
}

// quarantined checks a quarantined unit the moment it is reported.
func (c *checker) quarantined(key string) bool {
	c.quarKeys[key] = true
	t := c.txnForKey(key)
	if t == nil || !t.incompatible {
		c.fail(InvQuarantine, "unit %s was quarantined but its data is compatible with the target", key)
		return false
	}
	return true
}

func (c *checker) txnForKey(key string) *htxn {
	s, ok := strings.CutPrefix(key, "transaction/")
	if !ok {
		return nil
	}
	for _, t := range c.h.txns {
		if envelope.FormatLSN(t.commitLSN) == s {
			return t
		}
	}
	return nil
}

// final checks the end state. converge: every expected transaction must
// be at the target exactly once; otherwise the target must hold a prefix
// of history exactly once (a typed error stopped the flow).
func (c *checker) final(converge bool) {
	c.afterCommit()
	db := c.db
	var missing, twice, extra []int
	last := 0
	for _, t := range c.h.txns {
		if c.h.expected(t) {
			last = t.hashIndex
		}
	}
	for _, t := range c.h.txns {
		if t.rows == 0 {
			continue
		}
		n := db.data.count(tTxnLog.name, fmt.Sprint(t.id))
		switch {
		case n > 1:
			twice = append(twice, t.id)
		case n == 1 && !c.h.expected(t):
			extra = append(extra, t.id)
		case n == 0 && c.h.expected(t) && converge:
			missing = append(missing, t.id)
		}
	}
	if len(twice) > 0 {
		c.fail(InvExactlyOnce, "transactions %v were applied more than once", twice)
	}
	if len(missing) > 0 {
		c.fail(InvNoLoss, "committed transactions %v never reached the target", head(missing))
	}
	if len(extra) > 0 {
		c.fail(InvSchemaPinned, "transactions %v reached the target although capture had to stop before them", head(extra))
	}
	if converge && db.data.hash != c.h.hashes[last] {
		c.fail(InvNoLoss, "the target's tables differ from the source's final state (source transaction %d)", last)
	}
	// Quarantine: every incompatible transaction the flow reached was
	// quarantined, and nothing else was (checked as they happened).
	for _, t := range c.h.txns {
		if t.incompatible && c.h.expected(t) && db.data.count(tTxnLog.name, fmt.Sprint(t.id)) > 0 {
			if !c.quarKeys["transaction/"+envelope.FormatLSN(t.commitLSN)] {
				c.fail(InvQuarantine, "incompatible transaction %d was applied without being quarantined", t.id)
			}
		}
	}
	open := db.openQuarantine()
	sort.Strings(open)
	if converge && len(open) > 0 {
		c.fail(InvQuarantine, "quarantine rows %v are still open after recovery", open)
	}
}

func head(ids []int) string {
	if len(ids) > 12 {
		return fmt.Sprintf("%v … (%d in all)", ids[:12], len(ids))
	}
	return fmt.Sprint(ids)
}
