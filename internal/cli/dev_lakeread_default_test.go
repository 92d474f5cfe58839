//go:build !full

package cli

import (
	"strings"
	"testing"
)

// The default edition links no lake reader: dev lake-read exits 2 naming
// trellara-full.
func TestDevLakeReadNamesTrellaraFull(t *testing.T) {
	_, errOut, code := run(t, "dev", "lake-read", "--config", "fleet.yml")
	if code != ExitError || !strings.Contains(errOut, "needs trellara-full") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}
