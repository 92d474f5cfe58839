package pack

import "testing"

func TestPackageVersion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"v1.2.3-rc1", "1.2.3~rc1"},
		{"v1.2.3-rc.1-4-gabcdef0", "1.2.3~rc.1+4.gabcdef0"},
		{"v1.2.3-4-gabcdef0", "1.2.3+4.gabcdef0"},
		{"v1.2.3-4-gabcdef0-dirty", "1.2.3+4.gabcdef0.dirty"},
		{"af42757", "0.0.0+gaf42757"},
		{"af42757-dirty", "0.0.0+gaf42757.dirty"},
		{"af42757-dirty\n", "0.0.0+gaf42757.dirty"},
	} {
		got, err := PackageVersion(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("PackageVersion(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "dev", "v1.2", "release-1", "v1.2.3 extra", "AF42757"} {
		if got, err := PackageVersion(bad); err == nil {
			t.Errorf("PackageVersion(%q) = %q, want an error", bad, got)
		}
	}
}
