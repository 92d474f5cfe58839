package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay/pgoutput"
)

// The simulated target shows nothing of an open or rolled-back
// transaction and refuses what the real one would.
func TestSimTarget(t *testing.T) {
	ctx := context.Background()
	db := newSimDB(func() time.Time { return time.Unix(0, 0) })
	commits := 0
	db.onCommit = func() { commits++ }
	c := db.connect()
	if _, err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.connect().Start(ctx); !errors.Is(err, apply.ErrBusy) {
		t.Errorf("second applier started: %v", err)
	}
	rel := relationOf(tOrders)
	ins := func(status string) *pb.Envelope {
		return &pb.Envelope{Relations: []*pb.Relation{rel}, Rows: []*pb.Row{{Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{
			tv("1"), tv(status), tv("10"), tv("doc")}}}}
	}
	tx, _ := c.Begin(ctx)
	if _, _, err := tx.Apply(ctx, 0, ins("new")); err != nil {
		t.Fatal(err)
	}
	if len(db.data.tables[tOrders.name].rows) != 0 {
		t.Fatal("an uncommitted row is visible")
	}
	tx.Rollback(ctx)
	if len(db.data.tables[tOrders.name].rows) != 0 || commits != 0 {
		t.Fatal("a rolled-back row is visible")
	}
	tx, _ = c.Begin(ctx)
	_, _, err := tx.Apply(ctx, 3, ins("incompatible-7"))
	var r *apply.Refusal
	if !errors.As(err, &r) || r.Unit != 3 || r.SQLState != "23514" {
		t.Fatalf("CHECK violation = %v", err)
	}
	tx.Rollback(ctx)
	tx, _ = c.Begin(ctx)
	if _, _, err := tx.Apply(ctx, 0, ins("new")); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil || commits != 1 || len(db.data.tables[tOrders.name].rows) != 1 {
		t.Fatalf("commit: %v, %d commits", err, commits)
	}
	tx, _ = c.Begin(ctx)
	_, _, err = tx.Apply(ctx, 0, ins("new"))
	if !errors.As(err, &r) || r.SQLState != "23505" {
		t.Errorf("duplicate key = %v", err)
	}
	tx.Rollback(ctx)
	// An UPDATE that keeps the TOASTed doc leaves it as it is; one that
	// matches no row is refused.
	upd := &pb.Envelope{Relations: []*pb.Relation{rel}, Rows: []*pb.Row{{Op: pb.Op_OP_UPDATE, NewTuple: []*pb.Value{
		tv("1"), tv("paid"), tv("10"), {Kind: pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST}}}}}
	tx, _ = c.Begin(ctx)
	if _, _, err := tx.Apply(ctx, 0, upd); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if row := db.data.tables[tOrders.name].rows[keyOf(tOrders, []val{num(1)})]; row[1].s != "paid" || row[3].s != "doc" {
		t.Errorf("after the TOAST update the row is %v", row)
	}
	upd.Rows[0].NewTuple[0] = tv("2")
	tx, _ = c.Begin(ctx)
	if _, _, err := tx.Apply(ctx, 0, upd); !errors.As(err, &r) {
		t.Errorf("UPDATE of a missing row = %v", err)
	}
	// A lost connection rolls back and reads as transient.
	c.kill()
	if _, err := c.Begin(ctx); !errors.Is(err, errConnLost) {
		t.Errorf("Begin on a dead connection = %v", err)
	}
	var pe *pgconn.PgError
	if errors.As(errConnLost, &pe) {
		t.Error("a lost connection must not look like a server error")
	}
}

func tv(s string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(s)} }

func relationOf(d *tableDef) *pb.Relation {
	r := &pb.Relation{Schema: d.schema(), Name: d.rel(), ReplicaIdentity: 'd'}
	for _, c := range d.cols {
		r.Columns = append(r.Columns, &pb.RelationColumn{Name: c.name, TypeOid: c.typeOID, TypeModifier: -1, Key: c.key})
	}
	r.Fingerprint = envelope.RelationFingerprint(r)
	return r
}

// The source renders valid pgoutput and resends, from any position, every
// transaction committing at or after it.
func TestSourceHistory(t *testing.T) {
	w := Workload{Txns: 40, BigEvery: 7, BigRows: 20, StreamEvery: 5, AbortEvery: 6, EmptyEvery: 9, TruncateEvery: 8, MessageEvery: 3}
	h := generate(3, w)
	if len(h.txns) != 40 || len(h.hashes) != 41 {
		t.Fatalf("%d transactions, %d hashes", len(h.txns), len(h.hashes))
	}
	kinds := map[string]int{}
	var last uint64
	for _, tx := range h.txns {
		kinds[tx.kind]++
		if tx.commitLSN <= last || tx.endLSN <= tx.commitLSN {
			t.Fatalf("transaction %d: commit %x end %x after %x", tx.id, tx.commitLSN, tx.endLSN, last)
		}
		last = tx.commitLSN
	}
	for _, k := range []string{"streamed", "big", "empty", "truncate", "init"} {
		if kinds[k] == 0 {
			t.Errorf("no %s transaction in %v", k, kinds)
		}
	}
	var dec pgoutput.Decoder
	for _, wr := range h.wires {
		if _, err := dec.Decode(wr.data, pgoutput.LSN(wr.pos)); err != nil {
			t.Fatalf("message at %x does not decode: %v", wr.pos, err)
		}
	}
	mid := h.txns[20]
	for _, wr := range h.stream(mid.commitLSN) {
		if !wr.owner.aborted && wr.owner.commitLSN < mid.commitLSN {
			t.Fatalf("a session from %x receives transaction %d (commit %x)", mid.commitLSN, wr.owner.id, wr.owner.commitLSN)
		}
	}
	if g := generate(3, w); g.hashes[40] != h.hashes[40] || len(g.wires) != len(h.wires) {
		t.Error("the same seed generated another history")
	}
}
