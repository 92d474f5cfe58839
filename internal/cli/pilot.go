package cli

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/pilot"
	"github.com/trellara/trellara/internal/release/sign"
	"github.com/trellara/trellara/internal/shell"
)

// pilotPackageCommand is `trellara pilot-package`: the flow's evidence in
// one tarball (internal/pilot).
func pilotPackageCommand() *cli.Command {
	return &cli.Command{
		Name:   "pilot-package",
		Usage:  "exportable evidence package: redacted config, versions, SBOM, check, status, last verify, failure matrix",
		Hidden: true,
		Flags: []cli.Flag{configFlag(), formatFlag(),
			&cli.StringFlag{Name: "output", Usage: "where to write the package: a directory (new or empty), or a .tar.gz file", Value: "evidence.tar.gz"},
			&cli.DurationFlag{Name: "chaos-budget", Usage: "how long the failure-matrix catalogue may run; unfinished, it is listed as not run", Value: 5 * time.Minute},
			&cli.StringFlag{Name: "signing-key", EnvVars: []string{"TRELLARA_SIGNING_KEY"}, Usage: "sign the manifest with the ed25519 private key in this FILE (the key format make release uses); " +
				"or the path in $TRELLARA_SIGNING_KEY. Without it the package is UNSIGNED"},
		},
		Action: func(c *cli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			var key ed25519.PrivateKey
			if path := c.String("signing-key"); path != "" {
				// Loaded before the package is built, so a bad key costs
				// nothing.
				if key, err = sign.LoadPrivateKey(path); err != nil {
					return failure(fmt.Errorf("pilot-package: %w (create one with: openssl genpkey -algorithm ed25519 -out operator.pem)", err))
				}
			}
			out := c.String("output")
			if !pilot.IsArchivePath(out) {
				// Refused before the work, not after it.
				if err := pilot.CheckDirOutput(out); err != nil {
					return failure(err)
				}
			}
			ctx, stop := signalContext(c)
			defer stop()
			p, err := pilot.Build(ctx, pilotOptions(c))
			if err != nil {
				return failure(err)
			}
			signature := pilot.Unsigned
			if key != nil {
				p.SignWith(key)
				signature = "signed-by-" + p.Manifest.SigningKey
			}
			if pilot.IsArchivePath(out) {
				var buf bytes.Buffer
				if err := p.Write(&buf); err != nil {
					return failure(fmt.Errorf("pilot-package: encode: %w", err))
				}
				if err := os.WriteFile(out, buf.Bytes(), 0o600); err != nil {
					return failure(fmt.Errorf("pilot-package: write %s: %w", out, err))
				}
			} else if err := p.WriteDir(out); err != nil {
				return failure(fmt.Errorf("pilot-package: %w", err))
			}
			if format == "json" {
				return writeJSON(c, true, map[string]any{"output": out, "signature": signature, "manifest": p.Manifest})
			}
			w := c.App.Writer
			fmt.Fprintf(w, "wrote %s: %d files for flow %s, %s\n", out, len(p.Manifest.Files), p.Manifest.Flow, signature)
			if key == nil {
				fmt.Fprintf(w, "  UNSIGNED: a recipient cannot tell this package from one rewritten by anyone; sign it with --signing-key FILE\n")
			} else {
				fmt.Fprintf(w, "  a recipient scores it with pilot-scorecard --package %s and --public-key set to the file of your public key (docs/SECURITY.md)\n", shell.Quote(out))
			}
			for _, f := range p.Manifest.Files {
				fmt.Fprintf(w, "  %-22s %s  %s\n", f.Path, f.SHA256[:16], f.Description)
			}
			for _, n := range p.Manifest.NotRun {
				fmt.Fprintf(w, "  not run: %s: %s\n", n.Item, n.Reason)
			}
			return nil
		},
	}
}

func pilotOptions(c *cli.Context) pilot.Options {
	return pilot.Options{ConfigPath: c.String("config"), ChaosBudget: c.Duration("chaos-budget"), Logger: logger(c),
		Progress: func(line string) { fmt.Fprintln(c.App.ErrWriter, "pilot: "+line) }}
}

// pilotScorecardCommand is `trellara pilot-scorecard`: the product's four
// claims scored from an evidence package, or from one built in memory.
func pilotScorecardCommand() *cli.Command {
	return &cli.Command{
		Name:   "pilot-scorecard",
		Usage:  "the four claims, each pass, fail or not run, with the package file that proves it",
		Hidden: true,
		Flags: []cli.Flag{configFlag(), formatFlag(),
			&cli.StringFlag{Name: "package", Usage: "score this evidence package (pilot-package's output: a directory or a .tar.gz) instead of building one"},
			&cli.DurationFlag{Name: "chaos-budget", Usage: "without --package: how long the failure-matrix catalogue may run", Value: 5 * time.Minute},
			&cli.StringFlag{Name: "public-key", Usage: "with --package: the sender's ed25519 public key FILE; the package must be signed by it, or it is refused"},
		},
		Action: func(c *cli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			var p *pilot.Package
			source := "built in memory from " + c.String("config")
			var pub ed25519.PublicKey
			if kp := c.String("public-key"); kp != "" {
				if c.String("package") == "" {
					return usageError("--public-key verifies a package: give --package FILE too")
				}
				if pub, err = sign.LoadPublicKey(kp); err != nil {
					return failure(fmt.Errorf("pilot-scorecard: %w", err))
				}
			}
			if path := c.String("package"); path != "" {
				if st, serr := os.Stat(path); serr == nil && st.IsDir() {
					p, err = pilot.ReadDir(path, pub)
				} else if f, oerr := os.Open(path); oerr != nil {
					return failure(fmt.Errorf("pilot-scorecard: open the package: %w", oerr))
				} else {
					p, err = pilot.Read(f, pub)
					f.Close()
				}
				if err != nil {
					return failure(fmt.Errorf("%w (package %s)", err, path))
				}
				source = path
			} else {
				ctx, stop := signalContext(c)
				defer stop()
				if p, err = pilot.Build(ctx, pilotOptions(c)); err != nil {
					return failure(err)
				}
			}
			sc := pilot.Score(p, source)
			if format == "json" {
				err = writeJSON(c, !sc.Failed(), sc)
			} else {
				err = sc.RenderText(c.App.Writer)
			}
			if err != nil {
				return failure(err)
			}
			if sc.Failed() {
				return cli.Exit("", ExitFindings)
			}
			return nil
		},
	}
}
