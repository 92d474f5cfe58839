package pack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

// The package definitions, at the repository root (packaging/README.md).
const (
	// mainDefinition defines the trellara package.
	mainDefinition = "nfpm.yaml"
	// extensionDefinition defines postgresql-NN-trellara (.deb) and
	// postgresqlNN-trellara (.rpm), once per PostgreSQL major.
	extensionDefinition = "nfpm-extension.yaml"
)

// formats are the package formats every definition is built in.
var formats = []string{"deb", "rpm"}

// Options says what to build and from where.
type Options struct {
	// Root holds nfpm.yaml and nfpm-extension.yaml: the repository
	// root. Relative source paths in them are resolved from the working
	// directory, so run from the root.
	Root string
	// Version is the package version (see PackageVersion).
	Version string
	// Maintainer fills the Maintainer/Packager field.
	Maintainer string
	// MTime is stamped on every file in the packages, so that the same
	// commit builds byte-identical archives (use the commit time).
	MTime time.Time
	// Extensions maps a PostgreSQL major to the directory holding that
	// major's trellara.so, trellara.control and SQL scripts. Majors with no
	// build get no package.
	Extensions map[int]string
	// OutDir receives the packages.
	OutDir string
}

// spec is one package definition with the placeholder values of one
// format.
type spec struct {
	definition string
	format     string
	vars       map[string]string
}

// Build writes every package Options describes, in every package
// format, into OutDir and returns their paths in build order.
func Build(opts Options) ([]string, error) {
	if opts.Version == "" || opts.Maintainer == "" || opts.MTime.IsZero() {
		return nil, errors.New("pack: version, maintainer and mtime are required")
	}
	var specs []spec
	for _, format := range formats {
		specs = append(specs, spec{definition: mainDefinition, format: format, vars: mainVars(opts)})
	}
	majors := make([]int, 0, len(opts.Extensions))
	for m := range opts.Extensions {
		majors = append(majors, m)
	}
	sort.Ints(majors)
	for _, m := range majors {
		for _, format := range formats {
			vars, err := extensionVars(opts, m, format)
			if err != nil {
				return nil, err
			}
			specs = append(specs, spec{definition: extensionDefinition, format: format, vars: vars})
		}
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range specs {
		path, err := buildOne(filepath.Join(opts.Root, s.definition), s.vars, s.format, opts)
		if err != nil {
			return out, err
		}
		out = append(out, path)
	}
	return out, nil
}

// mainVars are the placeholder values of nfpm.yaml.
func mainVars(opts Options) map[string]string {
	return map[string]string{"VERSION": opts.Version, "MAINTAINER": opts.Maintainer}
}

// extensionVars are the placeholder values of nfpm-extension.yaml for one
// PostgreSQL major in one format.
func extensionVars(opts Options, major int, format string) (map[string]string, error) {
	prefix, err := pgPackage(format, major)
	if err != nil {
		return nil, err
	}
	vars := mainVars(opts)
	vars["PG_MAJOR"] = fmt.Sprint(major)
	vars["PG_PACKAGE"] = prefix
	vars["EXT_DIR"] = opts.Extensions[major]
	return vars, nil
}

// pgPackage is how a distribution names its packages of one PostgreSQL
// major, in the given package format: Debian's postgresql-15 (with
// postgresql-15-pgaudit and the like), PGDG's postgresql15 (with
// postgresql15-server, postgresql15-contrib). nfpm-extension.yaml names the
// extension's package ${PG_PACKAGE}-trellara. It is the only per-format
// value the definitions take from code: nfpm cannot vary a package's name
// by format.
func pgPackage(format string, major int) (string, error) {
	switch format {
	case "deb":
		return fmt.Sprintf("postgresql-%d", major), nil
	case "rpm":
		return fmt.Sprintf("postgresql%d", major), nil
	}
	return "", fmt.Errorf("pack: no PostgreSQL package naming known for format %q (known: %s)", format, strings.Join(formats, ", "))
}

// placeholderRe finds ${NAME} in a config.
var placeholderRe = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func buildOne(configPath string, vars map[string]string, format string, opts Options) (string, error) {
	info, err := parse(configPath, vars, format)
	if err != nil {
		return "", err
	}
	info.MTime = opts.MTime
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", fmt.Errorf("pack: %s (%s): %w", configPath, format, err)
	}
	p, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	target := filepath.Join(opts.OutDir, p.ConventionalFileName(info))
	info.Target = target
	f, err := os.Create(target)
	if err != nil {
		return "", err
	}
	if err := p.Package(info, f); err != nil {
		f.Close()
		os.Remove(target)
		return "", fmt.Errorf("pack: %s (%s): %w", configPath, format, err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return target, nil
}

// parse reads one package definition for format, with vars substituted.
func parse(configPath string, vars map[string]string, format string) (*nfpm.Info, error) {
	raw, err := os.ReadFile(configPath)
	if err != nil {
		return nil, err
	}
	// nfpm expands placeholders in some fields only (not in contents unless
	// marked), and maps unknown names to "". Substitute here instead, all
	// fields alike, and fail on a name that has no value.
	var unknown []string
	text := placeholderRe.ReplaceAllStringFunc(string(raw), func(ph string) string {
		name := placeholderRe.FindStringSubmatch(ph)[1]
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, ph)
		}
		return v
	})
	if len(unknown) > 0 {
		return nil, fmt.Errorf("pack: %s: unknown placeholder %s; known: %s", configPath, strings.Join(unknown, ", "), strings.Join(keys(vars), ", "))
	}
	// The mapping answers nfpm's own lookups (signing passphrases) with
	// nothing: packages are not signed here, and the environment must not
	// leak into them.
	cfg, err := nfpm.ParseWithEnvMapping(strings.NewReader(text), func(string) string { return "" })
	if err != nil {
		return nil, fmt.Errorf("pack: %s: %w", configPath, err)
	}
	info, err := cfg.Get(format)
	if err != nil {
		return nil, fmt.Errorf("pack: %s (%s): %w", configPath, format, err)
	}
	// Scripts are named relative to the definition, as its readers see
	// them, not to whatever directory the build runs from.
	dir := filepath.Dir(configPath)
	for _, s := range []*string{&info.Scripts.PreInstall, &info.Scripts.PostInstall, &info.Scripts.PreRemove, &info.Scripts.PostRemove} {
		if *s != "" && !filepath.IsAbs(*s) {
			*s = filepath.Join(dir, *s)
		}
	}
	return info, nil
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
