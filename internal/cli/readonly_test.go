package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/segmentlog"
)

// writerChildEnv makes the test binary a second process that holds a log
// directory for writing (segmentlog.Open), prints "ready" and waits for
// stdin to close: the running service, as far as the log can tell.
const writerChildEnv = "TRELLARA_CLI_TEST_LOG_WRITER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(writerChildEnv); dir != "" {
		l, _, err := segmentlog.Open(dir, segmentlog.Options{})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = l.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startLogWriter runs a writer process on dir and returns its PID; it
// stops when the test ends.
func startLogWriter(t *testing.T, dir string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("writer process: %q", line)
	}
	return cmd.Process.Pid
}

// logDigest is the listing of the log directory with a hash of every
// file's contents.
func logDigest(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			lines = append(lines, rel+"/")
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %d %016x", rel, len(b), xxh3.Hash(b)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// restFlow writes a flow at rest: a config and a closed local log of six
// entries, damaged as damage says. It returns the config and log paths.
func restFlow(t *testing.T, damage string) (cfg, logDir string) {
	t.Helper()
	cfg, l, _ := tailFlow(t, 6)
	logDir = filepath.Join(filepath.Dir(cfg), "data", "log")
	// A target (unreachable, as the source): run --local gets as far as
	// the log, where a capture-only flow is refused before it.
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("target:\n  database_url: \"postgres://127.0.0.1:1/dst\"\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// A cursor and a stale temporary file, as a crashed writer leaves
	// them: a read-only command must not register, move or remove either.
	if err := l.CommitCursor("applier", 2); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(logDir, "00000000000000000000.seg")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	switch damage {
	case "healthy":
	case "torn tail past the durable end":
		b = append(b, []byte("a torn, unacknowledged write")...)
	case "8 bytes flipped below the durable end":
		for i := len(b) - 20; i < len(b)-12; i++ {
			b[i] ^= 0xff
		}
	default:
		t.Fatalf("unknown damage %q", damage)
	}
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logDir, "00000000000000000006.seg.tmp"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, logDir
}

// readOnlyCommands are every command that reads the local log and must
// change nothing in it. The source and target are unreachable here: each
// command gets as far as the log and the databases, and whatever its exit
// code, the log directory must be as it was.
func readOnlyCommands(cfg string) [][]string {
	return [][]string{
		{"status", "--config", cfg},
		{"status", "--config", cfg, "--view", "diagnostics"},
		{"verify", "--config", cfg, "--wait", "0s"},
		{"stream", "tail", "--config", cfg, "--consumer", "inspect"},
		{"stream", "tail", "--config", cfg, "--consumer", "applier", "--from", "cursor"},
		{"stream", "locate-local", "--config", cfg, "--offset", "0"},
		{"repair-plan", "--config", cfg},
		{"preflight", "--config", cfg},
		{"schema", "ddl-plan", "--config", cfg},
	}
}

// TestReadOnlyCommandsChangeNothing: on a flow at rest, healthy or with a
// damaged tail (past the durable end: a torn write; below it: damaged
// acknowledged data), and beside a running writer process, every read-only
// command leaves the log directory's listing and every file's bytes as
// they were (issue 29: status cut a tail to .seg.torn-1 and rewrote
// DURABLE; issue 28: locate-local and preflight failed beside the service).
//
// Mutation tried: flow.OpenReadOnly calling openLog (segmentlog.Open) when
// no writer holds the lock, as before, turns the damaged cases red
// (.seg.torn-1 created, .tmp removed, DURABLE rewritten).
func TestReadOnlyCommandsChangeNothing(t *testing.T) {
	for _, damage := range []string{"healthy", "torn tail past the durable end", "8 bytes flipped below the durable end"} {
		for _, beside := range []bool{false, true} {
			name := damage
			if beside {
				name += " beside a running writer"
			}
			t.Run(name, func(t *testing.T) {
				cfg, logDir := restFlow(t, damage)
				if beside {
					if damage == "8 bytes flipped below the durable end" {
						t.Skip("a writer refuses to open damaged acknowledged data")
					}
					startLogWriter(t, logDir)
				}
				before := logDigest(t, logDir)
				for _, args := range readOnlyCommands(cfg) {
					out, errOut, code := run(t, args...)
					if after := logDigest(t, logDir); after != before {
						t.Fatalf("%s (exit %d) changed the log directory:\nbefore:\n%s\nafter:\n%s\nstderr: %s",
							strings.Join(args, " "), code, before, after, errOut)
					}
					if strings.Contains(out+errOut, "locked by another") {
						t.Fatalf("%s: %s%s", strings.Join(args, " "), out, errOut)
					}
					if args[0] == "stream" && args[1] == "locate-local" && code != ExitOK {
						t.Fatalf("%s: exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
					}
				}
			})
		}
	}
}

// TestSecondWriterNamesTheRunningProcess: beside a running writer process,
// a second `run` is refused with that process's PID and what to do, and
// the read-only commands work (locate-local exits 0).
//
// Mutation tried: dropping the LockedError branch of flow.logError turns
// it red (no PID, no systemctl, no read-only commands named).
func TestSecondWriterNamesTheRunningProcess(t *testing.T) {
	cfg, logDir := restFlow(t, "healthy")
	pid := startLogWriter(t, logDir)
	_, errOut, code := run(t, "run", "--config", cfg, "--local")
	if code != ExitError {
		t.Fatalf("second run: exit %d, want %d: %s", code, ExitError, errOut)
	}
	for _, want := range []string{fmt.Sprintf("process %d", pid), fmt.Sprintf("kill %d", pid), "systemctl stop trellara@tail",
		"trellara status --config", "stream locate-local"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("second run said %q, want it to name %q", errOut, want)
		}
	}
	if out, errOut, code := run(t, "stream", "locate-local", "--config", cfg, "--offset", "3"); code != ExitOK || !strings.Contains(out, "3") {
		t.Fatalf("locate-local beside the writer: exit %d: %s%s", code, out, errOut)
	}
}

// TestDamagedAcknowledgedLogIsRefused is the repro on a flow at
// rest: 8 bytes flipped near the end of the newest segment, below the
// durable end. `run --local` refuses without changing a byte, names the
// lost offsets and the first lost LSN, and prints the re-snapshot, whose
// first command (`run --cleanup`) gets past the damaged log.
//
// Mutation tried: checkDurable returning nil (segmentlog) turns it red:
// the tail is cut to .seg.torn-1 and the run goes on.
func TestDamagedAcknowledgedLogIsRefused(t *testing.T) {
	cfg, logDir := restFlow(t, "8 bytes flipped below the durable end")
	before := logDigest(t, logDir)
	_, errOut, code := run(t, "run", "--config", cfg, "--local")
	if after := logDigest(t, logDir); after != before {
		t.Fatalf("run --local changed a damaged log:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	ro, err := segmentlog.OpenReadOnly(logDir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rd := ro.NewReader(4)
	_, b, err := rd.Next(t.Context())
	rd.Close()
	ro.Close()
	if err != nil {
		t.Fatal(err)
	}
	e, err := envelope.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"acknowledged entries at offsets 5 to 5 are lost", "committing after LSN " + envelope.FormatLSN(e.EndLsn),
		"left every byte as it is", "run --config " + cfg + " --cleanup"} {
		if code != ExitError || !strings.Contains(errOut, want) {
			t.Fatalf("run --local on damaged acknowledged data: exit %d, %q; want it to say %q", code, errOut, want)
		}
	}
	_, errOut, _ = run(t, "run", "--config", cfg, "--cleanup")
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if last := lines[len(lines)-1]; strings.Contains(last, "corruption") || !strings.Contains(last, "owns_slot") {
		t.Fatalf("run --cleanup, the printed recovery, stopped at the damaged log: %s", errOut)
	}
}
