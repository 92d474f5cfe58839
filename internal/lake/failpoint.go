//go:build full

package lake

import (
	"os"
	"strings"
	"syscall"

	"github.com/trellara/trellara/internal/config"
)

var failpointEnv = os.Getenv("TRELLARA_LAKE_FAILPOINT")

// failpoint reports whether the named failpoint is armed. TRELLARA_LAKE_FAILPOINT
// names one; "NAME:kill" SIGKILLs the process there instead (the crash
// tests use it to die between a data commit and the epoch record).
func failpoint(name string) bool {
	v := failpointEnv
	if v == "" {
		return false
	}
	n, mode, _ := strings.Cut(v, ":")
	if n != name {
		return false
	}
	if mode == "kill" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return true
}

// scrubText is err's text with url's secrets removed.
func scrubText(err error, url string) string { return scrubConn(err, url).Error() }

func scrubConn(err error, url string) error { return config.ScrubConnError(err, url) }
