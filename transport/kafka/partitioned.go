package kafka

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/trellara/trellara/transport/kafka/manifest"
)

// ChunkRef names one chunk of a unit (manifest.ChunkRef).
type ChunkRef = manifest.ChunkRef

// Partitioned mode (docs/KAFKA.md, "Partitioned mode").
//
// The topic has Partitions+1 partitions. Partition 0 is the manifest
// partition: one manifest record per unit, in commit order, and nothing
// else. Partitions 1..N are data partitions: a unit's rows go to partition
// 1 + hash(schema, table, primary key) mod N, as one chunk record per data
// partition the unit touches. The producer writes a batch's chunks first
// and, once the cluster has acknowledged all of them, the manifests, which
// name each chunk by partition and offset. The reader follows the manifest
// partition: it holds a unit until every chunk its manifest names has
// arrived, and hands the applier the whole envelope, so the target applies
// it in one transaction and the applier's checkpoint offset is the
// manifest's offset.

// HeaderRecord says what a partitioned-mode record is: RecordManifest or
// RecordChunk. Strict-mode records carry no such header.
const HeaderRecord = "trellara-record"

// Values of HeaderRecord.
const (
	RecordManifest = "manifest"
	RecordChunk    = "chunk"
)

// ManifestPartition is the partition that carries the manifests in
// partitioned mode, and the only partition in strict mode.
const ManifestPartition int32 = 0

// partitioned reports whether the flow runs in partitioned mode.
func (c Config) partitioned() bool { return c.Kafka.Mode == ModePartitioned }

// topicPartitions is how many partitions the flow's topic must have.
func (c Config) topicPartitions() int {
	if c.partitioned() {
		return c.Kafka.Partitions + 1
	}
	return 1
}

// header returns a record header's value.
func header(hs []kgo.RecordHeader, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func checksumHeader(sum uint64) []byte { return []byte(fmt.Sprintf("%016x", sum)) }

func parseChecksumHeader(s string) (uint64, bool) {
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil && len(s) == 16
}
