package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/consumerconfig"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// tailCommand is `trellara stream tail`: the flow's log as JSON lines, read
// through the public consumer package (read-only, up to the relay's
// durable end), so what it prints is what a custom consumer sees.
func tailCommand() *cli.Command {
	return &cli.Command{
		Name:  "tail",
		Usage: "print the local log's envelopes as JSON lines from a named consumer's cursor (moves the cursor only with --commit)",
		Flags: []cli.Flag{configFlag(), verboseFlag(),
			&cli.StringFlag{Name: "consumer", Usage: "cursor name (A-Z a-z 0-9 . _ -)", Required: true},
			&cli.StringFlag{Name: "from", Usage: "earliest, latest, cursor, or a commit LSN X/X (default: the cursor, or earliest when it is not registered)"},
			&cli.StringFlag{Name: "format", Usage: "output format: json (one object per line) or text", Value: "json"},
			&cli.BoolFlag{Name: "rows", Usage: "include every row with its values"},
			&cli.BoolFlag{Name: "commit", Usage: "register the consumer and move its cursor past each printed unit (retention then keeps what it has not read)"},
			&cli.BoolFlag{Name: "follow", Usage: "keep waiting for new units instead of stopping at the log's durable end"},
		},
		Action: func(c *cli.Context) error {
			format := c.String("format")
			if format != "json" && format != "text" {
				return cli.Exit(fmt.Sprintf("stream tail: --format %q: use json or text", format), ExitError)
			}
			start, err := consumer.ParseStart(c.String("from"))
			if err != nil {
				return cli.Exit("stream tail: --from: "+err.Error(), ExitError)
			}
			cons, err := consumerconfig.Open(c.String("config"), c.String("consumer"),
				consumer.Options{Start: start, NoCommit: !c.Bool("commit"), Logger: logger(c)})
			if err != nil {
				return failure(err)
			}
			defer cons.Close()
			ctx, stop := signalContext(c)
			defer stop()
			end := cons.NextOffset()
			w := bufio.NewWriter(c.App.Writer)
			for c.Bool("follow") || cons.Offset() < end {
				u, err := cons.Next(ctx)
				if err != nil {
					if ctx.Err() != nil {
						break // SIGINT/SIGTERM: a clean stop
					}
					_ = w.Flush()
					return failure(err)
				}
				line := tailLineOf(u, c.Bool("rows"))
				if format == "json" {
					err = json.NewEncoder(w).Encode(line)
				} else {
					err = line.writeText(w)
				}
				if err == nil {
					// Printed before committed: a consumer that dies in
					// between prints the unit again, never skips it.
					err = w.Flush()
				}
				if err == nil && c.Bool("commit") {
					err = cons.Commit(u)
				}
				if err != nil {
					return failure(err)
				}
			}
			return w.Flush()
		},
	}
}

// tailLine is one line of `stream tail --format json` (docs/CLI.md).
type tailLine struct {
	Offset           uint64         `json:"offset"`
	SourceID         string         `json:"source_id"`
	Xid              uint32         `json:"xid"`
	CommitLSN        string         `json:"commit_lsn"`
	EndLSN           string         `json:"end_lsn"`
	CommitTime       string         `json:"commit_time"`
	Kind             string         `json:"kind"`
	ChunkIndex       uint32         `json:"chunk_index"`
	ChunkCount       uint32         `json:"chunk_count"`
	TotalRows        uint64         `json:"total_rows"`
	Partition        uint32         `json:"partition"`
	SnapshotRelation string         `json:"snapshot_relation,omitempty"`
	RowCount         uint64         `json:"row_count"`
	Ops              map[string]int `json:"ops"`
	DDLEvents        int            `json:"ddl_events"`
	SchemaFP         string         `json:"schema_fingerprint"`
	Checksum         string         `json:"checksum"`
	Bytes            int            `json:"bytes"`
	Rows             []tailRow      `json:"rows,omitempty"`
}

// tailRow is one row with its values in PostgreSQL text form; null is
// SQL NULL and "unchanged_toast" marks a value the source did not send.
type tailRow struct {
	Seq       uint64    `json:"seq"`
	Op        string    `json:"op"`
	Relation  string    `json:"relation,omitempty"`
	New       []*string `json:"new,omitempty"`
	Old       []*string `json:"old,omitempty"`
	Unchanged []int     `json:"unchanged_toast,omitempty"`
	Prefix    string    `json:"message_prefix,omitempty"`
	Content   []byte    `json:"message_content,omitempty"`
}

func tailLineOf(u consumer.Unit, rows bool) tailLine {
	e := u.Envelope
	b := e.GetBoundary()
	l := tailLine{
		Offset: u.Offset, SourceID: e.SourceId, Xid: e.Xid,
		CommitLSN: envelope.FormatLSN(e.CommitLsn), EndLSN: envelope.FormatLSN(e.EndLsn),
		CommitTime: time.UnixMicro(e.CommitTimeUnixMicros).UTC().Format(time.RFC3339Nano),
		Kind:       strings.TrimPrefix(b.GetKind().String(), "UNIT_KIND_"),
		ChunkIndex: b.GetChunkIndex(), ChunkCount: b.GetChunkCount(), TotalRows: b.GetTotalRows(),
		Partition: b.GetPartition(), SnapshotRelation: b.GetSnapshotRelation(),
		RowCount: e.RowCount, Ops: map[string]int{}, DDLEvents: len(e.DdlEvents),
		SchemaFP: fmt.Sprintf("%016x", e.SchemaFingerprint), Checksum: fmt.Sprintf("%016x", e.Checksum),
		Bytes: u.Bytes,
	}
	for _, r := range e.Rows {
		op := strings.TrimPrefix(r.Op.String(), "OP_")
		l.Ops[op]++
		if !rows {
			continue
		}
		tr := tailRow{Seq: r.Seq, Op: op, Prefix: r.MessagePrefix, Content: r.MessageContent}
		if r.Op != pb.Op_OP_MESSAGE && int(r.RelationIndex) < len(e.Relations) {
			rel := e.Relations[r.RelationIndex]
			tr.Relation = rel.Schema + "." + rel.Name
		}
		tr.New, tr.Unchanged = tailValues(r.NewTuple)
		tr.Old, _ = tailValues(r.OldTuple)
		l.Rows = append(l.Rows, tr)
	}
	return l
}

func tailValues(vals []*pb.Value) (out []*string, unchanged []int) {
	for i, v := range vals {
		switch v.Kind {
		case pb.ValueKind_VALUE_KIND_TEXT:
			s := string(v.Data)
			out = append(out, &s)
		case pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST:
			out = append(out, nil)
			unchanged = append(unchanged, i)
		default:
			out = append(out, nil)
		}
	}
	return out, unchanged
}

func (l tailLine) writeText(w io.Writer) error {
	ops := make([]string, 0, len(l.Ops))
	for _, op := range []string{"INSERT", "UPDATE", "DELETE", "TRUNCATE", "MESSAGE"} {
		if n := l.Ops[op]; n > 0 {
			ops = append(ops, fmt.Sprintf("%s %d", op, n))
		}
	}
	kind := l.Kind
	if l.ChunkCount > 0 {
		kind += fmt.Sprintf(" %d/%d", l.ChunkIndex+1, l.ChunkCount)
	}
	_, err := fmt.Fprintf(w, "offset %d · %s · commit %s · xid %d · %d rows (%s) · checksum %s\n",
		l.Offset, kind, l.CommitLSN, l.Xid, l.RowCount, strings.Join(ops, ", "), l.Checksum)
	return err
}
