//go:build !full

package cli

import (
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/buildinfo"
)

// The default edition has no fleet, lake or fanin: each says so, exits 2
// and names the binary that has it.
func TestFleetLakeFaninNameTrellaraFull(t *testing.T) {
	for _, args := range [][]string{{"fleet", "scorecard"}, {"fleet", "run"}, {"lake", "epoch"}, {"fanin", "verify"}} {
		_, errOut, code := run(t, args...)
		if code != ExitError || !strings.Contains(errOut, buildinfo.ErrNotImplemented.Error()+": "+args[0]) || !strings.Contains(errOut, "trellara-full") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}
