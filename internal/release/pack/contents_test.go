package pack

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// repoRoot is where the package definitions live.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The deb and the rpm ship the monitoring files, from sources that exist
// (paths in the package definition are relative to the repository root).
func TestPackageShipsMonitoring(t *testing.T) {
	root := repoRoot(t)
	want := map[string]string{
		"/usr/share/trellara/prometheus/trellara-alerts.yml":  "packaging/prometheus/trellara-alerts.yml",
		"/usr/share/trellara/grafana/trellara-dashboard.json": "packaging/grafana/trellara-dashboard.json",
	}
	for _, format := range formats {
		info, err := parse(filepath.Join(root, mainDefinition),
			map[string]string{"VERSION": "1.2.3", "MAINTAINER": "test <test@example.invalid>"}, format)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, c := range info.Contents {
			got[c.Destination] = c.Source
		}
		for dst, src := range want {
			if got[dst] != src {
				t.Errorf("%s: %s comes from %q, want %s", format, dst, got[dst], src)
			}
			if _, err := os.Stat(filepath.Join(root, src)); err != nil {
				t.Errorf("%s: %v", format, err)
			}
		}
	}
}

// testOptions are Options for one extension build in dir.
func testOptions(major int, dir string) Options {
	return Options{
		Version:    "1.2.3",
		Maintainer: "test <test@example.invalid>",
		MTime:      time.Unix(1700000000, 0).UTC(),
		Extensions: map[int]string{major: dir},
	}
}

// The extension's .deb is Debian's postgresql-NN-trellara with Debian's
// paths, its .rpm PGDG's postgresqlNN-trellara with PGDG's, both from the
// one definition and with the same files.
func TestExtensionPackagesPerFormat(t *testing.T) {
	root := repoRoot(t)
	const ext = "/build/ext/pg15"
	type want struct {
		name    string
		depends []string
		files   map[string]string // destination -> source
	}
	wants := map[string]want{
		"deb": {
			name:    "postgresql-15-trellara",
			depends: []string{"postgresql-15", "libc6 (>= 2.33)"},
			files: map[string]string{
				"/usr/lib/postgresql/15/lib/trellara.so":              ext + "/trellara.so",
				"/usr/share/postgresql/15/extension/trellara.control": ext + "/trellara.control",
				"/usr/share/postgresql/15/extension/":                 ext + "/trellara--*.sql",
			},
		},
		"rpm": {
			name:    "postgresql15-trellara",
			depends: []string{"postgresql15-server", "glibc >= 2.33"},
			files: map[string]string{
				"/usr/pgsql-15/lib/trellara.so":                  ext + "/trellara.so",
				"/usr/pgsql-15/share/extension/trellara.control": ext + "/trellara.control",
				"/usr/pgsql-15/share/extension/":                 ext + "/trellara--*.sql",
			},
		},
	}
	sources := map[string][]string{}
	for _, format := range formats {
		w, ok := wants[format]
		if !ok {
			t.Fatalf("no expectation for format %s", format)
		}
		vars, err := extensionVars(testOptions(15, ext), 15, format)
		if err != nil {
			t.Fatal(err)
		}
		info, err := parse(filepath.Join(root, extensionDefinition), vars, format)
		if err != nil {
			t.Fatal(err)
		}
		if info.Name != w.name {
			t.Errorf("%s: package name %q, want %q", format, info.Name, w.name)
		}
		if strings.Join(info.Depends, ",") != strings.Join(w.depends, ",") {
			t.Errorf("%s: depends %q, want %q", format, info.Depends, w.depends)
		}
		if !strings.Contains(info.Description, "PostgreSQL 15.") {
			t.Errorf("%s: description does not name the major: %q", format, info.Description)
		}
		got := map[string]string{}
		for _, c := range info.Contents {
			got[c.Destination] = c.Source
			sources[format] = append(sources[format], c.Source)
		}
		for dst, src := range w.files {
			if got[dst] != src {
				t.Errorf("%s: %s comes from %q, want %s", format, dst, got[dst], src)
			}
		}
		if len(got) != len(w.files) {
			t.Errorf("%s: %d entries %v, want %d", format, len(got), got, len(w.files))
		}
		sort.Strings(sources[format])
	}
	if strings.Join(sources["deb"], " ") != strings.Join(sources["rpm"], " ") {
		t.Errorf("the .deb ships %v, the .rpm %v: want the same files", sources["deb"], sources["rpm"])
	}
}

// Build writes the extension in every format under the distributions'
// file names, from files that stand in for one major's build.
func TestBuildExtensionPackages(t *testing.T) {
	root := repoRoot(t)
	ext := t.TempDir()
	for name, body := range map[string]string{
		"trellara.so":       "\x7fELF stand-in",
		"trellara.control":  "default_version = '0.1'\n",
		"trellara--0.1.sql": "SELECT 1;\n",
		"trellara--0.2.sql": "SELECT 2;\n",
	} {
		if err := os.WriteFile(filepath.Join(ext, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	opts := testOptions(17, ext)
	opts.Root = root
	opts.OutDir = out
	var paths []string
	for _, format := range formats {
		vars, err := extensionVars(opts, 17, format)
		if err != nil {
			t.Fatal(err)
		}
		p, err := buildOne(filepath.Join(root, extensionDefinition), vars, format, opts)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Base(p))
	}
	want := []string{"postgresql-17-trellara_1.2.3-1_amd64.deb", "postgresql17-trellara-1.2.3-1.x86_64.rpm"}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Fatalf("built %v, want %v", paths, want)
	}
	for _, p := range want {
		st, err := os.Stat(filepath.Join(out, p))
		if err != nil {
			t.Error(err)
		} else if st.Size() == 0 {
			t.Errorf("%s is empty", p)
		}
	}
}

func TestPGPackageRefusesUnknownFormat(t *testing.T) {
	if _, err := pgPackage("apk", 15); err == nil || !strings.Contains(err.Error(), `"apk"`) {
		t.Fatalf("pgPackage(apk) = %v, want an error naming the format", err)
	}
}
