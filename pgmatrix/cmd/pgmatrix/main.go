// Command pgmatrix records and renders the PostgreSQL support matrix for
// pgmatrix/run.sh (`make pgmatrix`):
//
//	pgmatrix step   -o STEPS -name N -status pass|fail|not-covered [-detail D] [-seconds S]
//	pgmatrix skip   -exclude pgmatrix/exclude.tsv      # prints the go test -skip pattern
//	pgmatrix result -major N ... -o pgmatrix/results/pgN.json
//	pgmatrix doc    -results pgmatrix/results -o docs/SUPPORT.md
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/trellara/trellara/internal/release/matrix"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "step":
		err = step(os.Args[2:])
	case "skip":
		err = skip(os.Args[2:])
	case "result":
		err = result(os.Args[2:])
	case "doc":
		err = doc(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgmatrix:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: pgmatrix step|skip|result|doc [flags] (see pgmatrix/README.md)")
	os.Exit(2)
}

func step(args []string) error {
	fs := flag.NewFlagSet("step", flag.ExitOnError)
	out := fs.String("o", "", "JSON-lines file to append to")
	var s matrix.Step
	fs.StringVar(&s.Name, "name", "", "step name")
	fs.StringVar(&s.Status, "status", "", "pass, fail or not-covered")
	fs.StringVar(&s.Detail, "detail", "", "what ran or why it could not")
	fs.Float64Var(&s.DurationSeconds, "seconds", 0, "duration")
	_ = fs.Parse(args)
	if *out == "" || s.Name == "" {
		return fmt.Errorf("step: -o and -name are required")
	}
	return matrix.AppendStep(*out, s)
}

func skip(args []string) error {
	fs := flag.NewFlagSet("skip", flag.ExitOnError)
	path := fs.String("exclude", "pgmatrix/exclude.tsv", "exclusion list")
	_ = fs.Parse(args)
	ex, err := matrix.ReadExcludes(*path)
	if err != nil {
		return err
	}
	fmt.Println(matrix.SkipPattern(ex))
	return nil
}

func result(args []string) error {
	fs := flag.NewFlagSet("result", flag.ExitOnError)
	r := matrix.Result{FormatVersion: matrix.FormatVersion}
	fs.IntVar(&r.Major, "major", 0, "PostgreSQL major")
	fs.StringVar(&r.ServerVersion, "server-version", "", "postgres --version of the server that ran")
	fs.StringVar(&r.ServerSource, "server-source", "", "where the server came from")
	date := fs.String("date", "", "start of the run, RFC 3339")
	fs.StringVar(&r.Commit, "commit", "", "git rev-parse HEAD")
	fs.StringVar(&r.Describe, "describe", "", "git describe --tags --always --dirty")
	fs.StringVar(&r.Host, "host", "", "machine description")
	gotest := fs.String("gotest", "", "go test -json output of the relay suite")
	gotestExit := fs.Int("gotest-exit", 0, "exit status of that go test")
	fs.StringVar(&r.Paths.ExternalRelay.Ran, "gotest-ran", "", "the go test command, as run")
	fs.Float64Var(&r.Paths.ExternalRelay.DurationSeconds, "gotest-seconds", 0, "its duration")
	relayNC := fs.String("relay-not-covered", "", "reason the relay suite could not run")
	exclude := fs.String("exclude", "", "exclusion list the run used")
	steps := fs.String("steps", "", "JSON-lines steps of the extension path")
	fs.StringVar(&r.Paths.Extension.Ran, "ext-ran", "", "the extension commands, as run")
	fs.Float64Var(&r.Paths.Extension.DurationSeconds, "ext-seconds", 0, "their duration")
	out := fs.String("o", "", "results file to write")
	repo := fs.String("repo", "", "repository root, written as ./ in excerpts so results do not depend on the checkout path")
	_ = fs.Parse(args)
	if *out == "" {
		return fmt.Errorf("result: -o is required")
	}
	rel := func(s string) string {
		if *repo == "" {
			return s
		}
		return strings.ReplaceAll(s, strings.TrimSuffix(*repo, "/")+"/", "./")
	}
	t, err := time.Parse(time.RFC3339, *date)
	if err != nil {
		return fmt.Errorf("result: -date: %w", err)
	}
	r.Date = t.UTC()

	relay := &r.Paths.ExternalRelay
	if *relayNC != "" {
		relay.Status, relay.Reason, relay.Ran = matrix.NotCovered, *relayNC, ""
	} else {
		f, err := os.Open(*gotest)
		if err != nil {
			return err
		}
		relay.Packages, err = matrix.ParseGoTest(f)
		f.Close()
		if err != nil {
			return err
		}
		relay.Status, relay.Reason = matrix.RelayStatus(relay.Packages, *gotestExit)
		if *exclude != "" {
			if relay.Excluded, err = matrix.ReadExcludes(*exclude); err != nil {
				return err
			}
		}
	}

	ext := &r.Paths.Extension
	if ext.Steps, err = matrix.ReadSteps(*steps); err != nil {
		return err
	}
	ext.Status, ext.Reason = matrix.StepStatus(ext.Steps)
	if ext.Status == matrix.NotCovered {
		ext.Ran = ""
	}
	for i := range relay.Packages {
		for j := range relay.Packages[i].FailedTests {
			relay.Packages[i].FailedTests[j].Excerpt = rel(relay.Packages[i].FailedTests[j].Excerpt)
		}
	}
	for i := range ext.Steps {
		ext.Steps[i].Detail = rel(ext.Steps[i].Detail)
	}
	relay.Reason, ext.Reason = rel(relay.Reason), rel(ext.Reason)
	if err := r.Write(*out); err != nil {
		return err
	}
	fmt.Printf("external_relay: %s\nextension: %s\n", relay.Status, ext.Status)
	return nil
}

func doc(args []string) error {
	fs := flag.NewFlagSet("doc", flag.ExitOnError)
	dir := fs.String("results", "pgmatrix/results", "directory of pgNN.json")
	out := fs.String("o", "docs/SUPPORT.md", "output")
	_ = fs.Parse(args)
	results, err := matrix.LoadDir(*dir)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := matrix.RenderSupport(f, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
