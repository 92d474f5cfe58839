package cli

import "github.com/urfave/cli/v2"

func initCommand() *cli.Command {
	return notImplemented("init", "write a flow config (trellara.yml) for a source, target and tables", false,
		&cli.StringFlag{Name: "source-database-url", Usage: "source connection URL (written as a reference unless --evaluate)"},
		&cli.StringFlag{Name: "target-database-url", Usage: "target connection URL"},
		&cli.StringSliceFlag{Name: "table", Usage: "schema.table to capture (repeatable)"},
		&cli.BoolFlag{Name: "evaluate", Usage: "local transport in ./.trellara, bounded run, Trellara owns slot and publication"},
		&cli.StringFlag{Name: "output", Usage: "config path to write", Value: "trellara.yml"},
		&cli.BoolFlag{Name: "force", Usage: "overwrite an existing config"},
	)
}

func checkCommand() *cli.Command {
	return notImplemented("check", "validate the config and grade the source (read-only)", false, configFlag(), formatFlag())
}

func preflightCommand() *cli.Command {
	return notImplemented("preflight", "check connectivity, privileges, slots, publication and target tables", false, configFlag(), formatFlag(),
		&cli.BoolFlag{Name: "create-target-tables", Usage: "create missing target tables from the source definitions"})
}

func runCommand() *cli.Command {
	return notImplemented("run", "capture, publish, apply (long-running service, or bounded with --local)", false, configFlag(), formatFlag(),
		&cli.BoolFlag{Name: "local", Usage: "bounded run on the local segment log: snapshot, relay and apply until caught up, then exit"},
		&cli.BoolFlag{Name: "verify", Usage: "after a bounded run, verify convergence; exit 0 only on CONVERGED"},
		&cli.StringFlag{Name: "role", Usage: "relay, applier or all", Value: "all"},
		&cli.BoolFlag{Name: "cleanup", Usage: "drop the slot and publication Trellara created (evaluate flows)"},
	)
}

func verifyCommand() *cli.Command {
	return notImplemented("verify", "prove the target converged: counts, PK checksums, watermarks", false, configFlag(), formatFlag(),
		&cli.StringSliceFlag{Name: "table", Usage: "verify only this schema.table (repeatable)"})
}

func statusCommand() *cli.Command {
	return notImplemented("status", "slot, lag, log retention, cursors, checkpoint, quarantine, last verify", false, configFlag(), formatFlag(),
		&cli.StringFlag{Name: "view", Usage: "report, diagnostics or quarantine", Value: "report"})
}

func configCommand() *cli.Command {
	return notImplemented("config", "validate or redact a config", false, configFlag(), formatFlag())
}

func chaosCommand() *cli.Command {
	return notImplemented("chaos", "deterministic failure matrix: run, report", true, formatFlag())
}

func streamCommand() *cli.Command {
	return notImplemented("stream", "inspect the transport: locate-local", true, configFlag(), formatFlag())
}
