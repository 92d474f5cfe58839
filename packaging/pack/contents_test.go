package pack

import (
	"os"
	"path/filepath"
	"testing"
)

// The deb and the rpm ship the monitoring files, from sources that exist
// (paths in the package definition are relative to the repository root).
func TestPackageShipsMonitoring(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/usr/share/trellara/prometheus/trellara-alerts.yml":  "packaging/prometheus/trellara-alerts.yml",
		"/usr/share/trellara/grafana/trellara-dashboard.json": "packaging/grafana/trellara-dashboard.json",
	}
	for _, format := range []string{"deb", "rpm"} {
		info, err := parse(filepath.Join(root, "packaging/nfpm/trellara.yaml"),
			map[string]string{"VERSION": "1.2.3", "MAINTAINER": "test <test@example.invalid>"}, format)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, c := range info.Contents {
			got[c.Destination] = c.Source
		}
		for dst, src := range want {
			if got[dst] != src {
				t.Errorf("%s: %s comes from %q, want %s", format, dst, got[dst], src)
			}
			if _, err := os.Stat(filepath.Join(root, src)); err != nil {
				t.Errorf("%s: %v", format, err)
			}
		}
	}
}
