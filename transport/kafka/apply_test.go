package kafka

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
)

// txnLSN is the commit LSN of test transaction i.
func txnLSN(i int) uint64 { return 0x10000 + uint64(i)*0x100 }

// salesTxn is source transaction i: INSERT INTO public.sales VALUES (i, 'v<i>').
func salesTxn(t *testing.T, i int) []byte {
	t.Helper()
	rel := &pb.Relation{Oid: 16384, Schema: "public", Name: "sales", ReplicaIdentity: 'd', Columns: []*pb.RelationColumn{
		{Name: "id", TypeOid: 25, TypeModifier: -1, Key: true},
		{Name: "v", TypeOid: 25, TypeModifier: -1},
	}}
	lsn := txnLSN(i)
	e := &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: "store_001", Xid: uint32(1000 + i),
		CommitLsn: lsn, EndLsn: lsn + 40, CommitTimeUnixMicros: 1_700_000_000_000_000 + int64(i),
		Boundary:  &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION},
		Relations: []*pb.Relation{rel},
		Rows: []*pb.Row{{Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{
			{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(fmt.Sprint(i))},
			{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(fmt.Sprintf("v%d", i))},
		}}},
	}
	envelope.Seal(e)
	b, err := envelope.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func salesTxns(t *testing.T, from, to int) [][]byte {
	var out [][]byte
	for i := from; i < to; i++ {
		out = append(out, salesTxn(t, i))
	}
	return out
}

// runApplier applies from the group's offset until the target's
// checkpoint reaches commit LSN upTo.
func runApplier(t *testing.T, ctx context.Context, conn *pgx.Conn, cfg Config, upTo uint64) apply.Stats {
	t.Helper()
	a, err := apply.New(conn, apply.Config{Flow: cfg.Flow, SourceID: cfg.SourceID, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := a.Run(ctx, r, r, func(cp apply.Checkpoint) bool { return cp.CommitLSN >= upTo }); err != nil {
		t.Fatal(err)
	}
	return a.Stats()
}

// TestApplyOverKafka: the applier reads the topic through Reader. A relay
// restarted before it acknowledged the source publishes again what the
// topic already holds (a new producer id, so the broker cannot absorb it);
// the applier skips each redelivered transaction. The group offset moved
// past what the target holds is overruled by the target's checkpoint:
// the reader is rewound and nothing is lost.
func TestApplyOverKafka(t *testing.T) {
	pgtest.Require(t)
	pg := pgtest.Start(t, pgtest.Options{})
	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, pg.CreateDB(t, "target"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE public.sales (id text PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}

	c := cluster(t)
	cfg, p1 := setup(t, c)
	if err := p1.PublishBatch(ctx, salesTxns(t, 0, 10)); err != nil {
		t.Fatal(err)
	}
	runApplier(t, ctx, conn, cfg, txnLSN(9))
	r, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if at, err := r.Committed(ctx); err != nil || at != 10 {
		t.Fatalf("group offset after applying offsets 0..9 = %d, %v; want 10", at, err)
	}

	// The relay restarts and the source resends from transaction 5.
	p2, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if err := p2.PublishBatch(ctx, salesTxns(t, 5, 30)); err != nil {
		t.Fatal(err)
	}
	// The group offset runs ahead of the target's checkpoint (offset 9).
	if err := r.Commit(29); err != nil {
		t.Fatal(err)
	}
	r.Close()

	st := runApplier(t, ctx, conn, cfg, txnLSN(29))
	var n, bad int64
	if err := conn.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE v <> 'v' || id) FROM public.sales").Scan(&n, &bad); err != nil {
		t.Fatal(err)
	}
	if n != 30 || bad != 0 {
		t.Fatalf("target holds %d rows (%d wrong), want 30: transactions lost", n, bad)
	}
	if st.TxnsSkipped != 5 || st.TxnsApplied != 20 {
		t.Fatalf("applied %d, skipped %d; want 20 applied and the 5 redelivered skipped", st.TxnsApplied, st.TxnsSkipped)
	}
	if st.Checkpoint.Offset != 34 {
		t.Fatalf("checkpoint offset %d, want 34 (the topic's last record)", st.Checkpoint.Offset)
	}
	r2, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if at, err := r2.Committed(ctx); err != nil || at != 35 {
		t.Fatalf("group offset = %d, %v; want 35", at, err)
	}
}
