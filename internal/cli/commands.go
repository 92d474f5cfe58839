package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/check"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/flow"
	"github.com/trellara/trellara/internal/obs"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/internal/verify"
)

// signalContext ends on SIGINT/SIGTERM: a bounded run stops cleanly, with
// the durable boundary preserved.
func signalContext(c *cli.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
}

// logger writes JSON lines to stderr, the one log format of every command
// (obs.NewLogger): warnings and errors, and lifecycle events too with
// --verbose.
func logger(c *cli.Context) *slog.Logger {
	level := slog.LevelWarn
	if c.Bool("verbose") {
		level = slog.LevelInfo
	}
	return obs.NewLogger(c.App.ErrWriter, level)
}

func verboseFlag() cli.Flag {
	return &cli.BoolFlag{Name: "verbose", Usage: "log lifecycle events to stderr"}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// failure maps an error to the exit code contract: 2 = could not run.
func failure(err error) error {
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return err
	}
	return cli.Exit("trellara: "+err.Error(), ExitError)
}

func openFlow(c *cli.Context) (*flow.Flow, error) {
	return flow.Open(c.String("config"), logger(c))
}

// flowAction is an action on the flow named by --config, with the
// validated --format; the flow's log is closed when it returns.
func flowAction(fn func(c *cli.Context, f *flow.Flow, format string) error) cli.ActionFunc {
	return openedAction(openFlow, fn)
}

// databaseAction is flowAction for a command that only talks to the
// databases: the local log stays closed, so it runs beside the service.
func databaseAction(fn func(c *cli.Context, f *flow.Flow, format string) error) cli.ActionFunc {
	return openedAction(func(c *cli.Context) (*flow.Flow, error) {
		return flow.OpenConfig(c.String("config"), logger(c))
	}, fn)
}

func openedAction(open func(*cli.Context) (*flow.Flow, error), fn func(c *cli.Context, f *flow.Flow, format string) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		format, err := outputFormat(c)
		if err != nil {
			return err
		}
		f, err := open(c)
		if err != nil {
			return failure(err)
		}
		defer f.Close()
		return fn(c, f, format)
	}
}

func initCommand() *cli.Command {
	return &cli.Command{
		Name:  "init",
		Usage: "write a flow config (trellara.yml) for a source, target and tables",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "source-database-url", Usage: "source connection URL; with --evaluate written inline, otherwise as {env: TRELLARA_SOURCE_URL}"},
			&cli.StringFlag{Name: "target-database-url", Usage: "target connection URL (same rule)"},
			&cli.StringSliceFlag{Name: "table", Usage: "schema.table to capture (repeatable)", Required: true},
			&cli.StringFlag{Name: "flow", Usage: "flow name (default: from the first table)"},
			&cli.StringFlag{Name: "source-id", Usage: "stable id of the source database", Value: "source"},
			&cli.BoolFlag{Name: "evaluate", Usage: "evaluation flow: local log beside the config, Trellara owns slot and publication, target tables created"},
			&cli.StringFlag{Name: "output", Aliases: []string{"config"}, Usage: "config path to write", Value: "trellara.yml"},
			formatFlag(),
		},
		Action: func(c *cli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			ref := func(flag, env string) config.SecretRef {
				v := c.String(flag)
				if v == "" {
					return config.SecretRef{}
				}
				if c.Bool("evaluate") {
					return config.InlineRef(v)
				}
				return config.EnvRef(env)
			}
			src := ref("source-database-url", "TRELLARA_SOURCE_URL")
			if src.IsZero() {
				src = config.EnvRef("TRELLARA_SOURCE_URL")
			}
			cfg, err := config.Starter(config.StarterOptions{
				Flow: c.String("flow"), SourceID: c.String("source-id"),
				SourceDatabaseURL: src, TargetDatabaseURL: ref("target-database-url", "TRELLARA_TARGET_URL"),
				Tables: c.StringSlice("table"), Evaluate: c.Bool("evaluate"),
			})
			if err != nil {
				return failure(err)
			}
			out := c.String("output")
			if err := config.CreateFile(out, cfg); err != nil {
				return failure(err)
			}
			if format == "json" {
				return writeJSON(c.App.Writer, map[string]any{"config": out, "flow": cfg.Flow, "evaluate": c.Bool("evaluate")})
			}
			fmt.Fprintf(c.App.Writer, "wrote %s (flow %s)\nnext: %s\n", out, cfg.Flow, shell.Trellara("check", out, "--format", "text"))
			return nil
		},
	}
}

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "validate the config and grade the source (read-only)",
		Flags: []cli.Flag{configFlag(), formatFlag()},
		Action: func(c *cli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			cfg, err := config.Load(c.String("config"))
			if err != nil {
				return cli.Exit(err.Error(), ExitFindings)
			}
			sec, err := cfg.ResolveSecrets()
			if err != nil {
				return cli.Exit(err.Error(), ExitFindings)
			}
			ctx := c.Context
			s, err := check.Connect(ctx, sec.SourceDatabaseURL.Reveal(), check.ConnectOptions{})
			if err != nil {
				return failure(err)
			}
			defer s.Close(context.Background())
			// The grade covers the configured tables too: a table the
			// source lacks is a critical finding, not a valid config.
			r, err := s.Inspect(ctx, check.Options{Tables: cfg.Source.Tables})
			if err != nil {
				return failure(err)
			}
			if format == "json" {
				err = r.RenderJSON(c.App.Writer)
			} else {
				verdict := "valid"
				for _, f := range r.Findings {
					if f.Code == check.CodeConfiguredTableMissing {
						verdict = fmt.Sprintf("parses, but %s", f.Title)
					}
				}
				fmt.Fprintf(c.App.Writer, "config %s %s (flow %s, %d tables)\n", c.String("config"), verdict, cfg.Flow, len(cfg.Source.Tables))
				err = r.RenderText(c.App.Writer)
			}
			if err != nil {
				return failure(err)
			}
			if !check.Passing(r.Grade) {
				return cli.Exit("", ExitFindings)
			}
			return nil
		},
	}
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "capture, publish, apply: a bounded run with --local, else the long-running service",
		Flags: []cli.Flag{configFlag(), formatFlag(), verboseFlag(),
			&cli.StringFlag{Name: "role", Usage: "service role: all (capture and applier in one process), relay (pgoutput capture only) or sidecar (native extension capture only)", Value: "all"},
			&cli.BoolFlag{Name: "local", Usage: "bounded run on the local segment log: snapshot, relay and apply until caught up with the source, then exit"},
			&cli.BoolFlag{Name: "verify", Usage: "after a bounded run, verify convergence; exit 0 only on CONVERGED"},
			&cli.BoolFlag{Name: "cleanup", Usage: "drop the slot and publication Trellara created, empty the target tables the flow copied into, and remove the flow's state (owns_slot flows only)"},
		},
		Action: func(c *cli.Context) error {
			if !c.Bool("local") && !c.Bool("cleanup") {
				ctx, stop := signalContext(c)
				defer stop()
				return serve(c, ctx)
			}
			return flowAction(func(c *cli.Context, f *flow.Flow, format string) error {
				return runLocal(c, f, format)
			})(c)
		},
	}
}

// runLocal is `run --local` and `run --cleanup`.
func runLocal(c *cli.Context, f *flow.Flow, format string) error {
	ctx, stop := signalContext(c)
	defer stop()
	if c.Bool("cleanup") {
		emptied, err := f.Cleanup(ctx)
		if err != nil {
			return failure(err)
		}
		fmt.Fprintf(c.App.Writer, "dropped slot %s, publication %s and local state of flow %s\n", f.Cfg.Source.Slot, f.Cfg.Source.Publication, f.Cfg.Flow)
		for _, t := range emptied {
			fmt.Fprintf(c.App.Writer, "emptied target table %s (rows this flow had copied)\n", t)
		}
		return nil
	}
	var progress func(flow.Progress)
	if format == "text" {
		progress = textProgress(c.App.ErrWriter)
	}
	res, err := f.RunLocal(ctx, c.Bool("verify"), progress)
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		if err := writeJSON(c.App.Writer, res); err != nil {
			return failure(err)
		}
	} else {
		w := c.App.Writer
		fmt.Fprintf(w, "flow          %s\n", res.Flow)
		fmt.Fprintf(w, "transport     %s\n", res.Transport)
		fmt.Fprintf(w, "transactions  %d applied atomically (%d redelivered, skipped), %d rows\n", res.Applied, res.Skipped, res.Rows)
		fmt.Fprintf(w, "checkpoint    %s (caught up with %s)\n", res.Checkpoint, res.CatchUpLSN)
		fmt.Fprintf(w, "duration      %.1fs\n", res.DurationSecs)
		if res.Verify != nil {
			fmt.Fprintln(w)
			if err := res.Verify.RenderText(w); err != nil {
				return failure(err)
			}
		}
	}
	if res.Verify != nil {
		return verdictExit(res.Verify)
	}
	return nil
}

// verdictExit maps a verify result to the exit status: ExitOK for
// CONVERGED, ExitFindings for DIVERGED, ExitBehind for BEHIND
// (verify.ExitCode, whose numbers TestVerdictExitCodes holds to these).
func verdictExit(r *verify.Result) error {
	if code := verify.ExitCode(r, nil); code != ExitOK {
		return cli.Exit("", code)
	}
	return nil
}

// serve runs the long-running service: health and metrics on
// run.listen.relay / run.listen.applier, SIGTERM drain, SIGHUP reload.
func serve(c *cli.Context, ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{})
	go func() {
		for range hup {
			reload <- struct{}{}
		}
	}()
	log := obs.NewLogger(c.App.ErrWriter, slog.LevelInfo)
	err := flow.Serve(ctx, flow.ServiceOptions{ConfigPath: c.String("config"), Role: c.String("role"), Logger: log, Reload: reload,
		Build: build(),
		Listening: func(component, addr string) {
			log.Info("listening", "component", component, "addr", addr, "endpoints", "/livez /readyz /healthz /metrics")
		}})
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	if strings.HasPrefix(err.Error(), "not implemented yet") {
		return cli.Exit(err.Error(), ExitError)
	}
	return failure(err)
}

// textProgress renders a one-line progress display on a terminal-ish
// stream, rewritten in place.
func textProgress(w io.Writer) func(flow.Progress) {
	last := time.Time{}
	return func(p flow.Progress) {
		if p.Phase == "done" {
			fmt.Fprint(w, "\r\033[K")
			return
		}
		if time.Since(last) < 250*time.Millisecond && p.Phase != "verifying" {
			return
		}
		last = time.Now()
		switch {
		case p.Snapshot != nil:
			s := p.Snapshot
			fmt.Fprintf(w, "\r\033[Ksnapshot %s: %d rows, %.1f MB, %.0f rows/s, ETA %.0fs", s.Table, s.Rows, float64(s.Bytes)/1e6, s.RowsPerSecond, s.ETASeconds)
		case p.Phase == "verifying":
			fmt.Fprint(w, "\r\033[Kverifying convergence...")
		default:
			fmt.Fprintf(w, "\r\033[Kstreaming: %d units published, %d transactions applied, checkpoint %s → %s", p.Published, p.Applied, p.Checkpoint, p.Target)
		}
	}
}

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "prove the target converged: counts, PK checksums, watermarks (exit 0 CONVERGED, 1 DIVERGED, 3 BEHIND, 2 error)",
		Flags: []cli.Flag{configFlag(), formatFlag(), verboseFlag(),
			&cli.StringSliceFlag{Name: "table", Usage: "verify only this schema.table (repeatable)"},
			&cli.DurationFlag{Name: "wait", Value: 30 * time.Second, Usage: "how long to wait for the target to reach the watermark before answering BEHIND; 0 does not wait. " +
				"Unset, a flow whose slot is not active (no pipeline running) is not waited for"}},
		Action: databaseAction(func(c *cli.Context, f *flow.Flow, format string) error {
			var wait time.Duration // flow.VerifyOptions' default
			if c.IsSet("wait") {
				switch wait = c.Duration("wait"); {
				case wait < 0:
					return cli.Exit(fmt.Sprintf("--wait %s: must not be negative, e.g. --wait 30s (0 does not wait)", wait), ExitError)
				case wait == 0:
					wait = verify.NoWait
				}
			}
			ctx, stop := signalContext(c)
			defer stop()
			res, err := f.Verify(ctx, flow.VerifyOptions{Tables: c.StringSlice("table"), Wait: wait})
			if err != nil {
				return failure(err)
			}
			if format == "json" {
				err = writeJSON(c.App.Writer, res)
			} else {
				err = res.RenderText(c.App.Writer)
			}
			if err != nil {
				return failure(err)
			}
			return verdictExit(res)
		}),
	}
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "slot, lag, log retention, cursors, checkpoint, quarantine",
		Flags: []cli.Flag{configFlag(), formatFlag(),
			&cli.StringFlag{Name: "view", Usage: "report, diagnostics or quarantine", Value: "report"}},
		Action: flowAction(func(c *cli.Context, f *flow.Flow, format string) error {
			view := c.String("view")
			switch view {
			case "report", "diagnostics", "quarantine":
			default:
				return cli.Exit(fmt.Sprintf("--view %q: must be report, diagnostics or quarantine", view), ExitError)
			}
			st, err := f.Status(c.Context, view)
			if err != nil {
				return failure(err)
			}
			if format == "json" {
				return writeJSON(c.App.Writer, st)
			}
			return st.RenderText(c.App.Writer, view)
		}),
	}
}

func preflightCommand() *cli.Command {
	return &cli.Command{
		Name:  "preflight",
		Usage: "check connectivity, privileges, wal_level, slots, publication and target tables; each failure names its fix",
		Flags: []cli.Flag{configFlag(), formatFlag(),
			&cli.BoolFlag{Name: "create-target-tables", Usage: "create missing target tables from the source definitions"}},
		Action: flowAction(func(c *cli.Context, f *flow.Flow, format string) error {
			rep := f.Preflight(c.Context, c.Bool("create-target-tables"))
			if format == "json" {
				if err := writeJSON(c.App.Writer, rep); err != nil {
					return failure(err)
				}
			} else {
				rep.RenderText(c.App.Writer)
			}
			if !rep.OK {
				return cli.Exit("", ExitFindings)
			}
			return nil
		}),
	}
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "validate or redact a config",
		Subcommands: []*cli.Command{
			{
				Name:  "validate",
				Usage: "check a config: every problem at once, each naming its key, line and fix (exit 1 when invalid)",
				Flags: []cli.Flag{configFlag(), formatFlag(),
					&cli.BoolFlag{Name: "resolve-secrets", Usage: "also check that every credential reference resolves (values are never printed)", Value: true}},
				Action: func(c *cli.Context) error {
					format, err := outputFormat(c)
					if err != nil {
						return err
					}
					path := c.String("config")
					cfg, err := config.Load(path)
					if err == nil && c.Bool("resolve-secrets") {
						_, err = cfg.ResolveSecrets()
					}
					if format == "json" {
						out := map[string]any{"config": path, "valid": err == nil}
						if err != nil {
							out["errors"] = strings.Split(strings.TrimSpace(err.Error()), "\n")
						}
						if werr := writeJSON(c.App.Writer, out); werr != nil {
							return failure(werr)
						}
						if err != nil {
							return cli.Exit("", ExitFindings)
						}
						return nil
					}
					if err != nil {
						return cli.Exit(err.Error(), ExitFindings)
					}
					fmt.Fprintf(c.App.Writer, "%s: valid (flow %s, environment %s)\n", path, cfg.Flow, cfg.Environment)
					return nil
				},
			},
			{
				Name:  "redact",
				Usage: "print a shareable copy: no password, token, key or complete connection string",
				Flags: []cli.Flag{configFlag()},
				Action: func(c *cli.Context) error {
					raw, err := os.ReadFile(c.String("config"))
					if err != nil {
						return failure(fmt.Errorf("config: read %s: %w", c.String("config"), err))
					}
					out, err := config.Redact(raw)
					if err != nil {
						return failure(err)
					}
					_, err = c.App.Writer.Write(out)
					return err
				},
			},
		},
	}
}

func streamCommand() *cli.Command {
	return &cli.Command{
		Name:   "stream",
		Usage:  "inspect the transport",
		Hidden: true,
		Subcommands: []*cli.Command{tailCommand(), {
			Name:  "locate-local",
			Usage: "find and print a stored transaction in the local log by commit LSN or offset",
			Flags: []cli.Flag{configFlag(), formatFlag(),
				&cli.StringFlag{Name: "lsn", Usage: "commit LSN (X/X) of the transaction"},
				&cli.Uint64Flag{Name: "offset", Usage: "log offset"},
			},
			Action: flowAction(func(c *cli.Context, f *flow.Flow, format string) error {
				if c.IsSet("lsn") == c.IsSet("offset") {
					return cli.Exit("stream locate-local: give exactly one of --lsn or --offset", ExitError)
				}
				loc, err := f.Locate(c.Context, c.String("lsn"), c.Uint64("offset"), c.IsSet("offset"))
				if err != nil {
					return failure(err)
				}
				if loc == nil {
					return cli.Exit("stream locate-local: no stored transaction matches", ExitFindings)
				}
				if format == "json" {
					return writeJSON(c.App.Writer, loc)
				}
				return loc.RenderText(c.App.Writer)
			}),
		}},
	}
}

func repairPlanCommand() *cli.Command {
	return &cli.Command{
		Name:   "repair-plan",
		Usage:  "the recovery plan for a quarantined or diverged flow (exit 1 when there is something to repair)",
		Hidden: true,
		Flags: []cli.Flag{configFlag(), formatFlag(),
			&cli.StringSliceFlag{Name: "table", Usage: "accepted for the command named by verify; the plan covers the whole flow"}},
		Action: flowAction(func(c *cli.Context, f *flow.Flow, format string) error {
			p, err := f.RepairPlan(c.Context)
			if err != nil {
				return failure(err)
			}
			if format == "json" {
				err = writeJSON(c.App.Writer, p)
			} else {
				p.RenderText(c.App.Writer)
			}
			if err != nil {
				return failure(err)
			}
			if len(p.Steps) > 0 {
				return cli.Exit("", ExitFindings)
			}
			return nil
		}),
	}
}
