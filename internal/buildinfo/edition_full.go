//go:build full

package buildinfo

// The full edition carries the Kafka transport in both of its modes
// (transport/kafka, docs/KAFKA.md) and the dev-only in-process cluster.
func init() {
	Edition = "full"
	Carries = []string{"Kafka transport (strict and partitioned modes)", "dev kafka-cluster"}
}
