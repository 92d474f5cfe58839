//go:build full

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/check"
	"github.com/trellara/trellara/internal/lake"
	"github.com/trellara/trellara/internal/shell"
)

func init() { lakeCommands = fullLakeCommands }

func fleetConfigFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "path to the fleet config (fleet.yml)", Value: "fleet.yml"}
}

func fullLakeCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name:  "fleet",
			Usage: "many sources operated as one object: init, run, report, scorecard",
			Subcommands: []*cli.Command{
				{
					Name:  "init",
					Usage: "write a fleet.yml over existing flow configs",
					Flags: []cli.Flag{
						fleetConfigFlag(),
						&cli.StringSliceFlag{Name: "source", Usage: "a flow config (trellara.yml) of one source (repeatable)", Required: true},
						&cli.StringFlag{Name: "catalog", Usage: "catalog kind: sql-sqlite, sql-postgres or rest", Value: lake.CatalogSQLite},
						&cli.StringFlag{Name: "catalog-uri", Usage: "catalog URI (sqlite file, postgres:// URL kept out of the file as {env: TRELLARA_LAKE_CATALOG_URL}, REST base URL)", Value: "lake/catalog.db"},
						&cli.StringFlag{Name: "warehouse", Usage: "warehouse URL", Value: "file://lake/warehouse"},
						&cli.StringFlag{Name: "name", Usage: "fleet name", Value: "fleet"},
						&cli.DurationFlag{Name: "close-interval", Usage: "how often an epoch closes (epochs.close_interval)", Value: lake.DefaultCloseInterval},
						&cli.DurationFlag{Name: "max-lag", Usage: "how far behind a reachable source may be and still count as included (epochs.max_lag)", Value: lake.DefaultMaxLag},
					},
					Action: fleetInit,
				},
				{
					Name:   "run",
					Usage:  "run one relay per source and the lake committer in one supervised process",
					Flags:  []cli.Flag{fleetConfigFlag(), verboseFlag()},
					Action: fleetRun,
				},
				{
					Name:   "report",
					Usage:  "each source's flow, slot, log and committer cursor, and the last epoch",
					Flags:  []cli.Flag{fleetConfigFlag(), formatFlag()},
					Action: fleetReport,
				},
				{
					Name:   "scorecard",
					Usage:  "per source: capture posture (trellara-check grade), lag, last fan-in verify, quarantine, epoch inclusion",
					Flags:  []cli.Flag{fleetConfigFlag(), formatFlag()},
					Action: fleetScorecard,
				},
			},
		},
		{
			Name:  "lake",
			Usage: "Iceberg fan-in: plan, epoch",
			Subcommands: []*cli.Command{
				{
					Name:  "epoch",
					Usage: "print the latest epoch a consumer may read; a complete_with_gaps epoch is refused (exit 1) without --allow-gaps",
					Flags: []cli.Flag{fleetConfigFlag(), formatFlag(),
						&cli.BoolFlag{Name: "allow-gaps", Usage: "accept a complete_with_gaps epoch"}},
					Action: lakeEpoch,
				},
				{
					Name:   "plan",
					Usage:  "what the committer's next commit will contain, per source and table",
					Flags:  []cli.Flag{fleetConfigFlag(), formatFlag()},
					Action: lakePlan,
				},
			},
		},
		{
			Name:   "fanin",
			Usage:  "fan-in verification: fanin verify",
			Hidden: true,
			Subcommands: []*cli.Command{
				{
					Name:  "verify",
					Usage: "per source and table, the changelog's net state through an epoch vs the source: CONVERGED or DIVERGED",
					Flags: []cli.Flag{fleetConfigFlag(), formatFlag(),
						&cli.DurationFlag{Name: "wait", Usage: "how long to wait for an epoch that covers the source's position", Value: 2 * time.Minute}},
					Action: faninVerify,
				},
			},
		},
	}
}

// loadFleet reads --config.
func loadFleet(c *cli.Context) (*lake.Fleet, string, error) {
	format, err := outputFormat(c)
	if err != nil {
		return nil, "", err
	}
	f, err := lake.LoadFleet(c.String("config"))
	if err != nil {
		return nil, "", failure(err)
	}
	return f, format, nil
}

func fleetInit(c *cli.Context) error {
	path := c.String("config")
	if _, err := os.Stat(path); err == nil {
		return failure(fmt.Errorf("fleet init: %s exists; remove it or pass --config NEW.yml", path))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Trellara fleet: many flows fanned into one Iceberg changelog (docs/LAKE.md).\nversion: 1\nfleet: %s\nsources:\n", c.String("name"))
	for _, s := range c.StringSlice("source") {
		fmt.Fprintf(&b, "  - config: %s\n", s)
	}
	uri := c.String("catalog-uri")
	uriLine := fmt.Sprintf("%q", uri)
	if c.String("catalog") == lake.CatalogPostgres {
		uriLine = "{env: TRELLARA_LAKE_CATALOG_URL}"
	}
	fmt.Fprintf(&b, "lake:\n  catalog:\n    kind: %s\n    uri: %s\n  warehouse: %s\n  namespace: %s\n", c.String("catalog"), uriLine, c.String("warehouse"), lake.DefaultNamespace)
	fmt.Fprintf(&b, "epochs:\n  close_interval: %s\n  max_lag: %s\nrun:\n  listen: %s\n", c.Duration("close-interval"), c.Duration("max-lag"), lake.DefaultFleetListen)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return failure(fmt.Errorf("fleet init: write %s: %w", path, err))
	}
	// Relative flow paths resolve from fleet.yml's directory: validate the
	// written file, and take it back if it is not valid.
	f, err := lake.LoadFleet(path)
	if err != nil {
		_ = os.Remove(path)
		return failure(err)
	}
	// Create what the file names: fleet run must not be the first to find
	// that the catalog's directory does not exist.
	if err := f.Lake.CreateLocalDirs(); err != nil {
		_ = os.Remove(path)
		return failure(err)
	}
	fmt.Fprintf(c.App.Writer, "wrote %s\nnext: %s\n", path, shell.Command("trellara-full", "fleet", "run", "--config", path))
	if c.String("catalog") == lake.CatalogPostgres {
		fmt.Fprintf(c.App.Writer, "set the catalog URL first: export TRELLARA_LAKE_CATALOG_URL='postgres://...'\n")
	}
	return nil
}

func fleetRun(c *cli.Context) error {
	f, err := lake.LoadFleet(c.String("config"))
	if err != nil {
		return failure(err)
	}
	ctx, stop := signalContext(c)
	defer stop()
	log := logger(c)
	if err := lake.RunFleet(ctx, f, lake.RunOptions{Logger: log, Build: build()}); err != nil {
		return failure(err)
	}
	return nil
}

// lastEpoch reads the epochs; a lake that cannot be opened is reported,
// not fatal, for report and scorecard.
func lastEpoch(ctx context.Context, f *lake.Fleet) (*lake.Epoch, string) {
	l, err := lake.Open(ctx, f.Lake)
	if err != nil {
		return nil, err.Error()
	}
	defer l.Close()
	eps, err := l.Epochs(ctx)
	if err != nil {
		return nil, err.Error()
	}
	if len(eps) == 0 {
		return nil, ""
	}
	return &eps[len(eps)-1], ""
}

type reportSource struct {
	SourceID string              `json:"source_id"`
	Flow     string              `json:"flow"`
	Config   string              `json:"config"`
	Slot     string              `json:"slot"`
	LogDir   string              `json:"log_dir"`
	Log      lake.StreamPosition `json:"log"`
	Epoch    *lake.SourceEpoch   `json:"epoch,omitempty"`
}

func fleetReport(c *cli.Context) error {
	f, format, err := loadFleet(c)
	if err != nil {
		return err
	}
	ep, lerr := lastEpoch(c.Context, f)
	var out []reportSource
	for _, s := range f.Sources {
		rs := reportSource{SourceID: s.ID, Flow: s.Flow.Flow, Config: s.Config, Slot: s.Flow.Source.Slot,
			LogDir: s.LogDir(), Log: lake.ReadPosition(c.Context, f, s)}
		if ep != nil {
			if se, ok := ep.Source(s.ID); ok {
				rs.Epoch = &se
			}
		}
		out = append(out, rs)
	}
	if format == "json" {
		return writeJSON(c, true, map[string]any{"fleet": f.Name, "sources": out, "last_epoch": ep, "lake_error": lerr})
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "fleet %s: %d sources, lake %s %s namespace %s\n", f.Name, len(f.Sources), f.Lake.Catalog.Kind, f.Lake.Warehouse, f.Lake.Namespace)
	fmt.Fprintln(w, "SOURCE\tFLOW\tSLOT\tSTREAM\tEND\tCURSOR\tBEHIND\tEPOCH")
	var unreadable []reportSource
	for _, r := range out {
		e := "-"
		if r.Epoch != nil {
			e = epochLine(*r.Epoch)
		}
		end, cursor, behind := fmt.Sprint(r.Log.DurableEnd), fmt.Sprint(r.Log.Cursor), fmt.Sprint(r.Log.UnitsBehind)
		if r.Log.Err != "" {
			end, cursor, behind = "unreadable", "-", "-"
			unreadable = append(unreadable, r)
		} else if !r.Log.Registered {
			cursor += " (none yet)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.SourceID, r.Flow, r.Slot, r.Log.Where, end, cursor, behind, e)
	}
	_ = w.Flush()
	for _, r := range unreadable {
		fmt.Fprintf(c.App.Writer, "%s: %s unreadable: %s\n", r.SourceID, r.Log.Where, r.Log.Err)
	}
	switch {
	case lerr != "":
		fmt.Fprintf(c.App.Writer, "lake: %s\n", lerr)
	case ep == nil:
		fmt.Fprintln(c.App.Writer, "no epoch has closed yet")
	default:
		fmt.Fprintf(c.App.Writer, "last epoch %d: %s (closed %s)\n", ep.ID, ep.Status, ep.ClosedAt.Format(time.RFC3339))
	}
	return nil
}

func epochLine(se lake.SourceEpoch) string {
	switch {
	case se.Included && se.Lagging:
		return "included (lagging) through " + lsnText(se.ThroughLSN)
	case se.Included:
		return "included through " + lsnText(se.ThroughLSN)
	case se.Quarantined:
		return "gap: quarantined"
	case se.PastRetention:
		return "gap: past retention (reseed)"
	case se.Offline:
		return "gap: offline"
	default:
		return "gap: lagging"
	}
}

func lsnText(v uint64) string { return fmt.Sprintf("%X/%X", uint32(v>>32), uint32(v)) }

// faninStatePath is where fanin verify records its last result.
func faninStatePath(f *lake.Fleet) string {
	return filepath.Join(filepath.Dir(f.File()), ".trellara-fleet", "last-fanin-verify.json")
}

type scoreSource struct {
	SourceID    string `json:"source_id"`
	Grade       string `json:"capture_grade"`
	GradeError  string `json:"capture_grade_error,omitempty"`
	UnitsBehind uint64 `json:"lag_units"`
	LastVerify  string `json:"last_fanin_verify"`
	Quarantined bool   `json:"quarantined"`
	Included    *bool  `json:"epoch_included"`
	Epoch       string `json:"epoch"`
}

func fleetScorecard(c *cli.Context) error {
	f, format, err := loadFleet(c)
	if err != nil {
		return err
	}
	ep, _ := lastEpoch(c.Context, f)
	var last lake.FaninResult
	haveLast := false
	if b, err := os.ReadFile(faninStatePath(f)); err == nil && json.Unmarshal(b, &last) == nil {
		haveLast = true
	}
	var out []scoreSource
	ok := true
	for _, s := range f.Sources {
		ss := scoreSource{SourceID: s.ID, Grade: "-", LastVerify: "never", Epoch: "-"}
		ss.UnitsBehind = lake.ReadPosition(c.Context, f, s).UnitsBehind
		if g, err := captureGrade(c.Context, s); err != nil {
			ss.GradeError = err.Error()
			ok = false
		} else {
			ss.Grade = g
			ok = ok && check.Passing(g)
		}
		if haveLast {
			for _, fs := range last.Sources {
				if fs.SourceID == s.ID {
					ss.LastVerify = fs.Verdict
				}
			}
		}
		if ep != nil {
			if se, found := ep.Source(s.ID); found {
				in := se.Included
				ss.Included, ss.Quarantined, ss.Epoch = &in, se.Quarantined, fmt.Sprintf("%d: %s", ep.ID, epochLine(se))
				ok = ok && in
			}
		}
		out = append(out, ss)
	}
	if format == "json" {
		if err := writeJSON(c, ok, map[string]any{"fleet": f.Name, "sources": out}); err != nil {
			return err
		}
	} else {
		w := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "SOURCE\tCAPTURE\tLAG (units)\tLAST FANIN VERIFY\tQUARANTINE\tEPOCH")
		for _, s := range out {
			g := s.Grade
			if s.GradeError != "" {
				g = "unreachable"
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%v\t%s\n", s.SourceID, g, s.UnitsBehind, s.LastVerify, s.Quarantined, s.Epoch)
		}
		_ = w.Flush()
	}
	if !ok {
		return &exitErr{err: errors.New("fleet scorecard: a source is not graded A/B or not in the last epoch"), code: ExitFindings}
	}
	return nil
}

// captureGrade is trellara-check's grade of source s.
func captureGrade(ctx context.Context, s lake.FleetSource) (string, error) {
	sec, err := s.Flow.Source.DatabaseURL.Resolve()
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sess, err := check.Connect(cctx, sec.Reveal(), check.ConnectOptions{})
	if err != nil {
		return "", err
	}
	defer sess.Close(context.Background())
	r, err := sess.Inspect(cctx, check.Options{Tables: s.Flow.Source.Tables})
	if err != nil {
		return "", err
	}
	return r.Grade, nil
}

func lakeEpoch(c *cli.Context) error {
	f, format, err := loadFleet(c)
	if err != nil {
		return err
	}
	l, err := lake.Open(c.Context, f.Lake)
	if err != nil {
		return failure(err)
	}
	defer l.Close()
	eps, err := l.Epochs(c.Context)
	if err != nil {
		return failure(err)
	}
	e, gerr := lake.Gate(eps, c.Bool("allow-gaps"))
	var ge *lake.GateError
	if gerr != nil && !errors.As(gerr, &ge) {
		return failure(gerr)
	}
	if format == "json" {
		if err := writeJSON(c, gerr == nil, map[string]any{"epoch": e, "missing": e.Missing(), "accepted": gerr == nil}); err != nil {
			return err
		}
	} else if gerr == nil {
		fmt.Fprintf(c.App.Writer, "epoch %d: %s (closed %s)\n", e.ID, e.Status, e.ClosedAt.Format(time.RFC3339))
		for _, s := range e.Sources {
			fmt.Fprintf(c.App.Writer, "  %s: %s\n", s.SourceID, epochLine(s))
		}
	}
	if gerr != nil {
		return &exitErr{err: gerr, code: ExitFindings}
	}
	return nil
}

func lakePlan(c *cli.Context) error {
	f, format, err := loadFleet(c)
	if err != nil {
		return err
	}
	plans, err := lake.PlanNext(c.Context, f)
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		return writeJSON(c, true, map[string]any{"fleet": f.Name, "sources": plans})
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SOURCE\tUNITS\tTRANSACTIONS\tTABLE\tROWS\tNOTE")
	for _, p := range plans {
		if len(p.Tables) == 0 {
			fmt.Fprintf(w, "%s\t%d\t%d\t-\t0\t%s\n", p.SourceID, p.Units, p.Transactions, p.Note)
		}
		for _, t := range p.Tables {
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%s\n", p.SourceID, p.Units, p.Transactions, t.Table, t.Rows, p.Note)
		}
	}
	return w.Flush()
}

func faninVerify(c *cli.Context) error {
	f, format, err := loadFleet(c)
	if err != nil {
		return err
	}
	l, err := lake.Open(c.Context, f.Lake)
	if err != nil {
		return failure(err)
	}
	defer l.Close()
	ctx, stop := signalContext(c)
	defer stop()
	res, err := lake.FaninVerify(ctx, l, f, c.Duration("wait"))
	if err != nil {
		return failure(err)
	}
	if b, err := json.MarshalIndent(res, "", "  "); err == nil {
		p := faninStatePath(f)
		if os.MkdirAll(filepath.Dir(p), 0o700) == nil {
			_ = os.WriteFile(p, b, 0o600)
		}
	}
	if format == "json" {
		if err := writeJSON(c, res.Verdict == lake.Converged, res); err != nil {
			return err
		}
	} else {
		w := c.App.Writer
		for _, s := range res.Sources {
			fmt.Fprintf(w, "source %s at %s (epoch %d): %s", s.SourceID, s.AtLSN, s.Epoch, s.Verdict)
			if s.Reason != "" {
				fmt.Fprintf(w, ": %s", s.Reason)
			}
			fmt.Fprintln(w)
			for _, t := range s.Tables {
				fmt.Fprintf(w, "  %s: %s (source %d rows, lake %d rows)\n", t.Table, t.Verdict, t.Source.Rows, t.Lake.Rows)
				for _, x := range t.Samples {
					fmt.Fprintf(w, "    %s\n", x)
				}
			}
		}
		fmt.Fprintln(w, res.Verdict)
	}
	switch res.Verdict {
	case lake.Diverged:
		return &exitErr{err: errors.New("fanin verify: DIVERGED"), code: ExitFindings}
	case lake.Behind:
		return &exitErr{err: errors.New("fanin verify: BEHIND: no epoch covers a source's position yet"), code: ExitBehind}
	}
	return nil
}
