package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// docSections splits docs/CLI.md's public-command part into its "### name"
// sections (a section may name two commands, "### fleet, lake").
func docSections(t *testing.T) (public map[string]string, all string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "CLI.md"))
	if err != nil {
		t.Fatal(err)
	}
	all = string(b)
	start := strings.Index(all, "## trellara (public commands")
	end := strings.Index(all, "## Hidden commands")
	if start < 0 || end < start {
		t.Fatal("docs/CLI.md lost its public and hidden command sections")
	}
	public = map[string]string{}
	parts := regexp.MustCompile(`(?m)^### (.+)$`).Split(all[start:end], -1)
	names := regexp.MustCompile(`(?m)^### (.+)$`).FindAllStringSubmatch(all[start:end], -1)
	for i, n := range names {
		for _, name := range strings.Split(n[1], ",") {
			public[strings.TrimSpace(name)] = parts[i+1]
		}
	}
	return public, all
}

// flagNames lists a command's long flag names (help excluded).
func flagNames(flags []cli.Flag) []string {
	var out []string
	for _, f := range flags {
		n := f.Names()[0]
		if n != "help" {
			out = append(out, n)
		}
	}
	return out
}

// docs/CLI.md and --help agree: the same public commands, every flag of
// each documented where its command is, every flag a synopsis line names
// exists, and every --role the help lists is documented.
func TestHelpAndDocsAgree(t *testing.T) {
	public, all := docSections(t)
	var helpNames, docNames []string
	for _, c := range App().Commands {
		if !c.Hidden {
			helpNames = append(helpNames, c.Name)
		}
	}
	for n := range public {
		docNames = append(docNames, n)
	}
	sort.Strings(helpNames)
	sort.Strings(docNames)
	if strings.Join(helpNames, " ") != strings.Join(docNames, " ") {
		t.Errorf("--help lists %v, docs/CLI.md documents %v as public", helpNames, docNames)
	}

	synopsis := regexp.MustCompile("(?m)trellara ([a-z-]+(?: [a-z-]+)?)([^`\\n]*)")
	for _, c := range App().Commands {
		cmds := []*cli.Command{c}
		cmds = append(cmds, c.Subcommands...)
		for _, cmd := range cmds {
			name := c.Name
			if cmd != c {
				name = c.Name + " " + cmd.Name
			}
			// Where the command is documented: its section, or its row in
			// the hidden-command table.
			doc := public[c.Name]
			if c.Hidden {
				for _, line := range strings.Split(all, "\n") {
					if strings.HasPrefix(line, "| `"+name) {
						doc += line + "\n"
					}
				}
			}
			if strings.Contains(cmd.Usage, "not implemented yet") {
				if !strings.Contains(all, "`"+name+"`") {
					t.Errorf("%s (not implemented yet) is not named in docs/CLI.md", name)
				}
				continue
			}
			if doc == "" {
				t.Errorf("%s is not documented in docs/CLI.md", name)
				continue
			}
			for _, f := range flagNames(cmd.Flags) {
				if !regexp.MustCompile(`--` + regexp.QuoteMeta(f) + `\b`).MatchString(doc) {
					t.Errorf("%s --%s (in --help) is not documented in docs/CLI.md", name, f)
				}
			}
			// Flags a synopsis in the section names exist on the command.
			for _, m := range synopsis.FindAllStringSubmatch(doc, -1) {
				if m[1] != name {
					continue
				}
				have := map[string]bool{"help": true, "version": true}
				for _, f := range cmd.Flags {
					for _, n := range f.Names() {
						have[n] = true
					}
				}
				for _, fm := range regexp.MustCompile(`--([a-z][a-z-]*)`).FindAllStringSubmatch(m[2], -1) {
					if !have[fm[1]] {
						t.Errorf("docs/CLI.md shows `trellara %s ... --%s`, which --help does not have", name, fm[1])
					}
				}
			}
		}
	}

	// Every --role the help lists is documented.
	out, _, _ := run(t, "run", "--help")
	m := regexp.MustCompile(`--role value\s+service role: (.*)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("run --help has no --role line:\n%s", out)
	}
	docRoles := regexp.MustCompile("--role ([a-z|]+)").FindStringSubmatch(public["run"])
	if docRoles == nil {
		t.Fatal("docs/CLI.md does not document run --role")
	}
	for _, role := range regexp.MustCompile(`\b(all|relay|applier|sidecar)\b \(`).FindAllStringSubmatch(m[1], -1) {
		if !strings.Contains("|"+docRoles[1]+"|", "|"+role[1]+"|") {
			t.Errorf("run --help lists --role %s; docs/CLI.md documents --role %s", role[1], docRoles[1])
		}
	}
}
