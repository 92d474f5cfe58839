// Command jsonl-consumer is a custom Trellara consumer: it keeps a JSON-lines
// file with one line per captured row change, read from a flow's local log
// through the public consumer package while the relay keeps running.
//
//	go -C examples run ./jsonl-consumer --config "$PWD/trellara.yml" --consumer jsonl --out "$PWD/changes.jsonl" [--follow]
//
// It shows the pattern every consumer follows: do the unit's work durably,
// then return nil so the cursor moves. The file is fsynced before the commit,
// so a crash in between writes the unit again on the next run; the program
// makes that idempotent by skipping units at or below the last offset it
// finds in the file. Without --follow it stops at the log's durable end.
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

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/consumerconfig"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// change is one line of the output file.
type change struct {
	Offset    uint64    `json:"offset"`
	CommitLSN string    `json:"commit_lsn"`
	Xid       uint32    `json:"xid"`
	Seq       uint64    `json:"seq"`
	Op        string    `json:"op"`
	Relation  string    `json:"relation,omitempty"`
	New       []*string `json:"new,omitempty"`
	Old       []*string `json:"old,omitempty"`
}

func main() {
	cfg := flag.String("config", "", "flow config file (reads transport.local.dir)")
	logDir := flag.String("log-dir", "", "the log directory itself, instead of --config")
	name := flag.String("consumer", "jsonl", "cursor name")
	out := flag.String("out", "changes.jsonl", "JSON-lines file to maintain")
	follow := flag.Bool("follow", false, "keep waiting for new units")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *cfg, *logDir, *name, *out, *follow); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "jsonl-consumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg, logDir, name, out string, follow bool) error {
	var c *consumer.Consumer
	var err error
	switch {
	case cfg != "" && logDir == "":
		c, err = consumerconfig.Open(cfg, name, consumer.Options{})
	case logDir != "" && cfg == "":
		c, err = consumer.Open(logDir, name, consumer.Options{})
	default:
		return errors.New("give exactly one of --config or --log-dir")
	}
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

	end := c.NextOffset()
	if !follow && c.Offset() >= end {
		return nil // nothing new
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = c.Run(ctx, func(_ context.Context, u consumer.Unit) error {
		if !have || u.Offset > done {
			w := bufio.NewWriter(f)
			enc := json.NewEncoder(w)
			for _, r := range u.Envelope.Rows {
				if err := enc.Encode(changeOf(u, r)); err != nil {
					return err
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			// Durable before the cursor moves past the unit.
			if err := f.Sync(); err != nil {
				return err
			}
		}
		if !follow && u.Offset+1 >= end {
			cancel() // reached the durable end seen at start: stop after this commit
		}
		return nil
	})
	if errors.Is(err, context.Canceled) && !follow {
		return nil
	}
	return err
}

func changeOf(u consumer.Unit, r *pb.Row) change {
	e := u.Envelope
	ch := change{Offset: u.Offset, CommitLSN: envelope.FormatLSN(e.CommitLsn), Xid: e.Xid, Seq: r.Seq,
		Op: strings.TrimPrefix(r.Op.String(), "OP_"), New: texts(r.NewTuple), Old: texts(r.OldTuple)}
	if r.Op != pb.Op_OP_MESSAGE && int(r.RelationIndex) < len(e.Relations) {
		ch.Relation = e.Relations[r.RelationIndex].Schema + "." + e.Relations[r.RelationIndex].Name
	}
	return ch
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
		var ch change
		if err := dec.Decode(&ch); err != nil {
			if errors.Is(err, io.EOF) {
				return last, have, nil
			}
			// A line cut by a crash before the fsync: the unit was not
			// committed and is written again, after the cut line.
			return last, have, fmt.Errorf("%s: %w; remove the incomplete last line and run again", path, err)
		}
		last, have = ch.Offset, true
	}
}
