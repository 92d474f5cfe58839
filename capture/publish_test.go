package capture_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/capture"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay/pgoutput"
)

// events is the order in which a publish, an ack-store record and an
// acknowledgement happened.
type events []string

func (ev *events) add(f string, a ...any) { *ev = append(*ev, fmt.Sprintf(f, a...)) }

type fakeTransport struct {
	ev   *events
	fail error
}

func (f *fakeTransport) Publish(context.Context, []byte) (uint64, error) { panic("not used") }
func (f *fakeTransport) PublishBatch(_ context.Context, p [][]byte) error {
	if f.fail != nil {
		return f.fail
	}
	f.ev.add("publish %d", len(p))
	return nil
}
func (f *fakeTransport) Last(context.Context) ([]byte, bool, error) { return nil, false, nil }

type recordingAcks struct{ ev *events }

func (r recordingAcks) Load() (uint64, error)   { return 0, nil }
func (r recordingAcks) Record(lsn uint64) error { r.ev.add("record %d", lsn); return nil }

func newPublisher(ev *events, tr *fakeTransport, durable uint64) *capture.Publisher {
	return capture.NewPublisher(capture.PublisherOptions{Transport: tr, Acks: recordingAcks{ev},
		Acknowledge: func(_ context.Context, lsn uint64) (bool, error) { ev.add("ack %d", lsn); return true, nil },
		OnFence:     func(token string, at uint64) { ev.add("fence %s %d", token, at) },
	}, durable, durable)
}

// A batch's position is acknowledged only after its units are durable; a
// position no durable unit ends at is recorded before it is acknowledged.
func TestPublishThenAcknowledge(t *testing.T) {
	ev := &events{}
	p := newPublisher(ev, &fakeTransport{ev: ev}, 100)
	ctx := context.Background()
	steps := []*capture.Batch{
		{Units: [][]byte{{1}, {2}}, Bytes: 2, Ack: 300, Covers: 300, Fences: []capture.Fence{{"f1", 250}}},
		{Ack: 400}, // an empty transaction or a keepalive: no unit ends here
		{Units: [][]byte{{3}}, Bytes: 1, Ack: 400}, // a leading CHUNK: durable, nothing new to acknowledge
		{Units: [][]byte{{4}}, Bytes: 1, Ack: 450, Covers: 450},
		{Ack: 450}, // already acknowledged
	}
	for _, b := range steps {
		if err := p.Publish(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	want := events{"publish 2", "ack 300", "fence f1 250", "record 400", "ack 400", "publish 1", "publish 1", "ack 450"}
	if !slices.Equal(*ev, want) {
		t.Fatalf("events\n got %q\nwant %q", *ev, want)
	}
	if st := p.Stats(); st.Units != 4 || st.Groups != 3 || st.Durable != 450 || st.Acked != 450 {
		t.Fatalf("stats %+v", st)
	}
}

// A failed publish acknowledges nothing, records nothing and reports no
// fence: the source resends it all.
func TestPublishFailureAcknowledgesNothing(t *testing.T) {
	ev := &events{}
	boom := errors.New("fsync: input/output error")
	p := newPublisher(ev, &fakeTransport{ev: ev, fail: boom}, 100)
	err := p.Publish(context.Background(), &capture.Batch{Units: [][]byte{{1}}, Ack: 300, Covers: 300, Fences: []capture.Fence{{"f", 250}}})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if len(*ev) != 0 || p.Acked() != 100 {
		t.Fatalf("after a failed publish: events %q, acked %d", *ev, p.Acked())
	}
}

// Batch.Add holds the skip rule, the fence recognition and which unit makes
// a transaction's end acknowledgeable.
func TestBatchAdd(t *testing.T) {
	var units []struct {
		e     *pb.Envelope
		end   uint64
		final bool
	}
	rel := &pgoutput.Relation{RelationID: 16400, Namespace: "public", Name: "orders", ReplicaIdentity: 'd',
		Columns: []pgoutput.RelationColumn{{Key: true, Name: "id", TypeOID: 20, TypeModifier: -1}}}
	a := capture.NewAssembler(capture.AssemblerOptions{SourceID: "src"}, func(e *pb.Envelope, end uint64, final bool) error {
		if e != nil {
			e = proto.Clone(e).(*pb.Envelope) // lent: see Emit
		}
		units = append(units, struct {
			e     *pb.Envelope
			end   uint64
			final bool
		}{e, end, final})
		return nil
	})
	defer a.Close()
	txn := func(commit, end uint64, msgs ...pgoutput.Message) {
		t.Helper()
		all := append([]pgoutput.Message{&pgoutput.Begin{FinalLSN: pgoutput.LSN(commit), Xid: pgoutput.XID(commit)}}, msgs...)
		all = append(all, &pgoutput.Commit{CommitLSN: pgoutput.LSN(commit), EndLSN: pgoutput.LSN(end)})
		for _, m := range all {
			if err := a.Handle(m, pgoutput.LSN(commit)); err != nil {
				t.Fatal(err)
			}
		}
	}
	row := &pgoutput.Insert{RelationID: 16400, New: []pgoutput.Column{{Kind: pgoutput.ColumnText, Data: []byte("1")}}}
	txn(100, 110, rel, row) // replayed: the transport holds it
	txn(110, 120)           // no rows
	txn(120, 130, row, &pgoutput.LogicalMessage{Transactional: true, LSN: 121, Prefix: capture.FencePrefix, Content: []byte("tok")})
	txn(130, 140, &pgoutput.LogicalMessage{Transactional: true, LSN: 131, Prefix: "other", Content: []byte("x")})

	var b capture.Batch
	res := capture.Resume{DurableEnd: 110, SkipThrough: 100, SkipEqual: true}
	var skipped int
	for _, u := range units {
		s, err := b.Add(res, u.e, u.end, u.final)
		if err != nil {
			t.Fatal(err)
		}
		if s {
			skipped++
		}
	}
	if skipped != 1 || len(b.Units) != 2 || b.Ack != 140 || b.Covers != 140 {
		t.Fatalf("skipped %d, batch %d units ack %d covers %d", skipped, len(b.Units), b.Ack, b.Covers)
	}
	if want := []capture.Fence{{"tok", 120}}; !slices.Equal(b.Fences, want) {
		t.Fatalf("fences %v, want %v", b.Fences, want)
	}

	// A leading unit of a chunked transaction is published but does not
	// make its end acknowledgeable.
	var c capture.Batch
	if _, err := c.Add(capture.Resume{}, units[2].e, units[2].end, false); err != nil {
		t.Fatal(err)
	}
	if len(c.Units) != 1 || c.Ack != 0 || c.Covers != 0 || len(c.Fences) != 0 {
		t.Fatalf("non-final unit: %+v", c)
	}
}

func TestResumeSkips(t *testing.T) {
	for _, tc := range []struct {
		res    capture.Resume
		commit uint64
		want   bool
	}{
		{capture.Resume{SkipThrough: 100, SkipEqual: true}, 100, true},
		{capture.Resume{SkipThrough: 100, SkipEqual: true}, 101, false},
		{capture.AfterSnapshot(100), 100, false},
		{capture.AfterSnapshot(100), 99, true},
		{capture.Resume{Empty: true}, 1, false},
	} {
		if got := tc.res.Skips(tc.commit); got != tc.want {
			t.Errorf("%+v.Skips(%d) = %v, want %v", tc.res, tc.commit, got, tc.want)
		}
	}
}
