package pack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The package's prerm runs for real (with systemctl recorded instead of
// called): on removal it stops every instance of every unit template the
// package installs, and on upgrade it stops nothing.
func TestPrermStopsEveryUnit(t *testing.T) {
	units, err := filepath.Glob(filepath.Join(repoRoot(t), "packaging", "systemd", "*@.service"))
	if err != nil || len(units) < 4 {
		t.Fatalf("unit templates: %v %v", units, err)
	}
	script, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging", "scripts", "prerm.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The script acts only where systemd runs: point its check at a
	// directory that exists here, and put a recording systemctl first on
	// PATH.
	systemdDir := filepath.Join(dir, "run-systemd-system")
	if err := os.Mkdir(systemdDir, 0o700); err != nil {
		t.Fatal(err)
	}
	body := strings.ReplaceAll(string(script), "/run/systemd/system", systemdDir)
	if body == string(script) {
		t.Fatal("prerm.sh no longer checks /run/systemd/system; update this test")
	}
	prerm := filepath.Join(dir, "prerm.sh")
	calls := filepath.Join(dir, "calls")
	fake := "#!/bin/sh\nprintf '%s\\n' \"$@\" >>" + calls + "\n"
	if err := os.WriteFile(prerm, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(fake), 0o700); err != nil {
		t.Fatal(err)
	}
	run := func(arg string) []string {
		_ = os.Remove(calls)
		cmd := exec.Command("/bin/sh", prerm, arg)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("prerm %s: %v\n%s", arg, err, out)
		}
		b, _ := os.ReadFile(calls)
		return strings.Fields(string(b))
	}
	for _, arg := range []string{"remove", "0"} { // deb remove, rpm erase
		args := run(arg)
		if len(args) == 0 || args[0] != "stop" {
			t.Fatalf("prerm %s: systemctl %v, want stop", arg, args)
		}
		for _, u := range units {
			want := strings.Replace(filepath.Base(u), "@.service", "@*.service", 1)
			found := false
			for _, a := range args[1:] {
				found = found || a == want
			}
			if !found {
				t.Errorf("prerm %s does not stop %s (systemctl %v)", arg, want, args)
			}
		}
	}
	for _, arg := range []string{"upgrade", "1"} { // deb upgrade, rpm upgrade
		if args := run(arg); len(args) != 0 {
			t.Errorf("prerm %s: systemctl %v, want nothing on upgrade", arg, args)
		}
	}
}
