package kafka

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/envelope/envelopetest"
)

// cluster starts a three-broker kfake cluster.
func cluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testConfig(c *kfake.Cluster) Config {
	k := DefaultOptions()
	k.Brokers = c.ListenAddrs()
	k.Topic = "trellara.sales"
	k.ConsumerGroup = "trellara.sales"
	return Config{Flow: "sales", SourceID: "store_001", Kafka: k,
		extra: []kgo.Opt{kgo.MetadataMinAge(50 * time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond })}}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// envelopes returns n encoded envelopes with increasing commit LSNs from
// first.
func envelopes(t *testing.T, first uint64, n int) [][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(first, 1))
	out := make([][]byte, n)
	for i := range out {
		b, err := envelope.Encode(envelopetest.Random(rng, "store_001", first+uint64(i)*0x100))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func setup(t *testing.T, c *kfake.Cluster) (Config, *Producer) {
	t.Helper()
	cfg := testConfig(c)
	warn, err := CheckTopic(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(warn) != 0 {
		t.Fatalf("created topic warns: %v", warn)
	}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return cfg, p
}

// readAll reads n records from a new reader at the group's offset.
func readAll(t *testing.T, cfg Config, n int) (offsets []uint64, values [][]byte) {
	t.Helper()
	ctx := testCtx(t)
	r, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for range n {
		o, v, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, o)
		values = append(values, v)
	}
	return offsets, values
}

func endOffset(t *testing.T, p *Producer) int64 {
	t.Helper()
	_, end, err := offsets(testCtx(t), p.adm, p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return end
}

func TestRoundTrip(t *testing.T) {
	c := cluster(t)
	cfg, p := setup(t, c)
	ctx := testCtx(t)
	if _, ok, err := p.Last(ctx); err != nil || ok {
		t.Fatalf("Last on an empty topic = %v, %v", ok, err)
	}
	want := envelopes(t, 0x1000, 40)
	if err := p.PublishBatch(ctx, want[:39]); err != nil {
		t.Fatal(err)
	}
	off, err := p.Publish(ctx, want[39])
	if err != nil || off != 39 {
		t.Fatalf("Publish = %d, %v; want offset 39", off, err)
	}
	last, ok, err := p.Last(ctx)
	if err != nil || !ok || !bytes.Equal(last, want[39]) {
		t.Fatalf("Last = %v, %v; want the 40th envelope", ok, err)
	}
	offs, got := readAll(t, cfg, 40)
	for i := range want {
		if offs[i] != uint64(i) || !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d: offset %d, bytes equal %v", i, offs[i], bytes.Equal(got[i], want[i]))
		}
	}
	// Headers carry flow, source, commit LSN and checksum.
	rec, err := readAt(ctx, cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := envelope.Decode(want[5])
	h := map[string]string{}
	for _, x := range rec.Headers {
		h[x.Key] = string(x.Value)
	}
	if h[HeaderFlow] != "sales" || h[HeaderSource] != "store_001" || h[HeaderCommitLSN] != envelope.FormatLSN(e.GetCommitLsn()) || len(h[HeaderChecksum]) != 16 {
		t.Fatalf("headers = %v", h)
	}
	// capture.ResumeFrom reads the newest record through Last.
	res, err := capture.ResumeFrom(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	le, _ := envelope.Decode(want[39])
	if !res.Skips(le.GetCommitLsn()) || res.Skips(le.GetCommitLsn()+1) {
		t.Fatalf("resume from Last = %+v, newest commit LSN %s", res, envelope.FormatLSN(le.GetCommitLsn()))
	}
}

// TestPublishBatchWaitsForAcks: PublishBatch has not returned while the
// cluster holds the produce request unanswered.
func TestPublishBatchWaitsForAcks(t *testing.T) {
	c := cluster(t)
	_, p := setup(t, c)
	arrived, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		// The control may see more than one produce request (a retry, or
		// another broker's): hold only the first.
		first.Do(func() {
			close(arrived)
			c.SleepControl(func() { <-release })
		})
		return nil, nil, false // then the cluster writes and answers it
	})
	done := make(chan error, 1)
	go func() { done <- p.PublishBatch(testCtx(t), envelopes(t, 0x1000, 10)) }()
	<-arrived
	select {
	case err := <-done:
		t.Fatalf("PublishBatch returned (%v) before the cluster acknowledged", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if end := endOffset(t, p); end != 10 {
		t.Fatalf("end offset %d, want 10", end)
	}
}

// TestAmbiguousAcknowledgement: the cluster writes a produce and answers
// REQUEST_TIMED_OUT (the acknowledgement is lost after the write); the
// idempotent producer's retry is absorbed by the broker, so every record
// is in the topic exactly once and in order. Broker errors before the write
// (NOT_LEADER_FOR_PARTITION) and a leader move are retried too.
func TestAmbiguousAcknowledgement(t *testing.T) {
	c := cluster(t)
	cfg, p := setup(t, c)
	ctx := testCtx(t)
	want := envelopes(t, 0x1000, 30)

	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.topic(), Err: kerr.RequestTimedOut, Count: 2})
	if err := p.PublishBatch(ctx, want[:10]); err != nil {
		t.Fatal(err)
	}
	if h.Hits() == 0 {
		t.Fatal("the ambiguous acknowledgement was never injected")
	}
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.topic(), Err: kerr.NotLeaderForPartition, Count: 3})
	if err := p.PublishBatch(ctx, want[10:20]); err != nil {
		t.Fatal(err)
	}
	leader := c.LeaderFor(cfg.topic(), Partition)
	if err := c.MoveTopicPartition(cfg.topic(), Partition, (leader+1)%3); err != nil {
		t.Fatal(err)
	}
	if err := p.PublishBatch(ctx, want[20:]); err != nil {
		t.Fatal(err)
	}
	if end := endOffset(t, p); end != 30 {
		t.Fatalf("end offset %d, want 30: records written twice or lost", end)
	}
	_, got := readAll(t, cfg, 30)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d differs from envelope %d", i, i)
		}
	}
}

// TestReaderSeeksFromCheckpoint: Rewind moves the reader and the group
// offset; a new reader starts at the group offset; Commit commits
// offset+1 synchronously; a read below the log start fails instead of
// resetting.
func TestReaderSeeksFromCheckpoint(t *testing.T) {
	c := cluster(t)
	cfg, p := setup(t, c)
	ctx := testCtx(t)
	want := envelopes(t, 0x1000, 20)
	if err := p.PublishBatch(ctx, want); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Position() != 0 || r.Oldest() != 0 {
		t.Fatalf("fresh reader at %d (oldest %d), want 0", r.Position(), r.Oldest())
	}
	for range 12 {
		if _, _, err := r.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Commit(11); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Committed(ctx); err != nil || got != 12 {
		t.Fatalf("committed = %d, %v; want 12", got, err)
	}
	// The target's checkpoint says offset 6 was the last applied: rewind.
	if err := r.Rewind(7); err != nil {
		t.Fatal(err)
	}
	o, v, err := r.Next(ctx)
	if err != nil || o != 7 || !bytes.Equal(v, want[7]) {
		t.Fatalf("after Rewind(7): offset %d, %v", o, err)
	}
	r2, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if r2.Position() != 7 {
		t.Fatalf("a restarted reader starts at %d, want the rewound group offset 7", r2.Position())
	}

	// Records below the log start are gone: the reader refuses to skip.
	adm := p.adm
	if _, err := adm.DeleteRecords(ctx, deleteBefore(cfg.topic(), 5)); err != nil {
		t.Fatal(err)
	}
	r3, err := NewReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	if r3.Oldest() != 5 {
		t.Fatalf("oldest = %d, want 5", r3.Oldest())
	}
	if err := r3.Rewind(2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r3.Next(ctx); err == nil || !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("reading deleted offset 2: err = %v, want OFFSET_OUT_OF_RANGE", err)
	}
}

func deleteBefore(topic string, at int64) kadm.Offsets {
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: topic, Partition: Partition, At: at, LeaderEpoch: -1})
	return os
}
