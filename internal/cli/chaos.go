package cli

import "github.com/urfave/cli/v2"

func chaosCommand() *cli.Command {
	return notImplemented("chaos", "deterministic failure matrix: run, report", true, formatFlag())
}
