package cli

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/flow"
)

// reseedCommand is `trellara reseed`: copy tables again while the flow
// keeps running (docs/SCHEMA.md, "Reseed").
func reseedCommand() *cli.Command {
	return &cli.Command{
		Name: "reseed",
		Usage: "copy tables again, beside the running service or, with none, running the flow's pipeline itself: watermarked primary-key chunks into a shadow table, swapped in at the handoff, " +
			"then verified (exit 0 CONVERGED, 1 DIVERGED or BEHIND, 2 error); run it again to resume",
		Hidden: true,
		Flags: []cli.Flag{configFlag(), formatFlag(), verboseFlag(),
			&cli.StringSliceFlag{Name: "table", Usage: "schema.table to copy again (repeatable); one of the flow's tables"},
			&cli.BoolFlag{Name: "all-tables", Usage: "copy every table of the flow again: the recovery of a sink past the local log's retention, " +
				"or whose target was restored from a backup older than the log"},
			&cli.StringFlag{Name: "sink", Usage: "the sink whose target is reseeded (default: the flow's only sink)"},
			&cli.IntFlag{Name: "chunk-rows", Value: 10000, Usage: "rows per primary-key chunk"},
			&cli.DurationFlag{Name: "wait", Value: 5 * time.Minute, Usage: "how long to wait for the flow's applier (the service's, or the one reseed runs itself when no service runs) to apply each watermark"},
		},
		Before: func(c *cli.Context) error {
			if len(c.StringSlice("table")) == 0 && !c.Bool("all-tables") {
				return usageError("name the table to copy again with --table schema.table, or every table with --all-tables")
			}
			return nil
		},
		Action: databaseAction(func(c *cli.Context, f *flow.Flow, format string) error {
			if n := c.Int("chunk-rows"); n < 1 {
				return usageError("--chunk-rows %d: must be at least 1", n)
			}
			if w := c.Duration("wait"); w <= 0 {
				return usageError("--wait %s: must be positive, e.g. --wait 5m", w)
			}
			ctx, stop := signalContext(c)
			defer stop()
			o := flow.ReseedOptions{Tables: c.StringSlice("table"), AllTables: c.Bool("all-tables"), Sink: c.String("sink"), ChunkRows: c.Int("chunk-rows"), Wait: c.Duration("wait")}
			if format == "text" {
				o.Progress = func(p apply.ReseedProgress) {
					fmt.Fprintf(c.App.ErrWriter, "reseed %d of %s: %s, %d chunks and %d rows merged\n", p.ID, p.Relation, p.Phase, p.Chunks, p.Rows)
				}
			}
			res, err := f.Reseed(ctx, o)
			if err != nil {
				return failure(err)
			}
			if format == "json" {
				if err := writeJSON(c, res.Converged(), res); err != nil {
					return err
				}
			} else {
				res.RenderText(c.App.Writer)
			}
			if !res.Converged() {
				return cli.Exit("", ExitFindings)
			}
			return nil
		}),
	}
}
