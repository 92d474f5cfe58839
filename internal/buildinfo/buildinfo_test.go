package buildinfo

import (
	"strings"
	"testing"
)

// --version claims what the build carries and nothing else: the default
// edition no Kafka transport, the full edition the Kafka transport.
func TestVersionClaimsWhatTheBuildCarries(t *testing.T) {
	s := String()
	switch Edition {
	case "default":
		if strings.Contains(s, "Kafka") || !strings.HasSuffix(s, "default edition)") {
			t.Fatalf("default --version = %q", s)
		}
	case "full":
		if !strings.Contains(s, "full edition: Kafka transport (strict and partitioned modes)") {
			t.Fatalf("full --version = %q", s)
		}
	default:
		t.Fatalf("unknown edition %q", Edition)
	}
}
