package flow

import (
	"context"
	"fmt"
	"github.com/trellara/trellara/internal/shell"
	"io"
	"strings"

	"github.com/trellara/trellara/lsn"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// Located is a stored unit found in the local log.
type Located struct {
	Offset   uint64
	Envelope *pb.Envelope
	Bytes    int // the encoded size
}

// RenderText prints the unit header and its rows.
func (l *Located) RenderText(w io.Writer) error {
	e := l.Envelope
	fmt.Fprintf(w, "offset %d · %s · source %s · xid %d\n", l.Offset, e.GetBoundary().GetKind(), e.SourceId, e.Xid)
	fmt.Fprintf(w, "commit %s · end %s · %d rows · schema %016x · checksum %016x\n",
		envelope.FormatLSN(e.CommitLsn), envelope.FormatLSN(e.EndLsn), e.RowCount, e.SchemaFingerprint, e.Checksum)
	for _, r := range e.Rows {
		rel := "-"
		if r.Op != pb.Op_OP_MESSAGE && int(r.RelationIndex) < len(e.Relations) {
			x := e.Relations[r.RelationIndex]
			rel = x.Schema + "." + x.Name
		}
		fmt.Fprintf(w, "  #%d %s %s %s\n", r.Seq, strings.TrimPrefix(r.Op.String(), "OP_"), rel, tupleText(r.NewTuple))
	}
	return nil
}

func tupleText(vals []*pb.Value) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch v.Kind {
		case pb.ValueKind_VALUE_KIND_NULL:
			parts[i] = "NULL"
		case pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST:
			parts[i] = "<unchanged toast>"
		default:
			s := string(v.Data)
			if len(s) > 40 {
				s = s[:40] + "…"
			}
			parts[i] = fmt.Sprintf("%q", s)
		}
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// Locate finds a unit by offset, or the first unit whose commit LSN equals
// lsn. It returns nil when nothing matches.
func (f *Flow) Locate(ctx context.Context, at string, offset uint64, byOffset bool) (*Located, error) {
	var want uint64
	if !byOffset {
		v, err := lsn.Parse(at)
		if err != nil {
			return nil, fmt.Errorf("--lsn: %w", err)
		}
		want = uint64(v)
	}
	if f.broker != nil {
		return nil, fmt.Errorf("flow %s has no local log to search (transport.kafka: the units are in topic %s)", f.Cfg.Flow, f.Cfg.Transport.Kafka.Topic)
	}
	if f.Log == nil {
		return nil, fmt.Errorf("flow %s has no local log with a published durable end at %s: nothing to search; `%s` creates it",
			f.Cfg.Flow, f.logDir(), shell.Trellara("run", f.ConfigPath, "--local"))
	}
	next := f.Log.NextOffset()
	from := f.Log.FirstOffset()
	if byOffset {
		if offset < from || offset >= next {
			return nil, fmt.Errorf("--offset %d: the log holds offsets %d..%d", offset, from, next)
		}
		from = offset
	}
	rd := f.Log.NewReader(from)
	defer rd.Close()
	for o := from; o < next; o++ {
		off, b, err := rd.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("flow %s: read local log offset %d: %w", f.Cfg.Flow, o, f.logError(err))
		}
		e, err := envelope.Decode(b)
		if err != nil {
			return nil, fmt.Errorf("offset %d: %w", off, err)
		}
		if byOffset || e.CommitLsn == want {
			return &Located{Offset: off, Envelope: e, Bytes: len(b)}, nil
		}
		if e.CommitLsn > want && e.GetBoundary().GetKind() == pb.UnitKind_UNIT_KIND_TRANSACTION {
			return nil, nil // units are in commit order: it is not here
		}
	}
	return nil, nil
}
