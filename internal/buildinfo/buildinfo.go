// Package buildinfo identifies a Trellara binary: its version, commit and
// edition. The Makefile stamps Version and Commit at link time; every binary
// (trellara, trellara-full, trellara-check) prints the same string through
// String, and the small grader links nothing heavier than this package.
package buildinfo

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
)

// ErrNotImplemented is wrapped by every refusal of a feature this build does
// not have: the placeholder commands, transport.kafka outside the full
// edition, partitioned apply. Callers test it with errors.Is, never by the
// text; the CLI exits 2 (could not run) for it.
var ErrNotImplemented = errors.New("not implemented yet")

// Version and Commit are stamped at link time (-ldflags -X).
var (
	Version = "dev"
	Commit  = ""
)

// Edition names the build: "default" or "full" (set by the full build tag).
var Edition = "default"

// Carries lists what this build has that the default edition does not;
// the full build tag sets it. --version names each.
var Carries []string

// String is what --version prints after the program name.
func String() string {
	if len(Carries) == 0 {
		return fmt.Sprintf("%s (commit %s, %s edition)", Version, CommitID(), Edition)
	}
	return fmt.Sprintf("%s (commit %s, %s edition: %s)", Version, CommitID(), Edition, strings.Join(Carries, ", "))
}

// CommitID is the stamped commit, else the one the Go toolchain recorded,
// else "unknown".
func CommitID() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return s.Value[:12]
			}
		}
	}
	return "unknown"
}
