package pgtest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcTimes reads /proc/pid/stat: the process's own user+system CPU
// seconds (utime+stime), those of the children it has reaped
// (cutime+cstime), and its parent's pid; ok is false when it is gone.
func ProcTimes(pid int) (self, reaped float64, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if pid == 0 || err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	// After the command name: state(0) ppid(1) ... utime(11) stime(12)
	// cutime(13) cstime(14).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	n := func(k int) float64 {
		v, _ := strconv.ParseFloat(f[k], 64)
		return v / ClockTicks
	}
	ppid, _ = strconv.Atoi(f[1])
	return n(11) + n(12), n(13) + n(14), ppid, true
}

// ClockTicks is USER_HZ, the unit of /proc's CPU times (100 on every Linux
// architecture Go supports).
const ClockTicks = 100

// ProcCPU is the user+system CPU time of process pid, in seconds, from
// /proc (0 when the process is gone). Benchmarks read it for the server's
// processes (a walsender, the extension's workers), which run outside the
// test binary.
func ProcCPU(pid int) float64 {
	self, _, _, _ := ProcTimes(pid)
	return self
}

// ProcSyscalls is how many read and write system calls process pid has
// made (syscr and syscw of /proc/pid/io; 0 when it is gone). pid 0 is
// this process.
func ProcSyscalls(pid int) (reads, writes int64) {
	path := "/proc/self/io"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/io", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// ProcByTitle finds a process whose command line holds title (a server
// process without a connection, such as the extension's socket worker,
// is not in pg_stat_activity); 0 when there is none.
func ProcByTitle(title string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), title) {
			return pid
		}
	}
	return 0
}

// SelfCPU is this process's user+system CPU time.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
