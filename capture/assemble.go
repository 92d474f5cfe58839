package capture

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/pgname"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/schemachange"
)

// Pins remembers the fingerprint each relation was first captured with.
// Implementations must make Pin durable before returning.
type Pins interface {
	Pinned(relation string) (uint64, bool)
	Pin(relation string, fingerprint uint64) error
}

// ShapePins are Pins that also keep each relation's pinned shape, which
// schema change classification needs (FilePins). With plain Pins every
// change blocks, unclassified.
type ShapePins interface {
	Pins
	PinnedShape(relation string) (schemachange.Shape, bool)
	PinShape(relation string, fingerprint uint64, shape schemachange.Shape) error
}

// AssemblerOptions bound and identify assembly.
type AssemblerOptions struct {
	SourceID string
	// MemoryBytesMax bounds the memory the decoded rows of all open
	// transactions hold (rowHeapBytes: the protobuf structs with their
	// values, not their smaller encoded size); beyond it the transaction
	// being appended to spills to a file in SpillDir.
	MemoryBytesMax int64
	// ChunkBytesMax is the largest row payload one envelope carries; a
	// larger transaction is published as CHUNK units that a reader applies
	// as one transaction.
	ChunkBytesMax int64
	SpillDir      string
	Pins          Pins
	// InspectCommand is named in schema drift errors.
	InspectCommand string
	// Catalog, when set, reads the source catalog's facts about relation's
	// columns (type name, NOT NULL, default), which pgoutput does not
	// carry. It is called when a relation is first pinned and at a schema
	// change; without it an added column's nullability is unknown (blocks).
	Catalog func(relation string) (map[string]schemachange.Facts, error)
	// Policy gives the classification policy of relation (configured
	// table, target mode); nil treats every relation as unconfigured.
	Policy func(relation string) schemachange.Policy
	// PlanCommand (trellara schema ddl-plan) is named in a blocked change's
	// error; Resnapshot is the recovery a blocked plan lists.
	PlanCommand, Resnapshot string
	// NewTable, when set, reads the source catalog about a table the flow
	// does not know that the policy admits (add_table). Capture adds the
	// table when it was created in the transaction that first writes it in
	// the stream, or earlier when the catalog proves the stream carried
	// every row it ever held (NewTableFacts.EarlierCarried); otherwise rows
	// may predate the stream and the change blocks.
	NewTable func(oid uint32, live schemachange.Shape) (NewTableFacts, error)
	// Accepted reports whether a reseed of relation has taken over its
	// blocked change (ReseedKind): capture then goes on under the new
	// shape, and the first transaction under it carries a ReseedKind
	// barrier, at which the applier stops writing the old table.
	Accepted func(relation string) bool
	// OnBarrier, when set, is told each capture-side phase of every DDL
	// barrier, in order: BarrierPublished once the unit carrying it is
	// durable in the transport, then BarrierPinMoved once its pin moved
	// (the propagation contract status shows). An error stops capture, as
	// a pin that cannot move does.
	OnBarrier func(b Barrier, phase string) error
	// HoldTable (schema.on_blocked: hold_table): a blocked change does
	// not stop capture. The first transaction under the new shape carries
	// a HoldKind barrier for the relation (no target DDL) and from it on
	// the relation's rows are not published; the rest of each transaction
	// is. Once that barrier is durable, OnBarrier is told BarrierHeld
	// (the flow records the relation as held). A held relation whose
	// reseed takes its change over (Accepted, checked at every reseed
	// watermark) is published again from there, in the new shape, behind
	// a ReseedKind barrier.
	HoldTable bool
	// Held reports whether relation is already recorded as held (its
	// hold barrier is durable): a new session holds it again without a
	// second barrier.
	Held func(relation string) bool
}

// Barrier is one relation's DDL barrier as capture published it.
type Barrier struct {
	// ID is BarrierID(Relation, CommitLSN): the applier records the same
	// id on the target.
	ID        string
	Relation  string
	CommitLSN uint64
	EndLSN    uint64
	Events    []*pb.DDLEvent
	// Plan is a hold barrier's blocked change, at its real LSN.
	Plan *schemachange.Plan
}

// Capture-side barrier phases, in the order they happen.
const (
	BarrierPublished = "published" // the unit carrying the barrier is durable in the log
	BarrierPinMoved  = "pin_moved" // the relation's pin moved to the new shape
	BarrierHeld      = "held"      // a hold barrier: the relation is held (its pin stays)
)

// The protocol names live in envelope (envelope/protocol.go); these
// aliases keep capture's callers in internal/flow and internal/sim
// unchanged.
const (
	HoldKind     = envelope.HoldKind
	ReseedKind   = envelope.ReseedKind
	ReseedPrefix = envelope.ReseedPrefix
)

// BarrierID is envelope.BarrierID.
func BarrierID(relation string, commitLSN uint64) string {
	return envelope.BarrierID(relation, commitLSN)
}

// Emit receives assembled units in commit order. e is nil for a committed
// transaction that produced no rows (nothing to publish, but its end LSN is
// still acknowledgeable). final is true on the last unit of a transaction:
// only after publishing it durably may the source be acknowledged at endLSN.
//
// e is lent, not given: once Emit returns, the Assembler builds later
// transactions in the memory of e, its rows and values. A consumer encodes e
// during the call (Batch.Add); one that keeps any part of it must copy it
// (proto.Clone) before returning.
type Emit func(e *pb.Envelope, endLSN uint64, final bool) error

// Assembler turns the pgoutput message stream of one replication session
// into one envelope per committed transaction (or a CHUNK sequence for a
// large one). It holds no more than MemoryBytesMax of row data in memory.
type Assembler struct {
	opts AssemblerOptions
	emit Emit

	rels    map[pgoutput.OID]*relState
	movesMu sync.Mutex               // MovePins may run on another goroutine (a pipelined publisher)
	moves   []pinMove                // pins to move once their barrier is durable
	cur     *txnBuf                  // open Begin..Commit transaction
	streams map[pgoutput.XID]*txnBuf // open streamed transactions
	inBlock *txnBuf                  // target of changes inside a stream block
	memUsed int64
	slab    slab
	spare   *txnBuf  // a finished Begin..Commit transaction's buffer, emptied for the next
	out     struct { // what finish lends Emit for a whole transaction
		env      pb.Envelope
		boundary pb.Boundary
		rows     []*pb.Row
		rels     []*pb.Relation
	}

	stats AssemblerStats
}

// AssemblerStats are counters for status and tests.
type AssemblerStats struct {
	Transactions  uint64 // committed transactions emitted
	Rows          uint64
	Spilled       uint64 // transactions that spilled to disk
	ChunkedTxns   uint64
	AbortedStream uint64 // streamed transactions aborted whole
	AbortedSubxid uint64 // subtransactions aborted inside streams
	MemoryPeak    int64
}

type relState struct {
	rel   *pb.Relation
	name  string
	drift *SchemaDriftError
	// A compatible change: the DDL events every transaction carries until
	// one carrying them is emitted (barrierOut), and the pin it moves.
	barrier    []*pb.DDLEvent
	barrierOut bool
	shape      schemachange.Shape
	// held: a blocked change held per table (HoldTable): the relation's
	// rows are dropped at each commit; plan is the change.
	held       bool
	plan       *schemachange.Plan
	heldPinned uint64
}

// pinMove is a pin to move once the barrier unit ending at endLSN is
// durable in the transport.
type pinMove struct {
	relation    string
	fingerprint uint64
	shape       schemachange.Shape
	commitLSN   uint64
	endLSN      uint64
	events      []*pb.DDLEvent
	hold        *schemachange.Plan // a hold barrier: no pin moves
}

// NewAssembler returns an Assembler emitting to emit.
func NewAssembler(opts AssemblerOptions, emit Emit) *Assembler {
	if opts.MemoryBytesMax <= 0 {
		opts.MemoryBytesMax = 64 << 20
	}
	if opts.ChunkBytesMax <= 0 {
		opts.ChunkBytesMax = 4 << 20
	}
	if opts.SpillDir == "" {
		opts.SpillDir = os.TempDir()
	}
	return &Assembler{opts: opts, emit: emit, rels: map[pgoutput.OID]*relState{}, streams: map[pgoutput.XID]*txnBuf{}}
}

// Stats returns the counters so far.
func (a *Assembler) Stats() AssemblerStats { return a.stats }

// Idle reports whether no transaction is open: every change received so far
// has been emitted, so the source may be acknowledged up to the server's
// reported WAL end.
func (a *Assembler) Idle() bool { return a.cur == nil && len(a.streams) == 0 }

// Close discards open transactions and their spill files.
func (a *Assembler) Close() {
	if a.cur != nil {
		a.cur.discard(a)
	}
	for _, t := range a.streams {
		t.discard(a)
	}
	a.cur, a.inBlock, a.streams = nil, nil, map[pgoutput.XID]*txnBuf{}
}

// RelationFromPgoutput converts pgoutput's relation metadata into the
// envelope's, with its fingerprint.
func RelationFromPgoutput(m *pgoutput.Relation) *pb.Relation {
	ns := m.Namespace
	if ns == "" {
		ns = "pg_catalog"
	}
	r := &pb.Relation{Oid: uint32(m.RelationID), Schema: ns, Name: m.Name, ReplicaIdentity: uint32(m.ReplicaIdentity)}
	for _, c := range m.Columns {
		r.Columns = append(r.Columns, &pb.RelationColumn{Name: c.Name, TypeOid: uint32(c.TypeOID), TypeModifier: c.TypeModifier, Key: c.Key})
	}
	r.Fingerprint = envelope.RelationFingerprint(r)
	return r
}

// Handle consumes one decoded message. walStart is the WAL position of the
// XLogData that carried it.
func (a *Assembler) Handle(m pgoutput.Message, walStart pgoutput.LSN) error {
	switch m := m.(type) {
	case *pgoutput.Begin:
		if a.cur != nil {
			return fmt.Errorf("%w: Begin of xid %d at %s while xid %d is open", ErrProtocol, m.Xid, walStart, a.cur.xid)
		}
		a.cur = a.newTxn(uint32(m.Xid))
		a.cur.commitTime, a.cur.finalLSN = m.CommitTime, uint64(m.FinalLSN)
	case *pgoutput.Commit:
		if a.cur == nil {
			return fmt.Errorf("%w: Commit at %s without Begin", ErrProtocol, walStart)
		}
		t := a.cur
		a.cur = nil
		err := a.finish(t, uint64(m.CommitLSN), uint64(m.EndLSN), m.CommitTime)
		a.recycle(t)
		a.settle()
		return err
	case *pgoutput.Relation:
		return a.relation(m, walStart)
	case *pgoutput.StreamStart:
		t := a.streams[m.Xid]
		if t == nil {
			t = &txnBuf{xid: uint32(m.Xid), aborted: map[uint32]bool{}}
			a.streams[m.Xid] = t
		}
		a.inBlock = t
	case *pgoutput.StreamStop:
		a.inBlock = nil
	case *pgoutput.StreamCommit:
		t := a.streams[m.Xid]
		if t == nil {
			// A transaction streamed before a restart: its earlier blocks
			// were never seen in this session. The server resends the whole
			// transaction after restart, so this cannot happen; refuse to
			// emit a partial transaction if it does.
			return fmt.Errorf("%w: StreamCommit of xid %d at %s without its stream", ErrProtocol, m.Xid, walStart)
		}
		delete(a.streams, m.Xid)
		t.commitTime = m.CommitTime
		err := a.finish(t, uint64(m.CommitLSN), uint64(m.EndLSN), m.CommitTime)
		a.settle()
		return err
	case *pgoutput.StreamAbort:
		t := a.streams[m.Xid]
		if t == nil {
			return nil // aborted before any change of ours was streamed
		}
		if m.SubXid == m.Xid {
			delete(a.streams, m.Xid)
			t.discard(a)
			a.stats.AbortedStream++
			a.settle()
			return nil
		}
		// A rolled-back subtransaction: its rows (and those of its own
		// subtransactions, which the server aborts with their own
		// StreamAbort) vanish at commit time.
		t.aborted[uint32(m.SubXid)] = true
		a.stats.AbortedSubxid++
	case *pgoutput.Insert:
		return a.change(m.Xid, m.RelationID, walStart, func(rel *pb.Relation) (*pb.Row, error) {
			vals, err := a.slab.values(m.New, rel, walStart, false)
			if err != nil {
				return nil, err
			}
			row := a.slab.row()
			row.Op, row.NewTuple = pb.Op_OP_INSERT, vals
			return row, nil
		})
	case *pgoutput.Update:
		return a.change(m.Xid, m.RelationID, walStart, func(rel *pb.Relation) (*pb.Row, error) {
			vals, err := a.slab.values(m.New, rel, walStart, true)
			if err != nil {
				return nil, err
			}
			row := a.slab.row()
			row.Op, row.NewTuple, row.OldKind = pb.Op_OP_UPDATE, vals, oldKind(m.OldKind)
			if row.OldKind != pb.OldTuple_OLD_TUPLE_NONE {
				if row.OldTuple, err = a.slab.values(m.Old, rel, walStart, true); err != nil {
					return nil, err
				}
			}
			return row, nil
		})
	case *pgoutput.Delete:
		return a.change(m.Xid, m.RelationID, walStart, func(rel *pb.Relation) (*pb.Row, error) {
			vals, err := a.slab.values(m.Old, rel, walStart, true)
			if err != nil {
				return nil, err
			}
			row := a.slab.row()
			row.Op, row.OldKind, row.OldTuple = pb.Op_OP_DELETE, oldKind(m.OldKind), vals
			return row, nil
		})
	case *pgoutput.Truncate:
		var flags uint32
		if m.Cascade {
			flags |= 1
		}
		if m.RestartIdentity {
			flags |= 2
		}
		for _, id := range m.RelationIDs {
			if err := a.change(m.Xid, id, walStart, func(*pb.Relation) (*pb.Row, error) {
				return &pb.Row{Op: pb.Op_OP_TRUNCATE, TruncateFlags: flags}, nil
			}); err != nil {
				return err
			}
		}
	case *pgoutput.LogicalMessage:
		if !m.Transactional {
			return nil // not part of any transaction: nothing to carry
		}
		t, err := a.target(m.Xid, walStart)
		if err != nil {
			return err
		}
		if m.Prefix == ReseedPrefix {
			a.releaseTakenOver()
		}
		return a.add(t, uint32(m.Xid), nil, &pb.Row{Op: pb.Op_OP_MESSAGE, MessagePrefix: m.Prefix,
			MessageContent: append([]byte(nil), m.Content...)})
	case *pgoutput.Origin, *pgoutput.Type:
		// Origin is informational; Type precedes a Relation that already
		// names the type by OID, which is what the fingerprint pins.
	default:
		return fmt.Errorf("%w: unexpected %T at %s", ErrProtocol, m, walStart)
	}
	return nil
}

func oldKind(k pgoutput.TupleKind) pb.OldTuple {
	switch k {
	case pgoutput.TupleKey:
		return pb.OldTuple_OLD_TUPLE_KEY
	case pgoutput.TupleOld:
		return pb.OldTuple_OLD_TUPLE_FULL
	}
	return pb.OldTuple_OLD_TUPLE_NONE
}

// slab allocates the Rows and Values the assembler builds, many to an
// allocation, and hands the same memory out again once every transaction
// built from it has been emitted (rewind): one allocation per struct and
// per value's data, and the collector they drove, were a third of
// capture's CPU.
type slab struct {
	rows  []pb.Row
	vals  []pb.Value
	ptrs  []*pb.Value
	data  []byte
	nrows int // rows[:nrows] are handed out; likewise for the others
	nvals int
	nptrs int
	ndata int
}

// Chunk sizes of a slab, in elements; a value longer than slabValueMax
// bytes gets its own allocation. A rewind reuses the current chunks; the
// earlier ones are left to the collector.
const (
	slabRows     = 64
	slabValues   = 256
	slabData     = 16 << 10
	slabValueMax = 1 << 10
)

// rewind makes everything handed out free again. Only when no row built
// from the slab is referenced: every transaction holding such rows has
// been emitted or discarded (Emit: the consumer keeps none of it).
func (s *slab) rewind() { s.nrows, s.nvals, s.nptrs, s.ndata = 0, 0, 0, 0 }

// row is an empty Row.
func (s *slab) row() *pb.Row {
	if s.nrows == len(s.rows) {
		s.rows, s.nrows = make([]pb.Row, slabRows), 0
	}
	r := &s.rows[s.nrows]
	s.nrows++
	*r = pb.Row{} // not Reset, whose atomic store of the type's metadata showed in profiles
	return r
}

// bytes is a copy of b, whose capacity is its length (rowHeapBytes counts
// the capacity of each value's data).
func (s *slab) bytes(b []byte) []byte {
	n := len(b)
	if n > slabValueMax {
		return append(make([]byte, 0, n), b...)
	}
	if len(s.data)-s.ndata < n {
		s.data, s.ndata = make([]byte, slabData), 0
	}
	c := s.data[s.ndata : s.ndata+n : s.ndata+n]
	copy(c, b)
	s.ndata += n
	return c
}

// values converts a tuple: one Value per column.
func (s *slab) values(cols []pgoutput.Column, rel *pb.Relation, at pgoutput.LSN, toastOK bool) ([]*pb.Value, error) {
	n := len(cols)
	if n != len(rel.Columns) {
		return nil, fmt.Errorf("%w: %s.%s change at %s has %d columns, its relation %d",
			ErrProtocol, rel.Schema, rel.Name, at, len(cols), len(rel.Columns))
	}
	if len(s.vals)-s.nvals < n {
		s.vals, s.nvals = make([]pb.Value, max(slabValues, n)), 0
	}
	if len(s.ptrs)-s.nptrs < n {
		s.ptrs, s.nptrs = make([]*pb.Value, max(slabValues, n)), 0
	}
	vals, out := s.vals[s.nvals:s.nvals+n:s.nvals+n], s.ptrs[s.nptrs:s.nptrs+n:s.nptrs+n]
	for i, c := range cols {
		v := &vals[i]
		out[i] = v
		*v = pb.Value{}
		switch c.Kind {
		case pgoutput.ColumnNull:
			v.Kind = pb.ValueKind_VALUE_KIND_NULL
		case pgoutput.ColumnText:
			// Copy: the decoder aliases the connection's receive buffer.
			v.Kind, v.Data = pb.ValueKind_VALUE_KIND_TEXT, s.bytes(c.Data)
		case pgoutput.ColumnUnchangedToast:
			if !toastOK {
				return nil, fmt.Errorf("%w: %s.%s column %s: unchanged TOAST in an insert at %s",
					ErrProtocol, rel.Schema, rel.Name, rel.Columns[i].Name, at)
			}
			v.Kind = pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST
		default:
			return nil, fmt.Errorf("%w: %s.%s column %s: value kind %q at %s (binary mode is never requested)",
				ErrProtocol, rel.Schema, rel.Name, rel.Columns[i].Name, c.Kind, at)
		}
	}
	s.nvals += n
	s.nptrs += n
	return out, nil
}

func (a *Assembler) relation(m *pgoutput.Relation, at pgoutput.LSN) error {
	rel := RelationFromPgoutput(m)
	if old := a.rels[m.RelationID]; old != nil && old.drift == nil && old.rel.Fingerprint == rel.Fingerprint && old.rel.Oid == rel.Oid {
		// The server re-describes a relation at every stream block and
		// after cache invalidations; the same shape is the same relation.
		return nil
	}
	st := &relState{rel: rel, name: RelationName(rel)}
	prev := a.rels[m.RelationID]
	a.rels[m.RelationID] = st
	if a.opts.Pins == nil {
		return nil
	}
	sp, _ := a.opts.Pins.(ShapePins)
	pinned, ok := a.opts.Pins.Pinned(st.name)
	switch {
	case !ok && prev != nil && prev.name != st.name:
		// The same relation under a new name: renamed.
		old, _ := a.shapeOf(sp, prev.name, prev.rel, false)
		live, err := a.shapeOf(sp, st.name, rel, true)
		if err != nil {
			return err
		}
		st.drift = a.drift(st, prev.rel.Fingerprint, old, live)
	case !ok && prev == nil && a.renamedSinceLastSession(sp, st):
		// A pinned relation's OID under a new name, met first in this
		// session: renamed while capture was not running.
	case !ok && sp != nil && a.opts.Policy != nil && !a.policy(st.name).Configured:
		// Neither pinned nor one of the flow's tables: a table new to the
		// flow (add_table), which only a whole-schema publication sends.
		return a.newTable(st)
	case !ok:
		if sp == nil {
			if err := a.opts.Pins.Pin(st.name, rel.Fingerprint); err != nil {
				return fmt.Errorf("relay: pin %s: %w", st.name, err)
			}
			return nil
		}
		live, err := a.shapeOf(sp, st.name, rel, true)
		if err != nil {
			return err
		}
		if err := sp.PinShape(st.name, rel.Fingerprint, live); err != nil {
			return fmt.Errorf("relay: pin %s: %w", st.name, err)
		}
	case pinned == rel.Fingerprint:
		if sp != nil {
			if _, kept := sp.PinnedShape(st.name); !kept {
				// A pin taken before shapes were kept: fill it in.
				live, err := a.shapeOf(sp, st.name, rel, true)
				if err != nil {
					return err
				}
				if err := sp.PinShape(st.name, rel.Fingerprint, live); err != nil {
					return fmt.Errorf("relay: pin %s: %w", st.name, err)
				}
			}
		}
	default:
		var old schemachange.Shape
		if sp != nil {
			old, _ = sp.PinnedShape(st.name)
		}
		live, err := a.shapeOf(sp, st.name, rel, true)
		if err != nil {
			return err
		}
		plan := a.plan(st, old, live)
		if !plan.AutoApplies() && a.opts.Accepted != nil && a.opts.Accepted(st.name) {
			st.shape = live
			st.barrier = []*pb.DDLEvent{{Kind: ReseedKind, Relation: st.name, OldFingerprint: pinned, NewFingerprint: rel.Fingerprint,
				Detail: "taken over by a reseed: " + plan.Kinds()}}
			return nil
		}
		if !plan.AutoApplies() && a.opts.HoldTable {
			d := a.drift(st, pinned, old, live)
			d.Plan.Holds = "only this table is held (schema.on_blocked: hold_table): its rows are not published from this transaction on; the other tables keep flowing"
			st.held, st.plan, st.shape, st.heldPinned = true, d.Plan, live, pinned
			if a.opts.Held == nil || !a.opts.Held(st.name) {
				st.barrier = []*pb.DDLEvent{{Kind: HoldKind, Relation: st.name, OldFingerprint: pinned, NewFingerprint: rel.Fingerprint,
					Detail: "held: " + plan.Kinds()}}
			}
			return nil
		}
		if !plan.AutoApplies() {
			st.drift = a.drift(st, pinned, old, live)
			return nil
		}
		// Compatible: the first transaction under the new shape carries
		// the change to the target (a DDL barrier), and the pin moves
		// once that transaction is durable.
		st.shape = live
		for _, c := range plan.Changes {
			col, typ := c.Column, ""
			for _, lc := range live.Columns {
				if lc.Name == col {
					typ = lc.Type()
				}
			}
			st.barrier = append(st.barrier, &pb.DDLEvent{Kind: string(c.Kind), Relation: st.name, OldFingerprint: pinned,
				NewFingerprint: rel.Fingerprint, Column: col, OldColumn: c.OldColumn, ColumnType: typ, Detail: c.TargetDDL})
		}
	}
	return nil
}

// NewTableFacts are what the source catalog says about a table new to the
// flow.
type NewTableFacts struct {
	// CreatedXid is the transaction that created the table; 0 when the
	// table is gone.
	CreatedXid uint32
	// EarlierCarried: the source catalog proves the stream carries every
	// row the table ever held even when CreatedXid is an earlier
	// transaction than the one that first writes it (docs/SCHEMA.md,
	// "add_table"). When false, NotCarried says which condition failed.
	EarlierCarried bool
	NotCarried     string
	// Definition is the table's definition for the target (the add_table
	// DDLEvent's detail).
	Definition string
	// Refused says why the table cannot join as it is ("" when it can):
	// no replica identity, or a definition that no longer has the
	// stream's columns.
	Refused string
}

// AddTableKind is the DDLEvent kind of a table that joins the flow
// (schemachange.AddTable); its Detail is the source's definition of the
// table (apply.AddTableDetail), which the applier creates the target table
// from, in one transaction with the table's first rows.
const AddTableKind = envelope.AddTableKind

// newTable classifies a relation the flow does not know. An admitted table
// created in the transaction that first writes it, or earlier where the
// catalog proves the stream carried it whole (EarlierCarried), carries an
// add_table barrier: every row it ever held is then in the stream, and its
// pin is taken once the barrier is durable (MovePins). Anything else
// blocks with the plan.
func (a *Assembler) newTable(st *relState) error {
	live, err := a.shapeOf(a.opts.Pins.(ShapePins), st.name, st.rel, true)
	if err != nil {
		return err
	}
	p := a.policy(st.name)
	var facts NewTableFacts
	refused := ""
	if p.AdmitTables && a.opts.NewTable != nil {
		if facts, err = a.opts.NewTable(st.rel.Oid, live); err != nil {
			return fmt.Errorf("relay: read the source catalog for new table %s: %w", st.name, err)
		}
		var xid uint32
		switch {
		case a.inBlock != nil:
			xid = a.inBlock.xid
		case a.cur != nil:
			xid = a.cur.xid
		}
		switch {
		case facts.CreatedXid == 0:
			refused = "the table is gone from the source catalog, so its definition cannot be read"
		case facts.CreatedXid != xid && !facts.EarlierCarried:
			refused = fmt.Sprintf("the table was created by xid %d, not by xid %d that first wrote it in the stream, and %s, "+
				"so it may hold rows the stream never carried", facts.CreatedXid, xid, facts.NotCarried)
		case facts.Refused != "":
			refused = facts.Refused
		case facts.Definition == "":
			refused = "the source catalog gave no definition of the table"
		}
	}
	plan := schemachange.NewTablePlan(live, p, refused)
	if !plan.AutoApplies() {
		st.drift = a.blocked(st, 0, schemachange.Shape{}, plan)
		st.drift.PinnedColumns = "none: not one of the flow's tables"
		return nil
	}
	st.shape = live
	st.barrier = []*pb.DDLEvent{{Kind: AddTableKind, Relation: st.name, NewFingerprint: st.rel.Fingerprint, Detail: facts.Definition}}
	return nil
}

// renamedSinceLastSession reports whether st is a pinned relation under
// a new name (the same OID), renamed before this session met it, and then
// sets st.drift to the drop_or_rename_table change. Within a session the
// previous Relation message tells a rename; across sessions only the pins
// do, which is why pins keep each relation's OID.
func (a *Assembler) renamedSinceLastSession(sp ShapePins, st *relState) bool {
	all, ok := a.opts.Pins.(interface{ All() map[string]uint64 })
	if sp == nil || !ok {
		return false
	}
	for name, fp := range all.All() {
		old, kept := sp.PinnedShape(name)
		if !kept || name == st.name || old.OID == 0 || old.OID != st.rel.Oid {
			continue
		}
		live, err := a.shapeOf(sp, st.name, st.rel, false)
		if err != nil {
			return false
		}
		old.Relation = name
		st.drift = a.drift(st, fp, old, live)
		return true
	}
	return false
}

// shapeOf is rel's shape, with the source catalog's facts when facts is
// set and a Catalog is configured.
func (a *Assembler) shapeOf(sp ShapePins, name string, rel *pb.Relation, facts bool) (schemachange.Shape, error) {
	var f map[string]schemachange.Facts
	if facts && a.opts.Catalog != nil {
		var err error
		if f, err = a.opts.Catalog(name); err != nil {
			return schemachange.Shape{}, fmt.Errorf("relay: read the source catalog for %s: %w", name, err)
		}
	}
	return ShapeOf(name, rel, f), nil
}

// shapeOf is rel's shape for classification, with facts where given.
func ShapeOf(name string, rel *pb.Relation, f map[string]schemachange.Facts) schemachange.Shape {
	sh := schemachange.Shape{Relation: name, OID: rel.Oid}
	for _, c := range rel.Columns {
		col := schemachange.Column{Name: c.Name, TypeOID: c.TypeOid, TypeMod: c.TypeModifier, Key: c.Key}
		if fc, ok := f[c.Name]; ok {
			fc := fc
			col.Facts = &fc
		}
		sh.Columns = append(sh.Columns, col)
	}
	return sh
}

func (a *Assembler) policy(name string) schemachange.Policy {
	if a.opts.Policy == nil {
		return schemachange.Policy{Mode: schemachange.ModeStrict}
	}
	return a.opts.Policy(name)
}

func (a *Assembler) plan(st *relState, old, live schemachange.Shape) *schemachange.Plan {
	if len(old.Columns) == 0 && old.Relation == "" {
		// Nothing kept to compare with: unclassified, and blocked.
		return &schemachange.Plan{Relation: st.name, Live: live, Blocked: true}
	}
	return schemachange.NewPlan(relTarget(st.rel), old, live, a.policy(st.name))
}

func relTarget(r *pb.Relation) string { return pgx.Identifier{r.Schema, r.Name}.Sanitize() }

// drift is the error that stops capture at a blocked change. Its LSN is
// filled in at the commit of the transaction that first used the new
// shape (pgoutput sends the Relation message without a WAL position).
func (a *Assembler) drift(st *relState, pinned uint64, old, live schemachange.Shape) *SchemaDriftError {
	return a.blocked(st, pinned, old, a.plan(st, old, live))
}

// blocked is the error that stops capture at plan's change.
func (a *Assembler) blocked(st *relState, pinned uint64, old schemachange.Shape, plan *schemachange.Plan) *SchemaDriftError {
	plan.Blocked = true
	plan.Holds = "the whole flow holds (schema.on_blocked: hold_flow): no table advances past this transaction until the change is resolved; " +
		"with schema.on_blocked: hold_table only the changed table would stop"
	if a.opts.Resnapshot != "" {
		plan.Commands = append(plan.Commands, a.opts.Resnapshot)
	}
	pc := "see pins"
	if len(old.Columns) > 0 {
		pc = describeShape(old)
	}
	return &SchemaDriftError{Relation: st.name, Pinned: pinned, Live: st.rel.Fingerprint,
		LiveColumns: DescribeColumns(st.rel), PinnedColumns: pc, InspectCommand: a.opts.InspectCommand,
		PlanCommand: a.opts.PlanCommand, Plan: plan}
}

func describeShape(sh schemachange.Shape) string {
	s := ""
	for i, c := range sh.Columns {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s oid %d", c.Name, c.TypeOID)
		if c.Key {
			s += " key"
		}
	}
	return s
}

// MovePins moves the pin of every barrier durable at durableEnd (the
// transport holds every unit ending at or before it). A crash before a
// pin moves leaves the old pin: the next session sees the same change
// again and emits the barrier again, which the target applies
// idempotently.
//
// It is safe to call from another goroutine than the one calling Handle:
// the sidecar moves pins on its publisher's goroutine.
func (a *Assembler) MovePins(durableEnd uint64) error {
	a.movesMu.Lock()
	defer a.movesMu.Unlock()
	keep := a.moves[:0]
	for _, mv := range a.moves {
		if mv.endLSN > durableEnd {
			keep = append(keep, mv)
			continue
		}
		b := Barrier{ID: BarrierID(mv.relation, mv.commitLSN), Relation: mv.relation, CommitLSN: mv.commitLSN, EndLSN: mv.endLSN, Events: mv.events, Plan: mv.hold}
		if err := a.barrierPhase(b, BarrierPublished); err != nil {
			return err
		}
		if mv.hold != nil {
			// Held, not moved: the pin stays until a reseed takes the
			// change over.
			if err := a.barrierPhase(b, BarrierHeld); err != nil {
				return err
			}
			continue
		}
		sp, ok := a.opts.Pins.(ShapePins)
		if !ok {
			continue
		}
		if err := sp.PinShape(mv.relation, mv.fingerprint, mv.shape); err != nil {
			return fmt.Errorf("relay: move the pin of %s past its DDL barrier at %s: %w", mv.relation, envelope.FormatLSN(mv.endLSN), err)
		}
		if err := a.barrierPhase(b, BarrierPinMoved); err != nil {
			return err
		}
	}
	a.moves = keep
	return nil
}

func (a *Assembler) barrierPhase(b Barrier, phase string) error {
	if a.opts.OnBarrier == nil {
		return nil
	}
	if err := a.opts.OnBarrier(b, phase); err != nil {
		return fmt.Errorf("relay: record phase %s of DDL barrier %s: %w", phase, b.ID, err)
	}
	return nil
}

// DescribeColumns lists r's columns for messages: name, type OID, key.
func DescribeColumns(r *pb.Relation) string { return describeShape(ShapeOf("", r, nil)) }

// target finds the transaction a change belongs to.
func (a *Assembler) target(xid pgoutput.XID, at pgoutput.LSN) (*txnBuf, error) {
	if a.inBlock != nil {
		return a.inBlock, nil
	}
	if a.cur != nil {
		return a.cur, nil
	}
	return nil, fmt.Errorf("%w: change of xid %d at %s outside any transaction", ErrProtocol, xid, at)
}

func (a *Assembler) change(xid pgoutput.XID, relID pgoutput.OID, at pgoutput.LSN, build func(*pb.Relation) (*pb.Row, error)) error {
	t, err := a.target(xid, at)
	if err != nil {
		return err
	}
	st := a.rels[relID]
	if st == nil {
		return fmt.Errorf("%w: change for relation OID %d at %s before its Relation message", ErrProtocol, relID, at)
	}
	if st.drift != nil {
		// Blocked: nothing is assembled under the new shape. The error is
		// returned at the commit, which gives it its LSN; a transaction
		// that aborts never stops capture.
		if t.drift == nil {
			t.drift = st.drift
		}
		return nil
	}
	if len(st.barrier) > 0 && !st.barrierOut {
		t.addBarrier(st)
	}
	row, err := build(st.rel)
	if err != nil {
		return err
	}
	return a.add(t, uint32(xid), st, row)
}

// releaseTakenOver publishes again, from here on, each held relation a
// reseed has taken over: the reseed's begin watermark follows its
// takeover record, so by the time capture meets that watermark the
// record is there, and every row of the relation after the watermark
// (the reseed's chunks read the source after it) is published, in the
// new shape, behind a ReseedKind barrier.
func (a *Assembler) releaseTakenOver() {
	if a.opts.Accepted == nil {
		return
	}
	for _, st := range a.rels {
		if !st.held || !a.opts.Accepted(st.name) {
			continue
		}
		st.held = false
		st.barrier = []*pb.DDLEvent{{Kind: ReseedKind, Relation: st.name, OldFingerprint: st.heldPinned, NewFingerprint: st.rel.Fingerprint,
			Detail: "taken over by a reseed: " + st.plan.Kinds()}}
		st.barrierOut = false
	}
}

// dropped reports whether c is a row of a held relation: not published.
func (t *txnBuf) dropped(c change) bool {
	i := int(c.row.RelationIndex)
	return c.row.Op != pb.Op_OP_MESSAGE && i < len(t.rels) && t.rels[i].held
}

// add appends a row (rel nil for a logical message) to t, spilling when the
// memory bound is passed.
func (a *Assembler) add(t *txnBuf, subxid uint32, st *relState, row *pb.Row) error {
	if st != nil {
		row.RelationIndex = t.relIndex(st)
	}
	if t.spill != nil {
		return t.writeSpill(subxid, row)
	}
	size := int64(envelope.SizeRow(row)) + 32
	t.rows = append(t.rows, change{subxid: subxid, row: row})
	heap := rowHeapBytes(row)
	t.memBytes += size
	t.heapBytes += heap
	a.memUsed += heap
	if a.memUsed > a.stats.MemoryPeak {
		a.stats.MemoryPeak = a.memUsed
	}
	if a.memUsed > a.opts.MemoryBytesMax {
		if err := t.startSpill(a); err != nil {
			return err
		}
		a.stats.Spilled++
	}
	return nil
}

// finish emits a committed transaction.
func (a *Assembler) finish(t *txnBuf, commitLSN, endLSN uint64, commitTime pgoutput.Timestamp) error {
	defer t.discard(a)
	if t.drift != nil {
		d := *t.drift
		d.LSN, d.Xid = commitLSN, t.xid
		if d.Plan != nil {
			p := *d.Plan
			p.LSN, p.Xid = envelope.FormatLSN(commitLSN), t.xid
			d.Plan = &p
		}
		return &d
	}
	// The envelope, its boundary and lists are the assembler's, lent to
	// Emit (as the rows are) and reused for the next transaction.
	head := &a.out.env
	head.Reset()
	head.ProtocolVersion = envelope.ProtocolVersion
	head.SourceId = a.opts.SourceID
	head.Xid, head.CommitLsn, head.EndLsn = t.xid, commitLSN, endLSN
	head.CommitTimeUnixMicros = commitTime.Time().UnixMicro()
	// Only relations that surviving rows reference: a rolled-back
	// subtransaction must leave no trace, not even in the schema
	// fingerprint. remap[i] is the envelope's index of t.rels[i],
	// noRelation until a surviving row references it.
	var remapBuf [relIndexScanMax]uint32
	remap := remapBuf[:0]
	if len(t.rels) > len(remapBuf) {
		remap = make([]uint32, 0, len(t.rels))
	}
	for range t.rels {
		remap = append(remap, noRelation)
	}
	clear(a.out.rels)
	head.Relations = a.out.rels[:0]
	defer func() { a.out.rels = head.Relations }()
	err := t.each(func(c change) error {
		if t.dropped(c) {
			return nil
		}
		if i := int(c.row.RelationIndex); c.row.Op != pb.Op_OP_MESSAGE && i < len(t.rels) && len(t.rels[i].barrier) > 0 && !t.rels[i].barrierOut {
			st := t.rels[i]
			// Taken over since its rows arrived (a streamed transaction).
			t.addBarrier(st)
		}
		if c.row.Op != pb.Op_OP_MESSAGE {
			if remap[c.row.RelationIndex] == noRelation {
				remap[c.row.RelationIndex] = uint32(len(head.Relations))
				head.Relations = append(head.Relations, t.rels[c.row.RelationIndex].rel)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	fix := func(r *pb.Row) {
		if r.Op != pb.Op_OP_MESSAGE {
			r.RelationIndex = remap[r.RelationIndex]
		}
	}
	whole := func() error {
		clear(a.out.rows)
		rows := a.out.rows[:0]
		defer func() {
			if cap(rows) <= txnRowsKept {
				a.out.rows = rows
			} else {
				a.out.rows = nil
			}
		}()
		err := t.each(func(c change) error {
			if !t.dropped(c) {
				rows = append(rows, c.row)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(rows) == 0 && !t.holds() {
			return a.emit(nil, endLSN, true)
		}
		for i, r := range rows {
			r.Seq = uint64(i)
			fix(r)
		}
		head.Rows = rows
		head.Boundary = &a.out.boundary
		head.Boundary.Reset()
		head.Boundary.Kind, head.Boundary.TotalRows = pb.UnitKind_UNIT_KIND_TRANSACTION, uint64(len(rows))
		a.barrier(t, head, endLSN)
		envelope.Seal(head)
		a.stats.Transactions++
		a.stats.Rows += uint64(len(rows))
		return a.emit(head, endLSN, true)
	}
	if t.spill == nil && t.memBytes <= a.opts.ChunkBytesMax {
		return whole()
	}

	// Large: first pass sizes the chunks, second pass emits them, so no
	// more than one chunk of rows is in memory at once.
	var counts []uint64
	var total, cur uint64
	var curBytes int64
	err = t.each(func(c change) error {
		if t.dropped(c) {
			return nil
		}
		sz := int64(envelope.SizeRow(c.row)) + 8
		if cur > 0 && curBytes+sz > a.opts.ChunkBytesMax {
			counts = append(counts, cur)
			cur, curBytes = 0, 0
		}
		cur++
		curBytes += sz
		total++
		return nil
	})
	if err != nil {
		return err
	}
	if cur > 0 {
		counts = append(counts, cur)
	}
	if len(counts) <= 1 {
		// Spilled, but what survived fits one envelope.
		return whole()
	}
	var (
		idx  int
		rows []*pb.Row
		seq  uint64
	)
	flush := func() error {
		e := proto.Clone(head).(*pb.Envelope)
		e.Rows = rows
		e.Boundary = &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_CHUNK, ChunkIndex: uint32(idx),
			ChunkCount: uint32(len(counts)), TotalRows: total}
		if idx == 0 {
			// The first chunk carries the barrier: its DDL precedes every
			// row of the transaction.
			a.barrier(t, e, endLSN)
		}
		envelope.Seal(e)
		final := idx == len(counts)-1
		idx++
		rows = nil
		return a.emit(e, endLSN, final)
	}
	err = t.each(func(c change) error {
		if t.dropped(c) {
			return nil
		}
		c.row.Seq = seq
		fix(c.row)
		seq++
		rows = append(rows, c.row)
		if uint64(len(rows)) == counts[idx] {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	a.stats.Transactions++
	a.stats.ChunkedTxns++
	a.stats.Rows += total
	return nil
}

// noRelation marks a transaction's relation no surviving row references.
const noRelation = ^uint32(0)

// barrier puts the DDL events t carries on e and records the pins they
// move once e is durable.
func (a *Assembler) barrier(t *txnBuf, e *pb.Envelope, endLSN uint64) {
	for _, st := range t.barriers {
		hold := len(st.barrier) > 0 && st.barrier[0].Kind == HoldKind
		used := hold // a hold barrier carries none of its relation's rows
		for _, r := range e.Relations {
			used = used || r == st.rel
		}
		if hold && !st.held {
			continue // taken over before this commit: its own barrier follows
		}
		if !used {
			// Its rows were all in rolled-back subtransactions: the
			// next transaction using the relation carries the barrier.
			continue
		}
		var events []*pb.DDLEvent
		for _, ev := range st.barrier {
			d := proto.Clone(ev).(*pb.DDLEvent)
			d.Seq = uint64(len(e.DdlEvents))
			e.DdlEvents = append(e.DdlEvents, d)
			events = append(events, d)
		}
		st.barrierOut = true
		a.movesMu.Lock()
		mv := pinMove{relation: st.name, fingerprint: st.rel.Fingerprint, shape: st.shape,
			commitLSN: e.CommitLsn, endLSN: endLSN, events: events}
		if hold {
			p := *st.plan
			p.LSN, p.Xid = envelope.FormatLSN(e.CommitLsn), e.Xid
			mv.hold = &p
		}
		a.moves = append(a.moves, mv)
		a.movesMu.Unlock()
	}
}

// change is one buffered row and the (sub)transaction that made it.
type change struct {
	subxid uint32
	row    *pb.Row
}

// txnBuf buffers one open transaction: in memory until the memory bound is
// passed, then entirely in a spill file.
type txnBuf struct {
	xid        uint32
	finalLSN   uint64
	commitTime pgoutput.Timestamp
	rels       []*relState
	relIdx     map[*relState]uint32
	rows       []change
	memBytes   int64 // the rows' encoded size: it decides whole or CHUNK units
	heapBytes  int64 // what they hold in memory (rowHeapBytes): the memory bound
	aborted    map[uint32]bool
	// drift is the blocked change the transaction ran into; barriers are
	// the relations whose compatible change it carries.
	drift    *SchemaDriftError
	barriers []*relState

	spill  *os.File
	spillW *bufio.Writer
	buf    []byte
}

// settle rewinds the slab once no transaction is open: every row built
// from it was then emitted (and Emit keeps none) or discarded. While a
// streamed transaction stays open, its rows hold the slab.
func (a *Assembler) settle() {
	if a.Idle() {
		a.slab.rewind()
	}
}

// newTxn is an empty txnBuf for transaction xid: the spare one when there
// is one.
func (a *Assembler) newTxn(xid uint32) *txnBuf {
	t := a.spare
	a.spare = nil
	if t == nil {
		t = &txnBuf{}
	}
	t.xid = xid
	return t
}

// txnRowsKept bounds the rows a recycled txnBuf, and the row list of the
// envelope finish lends, keep room for.
const txnRowsKept = 4096

// recycle keeps the finished transaction t, emptied, as the spare for the
// next one, with the storage of its slices: nothing outside the assembler
// holds a txnBuf or its slices (an emitted envelope has Rows and Relations
// of its own).
func (a *Assembler) recycle(t *txnBuf) {
	rows := t.rows[:0]
	if cap(rows) > txnRowsKept {
		rows = nil
	}
	clear(t.rels)
	clear(t.barriers)
	clear(t.relIdx)
	*t = txnBuf{rows: rows, rels: t.rels[:0], relIdx: t.relIdx, barriers: t.barriers[:0]}
	a.spare = t
}

// holds reports whether t carries a hold barrier still to publish.
func (t *txnBuf) holds() bool {
	for _, st := range t.barriers {
		if st.held && len(st.barrier) > 0 && !st.barrierOut {
			return true
		}
	}
	return false
}

func (t *txnBuf) addBarrier(st *relState) {
	for _, b := range t.barriers {
		if b == st {
			return
		}
	}
	t.barriers = append(t.barriers, st)
}

// relIndexScanMax is how many relations a transaction looks up by a scan
// of t.rels; beyond it, by the map t.relIdx.
const relIndexScanMax = 8

func (t *txnBuf) relIndex(st *relState) uint32 {
	if len(t.rels) <= relIndexScanMax {
		for i, r := range t.rels {
			if r == st {
				return uint32(i)
			}
		}
	} else {
		if len(t.relIdx) == 0 {
			if t.relIdx == nil {
				t.relIdx = map[*relState]uint32{}
			}
			for i, r := range t.rels {
				t.relIdx[r] = uint32(i)
			}
		}
		if i, ok := t.relIdx[st]; ok {
			return i
		}
		t.relIdx[st] = uint32(len(t.rels))
	}
	t.rels = append(t.rels, st)
	return uint32(len(t.rels) - 1)
}

// Spill record: u32 length of row bytes | u32 subxid | row (protobuf Row).
func (t *txnBuf) startSpill(a *Assembler) error {
	f, err := os.CreateTemp(a.opts.SpillDir, fmt.Sprintf("trellara-spill-%d-*", t.xid))
	if err != nil {
		return fmt.Errorf("relay: spill xid %d: %w", t.xid, err)
	}
	// Unlinked at once: a crash leaves nothing behind to clean up.
	_ = os.Remove(f.Name())
	t.spill, t.spillW = f, bufio.NewWriterSize(f, 1<<20)
	for _, c := range t.rows {
		if err := t.writeSpill(c.subxid, c.row); err != nil {
			return err
		}
	}
	a.memUsed -= t.heapBytes
	t.rows, t.memBytes, t.heapBytes = nil, 0, 0
	return nil
}

func (t *txnBuf) writeSpill(subxid uint32, row *pb.Row) error {
	var err error
	t.buf, err = envelope.AppendRow(t.buf[:0], row)
	if err != nil {
		return fmt.Errorf("relay: spill xid %d: %w", t.xid, err)
	}
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[0:], uint32(len(t.buf)))
	binary.LittleEndian.PutUint32(hdr[4:], subxid)
	if _, err := t.spillW.Write(hdr[:]); err != nil {
		return fmt.Errorf("relay: spill xid %d: %w", t.xid, err)
	}
	if _, err := t.spillW.Write(t.buf); err != nil {
		return fmt.Errorf("relay: spill xid %d: %w", t.xid, err)
	}
	return nil
}

// each visits the surviving rows in order, skipping those of aborted
// subtransactions.
func (t *txnBuf) each(fn func(change) error) error {
	if t.spill == nil {
		for _, c := range t.rows {
			if t.aborted[c.subxid] {
				continue
			}
			if err := fn(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := t.spillW.Flush(); err != nil {
		return fmt.Errorf("relay: spill xid %d: %w", t.xid, err)
	}
	r := bufio.NewReaderSize(io.NewSectionReader(t.spill, 0, 1<<62), 1<<20)
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("relay: read spill xid %d: %w", t.xid, err)
		}
		n := binary.LittleEndian.Uint32(hdr[0:])
		sub := binary.LittleEndian.Uint32(hdr[4:])
		if cap(t.buf) < int(n) {
			t.buf = make([]byte, n)
		}
		b := t.buf[:n]
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("relay: read spill xid %d: %w", t.xid, err)
		}
		if t.aborted[sub] {
			continue
		}
		row := new(pb.Row)
		if err := proto.Unmarshal(b, row); err != nil {
			return fmt.Errorf("relay: read spill xid %d: %w", t.xid, err)
		}
		if err := fn(change{subxid: sub, row: row}); err != nil {
			return err
		}
	}
}

func (t *txnBuf) discard(a *Assembler) {
	a.memUsed -= t.heapBytes
	clear(t.rows)
	t.rows, t.memBytes, t.heapBytes = t.rows[:0], 0, 0
	if t.spill != nil {
		_ = t.spill.Close()
		t.spill = nil
	}
}

// RelationName is the relation's name as Trellara prints and keys it
// (schema pins, snapshot progress, quarantine): pgname.Name's text
// form, which parses back to the same table.
func RelationName(rel *pb.Relation) string {
	return pgname.Name{Schema: rel.Schema, Name: rel.Name}.String()
}

// Sizes of the structs a decoded row is made of, on this platform.
var (
	rowStructBytes   = int64(unsafe.Sizeof(pb.Row{}))
	valueStructBytes = int64(unsafe.Sizeof(pb.Value{}))
	pointerBytes     = int64(unsafe.Sizeof(uintptr(0)))
)

// rowHeapBytes is what a decoded row holds in memory: the Row, each Value
// with its pointer and its data, and the message fields. Its encoded size
// (envelope.SizeRow) is a third to a sixth of this for rows of short values, and
// bounding memory by it let the relay hold several times MemoryBytesMax.
func rowHeapBytes(r *pb.Row) int64 {
	n := rowStructBytes + int64(len(r.MessagePrefix)+cap(r.MessageContent))
	for _, vs := range [][]*pb.Value{r.NewTuple, r.OldTuple} {
		n += pointerBytes * int64(cap(vs))
		for _, v := range vs {
			n += valueStructBytes + int64(cap(v.Data))
		}
	}
	return n
}
