package importrules

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/trellara/trellara/"

// dataPath are the package patterns of the data path (the same list as
// the session hook's: .../shared/hooks/before-stop).
var dataPath = []string{"./capture", "./relay/...", "./sidecar", "./segmentlog/...", "./transport/...", "./apply", "./consumer/..."}

// forbidden are what no data-path package may depend on.
var forbidden = []string{"internal/config", "internal/cli", "internal/flow"}

// envelopeMay is all envelope may depend on inside the module.
var envelopeMay = []string{"envelope/envelopepb", "lsn"}

// pgcatalogMay is all pgcatalog (the reading of table definitions) may
// depend on inside the module: it is a leaf beside pgname.
var pgcatalogMay = []string{"pgname"}

// catalogReaders must read a source's table definitions through pgcatalog
// (one reading, one identity gate), not through one another.
var catalogReaders = []string{"apply", "internal/flow"}

type graph map[string][]string // package (module-relative) → its imports

func goList(t *testing.T, tags string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-tags=" + tags}, args...)...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -tags=%q %s: %v\n%s", tags, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// load returns the roots the patterns name and the import graph of
// everything they depend on, module packages only.
func load(t *testing.T, tags string, patterns ...string) ([]string, graph) {
	t.Helper()
	var roots []string
	for _, l := range strings.Fields(goList(t, tags, append([]string{"-f", "{{.ImportPath}}"}, patterns...)...)) {
		roots = append(roots, strings.TrimPrefix(l, module))
	}
	g := graph{}
	out := goList(t, tags, append([]string{"-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, patterns...)...)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		var imps []string
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				imps = append(imps, strings.TrimPrefix(imp, module))
			}
		}
		g[strings.TrimPrefix(f[0], module)] = imps
	}
	return roots, g
}

// path is the import chain from root to the first package bad accepts
// (breadth first: the shortest), or nil.
func (g graph) path(root string, bad func(string) bool) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if _, seen := prev[imp]; seen {
				continue
			}
			prev[imp] = p
			if bad(imp) {
				chain := []string{imp}
				for q := p; q != ""; q = prev[q] {
					chain = append([]string{q}, chain...)
				}
				return chain
			}
			queue = append(queue, imp)
		}
	}
	return nil
}

func TestImportRules(t *testing.T) {
	for _, tags := range []string{"", "full"} {
		t.Run("tags="+tags, func(t *testing.T) {
			roots, g := load(t, tags, append(slices.Clone(dataPath), "./envelope", "./pgcatalog", "./internal/flow")...)
			if len(roots) < len(dataPath) {
				t.Fatalf("go list named %d packages for %d patterns: %v", len(roots), len(dataPath), roots)
			}
			for _, p := range []string{"apply", "envelope", "pgcatalog", "internal/flow"} {
				if _, ok := g[p]; !ok {
					t.Fatalf("go list -deps did not list %s", p)
				}
			}
			for _, r := range roots {
				if r == "envelope" || r == "pgcatalog" || r == "internal/flow" {
					continue
				}
				if c := g.path(r, func(p string) bool { return slices.Contains(forbidden, p) }); c != nil {
					t.Errorf("%s depends on %s (the data path takes its own Options; only internal/flow maps config into them): %s",
						r, c[len(c)-1], strings.Join(c, " → "))
				}
			}
			if c := g.path("apply", func(p string) bool { return p == "capture" }); c != nil {
				t.Errorf("apply depends on capture (they meet only in envelope and transport): %s", strings.Join(c, " → "))
			}
			if c := g.path("envelope", func(p string) bool { return !slices.Contains(envelopeMay, p) }); c != nil {
				t.Errorf("envelope depends on %s (it may depend on nothing in the module but %s): %s",
					c[len(c)-1], strings.Join(envelopeMay, " and "), strings.Join(c, " → "))
			}
			if c := g.path("pgcatalog", func(p string) bool { return !slices.Contains(pgcatalogMay, p) }); c != nil {
				t.Errorf("pgcatalog depends on %s (it may depend on nothing in the module but %s): %s",
					c[len(c)-1], strings.Join(pgcatalogMay, " and "), strings.Join(c, " → "))
			}
			for _, r := range catalogReaders {
				if !slices.Contains(g[r], "pgcatalog") {
					t.Errorf("%s does not import pgcatalog: its table definitions must come from the one catalog reading", r)
				}
			}
		})
	}
}

// TestCatalogReadingLivesInPgcatalog: no package but pgcatalog defines the
// reading of table definitions (the functions apply once held), so a
// second copy cannot grow back beside the first.
func TestCatalogReadingLivesInPgcatalog(t *testing.T) {
	out := goList(t, "", "-f", "{{.ImportPath}} {{.Dir}} {{join .GoFiles \" \"}}", "./...")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] == module+"pgcatalog" {
			continue
		}
		for _, name := range f[2:] {
			src, err := os.ReadFile(filepath.Join(f[1], name))
			if err != nil {
				t.Fatal(err)
			}
			for _, def := range []string{"type TableDef ", "type ColumnDef ", "func SourceTables(", "func readTableDef(", "func leafPartitions(", "func uniqueKeys("} {
				if bytes.Contains(src, []byte("\n"+def)) {
					t.Errorf("%s/%s defines %q: table definitions are read by pgcatalog only", f[0], name, strings.TrimSpace(def))
				}
			}
		}
	}
}

// TestReadmeLayoutMatchesTheTree: every package directory of the module
// at the top level and under internal/ has a line in the README's layout
// table, and every directory the table names exists. (Mutation tried:
// deleting the internal/lake line from the table: red, naming it.)
func TestReadmeLayoutMatchesTheTree(t *testing.T) {
	root := moduleRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "## Layout\n\n```\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section with a code block")
	}
	table, _, _ := strings.Cut(after, "```")
	named := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		first, _, _ := strings.Cut(line, " ")
		for _, d := range strings.Split(strings.TrimSuffix(first, ","), ",") {
			if d = strings.TrimSuffix(strings.TrimSpace(d), "/"); d != "" && !strings.Contains(d, "*") {
				named[d] = true
			}
		}
		// "cmd/trellara, cmd/trellara-check, ..." names several.
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "cmd/") {
				named[strings.TrimSuffix(f, ",")] = true
			}
		}
	}
	for d := range named {
		if _, err := os.Stat(filepath.Join(root, d)); err != nil {
			t.Errorf("README layout names %s, which is not in the tree", d)
		}
	}
	// The tree is what git tracks: build outputs (bin/, dist/, .cache/)
	// are not part of it.
	ls := exec.Command("git", "ls-files")
	ls.Dir = root
	files, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	seen := map[string]bool{}
	var dirs []string
	for _, f := range strings.Split(string(files), "\n") {
		parts := strings.Split(f, "/")
		d := ""
		switch {
		case len(parts) >= 3 && parts[0] == "internal":
			d = parts[0] + "/" + parts[1]
		case len(parts) >= 2 && parts[0] != "internal" && parts[0] != "docs" && !strings.HasPrefix(parts[0], "."):
			d = parts[0]
		}
		if d != "" && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	under := func(d string) bool { // cmd: named by its binaries
		for n := range named {
			if strings.HasPrefix(n, d+"/") {
				return true
			}
		}
		return false
	}
	for _, d := range dirs {
		if d = strings.TrimPrefix(d, "./"); !named[d] && !under(d) {
			t.Errorf("%s is in the tree but has no line in the README's layout table", d)
		}
	}
}

// moduleRoot is the module's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(root))
}
