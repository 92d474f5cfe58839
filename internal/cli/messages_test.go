package cli

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the module root, relative to this package.
var repoRoot = filepath.Join("..", "..")

// scan calls fn for every line of the repository's non-test Go sources and
// of docs/ and README.md, with the file's path relative to the root.
func scan(t *testing.T, fn func(path string, n int, line string)) {
	t.Helper()
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", "bin", "dist", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		inDocs := strings.HasPrefix(rel, "docs"+string(filepath.Separator)) || rel == "README.md"
		goSource := strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")
		if !inDocs && !goSource {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			fn(rel, n, sc.Text())
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// reseedMention is `trellara reseed` with the words after it, up to the
// end of a quoted command.
var reseedMention = regexp.MustCompile("trellara reseed((?: +[^ `'\"]+)*)")

// Every message, comment or document that sends someone to `trellara
// reseed` names a working command: reseed is implemented (not App's
// notImplemented), and every flag the mention passes is one of its flags.
func TestEveryReseedMentionNamesAWorkingCommand(t *testing.T) {
	cmd := App().Command("reseed")
	if cmd == nil {
		t.Fatal("the reseed command is missing")
	}
	flags := map[string]bool{}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			flags["--"+n] = true
		}
	}
	files, mentions := 0, 0
	scan(t, func(path string, n int, line string) {
		if n == 1 {
			files++
		}
		for _, m := range reseedMention.FindAllStringSubmatch(line, -1) {
			mentions++
			for _, w := range strings.Fields(m[1]) {
				if name, _, _ := strings.Cut(w, "="); strings.HasPrefix(name, "--") && !flags[name] {
					t.Errorf("%s:%d names `trellara reseed %s`: reseed has no flag %s", path, n, strings.TrimSpace(m[1]), name)
				}
			}
		}
	})
	if files < 100 {
		t.Fatalf("scanned only %d files: the walk did not reach the sources", files)
	}
	if mentions == 0 {
		t.Fatal("nothing names `trellara reseed`: the repair-plan and docs should")
	}
	// A config that does not exist: reseed fails on the config, not as a
	// command that is not implemented, and --table is required.
	if _, errOut, code := run(t, "reseed", "--config", "x.yml", "--table", "public.t"); code == ExitOK || strings.Contains(errOut, "not implemented") ||
		!strings.Contains(errOut, "x.yml") {
		t.Fatalf("reseed with a missing config: exit %d, %s", code, errOut)
	}
	if _, errOut, code := run(t, "reseed", "--config", "x.yml"); code != ExitError || !strings.Contains(errOut, "table") {
		t.Fatalf("reseed without --table: exit %d, %s", code, errOut)
	}
}

// printedCommand finds a suggested command that splices a config path,
// table or output path into its text unquoted (a format verb or a string
// concatenation right after the flag). Such commands are built with
// internal/shell, which quotes each word.
var printedCommand = regexp.MustCompile(`--(config|table|output)\s*(%[sqv]|"\s*\+)`)

func TestPrintedCommandsAreBuiltQuoted(t *testing.T) {
	scan(t, func(path string, n int, line string) {
		if !strings.HasSuffix(path, ".go") || strings.HasPrefix(path, filepath.Join("internal", "shell")) {
			return
		}
		if printedCommand.MatchString(line) {
			t.Errorf("%s:%d builds a command with an unquoted word; use internal/shell: %s", path, n, strings.TrimSpace(line))
		}
	})
}

// The command `trellara init` tells the user to run next reads back, in a
// real shell, as the path it wrote — with a space and a quote in it.
func TestInitNextStepQuotesThePath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my flows")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "it's.yml")
	out, errOut, code := run(t, "init", "--table", "public.sales", "--flow", "sales", "--output", path)
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	_, next, ok := strings.Cut(out, "next: ")
	if !ok {
		t.Fatalf("init printed no next step:\n%s", out)
	}
	next = strings.TrimSpace(next)
	// Let a real shell split the printed command (printf stands in for
	// trellara) and compare the words it made.
	words, err := exec.Command("/bin/sh", "-c", `printf '%s\0' `+strings.TrimPrefix(next, "trellara ")).Output()
	if err != nil {
		t.Fatalf("sh could not parse %q: %v", next, err)
	}
	got := strings.Split(strings.TrimSuffix(string(words), "\x00"), "\x00")
	if want := []string{"check", "--config", path, "--format", "text"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the shell reads %q as %q, want %q", next, got, want)
	}
}

// verify --row-hash takes auto or sql, and names both when given anything
// else, before it opens the config.
func TestVerifyRowHashFlag(t *testing.T) {
	if _, errOut, code := run(t, "verify", "--config", "x.yml", "--row-hash", "c"); code != ExitError || !strings.Contains(errOut, "use auto (the default) or sql") {
		t.Fatalf("verify --row-hash c: exit %d, %s", code, errOut)
	}
	if _, errOut, code := run(t, "verify", "--config", "x.yml", "--row-hash", "sql"); code == ExitOK || strings.Contains(errOut, "row-hash") || !strings.Contains(errOut, "x.yml") {
		t.Fatalf("verify --row-hash sql with a missing config: exit %d, %s", code, errOut)
	}
}
