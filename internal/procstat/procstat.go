// Package procstat reads a process's CPU time and context switches from
// /proc, for benchmarks that split the cost of a step by process.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of the times in /proc/PID/stat and /proc/stat.
const userHZ = 100

// stat returns the fields of /proc/PID/stat after the command name (the
// first is the state), or nil when the process is gone.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// CPU is the user and system time of pid's threads (those that ended
// included), its children not included; 0 when the process is gone. It
// reads the process's CPU-time clock, which counts in nanoseconds; where
// that clock cannot be read, /proc/PID/stat, which counts in hundredths of
// a second.
func CPU(pid int) time.Duration {
	// The clock id of a process's CPU time (clock_getcpuclockid(3)):
	// the complement of the pid, shifted, with CPUCLOCK_SCHED (2).
	var ts unix.Timespec
	if unix.ClockGettime(int32(^pid<<3|2), &ts) == nil {
		return time.Duration(ts.Nano())
	}
	f := stat(pid)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / userHZ)
}

// Parent is pid's parent, 0 when the process is gone.
func Parent(pid int) int {
	f := stat(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// Faults is the number of page faults, minor and major, of every thread of
// pid (those that ended included), its children not included; 0 when the
// process is gone.
func Faults(pid int) int64 {
	f := stat(pid)
	if len(f) < 10 {
		return 0
	}
	minor, _ := strconv.ParseInt(f[7], 10, 64)
	major, _ := strconv.ParseInt(f[9], 10, 64)
	return minor + major
}

// Switches is the number of context switches, voluntary or not, of every
// thread of pid.
func Switches(pid int) int64 {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var n int64
	for _, t := range tasks {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		for _, l := range strings.Split(string(st), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}

// HostBusy is the time every CPU of the host spent busy (not idle, not
// waiting for I/O), from /proc/stat.
func HostBusy() time.Duration {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	var busy int64
	for i, v := range strings.Fields(line) {
		n, _ := strconv.ParseInt(v, 10, 64)
		// cpu user nice system idle iowait irq softirq steal ...
		if i >= 1 && i <= 8 && i != 4 && i != 5 {
			busy += n
		}
	}
	return time.Duration(busy) * (time.Second / userHZ)
}
