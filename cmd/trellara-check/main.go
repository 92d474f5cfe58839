// Command trellara-check grades a PostgreSQL source for change data capture,
// read-only. See docs/CLI.md ("trellara-check") for flags, output and exit
// codes; the rules live in internal/check.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/check"
)

// Exit codes, part of the documented interface.
const (
	exitPass    = 0 // grade A or B
	exitFail    = 1 // grade C, D or F, or --write-config refused
	exitProblem = 2 // could not connect or inspect, or bad usage
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// description is the help text below the usage line.
const description = `Grades a PostgreSQL source for change data capture. Read-only: it creates no
publication, slot, checkpoint or table. Without POSTGRES_URL the libpq
environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, ...)
is used. POSTGRES_URL may come before, between or after the flags.

Exit codes: 0 grade A/B · 1 grade C/D/F or config refused · 2 could not connect
or inspect, or bad usage. docs/CLI.md ("trellara-check") has the JSON schema.`

type flags struct {
	format           string
	writeConfig      string
	connectTimeout   time.Duration
	statementTimeout time.Duration
	sampleSeconds    float64
}

// app is the command line, on the same library and conventions as trellara
// (double-dash flags, help on stdout, --version). action receives the parsed
// flags; it is not called for --help and --version.
func app(stdout, stderr io.Writer, action cli.ActionFunc) *cli.App {
	return &cli.App{
		Name:            "trellara-check",
		Usage:           "grade a PostgreSQL source for change data capture (read-only)",
		UsageText:       "trellara-check [POSTGRES_URL] [--format text|json] [--write-config PATH]\n               [--connect-timeout 10s] [--statement-timeout 5s] [--sample-seconds 1]",
		Description:     description,
		Version:         buildinfo.String(),
		HideHelpCommand: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output format: text or json"},
			&cli.StringFlag{Name: "write-config", Usage: "write a starting config to `PATH` (refused while critical blockers exist; never overwrites)"},
			&cli.DurationFlag{Name: "connect-timeout", Value: 10 * time.Second, Usage: "give up connecting after this long"},
			&cli.DurationFlag{Name: "statement-timeout", Value: 5 * time.Second, Usage: "server-side limit for each statement"},
			&cli.Float64Flag{Name: "sample-seconds", Value: 1, Usage: "how long to sample the WAL generation rate, in seconds (0 < s <= 600)"},
		},
		Writer:    stdout,
		ErrWriter: stderr,
		// A usage error is reported once, on stderr, by run; urfave would
		// print it on stdout followed by the whole help.
		OnUsageError:   func(_ *cli.Context, err error, _ bool) error { return err },
		ExitErrHandler: func(*cli.Context, error) {}, // run decides the exit code
		Action:         action,
	}
}

// parseArgs reads the command line. done is true when --help or --version
// has already answered.
func parseArgs(args []string, stdout, stderr io.Writer) (f flags, url string, done bool, err error) {
	parsed := false
	a := app(stdout, stderr, func(c *cli.Context) error {
		parsed = true
		f = flags{
			format:           c.String("format"),
			writeConfig:      c.String("write-config"),
			connectTimeout:   c.Duration("connect-timeout"),
			statementTimeout: c.Duration("statement-timeout"),
			sampleSeconds:    c.Float64("sample-seconds"),
		}
		positional := c.Args().Slice()
		if len(positional) > 1 {
			return fmt.Errorf("expected at most one POSTGRES_URL, got %d arguments", len(positional))
		}
		if len(positional) == 1 {
			url = positional[0]
		}
		if f.format != "text" && f.format != "json" {
			return fmt.Errorf("--format must be text or json, not %q", f.format)
		}
		if f.sampleSeconds <= 0 || f.sampleSeconds > 600 {
			return fmt.Errorf("--sample-seconds must be in (0, 600], not %g", f.sampleSeconds)
		}
		return nil
	})
	parseMu.Lock()
	err = a.Run(append([]string{a.Name}, interspersed(a.Flags, args)...))
	parseMu.Unlock()
	if err != nil {
		return f, "", false, err
	}
	return f, url, !parsed, nil
}

// parseMu serialises parseArgs: every urfave/cli App applies the
// package's global help flag (cli.HelpFlag) to its flag set, a write the
// race detector sees when two parses run at once (the tests run checks in
// parallel; the command parses once).
var parseMu sync.Mutex

// interspersed moves positional arguments after the flags (behind "--"), so
// POSTGRES_URL may stand anywhere: Go's flag package, under urfave/cli,
// stops at the first positional argument.
func interspersed(defs []cli.Flag, args []string) []string {
	takesValue := map[string]bool{}
	for _, d := range defs {
		tv, ok := d.(interface{ TakesValue() bool })
		for _, n := range d.Names() {
			takesValue[n] = ok && tv.TakesValue()
		}
	}
	var flagArgs, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case len(a) > 1 && a[0] == '-':
			flagArgs = append(flagArgs, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(args) {
				i++
				flagArgs = append(flagArgs, args[i])
			}
		default:
			positional = append(positional, a)
		}
	}
	if len(positional) == 0 {
		return flagArgs
	}
	return append(append(flagArgs, "--"), positional...)
}

// redactArgs scrubs every password found in any argument: a usage error may
// quote the URL, wherever it stood.
func redactArgs(args []string, err error) error {
	for _, a := range args {
		err = check.NewRedactor(a).Wrap(err)
	}
	return err
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, url, done, err := parseArgs(args, stdout, stderr)
	if err != nil {
		// The URL may be among the arguments; never echo it.
		fmt.Fprintf(stderr, "trellara-check: %v (see trellara-check --help)\n", redactArgs(args, err))
		return exitProblem
	}
	if done {
		return exitPass
	}
	fail := func(err error) int {
		msg := err.Error()
		fmt.Fprintf(stderr, "trellara-check: %s\n", msg)
		if f.format == "json" {
			_ = json.NewEncoder(stdout).Encode(map[string]any{"schema_version": check.SchemaVersion, "error": msg})
		}
		return exitProblem
	}

	sample := time.Duration(f.sampleSeconds * float64(time.Second))
	// One overall deadline on top of the per-statement server limit, so a
	// network that stops answering cannot hang the command either.
	ctx, cancel := context.WithTimeout(ctx, f.connectTimeout+sample+6*f.statementTimeout+5*time.Second)
	defer cancel()

	sess, err := check.Connect(ctx, url, check.ConnectOptions{
		ConnectTimeout:   f.connectTimeout,
		StatementTimeout: f.statementTimeout,
	})
	if err != nil {
		return fail(err)
	}
	defer sess.Close(context.Background())

	rep, err := sess.Inspect(ctx, check.Options{SampleWindow: sample})
	if err != nil {
		return fail(err)
	}

	if f.format == "json" {
		err = rep.RenderJSON(stdout)
	} else {
		err = rep.RenderText(stdout)
	}
	if err != nil {
		return fail(err)
	}

	code := exitFail
	if check.Passing(rep.Grade) {
		code = exitPass
	}
	if f.writeConfig != "" {
		if c := writeConfig(f.writeConfig, rep, stderr); c != exitPass {
			return c
		}
	}
	return code
}

// writeConfig writes the starting config without overwriting a file a user
// may have edited. The file is created 0600: a config is where the
// connection strings go once the user fills them in.
func writeConfig(path string, rep *check.Report, stderr io.Writer) int {
	body, err := check.StarterConfig(rep)
	var blocked *check.BlockedError
	if errors.As(err, &blocked) {
		fmt.Fprintf(stderr, "trellara-check: not writing %s: %d critical blocker(s) must be fixed first:\n", path, len(blocked.Blockers))
		for _, b := range blocked.Blockers {
			fmt.Fprintf(stderr, "  - %s\n    fix: %s\n", b.Title, b.Action)
		}
		return exitFail
	}
	if err != nil {
		fmt.Fprintf(stderr, "trellara-check: %v\n", err)
		return exitProblem
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		fmt.Fprintf(stderr, "trellara-check: write config %s: %v (an existing file is never overwritten)\n", path, err)
		return exitProblem
	}
	if _, err := fh.Write(body); err != nil {
		fh.Close()
		fmt.Fprintf(stderr, "trellara-check: write config %s: %v\n", path, err)
		return exitProblem
	}
	if err := fh.Close(); err != nil {
		fmt.Fprintf(stderr, "trellara-check: write config %s: %v\n", path, err)
		return exitProblem
	}
	fmt.Fprintf(stderr, "trellara-check: wrote starting config %s\n", path)
	return exitPass
}
