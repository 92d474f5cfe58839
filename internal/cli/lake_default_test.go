//go:build !full

package cli

import (
	"strings"
	"testing"
)

// The default edition links no fleet, lake or fanin: each says so, exits 2
// and prints the same command for the binary that has it.
func TestFleetLakeFaninNameTrellaraFull(t *testing.T) {
	for _, args := range [][]string{{"fleet", "scorecard"}, {"fleet", "run"}, {"lake", "epoch"}, {"fanin", "verify"}} {
		_, errOut, code := run(t, append(args, "--config", "fleet.yml")...)
		want := "fix: trellara-full " + strings.Join(args, " ") + " --config fleet.yml"
		if code != ExitError || !strings.Contains(errOut, errFullEdition.Error()) || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}
