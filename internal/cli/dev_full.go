//go:build full

package cli

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/urfave/cli/v2"
)

func init() { devKafkaCluster = runKafkaCluster }

// runKafkaCluster starts a kfake cluster, prints its broker addresses and
// a ready line, and serves until SIGINT or SIGTERM.
func runKafkaCluster(c *cli.Context) error {
	n := c.Int("brokers")
	opts := []kfake.Opt{kfake.NumBrokers(n)}
	if p := c.Int("port"); p != 0 {
		ports := make([]int, n)
		for i := range ports {
			ports[i] = p + i
		}
		opts = append(opts, kfake.Ports(ports...))
	}
	if ts := c.StringSlice("seed-topic"); len(ts) > 0 {
		opts = append(opts, kfake.SeedTopics(1, ts...))
	}
	cl, err := kfake.NewCluster(opts...)
	if err != nil {
		return failure(fmt.Errorf("dev kafka-cluster: start %d brokers: %w", n, err))
	}
	defer cl.Close()
	ctx, stop := signalContext(c)
	defer stop()
	if c.String("format") == "json" {
		// One envelope, written once the brokers listen: its arrival is the ready signal.
		if err := writeJSON(c, true, map[string]any{"brokers": cl.ListenAddrs(), "ready": true}); err != nil {
			return err
		}
	} else {
		w := c.App.Writer
		fmt.Fprintf(w, "brokers %s\n", strings.Join(cl.ListenAddrs(), ","))
		fmt.Fprintf(w, "ready: %d-broker in-process Kafka cluster (kfake, memory only, for evaluation); stop with SIGINT or SIGTERM\n", n)
	}
	<-ctx.Done()
	return nil
}
