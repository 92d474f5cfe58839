package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// installation is one directory holding a runnable postgres server.
type installation struct {
	binDir string
	major  int
}

var (
	findOnce  sync.Once
	foundAll  []installation
	findNotes []string
)

// versionRe matches the major of "postgres (PostgreSQL) 15.20 (Debian ...)"
// and of development builds such as "18beta1".
var versionRe = regexp.MustCompile(`\(PostgreSQL\)\s+(\d+)`)

// installations lists every usable server once per process, in preference
// order: TRELLARA_PG_BIN, pg_config --bindir, then /usr/lib/postgresql/*/bin by
// descending major. Duplicates (pg_config usually points into
// /usr/lib/postgresql) are dropped.
func installations() ([]installation, []string) {
	findOnce.Do(func() {
		var dirs []string
		if d := os.Getenv("TRELLARA_PG_BIN"); d != "" {
			dirs = append(dirs, d)
		}
		if pc, err := exec.LookPath("pg_config"); err == nil {
			out, err := exec.Command(pc, "--bindir").Output()
			if err == nil {
				dirs = append(dirs, strings.TrimSpace(string(out)))
			} else {
				findNotes = append(findNotes, fmt.Sprintf("%s --bindir: %v", pc, err))
			}
		}
		globbed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		var system []installation
		for _, d := range globbed {
			if in, ok := probe(d); ok {
				system = append(system, in)
			}
		}
		sort.SliceStable(system, func(i, j int) bool { return system[i].major > system[j].major })

		seen := map[string]bool{}
		add := func(in installation) {
			key, err := filepath.EvalSymlinks(in.binDir)
			if err != nil {
				key = in.binDir
			}
			if !seen[key] {
				seen[key] = true
				foundAll = append(foundAll, in)
			}
		}
		for _, d := range dirs {
			if in, ok := probe(d); ok {
				add(in)
			} else {
				findNotes = append(findNotes, "no runnable postgres+initdb in "+d)
			}
		}
		for _, in := range system {
			add(in)
		}
	})
	return foundAll, findNotes
}

// probe reports whether dir has initdb and postgres and which major they are.
func probe(dir string) (installation, bool) {
	for _, b := range []string{"initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
			return installation{}, false
		}
	}
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return installation{}, false
	}
	m := versionRe.FindSubmatch(out)
	if m == nil {
		return installation{}, false
	}
	major, err := strconv.Atoi(string(m[1]))
	if err != nil {
		return installation{}, false
	}
	return installation{binDir: dir, major: major}, true
}

// pick returns the preferred installation, or the first with the requested
// major when major > 0.
func pick(major int) (installation, error) {
	all, notes := installations()
	if len(all) == 0 {
		return installation{}, fmt.Errorf("pgtest: no PostgreSQL server binaries found (set TRELLARA_PG_BIN, put pg_config on PATH, or install postgresql); %s",
			strings.Join(notes, "; "))
	}
	if major == 0 {
		return all[0], nil
	}
	var have []string
	for _, in := range all {
		if in.major == major {
			return in, nil
		}
		have = append(have, fmt.Sprintf("%d (%s)", in.major, in.binDir))
	}
	return installation{}, fmt.Errorf("%w: major %d requested, found %s", errMajorMissing, major, strings.Join(have, ", "))
}
