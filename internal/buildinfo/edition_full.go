//go:build full

package buildinfo

// The full edition carries the Kafka transport in both of its modes
// (transport/kafka, docs/KAFKA.md), the dev-only in-process cluster, and
// the fleet with its Iceberg changelog and epochs (internal/lake,
// docs/LAKE.md: fleet, lake, fanin).
func init() {
	Edition = "full"
	Carries = []string{"Kafka transport (strict and partitioned modes)", "dev kafka-cluster", "fleet and Iceberg lake (fleet, lake, fanin verify)"}
}
