// Package shell renders the commands Trellara prints for an operator to
// run — fixes, recoveries, next steps — so that each one can be pasted into
// a POSIX shell exactly as printed: a config path, table or name with a
// space, a quote or any other character a shell would split, expand or
// misread is single-quoted. Every printed command that carries such a word
// is built here.
package shell

import "strings"

// Quote returns s as one POSIX shell word: unchanged when it holds only
// characters no shell treats specially, otherwise in single quotes, with
// each single quote written as '\” (close, escaped quote, reopen).
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	for _, c := range s {
		if !plain(c) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// plain reports whether c needs no quoting anywhere in a word. '=' and ':'
// are plain except at a word's start in a few shells' rarely used
// features; a leading '-' is not a shell matter.
func plain(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_-./:=@,+%", c)
}

// Command joins words into one command line, each word Quote'd.
func Command(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = Quote(w)
	}
	return strings.Join(q, " ")
}

// ConfigPlaceholder stands for the flow's configuration file in a command
// printed by code that does not know its path.
const ConfigPlaceholder = "<config file>"

// Config returns the --config argument of a printed command: the path
// quoted, or ConfigPlaceholder when it is not known ("").
func Config(path string) string {
	if path == "" {
		return ConfigPlaceholder
	}
	return Quote(path)
}

// Trellara renders `trellara <subcommand...> --config <path> <args...>`:
// the subcommand words as given, the path through Config, every argument
// after it quoted.
func Trellara(subcommand, configPath string, args ...string) string {
	s := "trellara " + subcommand + " --config " + Config(configPath)
	if len(args) > 0 {
		s += " " + Command(args...)
	}
	return s
}

// Resnapshot is the recovery for a flow whose log or slot can no longer
// continue the stream (a gap, lost or damaged log data, a consumer past
// retention): start the flow over with a full snapshot. A reseed
// (`trellara reseed`) re-copies tables only while the stream continues:
// its watermarks travel the stream, so it cannot bridge a gap.
func Resnapshot(configPath string) string {
	return "start the flow over with a full snapshot: `" +
		Trellara("run", configPath, "--cleanup") + "` (drops the slot, publication and local state the flow created, " +
		"and empties the target tables its snapshot copied into), then `" + Trellara("run", configPath, "--local") + "`" +
		" (with source.owns_slot: false, set it to true for this recovery; --cleanup then drops that slot and publication too)"
}

// ResnapshotExtension is Resnapshot for a flow with source.capture:
// extension: the cleanup leaves the decoder's slot (the server's), and the
// next run takes a new initial snapshot through the extension's stream.
func ResnapshotExtension(configPath string) string {
	return "start the flow over with a new initial snapshot: `" + Trellara("run", configPath, "--cleanup") +
		"` (removes the flow's local state and its state on the target, and empties the target tables its snapshot copied into; " +
		"the extension's decoder slot stays), then `" + Trellara("run", configPath, "--local", "--verify") + "`"
}
