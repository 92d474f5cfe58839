// Command kafka-txn-jsonl is a custom Trellara consumer over Kafka: it
// keeps a JSON-lines file with one line per whole source transaction, read
// from a flow's topic (strict or partitioned) through the public
// consumer/kafkaconsumer package. In partitioned mode a transaction's rows
// are spread over the topic's data partitions; the consumer hands out each
// one whole, in commit order, so every line is a complete transaction.
//
//	go -C examples run ./kafka-txn-jsonl --brokers kafka-1:9092 --topic trellara.sales \
//	    --mode partitioned --partitions 6 --group txn-jsonl --out "$PWD/transactions.jsonl"
//
// The file is fsynced before the group offset moves, and a restart skips
// units at or below the last offset in the file, so a crash in between
// writes no transaction twice. It stops after --idle with no new unit (0:
// never).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/consumer/kafkaconsumer"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/transport/kafka"
)

// txn is one line of the output file: a whole unit.
type txn struct {
	Offset    uint64 `json:"offset"`
	CommitLSN string `json:"commit_lsn"`
	Xid       uint32 `json:"xid"`
	// Chunk is "i/n" for a transaction the relay carried in n chunks.
	Chunk string `json:"chunk,omitempty"`
	Rows  []row  `json:"rows"`
}

type row struct {
	Op       string    `json:"op"`
	Relation string    `json:"relation,omitempty"`
	New      []*string `json:"new,omitempty"`
	Old      []*string `json:"old,omitempty"`
}

func main() {
	var o kafkaconsumer.Options
	brokers := flag.String("brokers", "", "comma-separated host:port of the seed brokers")
	flag.StringVar(&o.Topic, "topic", "", "the flow's topic (transport.kafka.topic)")
	flag.StringVar(&o.Group, "group", "txn-jsonl", "consumer group holding this consumer's position")
	mode := flag.String("mode", "strict", "the flow's transport.kafka.mode: strict or partitioned")
	flag.IntVar(&o.Partitions, "partitions", 0, "the flow's transport.kafka.partitions (partitioned mode)")
	out := flag.String("out", "transactions.jsonl", "JSON-lines file to maintain")
	idle := flag.Duration("idle", 5*time.Second, "stop after this long with no new unit (0: never)")
	flag.Parse()
	o.Brokers, o.Mode = strings.Split(*brokers, ","), kafka.Mode(*mode)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, *out, *idle); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "kafka-txn-jsonl:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o kafkaconsumer.Options, out string, idle time.Duration) error {
	c, err := kafkaconsumer.Open(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	done, have, err := lastOffset(out)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		next := ctx
		cancel := context.CancelFunc(func() {})
		if idle > 0 {
			next, cancel = context.WithTimeout(ctx, idle)
		}
		u, err := c.Next(next)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return nil // idle: caught up
			}
			return err
		}
		if !have || u.Offset > done {
			b, err := json.Marshal(txnOf(u))
			if err != nil {
				return err
			}
			w := bufio.NewWriter(f)
			w.Write(b)
			w.WriteByte('\n')
			if err := w.Flush(); err != nil {
				return err
			}
			if err := f.Sync(); err != nil { // durable before the offset moves
				return err
			}
		}
		if err := c.Commit(u); err != nil {
			return err
		}
	}
}

func txnOf(u consumer.Unit) txn {
	e := u.Envelope
	t := txn{Offset: u.Offset, CommitLSN: envelope.FormatLSN(e.CommitLsn), Xid: e.Xid, Rows: []row{}}
	if b := e.GetBoundary(); b.GetKind() == pb.UnitKind_UNIT_KIND_CHUNK {
		t.Chunk = fmt.Sprintf("%d/%d", b.GetChunkIndex()+1, b.GetChunkCount())
	}
	for _, r := range e.Rows {
		rw := row{Op: strings.TrimPrefix(r.Op.String(), "OP_"), New: texts(r.NewTuple), Old: texts(r.OldTuple)}
		if r.Op != pb.Op_OP_MESSAGE && int(r.RelationIndex) < len(e.Relations) {
			rw.Relation = e.Relations[r.RelationIndex].Schema + "." + e.Relations[r.RelationIndex].Name
		}
		t.Rows = append(t.Rows, rw)
	}
	return t
}

// texts renders values as text; NULL and unchanged TOAST are null.
func texts(vals []*pb.Value) []*string {
	var out []*string
	for _, v := range vals {
		if v.Kind == pb.ValueKind_VALUE_KIND_TEXT {
			s := string(v.Data)
			out = append(out, &s)
		} else {
			out = append(out, nil)
		}
	}
	return out
}

// lastOffset returns the offset of the file's last line, if any.
func lastOffset(path string) (uint64, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	var last uint64
	have := false
	dec := json.NewDecoder(f)
	for {
		var t txn
		if err := dec.Decode(&t); err != nil {
			if errors.Is(err, io.EOF) {
				return last, have, nil
			}
			return last, have, fmt.Errorf("%s: %w; remove the incomplete last line and run again", path, err)
		}
		last, have = t.Offset, true
	}
}
