// Package cli is the trellara command tree: flags, output and exit codes.
// It wires the data-path packages together and holds no pipeline logic of
// its own.
package cli

import (
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/hoptrace"
	"github.com/trellara/trellara/internal/obs"
)

// Exit codes shared by every command (docs/CLI.md).
const (
	ExitOK       = 0 // success; CONVERGED; grade A/B
	ExitFindings = 1 // DIVERGED; grade C/D/F; validation failed
	ExitError    = 2 // could not run: bad input, unreachable server, not implemented
	ExitBehind   = 3 // BEHIND: the target had not reached the verify watermark
)

// App returns the trellara command tree.
func App() *cli.App {
	app := &cli.App{
		Name:    "trellara",
		Usage:   "verified change-data infrastructure for PostgreSQL",
		Version: VersionString(),
		Description: "Trellara moves committed PostgreSQL transactions to Postgres targets with their\n" +
			"boundaries intact, keeps retention pressure off the source, and proves convergence.\n" +
			"Recovery and evidence tooling (repair-plan, reseed, schema, stream, semantics, chaos, qualify, pilot-scorecard,\n" +
			"pilot-package, fanin) and development tools (dev) work and are tested, but are hidden from this list;\n" +
			"docs/CLI.md lists every command.",
		HideHelpCommand: true,
		Commands: append(append([]*cli.Command{
			initCommand(),
			checkCommand(),
			preflightCommand(),
			runCommand(),
			verifyCommand(),
			statusCommand(),
		}, fleetLakeCommands()...), // fleet, lake (and the hidden fanin): trellara-full links them
			configCommand(),
			repairPlanCommand(),
			chaosCommand(),
			semanticsCommand(),
			schemaCommand(),
			reseedCommand(),
			streamCommand(),
			pilotScorecardCommand(),
			pilotPackageCommand(),
			qualifyCommand(),
			devCommand(),
		),
		ExitErrHandler: func(*cli.Context, error) {}, // Main decides the exit code
	}
	return app
}

// Main runs the CLI and returns the process exit code. A command run with
// --format json that fails before writing its output still writes the
// envelope, with the error, on stdout; the message goes to stderr too.
func Main(args []string, stdout, stderr io.Writer) int {
	defer hoptrace.Close()
	app := App()
	out := &countingWriter{w: stdout}
	app.Writer, app.ErrWriter = out, stderr
	var ran struct{ command, config string }
	each(app.Commands, func(cmd *cli.Command) {
		cmd.OnUsageError = func(c *cli.Context, err error, _ bool) error {
			ran.command = commandName(c)
			return &exitErr{err: &usageErr{err.Error()}, code: ExitError}
		}
		if cmd.Action == nil {
			return
		}
		action := cmd.Action
		cmd.Action = func(c *cli.Context) error {
			ran.command, ran.config = commandName(c), c.String("config")
			return action(c)
		}
	})
	err := app.Run(args)
	if err == nil {
		return ExitOK
	}
	code := ExitError
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		code = ec.ExitCode()
	} else {
		err = &exitErr{err: err, code: ExitError}
	}
	msg := err.Error()
	if msg != "" {
		fmt.Fprintln(stderr, msg)
	}
	if out.n == 0 && msg != "" && wantsJSON(args[1:]) {
		name := ran.command
		if name == "" {
			name = "trellara"
		}
		_ = writeEnvelope(stdout, name, false, nil, classify(err, ran.config))
	}
	return code
}

// each calls fn for every command and subcommand.
func each(cmds []*cli.Command, fn func(*cli.Command)) {
	for _, c := range cmds {
		fn(c)
		each(c.Subcommands, fn)
	}
}

// VersionString is what --version prints after the program name.
func VersionString() string { return buildinfo.String() }

// build identifies this binary for logs and trellara_build_info.
func build() obs.Build {
	return obs.Build{Version: buildinfo.Version, Commit: buildinfo.CommitID(), GoVersion: runtime.Version()}
}

// notImplemented is a command whose feature has not landed: it says so and
// exits 2, never a fake success.
func notImplemented(name, usage string, hidden bool, flags ...cli.Flag) *cli.Command {
	return &cli.Command{
		Name:   name,
		Usage:  usage + " (not implemented yet)",
		Hidden: hidden,
		Flags:  flags,
		// Subcommands and arguments are accepted and ignored: whatever the
		// user typed, the answer is the same honest one.
		SkipFlagParsing: false,
		Action: func(*cli.Context) error {
			return &exitErr{err: fmt.Errorf("%w: %s", buildinfo.ErrNotImplemented, name), code: ExitError}
		},
	}
}

func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "path to the flow config (schema v2)", Value: "trellara.yml"}
}

func formatFlag() cli.Flag {
	return &cli.StringFlag{Name: "format", Usage: "output format: text or json", Value: "text"}
}

// outputFormat returns the validated --format value.
func outputFormat(c *cli.Context) (string, error) {
	switch f := c.String("format"); f {
	case "text", "json":
		return f, nil
	default:
		return "", usageError("--format %q: must be text or json", f)
	}
}
