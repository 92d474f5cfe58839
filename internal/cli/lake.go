package cli

import (
	"errors"
	"fmt"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/shell"
)

// lakeCommands builds fleet, lake and fanin; the full edition sets it
// (lake_full.go). Without it, each says it is not implemented in this
// build and names the binary that has it.
var lakeCommands func() []*cli.Command

// fleetLakeCommands are the fleet, lake and fanin commands of this build.
// fleet and lake are on the short help surface in both editions, as the
// product page lists them; fanin is hidden.
func fleetLakeCommands() []*cli.Command {
	if lakeCommands != nil {
		return lakeCommands()
	}
	return []*cli.Command{
		fullOnly("fleet", "many sources operated as one object: init, run, report, scorecard", false),
		fullOnly("lake", "Iceberg fan-in: plan, epoch", false),
		fullOnly("fanin", "fan-in verification: fanin verify", true),
	}
}

// errFullEdition is the refusal of a command that only trellara-full links
// (the default edition links no Iceberg or Kafka client). The feature has
// landed, so this is not ErrNotImplemented: the fix is the other binary.
var errFullEdition = errors.New("is in the full edition only")

// fullOnly is a command only trellara-full carries: in this build it
// names the binary that has it, with the same arguments, and exits 2.
func fullOnly(name, usage string, hidden bool) *cli.Command {
	return &cli.Command{
		Name:            name,
		Usage:           usage + " (trellara-full)",
		Hidden:          hidden,
		Flags:           []cli.Flag{configFlag(), formatFlag()},
		SkipFlagParsing: true, // whatever was typed, the answer is the same command in trellara-full
		Action: func(c *cli.Context) error {
			if slices.Contains(c.Args().Slice(), "--help") || slices.Contains(c.Args().Slice(), "-h") {
				fmt.Fprintf(c.App.Writer, "trellara %s: %s; in this build it names the same command for trellara-full (docs/CLI.md)\n", name, usage)
				return nil
			}
			args := append([]string{"trellara-full", name}, c.Args().Slice()...)
			return &exitErr{err: fmt.Errorf("%s %w (this build links no Iceberg or Kafka client); fix: %s (installed beside trellara by the package; make build writes bin/trellara-full)",
				name, errFullEdition, shell.Command(args...)), code: ExitError}
		},
	}
}
