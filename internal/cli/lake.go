package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/buildinfo"
)

// lakeCommands builds fleet, lake and fanin; the full edition sets it
// (lake_full.go). Without it, each says it is not implemented in this
// build and names the binary that has it.
var lakeCommands func() []*cli.Command

// fleetLakeCommands are the fleet, lake and fanin commands of this build.
func fleetLakeCommands() []*cli.Command {
	if lakeCommands != nil {
		return lakeCommands()
	}
	return []*cli.Command{
		fullOnly("fleet", "many sources operated as one object: init, run, report, scorecard"),
		fullOnly("lake", "Iceberg fan-in: plan, epoch"),
		fullOnly("fanin", "fan-in verification: fanin verify"),
	}
}

// fullOnly is notImplemented for a command only trellara-full carries.
func fullOnly(name, usage string) *cli.Command {
	cmd := notImplemented(name, usage, true, configFlag(), formatFlag())
	cmd.Action = func(*cli.Context) error {
		return &exitErr{err: fmt.Errorf("%w: %s in this build; trellara-full (make build writes bin/trellara-full) carries it", buildinfo.ErrNotImplemented, name), code: ExitError}
	}
	return cmd
}
