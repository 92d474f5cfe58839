package cli

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/chaoslive"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/obs"
	"github.com/trellara/trellara/internal/pilot"
	"github.com/trellara/trellara/internal/shell"
)

// liveFlags are the flags chaos live and qualify share.
func liveFlags(defaultDuration time.Duration) []cli.Flag {
	return []cli.Flag{
		configFlag(),
		&cli.DurationFlag{Name: "duration", Usage: "how long to inject faults (the workload runs throughout)", Value: defaultDuration},
		&cli.StringFlag{Name: "faults", Usage: "fault kinds: " + strings.Join(chaoslive.AllKinds, ","), Value: strings.Join(chaoslive.DefaultKinds, ",")},
		&cli.Uint64Flag{Name: "seed", Usage: "seed of the fault schedule and the workload", Value: 1},
		&cli.IntFlag{Name: "verify-every", Usage: "run trellara verify after every N faults", Value: 3},
		&cli.DurationFlag{Name: "sample-every", Usage: "resource sampling period", Value: 5 * time.Second},
		&cli.StringFlag{Name: "work-dir", Usage: "where the processes' config (DSNs through the proxies) and logs go; default a temporary directory, kept when the run fails"},
		&cli.StringFlag{Name: "output", Usage: "self-contained HTML report to write"},
		formatFlag(),
	}
}

// chaosLiveCommand is `trellara chaos live`.
func chaosLiveCommand() *cli.Command {
	return &cli.Command{
		Name:  "live",
		Usage: "kill, restart and cut the flow's real processes and servers under a workload; time each recovery (not in production)",
		Flags: append(liveFlags(2*time.Minute),
			&cli.BoolFlag{Name: "soak", Usage: "judge the resource samples: a series that grows without bound fails the run"}),
		Action: func(c *cli.Context) error {
			q, err := runLive(c, c.Bool("soak"), "live chaos")
			if err != nil {
				return err
			}
			return finishLive(c, q, chaoslive.EvidenceChaosJSON, chaoslive.EvidenceChaosHTML)
		},
	}
}

// qualifyCommand is `trellara qualify`.
func qualifyCommand() *cli.Command {
	return &cli.Command{
		Name:   "qualify",
		Usage:  "a qualification report: named workload, duration, environment, live chaos, soak curves, verify results, what was not covered",
		Hidden: true,
		Flags:  liveFlags(10 * time.Minute),
		Action: func(c *cli.Context) error {
			q, err := runLive(c, true, "qualification")
			if err != nil {
				return err
			}
			env := chaoslive.CollectEnvironment(c.Context, q.cfg)
			if exe, err := os.Executable(); err == nil {
				for _, b := range pilot.Executables(exe).Binaries {
					env.Binaries = append(env.Binaries, chaoslive.BinaryHash{Name: b.Name, Path: b.Path, SHA256: b.SHA256, Bytes: b.Bytes})
				}
			}
			env.Trellara = buildinfo.String()
			q.Environment = env
			return finishLive(c, q, chaoslive.EvidenceQualificationJSON, chaoslive.EvidenceQualificationHTML)
		},
	}
}

type liveRun struct {
	*chaoslive.Qualification
	cfg *config.Config
}

func runLive(c *cli.Context, soak bool, title string) (*liveRun, error) {
	if _, err := outputFormat(c); err != nil {
		return nil, err
	}
	kinds, err := chaoslive.ParseKinds(c.String("faults"))
	if err != nil {
		return nil, usageError("%v", err)
	}
	path := c.String("config")
	cfg, err := config.Load(path)
	if err != nil {
		return nil, failure(err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, failure(fmt.Errorf("chaos live: locate the trellara executable: %w", err))
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := chaoslive.Options{
		ConfigPath: path, Duration: c.Duration("duration"), Kinds: kinds, Seed: c.Uint64("seed"),
		Binary: exe, WorkDir: c.String("work-dir"), VerifyEvery: c.Int("verify-every"),
		SampleEvery: c.Duration("sample-every"), LeakCheck: soak, Logger: obs.NewLogger(c.App.ErrWriter, slog.LevelInfo),
	}
	if soak && c.Duration("duration") >= 10*time.Minute {
		// Faults spaced for a soak: the resources between them matter too.
		o.GapMin, o.GapMax = 20*time.Second, 60*time.Second
	}
	rep, err := chaoslive.Run(ctx, o)
	if err != nil {
		if errors.Is(err, chaoslive.ErrProduction) {
			return nil, &exitErr{err: err, code: ExitError}
		}
		return nil, failure(err)
	}
	command := shell.Command(append([]string{"trellara"}, os.Args[1:]...)...)
	return &liveRun{cfg: cfg, Qualification: &chaoslive.Qualification{
		Title: chaoslive.Title(title, cfg.Flow), Generated: time.Now().UTC(), Command: command,
		Workload: rep.Workload, Duration: rep.Duration, Live: rep, Verdict: rep.Verdict,
	}}, nil
}

// finishLive writes the HTML (--output), keeps the evidence in the flow's
// state directory, and prints the report.
func finishLive(c *cli.Context, q *liveRun, jsonName, htmlName string) error {
	if out := c.String("output"); out != "" {
		var buf bytes.Buffer
		if err := chaoslive.WriteHTML(&buf, q.Qualification); err != nil {
			return failure(err)
		}
		if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
			return failure(fmt.Errorf("write %s: %w", out, err))
		}
	}
	if err := chaoslive.SaveEvidence(q.cfg, jsonName, htmlName, q.Qualification); err != nil {
		return failure(err)
	}
	ok := q.Verdict == "PASS"
	if c.String("format") == "json" {
		if err := writeJSON(c, ok, q.Qualification); err != nil {
			return err
		}
	} else {
		if e := q.Environment; e != nil {
			fmt.Fprintf(c.App.Writer, "environment: %s, %d CPUs, kernel %s; source %s; target %s; trellara %s\n",
				e.Host, e.CPUs, e.Kernel, e.SourceVersion, e.TargetVersion, e.Trellara)
			for _, b := range e.Binaries {
				fmt.Fprintf(c.App.Writer, "  %s sha256:%s\n", b.Path, b.SHA256)
			}
		}
		chaoslive.WriteText(c.App.Writer, q.Live)
		if out := c.String("output"); out != "" {
			fmt.Fprintf(c.App.Writer, "wrote %s\n", out)
		}
	}
	if !ok {
		return cli.Exit("", ExitFindings)
	}
	return nil
}
