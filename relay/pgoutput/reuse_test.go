package pgoutput_test

import (
	"bytes"
	"testing"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay/pgoutput"
)

// TestAssemblerKeepsNothingOfAReusedDecode runs one session through
// capture's Assembler twice: as the relay receives it, every message
// written over the previous one in a single buffer (pgconn's receive
// buffer) and decoded by one Decoder into its reused structs; and with
// each message in bytes of its own, decoded into new structs. The
// envelopes must be byte-identical: the Assembler copies every value it
// keeps, and holds no tuple slice or message of the Decoder's past the
// next Decode. The streamed transaction is the case that would show it:
// its rows are kept across many messages before its commit.
func TestAssemblerKeepsNothingOfAReusedDecode(t *testing.T) {
	txt := func(s string) pgoutput.Column { return pgoutput.Column{Kind: pgoutput.ColumnText, Data: []byte(s)} }
	null := pgoutput.Column{Kind: pgoutput.ColumnNull}
	toast := pgoutput.Column{Kind: pgoutput.ColumnUnchangedToast}
	rel := &pgoutput.Relation{RelationID: 16400, Namespace: "public", Name: "orders", ReplicaIdentity: pgoutput.ReplicaIdentityDefault,
		Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 20, TypeModifier: -1}, {Name: "note", TypeOID: 25, TypeModifier: -1}}}
	const xid = 900
	session := []pgoutput.Message{
		rel,
		&pgoutput.Begin{FinalLSN: 0x2000, Xid: 700},
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("1"), txt("one")}},
		&pgoutput.Update{RelationID: 16400, OldKind: pgoutput.TupleKey, Old: []pgoutput.Column{txt("1"), null}, New: []pgoutput.Column{txt("2"), txt("two")}},
		&pgoutput.Update{RelationID: 16400, New: []pgoutput.Column{txt("2"), toast}},
		&pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{txt("3"), null}},
		&pgoutput.Delete{RelationID: 16400, OldKind: pgoutput.TupleKey, Old: []pgoutput.Column{txt("2"), null}},
		&pgoutput.Commit{CommitLSN: 0x2000, EndLSN: 0x2030},
		&pgoutput.StreamStart{Xid: xid, FirstSegment: true},
		&pgoutput.Insert{Xid: xid, RelationID: 16400, New: []pgoutput.Column{txt("4"), txt("four")}},
		&pgoutput.Insert{Xid: xid, RelationID: 16400, New: []pgoutput.Column{txt("5"), txt("five")}},
		&pgoutput.StreamStop{},
		&pgoutput.StreamStart{Xid: xid},
		&pgoutput.Update{Xid: xid, RelationID: 16400, New: []pgoutput.Column{txt("4"), txt("FOUR")}},
		&pgoutput.Delete{Xid: xid, RelationID: 16400, OldKind: pgoutput.TupleKey, Old: []pgoutput.Column{txt("5"), null}},
		&pgoutput.StreamStop{},
		&pgoutput.StreamCommit{Xid: xid, CommitLSN: 0x3000, EndLSN: 0x3030},
	}

	run := func(decode func(i int, m pgoutput.Message) (pgoutput.Message, error)) [][]byte {
		var units [][]byte
		a := capture.NewAssembler(capture.AssemblerOptions{SourceID: "src"}, func(e *pb.Envelope, _ uint64, _ bool) error {
			if e != nil {
				b, err := envelope.Encode(e)
				if err != nil {
					return err
				}
				units = append(units, b)
			}
			return nil
		})
		defer a.Close()
		for i, m := range session {
			dm, err := decode(i, m)
			if err != nil {
				t.Fatalf("message %d (%T): %v", i, m, err)
			}
			if err := a.Handle(dm, pgoutput.LSN(0x1000+i)); err != nil {
				t.Fatalf("message %d (%T): %v", i, m, err)
			}
		}
		return units
	}

	var d pgoutput.Decoder
	buf := make([]byte, 0, 256)
	reused := run(func(i int, m pgoutput.Message) (pgoutput.Message, error) {
		// Scribble over the previous message first: what the Assembler
		// kept of it must not be read from here.
		buf = buf[:cap(buf)]
		for j := range buf {
			buf[j] = 'X'
		}
		buf = pgoutput.Append(buf[:0], m)
		return d.Decode(buf, pgoutput.LSN(0x1000+i))
	})
	inStream := false
	fresh := run(func(i int, m pgoutput.Message) (pgoutput.Message, error) {
		switch m.(type) {
		case *pgoutput.StreamStart:
			defer func() { inStream = true }()
		case *pgoutput.StreamStop:
			defer func() { inStream = false }()
		}
		return pgoutput.Decode(pgoutput.Append(nil, m), pgoutput.LSN(0x1000+i), inStream)
	})
	if len(fresh) != 2 {
		t.Fatalf("the session gave %d envelopes, want 2", len(fresh))
	}
	if len(reused) != len(fresh) {
		t.Fatalf("reused decoding gave %d envelopes, fresh %d", len(reused), len(fresh))
	}
	for i := range fresh {
		if !bytes.Equal(reused[i], fresh[i]) {
			t.Errorf("envelope %d differs between reused and fresh decoding:\nreused %q\n fresh %q", i, reused[i], fresh[i])
		}
	}
}
