package cli

import (
	"errors"
	"os"
	"regexp"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/verify"
)

// TestVerdictExitCodes: verify and run --verify exit through verdictExit,
// and the numbers verify.ExitCode gives are the CLI's documented ones:
// BEHIND has its own code, distinct from DIVERGED and from errors.
func TestVerdictExitCodes(t *testing.T) {
	for v, want := range map[verify.Verdict]int{
		verify.Converged: ExitOK,
		verify.Diverged:  ExitFindings,
		verify.Behind:    ExitBehind,
	} {
		got := ExitOK
		if err := verdictExit(&verify.Result{Verdict: v}); err != nil {
			var ec cli.ExitCoder
			if !errors.As(err, &ec) {
				t.Fatalf("%s: %v is not an exit code", v, err)
			}
			got = ec.ExitCode()
		}
		if got != want {
			t.Errorf("%s exits %d, want %d", v, got, want)
		}
	}
	if got := verify.ExitCode(nil, errors.New("unreachable")); got != ExitError {
		t.Errorf("verify error exits %d, want %d", got, ExitError)
	}
	if ExitBehind == ExitOK || ExitBehind == ExitFindings || ExitBehind == ExitError {
		t.Errorf("ExitBehind %d collides with another exit code", ExitBehind)
	}
}

// TestExitCodeTableDocumentsBehind: docs/CLI.md's exit-code table has a row
// for every code the CLI uses, BEHIND's included.
func TestExitCodeTableDocumentsBehind(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	for code, word := range map[int]string{ExitOK: "CONVERGED", ExitFindings: "DIVERGED", ExitError: "could not run", ExitBehind: "BEHIND"} {
		if !regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(string(rune('0'+code))) + ` \|.*` + regexp.QuoteMeta(word)).Match(doc) {
			t.Errorf("docs/CLI.md has no exit-code row | %d | ... %s", code, word)
		}
	}
}
