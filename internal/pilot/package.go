// Package pilot builds the evidence package of a flow (`trellara
// pilot-package`) and scores the product's four claims from it (`trellara
// pilot-scorecard`). A package is a gzip'd tar of plain files and a
// manifest.json listing each with its SHA-256; what could not be produced
// is listed in the manifest as not run, with the reason, never as a
// placeholder file. No file in a package carries a credential: Build
// refuses to finish when one would.
package pilot

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/trellara/trellara/internal/shell"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	tbuild "github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/chaoslive"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/flow"
	"github.com/trellara/trellara/internal/release/sbom"
	"github.com/trellara/trellara/internal/sim"
	"github.com/trellara/trellara/internal/verify"
)

// FormatVersion is manifest.json's format_version.
const FormatVersion = 1

// Files of a package. The scorecard reads them by these names.
const (
	FileManifest   = "manifest.json"
	FileConfig     = "config.redacted.yml"
	FileVersions   = "versions.json"
	FileSBOM       = "sbom.cdx.json"
	FileCheck      = "check.json"
	FileStatus     = "status.json"
	FileLastVerify = "last-verify.json"
	FileChaosJSON  = "chaos/report.json"
	FileChaosHTML  = "chaos/report.html"
	// FileFleet is where fleet completeness evidence would be; no command
	// produces it yet.
	FileFleet = "fleet/scorecard.json"
	// FileQualification is `trellara qualify`'s last report (HTML), and
	// FileQualificationJSON the same as JSON.
	FileQualification     = "qualification.html"
	FileQualificationJSON = "qualification.json"
	// FileLiveChaosJSON and FileLiveChaosHTML are the last
	// `trellara chaos live` run of the flow.
	FileLiveChaosJSON = "live/chaos-live.json"
	// FileSemantics is the flow's last `trellara semantics` result (the
	// live attempt to observe a half-applied transaction), when recorded.
	FileSemantics     = "live/semantics.json"
	FileLiveChaosHTML = "live/chaos-live.html"
)

// Binaries are the executables a release ships, looked for beside the
// running one.
var Binaries = []string{"trellara", "trellara-check", "trellara-full"}

// Manifest is manifest.json.
type Manifest struct {
	FormatVersion int       `json:"format_version"`
	CreatedAt     time.Time `json:"created_at"`
	Flow          string    `json:"flow"`
	Config        string    `json:"config"`
	Version       string    `json:"trellara_version"`
	// SigningKey is the key id (sign.KeyID) of the key that signs this
	// manifest, or empty for an unsigned package. It is inside the signed
	// bytes, so a verified signature also proves the claim.
	SigningKey string     `json:"signing_key,omitempty"`
	Files      []FileInfo `json:"files"`
	NotRun     []NotRun   `json:"not_run"`
}

// FileInfo is one file of the package.
type FileInfo struct {
	Path        string `json:"path"`
	SHA256      string `json:"sha256"`
	Bytes       int    `json:"bytes"`
	Description string `json:"description"`
}

// NotRun is evidence the package does not hold, and why.
type NotRun struct {
	Item   string `json:"item"`
	File   string `json:"file,omitempty"`
	Reason string `json:"reason"`
}

// Package is a package in memory: the manifest and each file's bytes.
// A package Read returns holds only the files the scorecard parses
// (Scored); every other file was hashed as it streamed past and checked
// against the manifest, not kept.
type Package struct {
	Manifest Manifest
	Files    map[string][]byte
	// Signature is what Read found about the manifest's signature.
	Signature Signature

	signer ed25519.PrivateKey // set by SignWith; Write signs with it
}

// Options are what Build needs besides the config.
type Options struct {
	ConfigPath string
	// Executable is the running binary; the others in Binaries are looked
	// for in its directory. Default os.Executable().
	Executable string
	// ChaosBudget bounds the failure-matrix run; scenarios not started
	// within it leave the chaos report out (listed as not run). Default 5m.
	ChaosBudget time.Duration
	// Progress receives one line per step (the CLI writes them to stderr).
	Progress func(string)
	Logger   *slog.Logger
	Now      func() time.Time
}

// VersionsFile is versions.json.
type VersionsFile struct {
	Running  string          `json:"running"`
	Binaries []BinaryVersion `json:"binaries"`
}

// BinaryVersion identifies one executable.
type BinaryVersion struct {
	Name      string `json:"name"`
	Path      string `json:"path"`
	SHA256    string `json:"sha256"`
	Bytes     int64  `json:"bytes"`
	Running   bool   `json:"running"`
	GoVersion string `json:"go_version,omitempty"`
	Version   string `json:"version,omitempty"`
	Commit    string `json:"commit,omitempty"`
	Note      string `json:"note,omitempty"`
}

// builder accumulates a package.
type builder struct {
	p    *Package
	opts Options
}

func (b *builder) add(path, desc string, data []byte) { b.p.Put(path, desc, data) }

// Put adds a file to the package, or replaces it, and records its digest
// in the manifest.
func (p *Package) Put(path, desc string, data []byte) {
	sum := sha256.Sum256(data)
	fi := FileInfo{Path: path, SHA256: hex.EncodeToString(sum[:]), Bytes: len(data), Description: desc}
	p.Files[path] = data
	for i, f := range p.Manifest.Files {
		if f.Path == path {
			if desc == "" {
				fi.Description = f.Description
			}
			p.Manifest.Files[i] = fi
			return
		}
	}
	p.Manifest.Files = append(p.Manifest.Files, fi)
}

func (b *builder) addJSON(path, desc string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("pilot: encode %s: %w", path, err)
	}
	b.add(path, desc, append(data, '\n'))
	return nil
}

func (b *builder) notRun(item, file, reason string) {
	b.p.Manifest.NotRun = append(b.p.Manifest.NotRun, NotRun{Item: item, File: file, Reason: reason})
}

func (b *builder) progress(format string, args ...any) {
	if b.opts.Progress != nil {
		b.opts.Progress(fmt.Sprintf(format, args...))
	}
}

// Build gathers the evidence of the flow opts.ConfigPath names. Evidence
// that cannot be gathered (an unreachable source, no verify yet) is listed
// as not run; a config that does not load or resolve, or a file that would
// carry a credential, is an error.
func Build(ctx context.Context, opts Options) (*Package, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ChaosBudget <= 0 {
		opts.ChaosBudget = 5 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("pilot: locate the running executable: %w", err)
		}
		opts.Executable = exe
	}
	raw, err := os.ReadFile(opts.ConfigPath)
	if err != nil {
		return nil, fmt.Errorf("pilot: read config %s: %w", opts.ConfigPath, err)
	}
	cfg, err := config.Load(opts.ConfigPath)
	if err != nil {
		return nil, err
	}
	sec, err := cfg.ResolveSecrets()
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts, p: &Package{Files: map[string][]byte{}, Manifest: Manifest{
		FormatVersion: FormatVersion, CreatedAt: opts.Now().UTC(), Flow: cfg.Flow, Config: opts.ConfigPath,
		Version: tbuild.String(), Files: []FileInfo{}, NotRun: []NotRun{}}}}

	b.progress("config: redacting %s", opts.ConfigPath)
	red, err := config.Redact(raw)
	if err != nil {
		return nil, err
	}
	b.add(FileConfig, "the flow config with every credential redacted (trellara config redact)", red)

	b.progress("binaries: hashing the executables beside %s", opts.Executable)
	vers, paths := binaries(opts.Executable)
	if err := b.addJSON(FileVersions, "each executable's version, commit and SHA-256", vers); err != nil {
		return nil, err
	}

	b.progress("sbom: generating from %d executables", len(paths))
	if doc, err := sbom.Generate(paths, sbom.Options{Product: "trellara", Version: tbuild.Version, Module: "github.com/trellara/trellara",
		Timestamp: opts.Now(), Tool: "trellara pilot-package"}); err != nil {
		b.notRun("SBOM", FileSBOM, "could not be generated from the executables: "+err.Error())
	} else {
		var buf bytes.Buffer
		if err := doc.Write(&buf); err != nil {
			return nil, fmt.Errorf("pilot: encode the SBOM: %w", err)
		}
		b.add(FileSBOM, "CycloneDX 1.5 SBOM of the executables in versions.json", buf.Bytes())
	}

	b.progress("check: grading the source (read-only)")
	if err := b.check(ctx, cfg, sec); err != nil {
		b.notRun("trellara-check report", FileCheck, err.Error())
	}

	b.progress("status: reading the flow's status and last verify")
	if err := b.status(ctx); err != nil {
		b.notRun("flow status", FileStatus, err.Error())
	}

	b.progress("chaos: running the failure-matrix catalogue (at most %s)", opts.ChaosBudget)
	if err := b.chaos(ctx); err != nil {
		b.notRun("failure-matrix report", FileChaosJSON, err.Error())
	}

	b.progress("live: the flow's last live chaos run and qualification, when recorded")
	b.live(cfg)
	b.notRun("fleet completeness", FileFleet, "this package covers one flow; a fleet's completeness evidence is "+
		shell.Command("trellara-full", "fleet", "scorecard", "--config", "fleet.yml")+" and "+shell.Command("trellara-full", "lake", "epoch", "--config", "fleet.yml"))

	if err := scanSecrets(b.p, sec); err != nil {
		return nil, err
	}
	b.p.Signature = Signature{State: Unsigned, Statement: "UNSIGNED: built in memory by this command from " + opts.ConfigPath + "; no package was read"}
	b.progress("package: %d files, %d items not run", len(b.p.Manifest.Files), len(b.p.Manifest.NotRun))
	return b.p, nil
}

func (b *builder) check(ctx context.Context, cfg *config.Config, sec config.Secrets) error {
	// The same report as check --config: the flow's tables and slot only.
	r, err := flow.CheckSource(ctx, b.opts.ConfigPath, cfg, sec, b.opts.Logger)
	if err != nil {
		return fmt.Errorf("the source could not be graded: %w", config.ScrubConnError(err, sec.SourceDatabaseURL.Reveal()))
	}
	return b.addJSON(FileCheck, "trellara-check's grade of the source, as check --format json reports it", r)
}

func (b *builder) status(ctx context.Context) error {
	f, err := flow.OpenReadOnly(b.opts.ConfigPath, b.opts.Logger)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Status(ctx, "report")
	if err != nil {
		return err
	}
	if err := b.addJSON(FileStatus, "trellara status --format json: slot, log, checkpoint, quarantine, problems", st); err != nil {
		return err
	}
	if st.LastVerify == nil {
		b.notRun("last verify", FileLastVerify, "no verify of this flow is recorded: run "+verifyCommand(b.opts.ConfigPath))
		return nil
	}
	return b.addJSON(FileLastVerify, "the flow's last recorded verify result", st.LastVerify)
}

func verifyCommand(configPath string) string {
	return shell.Trellara("run", configPath, "--local", "--verify")
}

// chaos runs the failure-matrix catalogue as `trellara chaos report` does,
// in batches so the budget bounds it: a catalogue not finished within it
// is left out, not reported in part.
func (b *builder) chaos(ctx context.Context) error {
	scs, sims := sim.Catalogue()
	deadline := time.Now().Add(b.opts.ChaosBudget)
	start := time.Now()
	batch := 2 * max(1, runtime.GOMAXPROCS(0))
	var results []*sim.Result
	for i := 0; i < len(scs); i += batch {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted after %d of %d scenarios: %w", i, len(scs), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the catalogue did not finish within %s (%d of %d scenarios ran): run trellara chaos report for the full report", b.opts.ChaosBudget, i, len(scs))
		}
		results = append(results, sim.RunAll(scs[i:min(i+batch, len(scs))], sims, sim.Options{}, nil)...)
	}
	elapsed := time.Since(start)
	rep := sim.BuildReport(results, sims, "")
	if err := b.addJSON(FileChaosJSON, "the failure-matrix catalogue's results (trellara chaos run --format json)", rep); err != nil {
		return err
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown host (" + err.Error() + ")"
	}
	var html bytes.Buffer
	if err := sim.WriteHTML(&html, rep, sim.RunInfo{Version: tbuild.Version, Generated: b.opts.Now(), Host: host, Elapsed: elapsed}); err != nil {
		return err
	}
	b.add(FileChaosHTML, "the failure-matrix report, self-contained HTML (trellara chaos report)", html.Bytes())
	return nil
}

// live adds the flow's last live chaos run and qualification report from
// its evidence directory, or says how to make them.
func (b *builder) live(cfg *config.Config) {
	dir := chaoslive.EvidenceDir(cfg)
	for _, e := range []struct {
		item, jsonSrc, htmlSrc, jsonDst, htmlDst, command string
	}{
		{"live chaos report", chaoslive.EvidenceChaosJSON, chaoslive.EvidenceChaosHTML, FileLiveChaosJSON, FileLiveChaosHTML,
			shell.Trellara("chaos live", b.opts.ConfigPath, "--duration", "10m")},
		{"qualification report", chaoslive.EvidenceQualificationJSON, chaoslive.EvidenceQualificationHTML, FileQualificationJSON, FileQualification,
			shell.Trellara("qualify", b.opts.ConfigPath, "--duration", "30m", "--output", "qualification.html")},
	} {
		if dir == "" {
			b.notRun(e.item, e.htmlDst, "the flow has no transport.local directory to keep live evidence in")
			continue
		}
		js, err1 := os.ReadFile(filepath.Join(dir, e.jsonSrc))
		page, err2 := os.ReadFile(filepath.Join(dir, e.htmlSrc))
		if err1 != nil || err2 != nil {
			b.notRun(e.item, e.htmlDst, "none is recorded in "+dir+": run "+e.command)
			continue
		}
		b.add(e.jsonDst, "the "+e.item+" ("+e.jsonSrc+" from the flow's evidence directory)", js)
		b.add(e.htmlDst, "the "+e.item+", self-contained HTML", page)
	}
	semantics := shell.Trellara("semantics", b.opts.ConfigPath)
	if dir == "" {
		b.notRun("live semantics attempt", FileSemantics, "the flow has no transport.local directory to keep live evidence in")
	} else if js, err := os.ReadFile(filepath.Join(dir, chaoslive.EvidenceSemantics)); err != nil {
		b.notRun("live semantics attempt", FileSemantics, "none is recorded in "+dir+": run "+semantics)
	} else {
		b.add(FileSemantics, "the flow's last live attempt to observe a half-applied transaction ("+semantics+")", js)
	}
}

// binaries describes the running executable and those of Binaries beside
// it, and returns the paths of the Go executables among them.
// Executables describes the running executable exe and the release's
// other executables beside it (name, path, SHA-256, version, commit).
func Executables(exe string) VersionsFile {
	v, _ := binaries(exe)
	return v
}

func binaries(exe string) (VersionsFile, []string) {
	out := VersionsFile{Running: tbuild.String(), Binaries: []BinaryVersion{}}
	var paths []string
	seen := map[string]bool{}
	dir := filepath.Dir(exe)
	cands := []string{exe}
	for _, n := range Binaries {
		cands = append(cands, filepath.Join(dir, n))
	}
	for _, p := range cands {
		abs, err := filepath.Abs(p)
		if err != nil || seen[abs] {
			continue
		}
		seen[abs] = true
		data, err := os.ReadFile(abs)
		if err != nil {
			continue // not shipped beside this one
		}
		sum := sha256.Sum256(data)
		bv := BinaryVersion{Name: filepath.Base(abs), Path: abs, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(data)), Running: abs == cands[0] || p == exe}
		if bi, err := buildinfo.Read(bytes.NewReader(data)); err != nil {
			bv.Note = "no Go build information: " + err.Error()
		} else {
			bv.GoVersion = bi.GoVersion
			bv.Version, bv.Commit = stamped(bi)
			paths = append(paths, abs)
		}
		out.Binaries = append(out.Binaries, bv)
	}
	return out, paths
}

// stamped reads the version and commit the Makefile links in (-X
// .../buildinfo.Version=...), else the toolchain's VCS revision.
func stamped(bi *buildinfo.BuildInfo) (version, commit string) {
	const pkg = "github.com/trellara/trellara/internal/buildinfo."
	for _, s := range bi.Settings {
		switch s.Key {
		case "-ldflags":
			for _, f := range strings.Fields(s.Value) {
				if v, ok := strings.CutPrefix(f, pkg+"Version="); ok {
					version = v
				}
				if v, ok := strings.CutPrefix(f, pkg+"Commit="); ok {
					commit = v
				}
			}
		case "vcs.revision":
			if commit == "" {
				commit = s.Value
			}
		}
	}
	if version == "" {
		version = bi.Main.Version
	}
	return version, commit
}

// lastVerify decodes last-verify.json.
func lastVerify(data []byte) (*verify.Result, error) {
	var r verify.Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", FileLastVerify, err)
	}
	return &r, nil
}
