package buildinfo

import (
	"strings"
	"testing"
)

// --version claims what the build carries and nothing else: the default
// edition no Kafka transport and no lake, the full edition both.
func TestVersionClaimsWhatTheBuildCarries(t *testing.T) {
	s := String()
	switch Edition {
	case "default":
		if strings.Contains(s, "Kafka") || strings.Contains(s, "Iceberg") || !strings.HasSuffix(s, "default edition)") {
			t.Fatalf("default --version = %q", s)
		}
	case "full":
		if !strings.Contains(s, "full edition: Kafka transport (strict and partitioned modes)") || !strings.Contains(s, "Iceberg lake") {
			t.Fatalf("full --version = %q", s)
		}
	default:
		t.Fatalf("unknown edition %q", Edition)
	}
}
