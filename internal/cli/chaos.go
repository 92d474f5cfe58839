package cli

import (
	"bytes"
	"fmt"
	"github.com/trellara/trellara/internal/buildinfo"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/sim"
)

// chaosCommand is the deterministic failure matrix (internal/sim): run the
// catalogue or one scenario, swarm-test with random fault mixes, and write
// the HTML correctness report. docs/CORRECTNESS.md describes it.
func chaosCommand() *cli.Command {
	return &cli.Command{
		Name:   "chaos",
		Usage:  "deterministic failure matrix (run, report) and live chaos on the real flow (live)",
		Hidden: true,
		Subcommands: []*cli.Command{
			{
				Name:  "run",
				Usage: "run the failure scenarios (all of them by default) and check every invariant",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "scenario", Usage: "run one scenario by id (also swarm.<simulation>.<seed>)"},
					&cli.StringFlag{Name: "family", Usage: "run one family: " + strings.Join(sim.Families, ", ")},
					&cli.IntFlag{Name: "seeds", Usage: "also run N randomized fault mixes per simulation (swarm testing)"},
					&cli.Uint64Flag{Name: "seed-base", Usage: "where the randomized runs draw their seeds from", Value: 1},
					&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "apply this flow config's bounds (memory, segment size) to the simulations"},
					formatFlag(),
				},
				Action: chaosRun,
			},
			{
				Name:  "report",
				Usage: "run the catalogue and write a self-contained HTML correctness report",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "output", Usage: "HTML file to write", Value: "report.html"},
					&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "apply this flow config's bounds (memory, segment size) to the simulations"},
				},
				Action: chaosReport,
			},
			chaosLiveCommand(),
		},
	}
}

// chaosOptions reads --config into simulation bounds.
func chaosOptions(c *cli.Context) (sim.Options, string, error) {
	path := c.String("config")
	if path == "" {
		return sim.Options{}, "", nil
	}
	cfg, err := config.Load(path)
	if err != nil {
		return sim.Options{}, "", cli.Exit(err.Error(), ExitError)
	}
	if cfg.Target.Mode == config.ModePartitioned {
		return sim.Options{}, "", cli.Exit(fmt.Sprintf("%s: target.mode partitioned is not simulated: the applier refuses it (use target.mode: strict)", path), ExitError)
	}
	o := &sim.Override{MemoryBytesMax: int64(cfg.Source.MemoryBytesMax)}
	desc := fmt.Sprintf("%s: source.memory_bytes_max %d", path, cfg.Source.MemoryBytesMax)
	if l := cfg.Transport.Local; l != nil && l.SegmentBytesMax > 0 {
		o.SegmentBytesMax = int64(l.SegmentBytesMax)
		desc += fmt.Sprintf(", transport.local.segment_bytes_max %d", l.SegmentBytesMax)
	}
	desc += " (chunk size and apply batch sizes are not flow settings in config schema v2: the simulations' own apply)"
	return sim.Options{Override: o}, desc, nil
}

func chaosSelect(c *cli.Context) ([]*sim.Scenario, map[string]*sim.Simulation, error) {
	all, sims := sim.Catalogue()
	if id := c.String("scenario"); id != "" {
		sc, s, err := sim.Lookup(id)
		if err != nil {
			return nil, nil, cli.Exit(err.Error(), ExitError)
		}
		sims[s.Name] = s
		return []*sim.Scenario{sc}, sims, nil
	}
	fam := c.String("family")
	if fam != "" {
		known := false
		for _, f := range sim.Families {
			known = known || f == fam
		}
		if !known {
			return nil, nil, cli.Exit(fmt.Sprintf("--family %q: must be one of %v", fam, sim.Families), ExitError)
		}
	}
	return sim.Select(all, "", fam), sims, nil
}

type swarmFailure struct {
	ID         string          `json:"id"`
	Simulation string          `json:"simulation"`
	Seed       uint64          `json:"seed"`
	Faults     []sim.Fault     `json:"faults"`
	Violations []sim.Violation `json:"violations"`
	Reproduce  string          `json:"reproduce"`
}

func chaosRun(c *cli.Context) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	opts, bounds, err := chaosOptions(c)
	if err != nil {
		return err
	}
	scs, sims, err := chaosSelect(c)
	if err != nil {
		return err
	}
	start := time.Now()
	results := sim.RunAll(scs, sims, opts, nil)
	rep := sim.BuildReport(results, sims, bounds)
	elapsed := time.Since(start)

	var swarmRuns int
	var failures []swarmFailure
	if n := c.Int("seeds"); n > 0 {
		runSims := map[string]*sim.Simulation{}
		for _, sc := range scs {
			runSims[sc.Simulation] = sims[sc.Simulation]
		}
		if c.String("scenario") == "" && c.String("family") == "" {
			runSims = sims
		}
		var swarm []*sim.Scenario
		for _, sc := range sim.SwarmSeeds(sims, n, c.Uint64("seed-base")) {
			if runSims[sc.Simulation] != nil {
				swarm = append(swarm, sc)
			}
		}
		swarmRuns = len(swarm)
		for _, r := range sim.RunAll(swarm, sims, opts, nil) {
			if !r.Pass {
				failures = append(failures, swarmFailure{ID: r.Scenario.ID, Simulation: r.Scenario.Simulation, Seed: r.Scenario.Seed,
					Faults: r.Scenario.Faults, Violations: r.Violations, Reproduce: "trellara chaos run --scenario " + r.Scenario.ID})
			}
		}
		elapsed = time.Since(start)
	}

	w := c.App.Writer
	if format == "json" {
		out := struct {
			*sim.Report
			Swarm *struct {
				Runs     int            `json:"runs"`
				Failures []swarmFailure `json:"failures"`
			} `json:"swarm,omitempty"`
		}{Report: rep}
		if swarmRuns > 0 {
			out.Swarm = &struct {
				Runs     int            `json:"runs"`
				Failures []swarmFailure `json:"failures"`
			}{swarmRuns, failures}
			if out.Swarm.Failures == nil {
				out.Swarm.Failures = []swarmFailure{}
			}
		}
		if err := writeJSON(c, rep.Summary.Failed == 0 && len(failures) == 0, out); err != nil {
			return err
		}
	} else {
		sim.WriteText(w, rep, elapsed)
		if swarmRuns > 0 {
			fmt.Fprintf(w, "swarm: %d randomized runs, %d failed\n", swarmRuns, len(failures))
			for _, f := range failures {
				fmt.Fprintf(w, "FAIL %s (faults %v)\n", f.ID, f.Faults)
				for _, v := range f.Violations {
					fmt.Fprintf(w, "     VIOLATED %s: %s\n", v.Invariant, v.Detail)
				}
				fmt.Fprintf(w, "     reproduce: %s\n", f.Reproduce)
			}
		}
	}
	if rep.Summary.Failed > 0 || len(failures) > 0 {
		return cli.Exit("", ExitFindings)
	}
	return nil
}

func chaosReport(c *cli.Context) error {
	opts, bounds, err := chaosOptions(c)
	if err != nil {
		return err
	}
	scs, sims := sim.Catalogue()
	start := time.Now()
	results := sim.RunAll(scs, sims, opts, nil)
	elapsed := time.Since(start)
	rep := sim.BuildReport(results, sims, bounds)
	// When, where and how long: in the HTML only, so report.json stays
	// reproducible.
	host, err := os.Hostname()
	if err != nil {
		host = "unknown host (" + err.Error() + ")"
	}
	var buf bytes.Buffer
	if err := sim.WriteHTML(&buf, rep, sim.RunInfo{Version: buildinfo.Version, Generated: time.Now(), Host: host, Elapsed: elapsed}); err != nil {
		return failure(err)
	}
	out := c.String("output")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return failure(fmt.Errorf("write %s: %w", out, err))
	}
	fmt.Fprintf(c.App.Writer, "wrote %s: %d scenarios across %d simulations in %d families, %d passed, %d failed, %d not reached\n",
		out, rep.Summary.Scenarios, rep.Summary.Simulations, rep.Summary.Families, rep.Summary.Passed, rep.Summary.Failed, rep.Summary.NotReached)
	if rep.Summary.Failed > 0 {
		return cli.Exit("", ExitFindings)
	}
	return nil
}
