package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Reader is the applier's side of the Kafka transport: apply.Source,
// apply.Rewinder and apply.Cursor over the flow's one partition.
//
// It consumes the partition directly (no group membership, so no
// rebalance can move it) from the consumer group's committed offset, and
// never commits on its own unless auto_commit is set: Commit, called by the
// applier after the target commit, commits the group offset synchronously.
// apply.Run puts the target's checkpoint in charge (Rewind), since the
// checkpoint commits with the data and the group offset only after it.
//
// A fetch at an offset the topic no longer holds fails (no silent reset to
// the oldest or newest record), and so does a gap in offsets: both would
// lose transactions.
type Reader struct {
	cfg    Config
	adm    *kadm.Client
	admCl  *kgo.Client
	cl     *kgo.Client // consuming client, made at pos on the first Next
	pos    int64       // the offset Next returns next
	oldest int64
	buf    []*kgo.Record
	part   *assembly // partitioned mode; nil in strict mode
}

// NewReader opens a reader at the consumer group's committed offset, or at
// offset 0 when the group has none.
func NewReader(ctx context.Context, c Config) (*Reader, error) {
	opts, err := clientOpts(c)
	if err != nil {
		return nil, err
	}
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: flow %q: admin client: %w", c.Flow, err)
	}
	r := &Reader{cfg: c, adm: kadm.NewClient(admCl), admCl: admCl}
	start, _, err := offsets(ctx, r.adm, c)
	if err != nil {
		admCl.Close()
		return nil, err
	}
	r.oldest = start
	at, err := r.Committed(ctx)
	if err != nil {
		admCl.Close()
		return nil, fmt.Errorf("kafka: flow %q: fetch the committed offset of consumer group %q: %w", c.Flow, c.Kafka.ConsumerGroup, err)
	}
	if at >= 0 {
		r.pos = at
	}
	if c.partitioned() {
		r.part = newAssembly(r.pos)
	}
	return r, nil
}

// Next returns the next record's offset and envelope bytes.
func (r *Reader) Next(ctx context.Context) (uint64, []byte, error) {
	if r.part != nil {
		return r.nextPartitioned(ctx)
	}
	for len(r.buf) == 0 {
		if err := r.fill(ctx); err != nil {
			return 0, nil, err
		}
	}
	rec := r.buf[0]
	r.buf = r.buf[1:]
	if rec.Offset != r.pos {
		return 0, nil, &RecordError{Kind: ErrRecordsMissing, Topic: r.cfg.topic(), Partition: Partition, Offset: r.pos,
			Err: fmt.Errorf("kafka: flow %q: topic %q partition %d: expected offset %d, got %d: records are missing "+
				"(a compacted topic or deleted records); fix: set cleanup.policy=delete on the topic and re-copy the flow's tables",
				r.cfg.Flow, r.cfg.topic(), Partition, r.pos, rec.Offset)}
	}
	r.pos++
	return uint64(rec.Offset), rec.Value, nil
}

func (r *Reader) fill(ctx context.Context) error {
	if r.cl == nil {
		opts, err := clientOpts(r.cfg)
		if err != nil {
			return err
		}
		opts = append(opts,
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.topic(): {Partition: kgo.NewOffset().At(r.pos)}}),
			kgo.ConsumeResetOffset(kgo.NoResetOffset()),
			kgo.FetchMaxPartitionBytes(MaxRecordBytes),
			kgo.FetchMaxBytes(2*MaxRecordBytes),
		)
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("kafka: flow %q: consumer for topic %q: %w", r.cfg.Flow, r.cfg.topic(), err)
		}
		r.cl = cl
	}
	fs := r.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := fetchErr(fs); err != nil {
		return fmt.Errorf("kafka: flow %q: read topic %q from offset %d: %w", r.cfg.Flow, r.cfg.topic(), r.pos, err)
	}
	fs.EachRecord(func(rec *kgo.Record) { r.buf = append(r.buf, rec) })
	if r.cfg.Kafka.AutoCommit && len(r.buf) > 0 {
		// auto_commit (development only): the group offset follows what
		// was read, before it is applied, as Kafka's own auto-commit does.
		return r.commit(ctx, map[int32]int64{Partition: r.buf[len(r.buf)-1].Offset + 1})
	}
	return nil
}

// Position returns the offset the next Next returns.
func (r *Reader) Position() uint64 { return uint64(r.pos) }

// End returns partition 0's end offset (high watermark) now: the offset
// after the newest unit in strict mode, after the newest manifest in
// partitioned mode. Every unit below it is durable in the cluster, and in
// partitioned mode so is every chunk its manifest names, since the
// producer writes manifests only after their chunks are acknowledged: a
// reader at Position reads through End without waiting for the relay.
func (r *Reader) End(ctx context.Context) (uint64, error) {
	_, end, err := offsets(ctx, r.adm, r.cfg)
	if err != nil {
		return 0, err
	}
	return uint64(end), nil
}

// Oldest returns the partition's log start offset as of NewReader.
func (r *Reader) Oldest() uint64 { return uint64(r.oldest) }

// Rewind commits offset as the group's position and reads from there on.
// Kafka's retention does not wait for consumers: the offsets the topic
// keeps are set by retention.ms and retention.bytes (CheckTopic warns when
// they are short).
func (r *Reader) Rewind(offset uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := r.commit(ctx, map[int32]int64{Partition: int64(offset)}); err != nil {
		return err
	}
	r.closeConsumer()
	r.buf = nil
	r.pos = int64(offset)
	if r.part != nil {
		r.part = newAssembly(r.pos)
	}
	return nil
}

// Commit records that everything through offset is applied: the group's
// committed offset becomes offset+1, synchronously. The applier calls it
// only after the target transaction holding offset has committed.
func (r *Reader) Commit(offset uint64) error {
	if r.part != nil {
		return r.commitPartitioned(int64(offset))
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return r.commit(ctx, map[int32]int64{Partition: int64(offset) + 1})
}

// commit commits next (partition → the next offset to read) as the
// group's offsets.
func (r *Reader) commit(ctx context.Context, next map[int32]int64) error {
	os := kadm.Offsets{}
	for p, at := range next {
		os.Add(kadm.Offset{Topic: r.cfg.topic(), Partition: p, At: at, LeaderEpoch: -1})
	}
	if err := r.adm.CommitAllOffsets(ctx, r.cfg.Kafka.ConsumerGroup, os); err != nil {
		return fmt.Errorf("kafka: flow %q: commit offset %d of topic %q partition %d to consumer group %q: %w",
			r.cfg.Flow, next[Partition], r.cfg.topic(), Partition, r.cfg.Kafka.ConsumerGroup, err)
	}
	return nil
}

// Committed returns the consumer group's committed offset (the next offset
// to apply), or -1 when there is none.
func (r *Reader) Committed(ctx context.Context) (int64, error) {
	got, err := r.adm.FetchOffsets(ctx, r.cfg.Kafka.ConsumerGroup)
	if err == nil {
		err = got.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return -1, nil // nothing committed yet
	}
	if err != nil {
		return 0, err
	}
	if o, ok := got.Lookup(r.cfg.topic(), Partition); ok {
		return o.At, nil
	}
	return -1, nil
}

// Close releases the reader's clients.
func (r *Reader) Close() error {
	r.closeConsumer()
	if r.admCl != nil {
		r.admCl.Close()
	}
	return nil
}

func (r *Reader) closeConsumer() {
	if r.cl != nil {
		r.cl.Close()
		r.cl = nil
	}
}
