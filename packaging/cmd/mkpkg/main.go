// Command mkpkg builds Trellara's .deb and .rpm packages into dist/ with
// the nfpm library, from the package definitions nfpm.yaml and
// nfpm-extension.yaml at the repository root. `make packages` runs it from
// the root; see packaging/README.md.
//
//	mkpkg -describe "$(git describe --tags --always --dirty)" -mtime UNIX \
//	      [-ext 15=DIR ...] [-out dist] [-root .]
//	mkpkg -print-version -describe DESCRIBE
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/trellara/trellara/internal/release/pack"
)

// extFlags collects repeated -ext MAJOR=DIR.
type extFlags map[int]string

func (e extFlags) String() string { return fmt.Sprint(map[int]string(e)) }

func (e extFlags) Set(s string) error {
	major, dir, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(major)
	if !ok || err != nil || n < 10 || dir == "" {
		return fmt.Errorf("want MAJOR=DIR (e.g. 15=.cache/build/ext/pg15), got %q", s)
	}
	e[n] = dir
	return nil
}

func main() {
	exts := extFlags{}
	describe := flag.String("describe", "", "git describe --tags --always --dirty output")
	mtime := flag.Int64("mtime", 0, "modification time stamped on packaged files (unix seconds; the commit time)")
	maintainer := flag.String("maintainer", "Trellara maintainers <maintainers@trellara.invalid>", "Maintainer/Packager field")
	root := flag.String("root", ".", "repository root: holds nfpm.yaml and nfpm-extension.yaml; relative source paths in them are resolved from the working directory")
	out := flag.String("out", "dist", "output directory")
	flag.Var(exts, "ext", "MAJOR=DIR: package the extension built for that PostgreSQL major in DIR (repeatable)")
	printVersion := flag.Bool("print-version", false, "print the package version derived from -describe and exit")
	flag.Parse()

	version, err := pack.PackageVersion(*describe)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkpkg:", err)
		os.Exit(2)
	}
	if *printVersion {
		fmt.Println(version)
		return
	}
	if *mtime <= 0 {
		fmt.Fprintf(os.Stderr, "mkpkg: -mtime is required: the commit time in unix seconds (git log -1 --format=%%ct)\n")
		os.Exit(2)
	}
	paths, err := pack.Build(pack.Options{
		Root:       *root,
		Version:    version,
		Maintainer: *maintainer,
		MTime:      time.Unix(*mtime, 0).UTC(),
		Extensions: exts,
		OutDir:     *out,
	})
	for _, p := range paths {
		fmt.Println(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkpkg:", err)
		os.Exit(1)
	}
}
