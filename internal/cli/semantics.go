package cli

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/chaoslive"
	"github.com/trellara/trellara/internal/flow"
)

// semanticsCommand is `trellara semantics`: try to observe a half-applied
// transaction on the running flow (flow.Semantics).
func semanticsCommand() *cli.Command {
	return &cli.Command{
		Name: "semantics",
		Usage: "commit two-table transactions at the source (tables it creates and removes) and read the target meanwhile: " +
			"exit 0 when no half-applied transaction was observed, 1 when one was (or nothing was observed); refuses environment: production",
		Hidden: true,
		Flags: []cli.Flag{configFlag(), formatFlag(), verboseFlag(),
			&cli.StringFlag{Name: "sink", Usage: "the sink whose target is read (default: the flow's only sink)"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "how long to commit transactions"},
			&cli.DurationFlag{Name: "wait", Value: 2 * time.Minute, Usage: "how long to wait for the flow's applier (the service's, or the one semantics runs itself when no service runs) to apply the last one, and before its tables are removed"},
		},
		Action: databaseAction(func(c *cli.Context, f *flow.Flow, format string) error {
			if d := c.Duration("duration"); d <= 0 {
				return usageError("--duration %s: must be positive, e.g. --duration 10s", d)
			}
			if w := c.Duration("wait"); w <= 0 {
				return usageError("--wait %s: must be positive, e.g. --wait 2m", w)
			}
			ctx, stop := signalContext(c)
			defer stop()
			res, err := f.Semantics(ctx, flow.SemanticsOptions{Sink: c.String("sink"), Duration: c.Duration("duration"), Wait: c.Duration("wait")})
			if err != nil {
				return failure(err)
			}
			// Kept for pilot-package: claim 2's live attempt.
			rec := struct {
				*flow.SemanticsResult
				RanAt time.Time `json:"ran_at"`
				OK    bool      `json:"ok"`
			}{res, time.Now().UTC(), res.OK()}
			if err := chaoslive.SaveJSON(f.Cfg, chaoslive.EvidenceSemantics, rec); err != nil {
				logger(c).Warn("semantics: could not keep the result for pilot-package", "err", err)
			}
			if format == "json" {
				if err := writeJSON(c, res.OK(), res); err != nil {
					return err
				}
			} else {
				res.RenderText(c.App.Writer)
			}
			if !res.OK() {
				return cli.Exit("", ExitFindings)
			}
			return nil
		}),
	}
}
