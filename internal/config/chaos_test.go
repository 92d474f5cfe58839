package config

import (
	"strings"
	"testing"
)

// TestChaosSection: the restart commands decode, survive Marshal, and are
// refused in production or when empty.
func TestChaosSection(t *testing.T) {
	base := readTestdata(t, "local.yml")
	c, err := Parse([]byte(base + "chaos:\n  source_restart: pg_ctl -D /d/src restart\n  target_restart: systemctl restart pg-target\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Chaos.SourceRestart != "pg_ctl -D /d/src restart" || c.Chaos.TargetRestart != "systemctl restart pg-target" {
		t.Fatalf("chaos = %+v", c.Chaos)
	}
	out, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out)
	if err != nil {
		t.Fatalf("marshalled config does not parse: %v\n%s", err, out)
	}
	if again.Chaos != c.Chaos {
		t.Errorf("round trip: %+v, want %+v", again.Chaos, c.Chaos)
	}

	for _, tc := range []struct{ name, yml, want string }{
		{"production", strings.Replace(base, "environment: development", "environment: production", 1) + "chaos:\n  source_restart: x\n", "chaos.source_restart: environment production refuses chaos commands"},
		{"empty", base + "chaos:\n  target_restart: \"\"\n", "chaos.target_restart: is empty"},
		{"unknown key", base + "chaos:\n  broker_restart: x\n", "broker_restart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
