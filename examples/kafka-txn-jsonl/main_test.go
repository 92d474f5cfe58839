package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/trellara/trellara/consumer/kafkaconsumer"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/transport/kafka"
)

// unit is source transaction i: rows in two tables.
func unit(t *testing.T, i int) []byte {
	t.Helper()
	col := func(n string, key bool) *pb.RelationColumn {
		return &pb.RelationColumn{Name: n, TypeOid: 25, TypeModifier: -1, Key: key}
	}
	rels := []*pb.Relation{
		{Oid: 16384, Schema: "public", Name: "orders", ReplicaIdentity: 'd', Columns: []*pb.RelationColumn{col("id", true), col("v", false)}},
		{Oid: 16390, Schema: "public", Name: "items", ReplicaIdentity: 'd', Columns: []*pb.RelationColumn{col("id", true), col("order_id", false)}},
	}
	lsn := uint64(0x2000000 + i*0x100)
	e := &pb.Envelope{ProtocolVersion: envelope.ProtocolVersion, SourceId: "store_001", Xid: uint32(500 + i),
		CommitLsn: lsn, EndLsn: lsn + 40, CommitTimeUnixMicros: 1_700_000_000_000_000 + int64(i),
		Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION}, Relations: rels}
	for j := range 10 {
		s := func(v string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(v)} }
		e.Rows = append(e.Rows, &pb.Row{Seq: uint64(j), Op: pb.Op_OP_INSERT, RelationIndex: uint32(j % 2),
			NewTuple: []*pb.Value{s(fmt.Sprintf("%d-%d", i, j)), s(fmt.Sprint(i))}})
	}
	envelope.Seal(e)
	b, err := envelope.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPartitionedTopicToFile: the relay's producer writes two-table
// transactions to a partitioned topic on three brokers; the program keeps
// one line per whole transaction, in commit order, and a second run after
// more transactions adds only the new ones.
func TestPartitionedTopicToFile(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := kafka.DefaultOptions()
	k.Brokers, k.Topic, k.ConsumerGroup, k.Mode, k.Partitions = c.ListenAddrs(), "trellara.sales", "trellara.sales", kafka.ModePartitioned, 4
	cfg := kafka.Config{Flow: "sales", SourceID: "store_001", Kafka: k}
	if _, err := kafka.CheckTopic(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	p, err := kafka.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	publish := func(from, to int) {
		var b [][]byte
		for i := from; i < to; i++ {
			b = append(b, unit(t, i))
		}
		if err := p.PublishBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "transactions.jsonl")
	o := kafkaconsumer.Options{Brokers: c.ListenAddrs(), Topic: "trellara.sales", Group: "txn-jsonl", Mode: kafka.ModePartitioned, Partitions: 4}
	publish(0, 4)
	if err := run(ctx, o, out, time.Second); err != nil {
		t.Fatal(err)
	}
	publish(4, 7)
	if err := run(ctx, o, out, time.Second); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for ; sc.Scan(); n++ {
		var got txn
		if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		want := envelope.FormatLSN(uint64(0x2000000 + n*0x100))
		if got.CommitLSN != want || len(got.Rows) != 10 || got.Rows[1].Relation != "public.items" {
			t.Fatalf("line %d: commit LSN %s with %d rows, want the whole transaction at %s (10 rows)", n+1, got.CommitLSN, len(got.Rows), want)
		}
	}
	if n != 7 {
		t.Fatalf("%d lines, want 7 (one per transaction, none twice)", n)
	}
}
