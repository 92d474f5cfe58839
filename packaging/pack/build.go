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

// Options says what to build and from where.
type Options struct {
	// ConfigDir holds trellara.yaml and postgresql-extension.yaml.
	ConfigDir string
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

// spec is one package to build in some formats.
type spec struct {
	config  string
	vars    map[string]string
	formats []string
}

// Build writes every package Options describes into OutDir and returns
// their paths in build order.
func Build(opts Options) ([]string, error) {
	if opts.Version == "" || opts.Maintainer == "" || opts.MTime.IsZero() {
		return nil, errors.New("pack: version, maintainer and mtime are required")
	}
	common := map[string]string{"VERSION": opts.Version, "MAINTAINER": opts.Maintainer}
	specs := []spec{{config: "trellara.yaml", vars: common, formats: []string{"deb", "rpm"}}}
	majors := make([]int, 0, len(opts.Extensions))
	for m := range opts.Extensions {
		majors = append(majors, m)
	}
	sort.Ints(majors)
	for _, m := range majors {
		vars := map[string]string{"PG_MAJOR": fmt.Sprint(m), "EXT_DIR": opts.Extensions[m]}
		for k, v := range common {
			vars[k] = v
		}
		// Debian layout only: an .rpm would need the PGDG layout
		// (/usr/pgsql-NN) and a build against PGDG's headers, neither of
		// which can be produced or tested here.
		specs = append(specs, spec{config: "postgresql-extension.yaml", vars: vars, formats: []string{"deb"}})
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range specs {
		for _, format := range s.formats {
			path, err := buildOne(filepath.Join(opts.ConfigDir, s.config), s.vars, format, opts)
			if err != nil {
				return out, err
			}
			out = append(out, path)
		}
	}
	return out, nil
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
