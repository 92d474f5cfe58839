package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	extOnce sync.Once
	extErr  error
	extSkip string // a missing prerequisite, not a failure
	// extSkipForced: TRELLARA_NO_EXTENSION said why; a skip even under
	// TRELLARA_REQUIRE_PG=1.
	extSkipForced bool
)

// InstallExtension builds the repository's ext/ and installs it into the
// server binDir belongs to, once per test binary, the way
// ext/run-regress.sh does. Missing tools or an unwritable server directory
// skip the test, as a missing server does (Require), unless
// TRELLARA_REQUIRE_PG=1; a failing build fails it. Test binaries of
// several packages may run at once: the build holds a file lock, so two
// never compile into ext/ together.
func InstallExtension(t testing.TB, binDir string) {
	t.Helper()
	extOnce.Do(func() { extSkip, extErr = installExtension(binDir) })
	if extSkip != "" {
		if os.Getenv("TRELLARA_REQUIRE_PG") == "1" && !extSkipForced {
			t.Fatalf("%s (TRELLARA_REQUIRE_PG=1 forbids skipping)", extSkip)
		}
		t.Skip(extSkip)
	}
	if extErr != nil {
		t.Fatal(extErr)
	}
}

func installExtension(binDir string) (skip string, err error) {
	// The PostgreSQL matrix runs servers that ship no pg_config: it names
	// the headers' pg_config (its shim installs into that server), or says
	// why the extension cannot be built for the major under test, which
	// skips the extension's tests even under TRELLARA_REQUIRE_PG=1 (the
	// matrix records each as not covered).
	if why := os.Getenv("TRELLARA_NO_EXTENSION"); why != "" {
		extSkipForced = true
		return "the trellara extension cannot be built for this server: " + why, nil
	}
	pgConfig := filepath.Join(binDir, "pg_config")
	if p := os.Getenv("TRELLARA_PG_CONFIG"); p != "" {
		pgConfig = p
	}
	for _, tool := range []string{"make", "gcc", pgConfig} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("cannot build the trellara extension: %s not found (apt-get install make gcc postgresql-server-dev-NN)", tool), nil
		}
	}
	out, err := exec.Command(pgConfig, "--pkglibdir").Output()
	if err != nil {
		return fmt.Sprintf("%s --pkglibdir: %v", pgConfig, err), nil
	}
	dir := strings.TrimSpace(string(out))
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return fmt.Sprintf("cannot install the trellara extension into %s: %v (run as root)", dir, err), nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "trellara-ext-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if os.Getenv("TRELLARA_PG_CONFIG") != "" {
		// Majors tested side by side share ext/: objects another major's
		// headers compiled must not be linked for this one.
		clean := exec.Command("make", "-s", "-C", "ext", "PG_CONFIG="+pgConfig, "clean")
		clean.Dir = root
		if out, err := clean.CombinedOutput(); err != nil {
			return "", fmt.Errorf("make -C ext clean: %v\n%s", err, out)
		}
	}
	cmd := exec.Command("make", "-s", "-C", "ext", "PG_CONFIG="+pgConfig, "install")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make -C ext install: %v\n%s", err, out)
	}
	return "", nil
}

// repoRoot is the nearest directory above the test's working directory
// that holds go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the test's directory")
		}
		dir = parent
	}
}
