package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/config"
)

// devKafkaCluster serves `dev kafka-cluster`; the full edition sets it
// (dev_full.go), so the default binary links no Kafka code.
var devKafkaCluster cli.ActionFunc

// devLakeRead serves `dev lake-read`; the full edition sets it
// (dev_lakeread_full.go).
var devLakeRead cli.ActionFunc

// devCommand holds development tools: hidden, never for production.
func devCommand() *cli.Command {
	return &cli.Command{
		Name:   "dev",
		Usage:  "development tools (evaluation only)",
		Hidden: true,
		Subcommands: []*cli.Command{{
			Name:  "kafka-cluster",
			Usage: "run an in-process Kafka cluster (franz-go kfake, memory only) until SIGINT or SIGTERM; trellara-full only",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "brokers", Usage: "number of brokers", Value: 3},
				&cli.StringSliceFlag{Name: "seed-topic", Usage: "topic to create at start (one partition); repeatable"},
				&cli.IntFlag{Name: "port", Usage: "first broker port (the rest follow); 0 picks free ports"},
				&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "flow config the cluster is for; refused when its environment is production"},
				formatFlag(),
			},
			Action: func(c *cli.Context) error {
				if _, err := outputFormat(c); err != nil {
					return err
				}
				if devKafkaCluster == nil {
					return cli.Exit("trellara dev kafka-cluster needs trellara-full (the full edition, built with make build as bin/trellara-full); "+
						"this binary is trellara "+VersionString(), ExitError)
				}
				if c.Int("brokers") < 1 || c.Int("brokers") > 16 {
					return usageError("dev kafka-cluster: --brokers %d: use 1 to 16", c.Int("brokers"))
				}
				if p := c.String("config"); p != "" {
					cfg, err := config.Load(p)
					if err != nil {
						return failure(err)
					}
					if cfg.Environment == config.Production {
						return cli.Exit(fmt.Sprintf("dev kafka-cluster: %s has environment: production; the in-process cluster keeps everything in memory "+
							"and is for evaluation only: point transport.kafka.brokers at your Kafka or Redpanda cluster", p), ExitError)
					}
				}
				return devKafkaCluster(c)
			},
		}, {
			Name: "lake-read",
			Usage: "read a fleet's changelog tables with the independent reader (no iceberg-go code) and check that no change is there twice; " +
				"trellara-full only",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "path to the fleet config (fleet.yml)", Value: "fleet.yml"},
				formatFlag(),
			},
			Action: func(c *cli.Context) error {
				if _, err := outputFormat(c); err != nil {
					return err
				}
				if devLakeRead == nil {
					return cli.Exit("trellara dev lake-read needs trellara-full (the full edition, built with make build as bin/trellara-full); "+
						"this binary is trellara "+VersionString(), ExitError)
				}
				return devLakeRead(c)
			},
		}},
	}
}
