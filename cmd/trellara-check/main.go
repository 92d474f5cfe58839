// Command trellara-check grades a PostgreSQL source for change data capture,
// read-only. See docs/CLI.md ("trellara-check") for flags, output and exit
// codes; the rules live in internal/check.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

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

const usage = `usage: trellara-check [POSTGRES_URL] [flags]

Grades a PostgreSQL source for change data capture. Read-only: it creates no
publication, slot, checkpoint or table. Without POSTGRES_URL the libpq
environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, ...)
is used.

Exit codes: 0 grade A/B · 1 grade C/D/F or config refused · 2 could not connect or inspect.

flags:
`

type flags struct {
	format           string
	writeConfig      string
	connectTimeout   time.Duration
	statementTimeout time.Duration
	sampleSeconds    float64
}

// parseArgs accepts the URL before, between or after flags.
func parseArgs(args []string, stderr io.Writer) (flags, string, error) {
	var f flags
	fs := flag.NewFlagSet("trellara-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.format, "format", "text", "output format: text or json")
	fs.StringVar(&f.writeConfig, "write-config", "", "write a starting config to this path (refused while critical blockers exist)")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", 10*time.Second, "give up connecting after this long")
	fs.DurationVar(&f.statementTimeout, "statement-timeout", 5*time.Second, "server-side limit for each statement")
	fs.Float64Var(&f.sampleSeconds, "sample-seconds", 1, "how long to sample the WAL generation rate")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return f, "", err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) > 1 {
		return f, "", fmt.Errorf("expected at most one POSTGRES_URL, got %d arguments", len(positional))
	}
	if f.format != "text" && f.format != "json" {
		return f, "", fmt.Errorf("--format must be text or json, not %q", f.format)
	}
	if f.sampleSeconds <= 0 || f.sampleSeconds > 600 {
		return f, "", fmt.Errorf("--sample-seconds must be in (0, 600], not %g", f.sampleSeconds)
	}
	url := ""
	if len(positional) == 1 {
		url = positional[0]
	}
	return f, url, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, url, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitPass
	}
	if err != nil {
		// The URL may be among the arguments; never echo it.
		fmt.Fprintf(stderr, "trellara-check: %v\n", check.NewRedactor(url).Wrap(err))
		return exitProblem
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

	rep, err := check.Inspect(ctx, sess.Conn, check.Options{SampleWindow: sample})
	if err != nil {
		return fail(sess.Redact(fmt.Errorf("inspect %s: %w", sess.Target, err)))
	}
	rep.Target = sess.Target

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
