package executor

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// The Go runtime's monitor thread (sysmon) runs at idle priority in the
// executor.
//
// sysmon sleeps while the process is idle, but every system call the
// executor makes wakes it (the runtime wakes it on entry to a system call so
// that it can take the scheduler slot back if the call blocks), and then it
// polls every 20 µs until the process is idle again. Per command that was
// about 6 wake-ups and 9 of the executor's 18 to 20 context switches, each one a
// switch away from the command on the sandbox's only core. The executor
// does not need it: it waits for requests, pipes and children on the
// runtime's poller, not in blocking system calls. As SCHED_IDLE, sysmon runs
// only when nothing else on the core wants to, and its wake-ups no longer
// preempt the command or the executor.
//
// Four things make this safe:
//   - No goroutine of the executor waits in a blocking system call for
//     long: a goroutine blocked in one keeps the one scheduler slot
//     (GOMAXPROCS=1) until sysmon takes it back, and an idle sysmon on a
//     busy core may take seconds. Children, the persistent shell and the
//     zygote are waited for through pidfds on the poller (awaitExit).
//   - A thread inherits its creator's policy, and sysmon does create threads
//     (when it hands the slot of a blocked call to a new one). Every process
//     the executor starts is started by startCmd, which first gives its
//     thread the normal policy back, and the threads of the agent's file
//     operations do the same; so no command and no agent thread ever runs
//     at idle priority.
//   - Changing a thread's policy from SCHED_IDLE back to the normal one
//     needs CAP_SYS_NICE (or an RLIMIT_NICE of 20, which no container has
//     by default), which the sandbox gives the machinery for this alone
//     (docker.machineCaps); the agent's processes have no capability.
//   - Nor does the executor's own work: sysmon rarely makes a thread, since
//     the runtime keeps spare threads made before sysmon got its policy
//     (startSpareThreads), and for each request, and again once its command
//     started and when its timeout fires, normalThreads gives the normal
//     policy back to any other thread that has sysmon's.

// sysmonTID is the thread id of sysmon once idleSysmon gave it SCHED_IDLE,
// and 0 before or without: a thread with SCHED_IDLE other than it has the
// policy from it.
var sysmonTID atomic.Int64

// idleSysmon gives the runtime's monitor thread the SCHED_IDLE policy. It
// does nothing where the kernel has no pidfds (children would then be
// waited for in blocking calls), where no thread could leave SCHED_IDLE
// again (canLeaveIdle), where the process already runs at idle priority, or
// where the kernel refuses the policy. It returns the thread's id, or 0
// when it changed nothing.
func idleSysmon() int {
	if !havePidfd() || !canLeaveIdle() {
		return 0
	}
	if attr, err := unix.SchedGetAttr(0, 0); err != nil || attr.Policy == unix.SCHED_IDLE {
		return 0
	}
	tid := sysmonThread()
	if tid == 0 {
		return 0
	}
	startSpareThreads(spareThreads)
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	if unix.SchedSetAttr(tid, &attr, 0) != nil {
		return 0
	}
	sysmonTID.Store(int64(tid))
	return tid
}

// sysmonThread returns the id of the runtime's monitor thread: the first
// thread the process made after its main thread (the runtime starts sysmon
// before anything else, ahead of every package's init), by start time and
// then by id. It returns 0 when /proc cannot tell.
func sysmonThread() int {
	pid := os.Getpid()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	type thread struct{ tid, start int }
	var threads []thread
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == pid {
			continue
		}
		start, ok := threadStart(tid)
		if !ok {
			return 0
		}
		threads = append(threads, thread{tid, start})
	}
	if len(threads) == 0 {
		return 0
	}
	first := slices.MinFunc(threads, func(a, b thread) int {
		if a.start != b.start {
			return a.start - b.start
		}
		return a.tid - b.tid
	})
	return first.tid
}

// threadStart is the start time of thread tid of this process, in clock
// ticks since boot (field 22 of its stat file).
func threadStart(tid int) (int, bool) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The name (field 2) is in parentheses and may hold spaces; the
	// fields after it start at field 3.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, false
	}
	start, err := strconv.Atoi(f[19])
	return start, err == nil
}

// spareThreads is how many idle threads the executor has the runtime start
// before sysmon gets SCHED_IDLE.
const spareThreads = 6

// startSpareThreads makes the runtime start n threads, with the caller's
// (normal) policy, and leaves them idle. The runtime never ends an idle
// thread, and takes one whenever it needs another: when sysmon hands the
// scheduler slot of a blocking call to another thread, or when a goroutine
// locked to its thread blocks. Only when none is idle does the runtime make
// one, and a thread sysmon makes inherits its idle policy: if it then holds
// the executor's only scheduler slot while the agent's commands fill the
// core, the executor's timers, and so a command's timeout, wait for it to
// run, which at idle priority against a fork bomb took longer than the
// server waits (TestConformance/ForkBomb failed so in CI). With spare
// threads, that takes more than n of the executor's threads busy at once;
// normalThreads repairs the rest. The threads also count against the
// container's pids limit before the agent can fill it: the runtime cannot
// make a thread while a fork bomb holds every pid.
//
// Each goroutine locks its thread and blocks in a read of a pipe, so the
// next one needs another thread; the runtime makes it (sysmon hands the
// slot on within tens of microseconds, with sysmon's policy still normal).
// Closing the pipe's other end releases them all, and they end unlocked,
// which leaves their threads idle.
func startSpareThreads(n int) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return
	}
	defer syscall.Close(p[0])
	var locked, done sync.WaitGroup
	for range n {
		locked.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			locked.Done()
			var b [1]byte
			for {
				if _, err := syscall.Read(p[0], b[:]); err != syscall.EINTR {
					return
				}
			}
		}()
	}
	locked.Wait()
	syscall.Close(p[1]) // every read returns: end of file
	done.Wait()
}

// canLeaveIdle says whether the kernel lets this process move a thread from
// SCHED_IDLE back to the normal policy: with CAP_SYS_NICE in effect, or an
// RLIMIT_NICE of 20 (nice 0 allowed).
func canLeaveIdle() bool {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NICE, &rl) == nil && rl.Cur >= 20 {
		return true
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_NICE) != 0
}

// havePidfd says whether the kernel has pidfds to wait for children with.
func havePidfd() bool {
	fd, _, e := syscall.Syscall(unix.SYS_PIDFD_OPEN, uintptr(os.Getpid()), 0, 0)
	if e != 0 {
		return false
	}
	syscall.Close(int(fd))
	return true
}

// normalThread gives the calling thread the normal scheduling policy back
// if it has SCHED_IDLE from sysmon (after idleSysmon). The caller holds the
// thread (runtime.LockOSThread).
func normalThread() {
	if sysmonTID.Load() == 0 {
		return
	}
	if attr, err := unix.SchedGetAttr(0, 0); err == nil && attr.Policy == unix.SCHED_IDLE {
		setNormal(0)
	}
}

// setNormal gives thread tid (0: the calling one) the normal policy.
func setNormal(tid int) {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	_ = unix.SchedSetAttr(tid, &attr, 0)
}

// normalSysmon gives sysmon the normal policy back; the executor calls it
// before it ends. Every thread of an ending process runs its own exit, and
// the container's init, which reaps the executor, waits in the kernel for
// the last of them (it walks the executor's /proc entries, and busy-waits
// on those another thread's exit is releasing). The init runs on the
// sandbox's one core; when sysmon was that last thread and still idle, the
// init took the core from it at once and spun until sysmon got a turn:
// on a busy host that was up to hundreds of milliseconds of CPU per
// sandbox (perf: release_task, d_invalidate, d_walk in docker-init; 6 to
// 8 % of the host's CPU with 4 episodes at a time).
func normalSysmon() {
	if tid := int(sysmonTID.Load()); tid != 0 {
		setNormal(tid)
	}
}

// threadsSeen is how many threads the runtime had when normalThreads last
// looked at them.
var threadsSeen struct {
	mu sync.Mutex
	n  atomic.Int64
}

// normalThreads gives the normal policy back to every thread of the process
// but sysmon that has SCHED_IDLE (a thread sysmon made inherits it), so
// that the executor's own work does not run at idle priority either. It
// looks at them only when the runtime's count of threads changed since the
// last time: the count is a walk of a short list; the look is a read of
// /proc per thread. The executor calls it for every request.
func normalThreads() {
	sysmon := int(sysmonTID.Load())
	if sysmon == 0 {
		return
	}
	n, _ := runtime.ThreadCreateProfile(nil)
	if int64(n) == threadsSeen.n.Load() {
		return
	}
	threadsSeen.mu.Lock()
	defer threadsSeen.mu.Unlock()
	// Counted before the look: a thread made during it changes the count
	// again, for the next call.
	threadsSeen.n.Store(int64(n))
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == sysmon {
			continue
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy == unix.SCHED_IDLE {
			setNormal(tid)
		}
	}
}

// startCmd starts cmd from a thread with the normal scheduling policy, which
// the process inherits: see normalThread.
func startCmd(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	normalThread()
	return cmd.Start()
}
