package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/check"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/flow"
	"github.com/trellara/trellara/internal/obs"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/internal/verify"
	"github.com/trellara/trellara/sidecar"
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

// writeJSON writes the command's JSON output in the envelope; ok is true
// exactly when the command exits 0.
func writeJSON(c *cli.Context, ok bool, body any) error {
	if err := writeEnvelope(c.App.Writer, commandName(c), ok, body, nil); err != nil {
		return failure(err)
	}
	return nil
}

// failure maps an error to the exit code contract: 1 for an invalid
// config (as `config validate` and `check` say it), 2 = could not run.
func failure(err error) error {
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return err
	}
	if _, ok := config.Problems(err); ok {
		return &exitErr{err: err, code: ExitFindings}
	}
	return &exitErr{err: err, code: ExitError}
}

// flowAction is an action on the flow named by --config, with the
// validated --format; the flow's log is closed when it returns. A
// read-only action (status, repair-plan) opens the flow without creating
// anything (flow.OpenReadOnly).
func flowAction(readOnly bool, fn func(c *cli.Context, f *flow.Flow, format string) error) cli.ActionFunc {
	open := flow.Open
	if readOnly {
		open = flow.OpenReadOnly
	}
	return openedAction(func(c *cli.Context) (*flow.Flow, error) { return open(c.String("config"), logger(c)) }, fn)
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
			&cli.StringFlag{Name: "source-database-url", Usage: "source connection URL; with --evaluate written inline, otherwise kept out of the file as {env: TRELLARA_SOURCE_URL} (init prints the export line to set)"},
			&cli.StringFlag{Name: "target-database-url", Usage: "target connection URL (same rule, TRELLARA_TARGET_URL)"},
			&cli.StringSliceFlag{Name: "table", Usage: "schema.table to capture (repeatable); checked against the source when it is reachable", Required: true},
			&cli.StringFlag{Name: "flow", Usage: "flow name (default: from the source database's name)"},
			&cli.StringFlag{Name: "source-id", Usage: "stable id of the source database", Value: "source"},
			&cli.BoolFlag{Name: "evaluate", Usage: "evaluation flow: local log beside the config, Trellara owns slot and publication, target tables created"},
			&cli.StringFlag{Name: "output", Aliases: []string{"config"}, Usage: "config path to write", Value: "trellara.yml"},
			&cli.StringFlag{Name: "relay-listen", Usage: "the relay's health and metrics address (default: 127.0.0.1:9401, or the first pair 10 ports up that no config beside the output names and nothing listens on)"},
			&cli.StringFlag{Name: "applier-listen", Usage: "the applier's health and metrics address (default: the relay's port + 1)"},
			&cli.StringFlag{Name: "capture", Usage: "pgoutput (a logical slot read by the relay) or extension (the trellara extension's decoder and socket; self-managed servers)", Value: "pgoutput"},
			&cli.StringFlag{Name: "socket", Usage: "with --capture extension: the extension's socket path (default: the server's trellara.socket_path, read from the source when it is reachable)"},
			formatFlag(),
		},
		Action: func(c *cli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			capture := config.Capture(c.String("capture"))
			if capture != config.CapturePgoutput && capture != config.CaptureExtension {
				return usageError("init: --capture must be pgoutput or extension, not %q", c.String("capture"))
			}
			if c.String("socket") != "" && capture != config.CaptureExtension {
				return usageError("init: --socket is only used with --capture extension")
			}
			evaluate := c.Bool("evaluate")
			// env: the variables a non-evaluation config references, each
			// with the typed URL's credentials replaced by a placeholder.
			env := map[string]string{}
			ref := func(flag, name string) config.SecretRef {
				v := c.String(flag)
				if v == "" {
					return config.SecretRef{}
				}
				if evaluate {
					return config.InlineRef(v)
				}
				env[name] = config.RedactConnString(v)
				return config.EnvRef(name)
			}
			srcURL := c.String("source-database-url")
			src := ref("source-database-url", "TRELLARA_SOURCE_URL")
			if src.IsZero() {
				src = config.EnvRef("TRELLARA_SOURCE_URL")
				if _, ok := os.LookupEnv("TRELLARA_SOURCE_URL"); !ok {
					env["TRELLARA_SOURCE_URL"] = "postgres://<user>:<password>@<host>:5432/<database>"
				}
			}
			database := ""
			if srcURL != "" {
				pc, err := pgconn.ParseConfig(srcURL)
				if err != nil {
					return usageError("--source-database-url: %v", config.ScrubConnError(err, srcURL))
				}
				database = pc.Database
			}
			if c.String("flow") == "" && database == "" {
				return usageError("init: name the flow with --flow NAME (the source URL names no database to derive it from)")
			}
			if srcURL != "" {
				if err := checkTablesExist(c.Context, srcURL, c.StringSlice("table")); err != nil {
					return err
				}
			}
			tgt := ref("target-database-url", "TRELLARA_TARGET_URL")
			// An evaluation applies somewhere: without a target URL the
			// config reads it from TRELLARA_TARGET_URL, and init says how to
			// make one (a flow with no target would pass check and preflight
			// and then refuse to run).
			var targetHint []string
			if tgt.IsZero() && evaluate {
				tgt = config.EnvRef("TRELLARA_TARGET_URL")
				if _, ok := os.LookupEnv("TRELLARA_TARGET_URL"); !ok {
					targetHint = evaluationTargetHint(srcURL, database)
				}
			}
			out := c.String("output")
			listen, listenNote := initListen(out, c.String("relay-listen"), c.String("applier-listen"))
			cfg, err := config.Starter(config.StarterOptions{
				Flow: c.String("flow"), SourceID: c.String("source-id"), Database: database,
				SourceDatabaseURL: src, TargetDatabaseURL: tgt, Listen: listen,
				Tables: c.StringSlice("table"), Evaluate: evaluate,
			})
			if err != nil {
				return failure(err)
			}
			if capture == config.CaptureExtension {
				sock, err := initSocket(c.Context, srcURL, c.String("socket"))
				if err != nil {
					return err
				}
				// The extension's decoder owns its slot and the flow has
				// no publication of its own.
				cfg.Source.Capture, cfg.Source.Socket, cfg.Source.OwnsSlot = config.CaptureExtension, sock, false
				// The sidecar runs as the server's OS user
				// (trellara-sidecar@.service), which may write only
				// /var/lib/trellara-sidecar.
				if l := cfg.Transport.Local; l != nil && !evaluate && l.Dir == "/var/lib/trellara/"+cfg.Flow {
					l.Dir = "/var/lib/trellara-sidecar/" + cfg.Flow
				}
			}
			if err := config.CreateFile(out, cfg); err != nil {
				return failure(err)
			}
			if format == "json" {
				body := map[string]any{"config": out, "flow": cfg.Flow, "evaluate": evaluate, "environment": env}
				if targetHint != nil {
					body["target_setup"] = targetHint
				}
				body["listen"] = map[string]string{"relay": cfg.Run.Listen.Relay, "applier": cfg.Run.Listen.Applier}
				return writeJSON(c, true, body)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "wrote %s (flow %s)\n", out, cfg.Flow)
			if listenNote != "" {
				fmt.Fprintln(w, listenNote)
			}
			if targetHint != nil {
				fmt.Fprintln(w, "the evaluation applies the source's transactions to a target database, and none was given (--target-database-url);")
				fmt.Fprintln(w, "the config reads it from TRELLARA_TARGET_URL: create an empty database (on this server or another) and export its URL before the next command:")
				for _, l := range targetHint {
					fmt.Fprintf(w, "  %s\n", l)
				}
			}
			if len(env) > 0 {
				fmt.Fprintln(w, "the config reads the connection URLs from the environment (they are not written to the file); set them, with the real user and password in place of <redacted>, before the next command:")
				for _, name := range []string{"TRELLARA_SOURCE_URL", "TRELLARA_TARGET_URL"} {
					if v, ok := env[name]; ok {
						fmt.Fprintf(w, "  export %s=%s\n", name, shell.Quote(v))
					}
				}
			}
			fmt.Fprintf(w, "next: %s\n", shell.Trellara("check", out, "--format", "text"))
			return nil
		},
	}
}

// initListen chooses the new flow's relay and applier addresses: the
// flags where given, else the first default pair (config.ListenPair) that
// no flow config beside out names and nothing on this machine listens on,
// so two flows made by init side by side (a fleet) never share a port.
// The note says why the defaults were passed over.
func initListen(out, relay, applier string) (config.Listen, string) {
	if relay != "" || applier != "" {
		l := config.ListenPair("127.0.0.1", 0)
		if relay != "" {
			l.Relay = relay
		}
		if applier != "" {
			l.Applier = applier
		}
		return l, ""
	}
	type taken struct{ addr, by string }
	var named []taken
	for _, pat := range []string{"*.yml", "*.yaml"} {
		paths, _ := filepath.Glob(filepath.Join(filepath.Dir(out), pat))
		for _, p := range paths {
			if cfg, err := config.Load(p); err == nil {
				for _, a := range cfg.ListenAddrs() {
					named = append(named, taken{a.Addr, fmt.Sprintf("flow %s's %s (%s)", cfg.Flow, a.Key, p)})
				}
			}
		}
	}
	var why []string
	for n := 0; n < 100; n++ {
		l := config.ListenPair("127.0.0.1", n)
		free := true
		for _, a := range []string{l.Relay, l.Applier} {
			for _, t := range named {
				if config.ListenConflict(a, t.addr) {
					free = false
					why = append(why, a+" is "+t.by)
				}
			}
			if free {
				ln, err := net.Listen("tcp", a)
				if err != nil {
					free = false
					why = append(why, a+" is in use on this machine")
				} else {
					_ = ln.Close()
				}
			}
		}
		if free {
			if n == 0 {
				return l, ""
			}
			return l, fmt.Sprintf("run.listen: relay %s, applier %s (passed over: %s; --relay-listen and --applier-listen choose others)", l.Relay, l.Applier, strings.Join(why, "; "))
		}
	}
	return config.ListenPair("127.0.0.1", 0), "run.listen: the default ports 9401 and 9402 (no free pair found up to 10391; set run.listen in the config)"
}

// evaluationTargetHint is the two commands that give an evaluation flow a
// target: an empty database beside the source's (named <database>_target)
// and the export of its URL, the source's URL with that database and its
// password shown as <redacted>.
func evaluationTargetHint(srcURL, database string) []string {
	name := "trellara_target"
	if database != "" {
		name = database + "_target"
	}
	createdb := "createdb " + shell.Quote(name)
	target := "postgres://<user>:<password>@<host>:5432/" + name
	if pc, err := pgconn.ParseConfig(srcURL); err == nil && srcURL != "" {
		createdb = fmt.Sprintf("createdb -h %s -p %d -U %s %s", shell.Quote(pc.Host), pc.Port, shell.Quote(pc.User), shell.Quote(name))
		if u, err := url.Parse(srcURL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
			u.Path = "/" + name
			target = config.RedactConnString(u.String())
		}
	}
	return []string{createdb, "export TRELLARA_TARGET_URL=" + shell.Quote(target)}
}

// checkTablesExist refuses tables the source lacks (or that are not
// tables). A source that cannot be reached is not a refusal: init may run
// before the database does; check and preflight will say.
// initSocket is init's source.socket for --capture extension: the flag,
// else the server's trellara.socket_path when the source is reachable.
func initSocket(ctx context.Context, url, flag string) (string, error) {
	if flag != "" {
		if !filepath.IsAbs(flag) {
			return "", usageError("init: --socket %s must be an absolute path", flag)
		}
		return flag, nil
	}
	if url != "" {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, url); err == nil {
			defer conn.Close(context.Background())
			info, err := sidecar.CheckServer(ctx, conn)
			if info.SocketPath != "" {
				return info.SocketPath, nil
			}
			if err != nil {
				return "", failure(fmt.Errorf("init: %w", err))
			}
		}
	}
	return "", usageError("init: name the extension's socket with --socket PATH (the source is not reachable to read trellara.socket_path; the default is <data_directory>/trellara.sock)")
}

func checkTablesExist(ctx context.Context, url string, tables []string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil
	}
	defer conn.Close(context.Background())
	var missing []string
	for _, s := range tables {
		t, err := config.ParseTableName(s)
		if err != nil {
			continue // Starter names the bad name with its fix
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, t.Schema, t.Name).Scan(&n); err != nil {
			return failure(fmt.Errorf("init: look up %s on the source: %w", t, config.ScrubConnError(err, url)))
		}
		if n == 0 {
			missing = append(missing, t.String())
		}
	}
	if len(missing) > 0 {
		return failure(fmt.Errorf("init: the source has no table %s; fix: correct --table (list the source's tables with psql's \\dt)", strings.Join(missing, ", ")))
	}
	return nil
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
				return failure(err)
			}
			sec, err := cfg.ResolveSecrets()
			if err != nil {
				return failure(err)
			}
			// The grade is the flow's: its tables (one the source lacks
			// is a critical finding, not a valid config), its slot, and
			// its log's consumers; the rest of the server only counted.
			r, err := flow.CheckSource(c.Context, c.String("config"), cfg, sec, nil)
			if err != nil {
				return failure(err)
			}
			if format == "json" {
				err = writeJSON(c, check.Passing(r.Grade), r)
			} else {
				verdict := "valid"
				for _, f := range r.Findings {
					if f.Code == check.CodeConfiguredTableMissing {
						verdict = fmt.Sprintf("parses, but %s", f.Title)
					}
				}
				fmt.Fprintf(c.App.Writer, "config %s %s (flow %s, %d tables)\n", c.String("config"), verdict, cfg.Flow, len(cfg.Source.Tables))
				if n := cfg.PlaintextNote(sec); n != "" {
					fmt.Fprintln(c.App.Writer, n)
				}
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
			&cli.StringFlag{Name: "role", Usage: "service role: all (capture and every sink's applier in one process), relay (pgoutput capture only), applier (the sinks' appliers, reading the relay's log read-only: every sink, or the one named by --sink) or sidecar (native extension capture only)", Value: "all"},
			&cli.StringFlag{Name: "sink", Usage: "with --role applier: apply to this sink only (one process per sink)"},
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
			if c.Bool("cleanup") {
				// The re-snapshot a damaged log prints starts here, so it
				// must not need the log to open (flow.OpenForCleanup).
				return openedAction(func(c *cli.Context) (*flow.Flow, error) {
					return flow.OpenForCleanup(c.String("config"), logger(c))
				}, func(c *cli.Context, f *flow.Flow, format string) error { return runLocal(c, f, format) })(c)
			}
			// A bounded run applies to a target: a capture-only flow is
			// refused before its local log is created.
			if err := needsTarget(c.String("config")); err != nil {
				if _, ferr := outputFormat(c); ferr != nil {
					return ferr
				}
				return failure(err)
			}
			return flowAction(false, func(c *cli.Context, f *flow.Flow, format string) error {
				return runLocal(c, f, format)
			})(c)
		},
	}
}

// needsTarget returns the no-target error for a flow config without sinks,
// touching nothing on disk; other config problems are left to the open.
func needsTarget(path string) error {
	cfg, err := config.Load(path)
	if err != nil {
		return nil
	}
	if len(cfg.Sinks) == 0 {
		return flow.ErrNoTarget(cfg.Flow)
	}
	return nil
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
		ext := f.Cfg.Source.Capture == config.CaptureExtension
		if format == "json" {
			dropped := map[string]any{"slot": f.Cfg.Source.Slot, "publication": f.Cfg.Source.Publication, "local_state": f.StateDir()}
			if ext {
				dropped = map[string]any{"local_state": f.StateDir()}
			}
			return writeJSON(c, true, map[string]any{"flow": f.Cfg.Flow, "dropped": dropped})
		}
		if ext {
			fmt.Fprintf(c.App.Writer, "removed the local state of flow %s and its state on the target; the extension decoder's slot stays (the server's); "+
				"the next run takes a new initial snapshot\n", f.Cfg.Flow)
		} else {
			fmt.Fprintf(c.App.Writer, "dropped slot %s, publication %s and local state of flow %s\n", f.Cfg.Source.Slot, f.Cfg.Source.Publication, f.Cfg.Flow)
		}
		for _, t := range emptied {
			fmt.Fprintf(c.App.Writer, "emptied target table %s (rows this flow had copied)\n", t)
		}
		return nil
	}
	var progress func(flow.Progress)
	var pd *progressDisplay
	if format == "text" {
		pd = newProgressDisplay(c.App.ErrWriter)
		progress = pd.update
	}
	res, err := f.RunLocal(ctx, c.Bool("verify"), progress)
	if pd != nil {
		pd.finish() // an error starts on a line of its own
	}
	if err != nil {
		return failure(err)
	}
	converged := res.Verify == nil || res.Verify.Verdict == verify.Converged
	if format == "json" {
		if err := writeJSON(c, converged, res); err != nil {
			return err
		}
	} else {
		w := c.App.Writer
		fmt.Fprintf(w, "flow          %s\n", res.Flow)
		if res.Transport.Broker != "" {
			fmt.Fprintf(w, "transport     %s · local state at %s\n", res.Transport.Broker, res.Transport.Dir)
		} else {
			fmt.Fprintf(w, "transport     local segment log at %s · fsync %s\n", res.Transport.Dir, res.Transport.Fsync)
		}
		fmt.Fprintf(w, "this run      %s published · %s applied atomically (%d redelivered, skipped) · %s\n",
			flow.Plural(int(*res.ThisRun.PublishedUnits), "unit"), flow.Plural(int(res.ThisRun.TransactionsApplied), "transaction"),
			res.ThisRun.TransactionsSkipped, flow.Plural(int(res.ThisRun.RowsApplied), "row"))
		fmt.Fprintf(w, "flow totals   %s applied · %d skipped · %s\n", flow.Plural(int(res.Totals.TransactionsApplied), "transaction"),
			res.Totals.TransactionsSkipped, flow.Plural(int(res.Totals.RowsApplied), "row"))
		fmt.Fprintf(w, "checkpoint    %s (caught up with %s)\n", res.Checkpoint, res.CatchUpLSN)
		if len(res.Sinks) > 1 {
			for _, s := range res.Sinks {
				fmt.Fprintf(w, "sink %-8s %s applied this run · checkpoint %s\n", s.Sink,
					flow.Plural(int(s.ThisRun.TransactionsApplied), "transaction"), s.Checkpoint)
			}
		}
		fmt.Fprintf(w, "duration      %.1fs\n", res.DurationSecs)
		for _, s := range res.Sinks {
			if s.Verify == nil {
				continue
			}
			fmt.Fprintln(w)
			if len(res.Sinks) > 1 {
				fmt.Fprintf(w, "sink %s\n", s.Sink)
			}
			if err := s.Verify.RenderText(w); err != nil {
				return failure(err)
			}
		}
	}
	// The exit status is the first sink's verdict that is not CONVERGED.
	for _, s := range res.Sinks {
		if s.Verify == nil {
			continue
		}
		if err := verdictExit(s.Verify); err != nil {
			return err
		}
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
	err := flow.Serve(ctx, flow.ServiceOptions{ConfigPath: c.String("config"), Role: flow.Role(c.String("role")), Sink: c.String("sink"), Logger: log, Reload: reload,
		Build: build(),
		Listening: func(component, addr string) {
			log.Info("listening", "component", component, "addr", addr, "endpoints", "/livez /readyz /healthz /metrics")
		}})
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	if errors.Is(err, buildinfo.ErrNotImplemented) {
		return &exitErr{err: err, code: ExitError}
	}
	return failure(err)
}

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "prove each sink's target converged: counts, PK checksums, watermarks (exit 0 CONVERGED, 1 DIVERGED, 3 BEHIND, 2 error)",
		Flags: []cli.Flag{configFlag(), formatFlag(), verboseFlag(),
			&cli.StringSliceFlag{Name: "table", Usage: "verify only this schema.table (repeatable)"},
			&cli.StringFlag{Name: "sink", Usage: "verify only this sink (default: every sink, each reported)"},
			&cli.DurationFlag{Name: "wait", Value: 30 * time.Second, Usage: "how long to wait for the target to reach the watermark before answering BEHIND; 0 does not wait. " +
				"Unset, a flow at rest (no pipeline holds it) is not waited for: verify counts what its target lacks instead"},
			&cli.StringFlag{Name: "row-hash", Value: "auto", Usage: "auto: hash rows with the trellara extension's C function on a side where it is installed, in SQL elsewhere " +
				"(the same hash either way); sql: in SQL on both sides"}},
		Before: func(c *cli.Context) error {
			if h := c.String("row-hash"); h != "auto" && h != "sql" {
				return cli.Exit(fmt.Sprintf("--row-hash %q: use auto (the default) or sql", h), ExitError)
			}
			return nil
		},
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
			rowHash := c.String("row-hash")
			ctx, stop := signalContext(c)
			defer stop()
			sinks, err := f.SelectSinks(c.String("sink"))
			if err != nil {
				return failure(err)
			}
			type sinkResult struct {
				Sink   string         `json:"sink"`
				Result *verify.Result `json:"result"`
			}
			var results []sinkResult
			var worst error // the first sink's verdict that is not CONVERGED
			for _, s := range sinks {
				res, err := f.VerifySink(ctx, s, flow.VerifyOptions{Tables: c.StringSlice("table"), Wait: wait, SQLRowHash: rowHash == "sql"})
				var notFlow *flow.NotFlowTableError
				if errors.As(err, &notFlow) {
					return usageError("%s", notFlow) // no verdict, none stored
				}
				if err != nil {
					return failure(fmt.Errorf("sink %s: %w", s.Name, err))
				}
				results = append(results, sinkResult{s.Name, res})
				if worst == nil {
					worst = verdictExit(res)
				}
			}
			// A flow with one sink prints its result as it always has.
			switch {
			case len(f.Sinks()) == 1 && format == "json":
				err = writeJSON(c, worst == nil, results[0].Result)
			case len(f.Sinks()) == 1:
				err = results[0].Result.RenderText(c.App.Writer)
			case format == "json":
				err = writeJSON(c, worst == nil, map[string]any{"flow": f.Cfg.Flow, "sinks": results})
			default:
				for i, r := range results {
					if i > 0 {
						fmt.Fprintln(c.App.Writer)
					}
					fmt.Fprintf(c.App.Writer, "sink %s\n", r.Sink)
					if err = r.Result.RenderText(c.App.Writer); err != nil {
						break
					}
				}
			}
			if err != nil {
				return failure(err)
			}
			return worst
		}),
	}
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "slot, lag, log retention, cursors, and every sink's checkpoint and quarantine",
		Flags: []cli.Flag{configFlag(), formatFlag(),
			&cli.StringFlag{Name: "view", Usage: "report, diagnostics or quarantine", Value: "report"}},
		Action: flowAction(true, func(c *cli.Context, f *flow.Flow, format string) error {
			view := c.String("view")
			switch view {
			case "report", "diagnostics", "quarantine":
			default:
				return usageError("--view %q: must be report, diagnostics or quarantine", view)
			}
			st, err := f.Status(c.Context, view)
			if err != nil {
				return failure(err)
			}
			if format == "json" {
				err = writeJSON(c, len(st.Problems) == 0, st)
			} else {
				err = st.RenderText(c.App.Writer, view)
			}
			if err != nil {
				return failure(err)
			}
			if len(st.Problems) > 0 {
				return cli.Exit("", ExitFindings)
			}
			return nil
		}),
	}
}

func preflightCommand() *cli.Command {
	return &cli.Command{
		Name:  "preflight",
		Usage: "check connectivity, privileges, wal_level, slots, publication and target tables; each failure names its fix",
		Flags: []cli.Flag{configFlag(), formatFlag(),
			&cli.BoolFlag{Name: "create-target-tables", Usage: "create missing target tables from the source definitions"}},
		// Read-only on the local log (it only checks the databases), so it
		// runs beside the service and on a flow at rest alike.
		Action: flowAction(true, func(c *cli.Context, f *flow.Flow, format string) error {
			rep := f.Preflight(c.Context, c.Bool("create-target-tables"))
			if format == "json" {
				if err := writeJSON(c, rep.OK, rep); err != nil {
					return err
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
						problems, isConfig := config.Problems(err)
						if err != nil && !isConfig {
							return failure(err)
						}
						if problems == nil {
							problems = []config.FieldError{}
						}
						out := map[string]any{"config": path, "valid": err == nil, "errors": problems}
						if err == nil {
							out["sinks"] = cfg.SinkNames()
						}
						if werr := writeJSON(c, err == nil, out); werr != nil {
							return werr
						}
						if err != nil {
							return cli.Exit("", ExitFindings)
						}
						return nil
					}
					if err != nil {
						return failure(err)
					}
					sinks := "capture only"
					if len(cfg.Sinks) > 0 {
						sinks = "sinks " + strings.Join(cfg.SinkNames(), ", ")
					}
					fmt.Fprintf(c.App.Writer, "%s: valid (flow %s, environment %s, %s)\n", path, cfg.Flow, cfg.Environment, sinks)
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
			Action: flowAction(true, func(c *cli.Context, f *flow.Flow, format string) error {
				if c.IsSet("lsn") == c.IsSet("offset") {
					return usageError("stream locate-local: give exactly one of --lsn or --offset")
				}
				loc, err := f.Locate(c.Context, c.String("lsn"), c.Uint64("offset"), c.IsSet("offset"))
				if err != nil {
					return failure(err)
				}
				if loc == nil {
					return cli.Exit("stream locate-local: no stored transaction matches", ExitFindings)
				}
				if format == "json" { // the unit as stream tail --rows prints it
					return writeJSON(c, true, tailLineOf(consumer.Unit{Offset: loc.Offset, Envelope: loc.Envelope, Bytes: loc.Bytes}, true))
				}
				return loc.RenderText(c.App.Writer)
			}),
		}},
	}
}

func schemaCommand() *cli.Command {
	return &cli.Command{
		Name:   "schema",
		Usage:  "schema contracts: the pending schema changes and their plans (ddl-plan)",
		Hidden: true,
		Subcommands: []*cli.Command{{
			Name: "ddl-plan",
			Usage: "each schema change capture stopped at: old and new columns, its kind and classification, " +
				"the target DDL, the recovery (exit 1 when one is pending)",
			Flags: []cli.Flag{configFlag(), formatFlag()},
			Action: flowAction(true, func(c *cli.Context, f *flow.Flow, format string) error {
				p, err := f.DDLPlan()
				if err != nil {
					return failure(err)
				}
				if format == "json" {
					err = writeJSON(c, len(p.Pending) == 0, p)
				} else {
					p.RenderText(c.App.Writer)
				}
				if err != nil {
					return failure(err)
				}
				if len(p.Pending) > 0 {
					return cli.Exit("", ExitFindings)
				}
				return nil
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
		Action: flowAction(true, func(c *cli.Context, f *flow.Flow, format string) error {
			p, err := f.RepairPlan(c.Context)
			if err != nil {
				return failure(err)
			}
			if format == "json" {
				err = writeJSON(c, len(p.Steps) == 0, p)
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
