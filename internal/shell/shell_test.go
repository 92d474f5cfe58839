package shell

import (
	"os/exec"
	"strings"
	"testing"
)

// words runs line through /bin/sh and returns the words the shell made of
// it after the command name (printf ends each with a NUL, so a word may
// hold a newline).
func words(t *testing.T, line string) []string {
	t.Helper()
	// The printed command's first word is replaced by printf, so the shell
	// parses exactly the arguments that were printed.
	_, rest, _ := strings.Cut(line, " ")
	out, err := exec.Command("/bin/sh", "-c", `printf '%s\0' `+rest).Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", rest, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// Every word comes back from a real shell exactly as it went in.
func TestQuoteRoundTripsThroughSh(t *testing.T) {
	for _, s := range []string{
		"/etc/trellara/sales.yml", "my dir/it's a \"flow\".yml", "'", "''", `a\b`, "$HOME", "`id`", "$(id)",
		"a;b", "a|b", "a&b", "a>b", "*", "?", "[ab]", "~", "#x", "a b\tc", "line\nbreak", "é ü", `public."Sales"`, "-x", "=x",
	} {
		got := words(t, "printf "+Quote(s))
		if len(got) != 1 || got[0] != s {
			t.Errorf("Quote(%q) = %s: the shell read %q", s, Quote(s), got)
		}
	}
	if Quote("/etc/trellara/sales.yml") != "/etc/trellara/sales.yml" {
		t.Error("a plain path was quoted")
	}
}

// The printed commands carry a config path with a space and a quote as one
// word, and name only what exists today.
func TestPrintedCommandsQuoteTheConfigPath(t *testing.T) {
	const path = "/srv/my flows/it's.yml"
	got := words(t, Trellara("repair-plan", path, "--table", `public."Sales"`))
	want := []string{"repair-plan", "--config", path, "--table", `public."Sales"`}
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("shell read %q, want %q", got, want)
	}
	r := Resnapshot(path)
	for _, cmd := range []string{Trellara("run", path, "--cleanup"), Trellara("run", path, "--local")} {
		if !strings.Contains(r, cmd) {
			t.Errorf("Resnapshot does not print %s: %s", cmd, r)
		}
		if got := words(t, cmd); len(got) != 4 || got[2] != path {
			t.Errorf("%s: the shell read %q", cmd, got)
		}
	}
	if strings.Contains(r, "trellara reseed") {
		t.Errorf("Resnapshot names a command that does not exist: %s", r)
	}
	if got := Trellara("status", "", "--view", "quarantine"); got != "trellara status --config <config file> --view quarantine" {
		t.Errorf("unknown config path: %s", got)
	}
}

func TestQuoteForms(t *testing.T) {
	for in, want := range map[string]string{
		"public.sales":      "public.sales",
		"/etc/trellara.yml": "/etc/trellara.yml",
		`public."My Table"`: `'public."My Table"'`,
		"it's":              `'it'\''s'`,
		"":                  "''",
		"a;rm -rf /":        "'a;rm -rf /'",
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}
