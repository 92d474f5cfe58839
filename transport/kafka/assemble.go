package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/transport/kafka/manifest"
)

// Reassembly bounds: the manifests buffered ahead of the applier, and the
// chunk bytes buffered per data partition before its fetches pause (a
// partition the unit at the head of the manifests waits for is never
// paused).
const (
	maxBufferedManifests  = 1024
	maxBufferedChunkBytes = 64 << 20
	fetchMaxWait          = 500 * time.Millisecond
)

// HoldWarnAfter is how long a unit waits at the manifest barrier before the
// reader logs that it is held (and keeps holding it).
var HoldWarnAfter = 10 * time.Second

// Held is a unit the reader holds at the manifest barrier: its manifest
// has arrived, some of its chunks have not.
type Held struct {
	ManifestOffset int64
	CommitLSN      uint64
	Missing        []ChunkRef
	Since          time.Time
}

func (h Held) String() string {
	miss := make([]string, len(h.Missing))
	for i, m := range h.Missing {
		miss[i] = m.String()
	}
	return fmt.Sprintf("unit at commit LSN %s (manifest offset %d) is held at the manifest barrier since %s, waiting for its chunk(s) at %s; none of it is applied",
		envelope.FormatLSN(h.CommitLSN), h.ManifestOffset, h.Since.UTC().Format(time.RFC3339), strings.Join(miss, ", "))
}

type pendingManifest struct {
	offset int64
	m      *manifest.Manifest
	lsn    uint64
}

// assembly is the reader's partitioned-mode state: the manifests read
// ahead, the chunks buffered per data partition, and what was handed out
// but not yet committed.
type assembly struct {
	recv      int64 // next manifest-partition offset expected
	manifests []pendingManifest
	added     bool // the data partitions are being consumed
	chunks    map[int32]map[int64]*kgo.Record
	bytes     map[int32]int
	seen      map[int32]int64 // per data partition: past the newest record received
	floor     map[int32]int64 // per data partition: records below are not needed
	paused    map[int32]bool
	handed    []handedUnit // handed out, not yet committed
	held      *Held
	warned    bool
}

type handedUnit struct {
	offset int64
	ends   map[int32]int64 // data partition → past its chunk
}

func newAssembly(at int64) *assembly {
	return &assembly{recv: at, chunks: map[int32]map[int64]*kgo.Record{}, bytes: map[int32]int{},
		seen: map[int32]int64{}, floor: map[int32]int64{}, paused: map[int32]bool{}}
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// nextPartitioned returns the next whole unit, in manifest order.
func (r *Reader) nextPartitioned(ctx context.Context) (uint64, []byte, error) {
	a := r.part
	for {
		if len(a.manifests) > 0 {
			h := a.manifests[0]
			b, missing, err := r.tryAssemble(h)
			if err != nil {
				return 0, nil, err
			}
			if missing == nil {
				r.handOut(h)
				return uint64(h.offset), b, nil
			}
			r.hold(h, missing)
		}
		if err := r.fillPartitioned(ctx); err != nil {
			if a.held != nil && ctx.Err() != nil {
				return 0, nil, fmt.Errorf("kafka: flow %q: topic %q: %s: %w", r.cfg.Flow, r.cfg.topic(), a.held, err)
			}
			return 0, nil, err
		}
	}
}

// tryAssemble rebuilds the unit of manifest h when every chunk it names
// has arrived; otherwise it returns the chunks still missing. A chunk that
// cannot arrive any more (its partition was read past its offset without
// it, or the record there is another unit's) is an error: the unit is
// never applied without it.
func (r *Reader) tryAssemble(h pendingManifest) ([]byte, []ChunkRef, error) {
	a := r.part
	for i, f := range h.m.From {
		p := int32(i + 1)
		if f > a.floor[p] {
			a.floor[p] = f
			r.dropBelow(p, f)
		}
	}
	var missing []ChunkRef
	rows := make([][]*pb.Row, 0, len(h.m.Chunks))
	for _, c := range h.m.Chunks {
		rec := a.chunks[c.Partition][c.Offset]
		if rec == nil {
			if a.seen[c.Partition] > c.Offset {
				return nil, nil, &RecordError{Kind: ErrRecordsMissing, Topic: r.cfg.topic(), Partition: c.Partition, Offset: c.Offset,
					Err: fmt.Errorf("kafka: flow %q: topic %q: the chunk of commit LSN %s at %s is not in the partition (deleted or compacted records); "+
						"the unit cannot be rebuilt and is not applied; fix: set cleanup.policy=delete and a retention longer than the applier's downtime on the topic, and re-copy the flow's tables",
						r.cfg.Flow, r.cfg.topic(), envelope.FormatLSN(h.lsn), c)}
			}
			missing = append(missing, c)
			continue
		}
		got, err := chunkRows(rec, h)
		if err != nil {
			return nil, nil, &RecordError{Kind: ErrInvalidRecord, Topic: r.cfg.topic(), Partition: c.Partition, Offset: c.Offset,
				Err: fmt.Errorf("kafka: flow %q: topic %q: the record at %s named by the manifest of commit LSN %s (offset %d): %w",
					r.cfg.Flow, r.cfg.topic(), c, envelope.FormatLSN(h.lsn), h.offset, err)}
		}
		if len(got) != c.Rows {
			return nil, nil, &RecordError{Kind: ErrInvalidRecord, Topic: r.cfg.topic(), Partition: c.Partition, Offset: c.Offset,
				Err: fmt.Errorf("kafka: flow %q: topic %q: the chunk at %s holds %d rows, its manifest (offset %d) says %d",
					r.cfg.Flow, r.cfg.topic(), c, len(got), h.offset, c.Rows)}
		}
		rows = append(rows, got)
	}
	if missing != nil {
		return nil, missing, nil
	}
	b, err := manifest.Assemble(h.m, rows)
	if err != nil {
		return nil, nil, &RecordError{Kind: ErrInvalidRecord, Topic: r.cfg.topic(), Partition: ManifestPartition, Offset: h.offset,
			Err: fmt.Errorf("kafka: flow %q: topic %q: rebuild the unit of manifest offset %d (commit LSN %s): %w",
				r.cfg.Flow, r.cfg.topic(), h.offset, envelope.FormatLSN(h.lsn), err)}
	}
	return b, nil, nil
}

// chunkRows checks that rec is a chunk of the unit of manifest h and
// returns its rows.
func chunkRows(rec *kgo.Record, h pendingManifest) ([]*pb.Row, error) {
	if k := header(rec.Headers, HeaderRecord); k != RecordChunk {
		return nil, fmt.Errorf("it is not a chunk (%s %q)", HeaderRecord, k)
	}
	if sum, ok := parseChecksumHeader(header(rec.Headers, HeaderChecksum)); !ok || sum != h.m.Checksum {
		return nil, fmt.Errorf("it belongs to another unit (checksum %s, the manifest's is %016x)", header(rec.Headers, HeaderChecksum), h.m.Checksum)
	}
	return manifest.DecodeChunk(rec.Value)
}

// handOut pops the head manifest: its chunks are released and its
// partition offsets kept for Commit.
func (r *Reader) handOut(h pendingManifest) {
	a := r.part
	a.manifests = a.manifests[1:]
	a.held, a.warned = nil, false
	ends := map[int32]int64{}
	for _, c := range h.m.Chunks {
		ends[c.Partition] = max(ends[c.Partition], c.Offset+1)
	}
	for p, e := range ends {
		if e > a.floor[p] {
			a.floor[p] = e
			r.dropBelow(p, e)
		}
	}
	a.handed = append(a.handed, handedUnit{offset: h.offset, ends: ends})
	r.pos = h.offset + 1
}

func (r *Reader) dropBelow(p int32, off int64) {
	a := r.part
	for o, rec := range a.chunks[p] {
		if o < off {
			a.bytes[p] -= len(rec.Value)
			delete(a.chunks[p], o)
		}
	}
}

// hold records that the head unit waits at the barrier, and logs it once
// it has waited HoldWarnAfter.
func (r *Reader) hold(h pendingManifest, missing []ChunkRef) {
	a := r.part
	if a.held == nil || a.held.ManifestOffset != h.offset {
		a.held, a.warned = &Held{ManifestOffset: h.offset, CommitLSN: h.lsn, Since: time.Now()}, false
	}
	a.held.Missing = missing
	if !a.warned && time.Since(a.held.Since) >= HoldWarnAfter {
		a.warned = true
		r.cfg.logger().Warn("kafka: "+a.held.String(), "flow", r.cfg.Flow, "topic", r.cfg.topic(),
			"fix", "check that the relay is running and the data partitions are readable (kafka-topics.sh --describe --topic "+r.cfg.topic()+")")
	}
}

// Held returns the unit held at the manifest barrier, if the last Next
// stopped at one. Call it from the goroutine that calls Next.
func (r *Reader) Held() (Held, bool) {
	if r.part == nil || r.part.held == nil {
		return Held{}, false
	}
	return *r.part.held, true
}

// fillPartitioned fetches once: manifests from partition 0 in offset
// order, chunks from the data partitions.
func (r *Reader) fillPartitioned(ctx context.Context) error {
	a := r.part
	if r.cl == nil {
		opts, err := clientOpts(r.cfg)
		if err != nil {
			return err
		}
		opts = append(opts,
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.topic(): {ManifestPartition: kgo.NewOffset().At(a.recv)}}),
			kgo.ConsumeResetOffset(kgo.NoResetOffset()),
			kgo.FetchMaxPartitionBytes(MaxRecordBytes),
			kgo.FetchMaxBytes(2*MaxRecordBytes),
			// A fetch in flight to a broker is not reissued when data
			// partitions are added: a short wait bounds how long their
			// first records can be kept waiting behind it.
			kgo.FetchMaxWait(fetchMaxWait),
		)
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("kafka: flow %q: consumer for topic %q: %w", r.cfg.Flow, r.cfg.topic(), err)
		}
		r.cl = cl
	}
	if !a.added && len(a.manifests) > 0 {
		// The first manifest says where each data partition's chunks of it
		// and of every later unit begin.
		add := map[int32]kgo.Offset{}
		for i, f := range a.manifests[0].m.From {
			p := int32(i + 1)
			add[p] = kgo.NewOffset().At(f)
			a.seen[p], a.floor[p] = f, f
			a.chunks[p] = map[int64]*kgo.Record{}
		}
		r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.topic(): add})
		a.added = true
		return nil // the head unit is judged again against the new floors
	}
	r.throttle()
	fs := r.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := fetchErr(fs); err != nil {
		return fmt.Errorf("kafka: flow %q: read topic %q from manifest offset %d: %w", r.cfg.Flow, r.cfg.topic(), a.recv, err)
	}
	var err error
	fs.EachRecord(func(rec *kgo.Record) {
		if err != nil {
			return
		}
		if rec.Partition != ManifestPartition {
			p := rec.Partition
			a.seen[p] = max(a.seen[p], rec.Offset+1)
			if rec.Offset >= a.floor[p] {
				a.chunks[p][rec.Offset] = rec
				a.bytes[p] += len(rec.Value)
			}
			return
		}
		err = r.addManifest(rec)
	})
	if err != nil {
		return err
	}
	if r.cfg.Kafka.AutoCommit && len(a.manifests) > 0 {
		return r.commit(ctx, map[int32]int64{ManifestPartition: a.manifests[len(a.manifests)-1].offset + 1})
	}
	return nil
}

func (r *Reader) addManifest(rec *kgo.Record) error {
	a := r.part
	if rec.Offset != a.recv {
		return &RecordError{Kind: ErrRecordsMissing, Topic: r.cfg.topic(), Partition: ManifestPartition, Offset: a.recv,
			Err: fmt.Errorf("kafka: flow %q: topic %q partition %d: expected manifest offset %d, got %d: records are missing "+
				"(a compacted topic or deleted records); fix: set cleanup.policy=delete on the topic and re-copy the flow's tables",
				r.cfg.Flow, r.cfg.topic(), ManifestPartition, a.recv, rec.Offset)}
	}
	bad := func(err error) error {
		return &RecordError{Kind: ErrInvalidRecord, Topic: r.cfg.topic(), Partition: ManifestPartition, Offset: rec.Offset,
			Err: fmt.Errorf("kafka: flow %q: topic %q partition %d offset %d is not a manifest of this flow: %w; "+
				"fix: the manifest partition is written by the relay alone; point transport.kafka.topic at the flow's own topic",
				r.cfg.Flow, r.cfg.topic(), ManifestPartition, rec.Offset, err)}
	}
	if k := header(rec.Headers, HeaderRecord); k != RecordManifest {
		return bad(fmt.Errorf("%s is %q", HeaderRecord, k))
	}
	m, err := manifest.Decode(rec.Value)
	if err != nil {
		return bad(err)
	}
	if len(m.From) != r.cfg.Kafka.Partitions {
		return bad(fmt.Errorf("written for %d data partitions, transport.kafka.partitions is %d", len(m.From), r.cfg.Kafka.Partitions))
	}
	for _, c := range m.Chunks {
		if c.Partition < 1 || int(c.Partition) > r.cfg.Kafka.Partitions {
			return bad(fmt.Errorf("names a chunk on partition %d", c.Partition))
		}
	}
	a.manifests = append(a.manifests, pendingManifest{offset: rec.Offset, m: m, lsn: m.Skeleton.GetCommitLsn()})
	a.recv++
	return nil
}

// throttle pauses the fetches that run too far ahead of the applier: the
// manifest partition beyond maxBufferedManifests, a data partition beyond
// maxBufferedChunkBytes unless the head unit waits for it.
func (r *Reader) throttle() {
	a := r.part
	want := map[int32]bool{ManifestPartition: len(a.manifests) >= maxBufferedManifests}
	need := map[int32]bool{}
	if len(a.manifests) > 0 {
		for _, c := range a.manifests[0].m.Chunks {
			if c.Offset >= a.seen[c.Partition] {
				need[c.Partition] = true
			}
		}
	}
	for p, n := range a.bytes {
		want[p] = n > maxBufferedChunkBytes && !need[p]
	}
	var pause, resume []int32
	for _, p := range slices.Sorted(maps.Keys(want)) {
		if want[p] != a.paused[p] {
			if want[p] {
				pause = append(pause, p)
			} else {
				resume = append(resume, p)
			}
			a.paused[p] = want[p]
		}
	}
	if len(pause) > 0 {
		r.cl.PauseFetchPartitions(map[string][]int32{r.cfg.topic(): pause})
	}
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(map[string][]int32{r.cfg.topic(): resume})
	}
}

// commitPartitioned commits the group offsets after the unit at manifest
// offset off: partition 0 past it, each data partition past the chunks of
// the units handed out up to it (for lag monitoring per partition).
func (r *Reader) commitPartitioned(off int64) error {
	a := r.part
	next := map[int32]int64{ManifestPartition: off + 1}
	keep := a.handed[:0]
	for _, h := range a.handed {
		if h.offset > off {
			keep = append(keep, h)
			continue
		}
		for p, e := range h.ends {
			next[p] = max(next[p], e)
		}
	}
	a.handed = keep
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return r.commit(ctx, next)
}

// lastPartitioned rebuilds the unit of the manifest at offset off (the
// relay's Last).
func lastPartitioned(ctx context.Context, c Config, off int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	k := *c.Kafka
	k.AutoCommit = false // the relay reads; it commits no group offset
	c.Kafka = &k
	r := &Reader{cfg: c, pos: off, part: newAssembly(off)}
	defer r.closeConsumer()
	_, b, err := r.Next(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w; fix: check that the topic's data partitions are readable", err)
	}
	return b, err
}
