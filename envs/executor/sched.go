package executor

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

// The executor's threads run under SCHED_BATCH. In a sandbox pinned to one
// core, the executor shares that core with the command it runs, and a
// normal task that wakes up preempts the running one: the command writes
// its output, the executor runs at once to read it, the command runs again
// to exit, and the executor runs again to report the exit. A batch task's
// wake-up preempts no one, so the command runs on to its exit and the
// executor, woken once, finds the output and the exit together.
//
// Children inherit SCHED_BATCH (SCHED_RESET_ON_FORK resets real-time
// policies only), so startCmd forks from a thread switched back to
// SCHED_OTHER for the moment: the agent's programs are scheduled as they
// would be anywhere else.

// Scheduling policies of sched_setscheduler(2).
const (
	schedOther = 0 // SCHED_OTHER (SCHED_NORMAL)
	schedBatch = 3 // SCHED_BATCH
)

// batchSched says the process's threads are SCHED_BATCH: batchThreads set
// them so, in Main, before any request is served.
var batchSched bool

// setPolicy sets the scheduling policy of thread tid (0: the calling
// thread). It reports whether that worked.
func setPolicy(tid, policy int) bool {
	var param struct{ priority int32 } // sched_param; 0 for these policies
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), uintptr(policy), uintptr(unsafe.Pointer(&param)))
	return e == 0
}

// batchThreads makes every thread of the process SCHED_BATCH. A thread
// the runtime starts later inherits the policy from the one that starts it.
func batchThreads() {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && setPolicy(tid, schedBatch) {
			batchSched = true
		}
	}
}

// startCmd starts cmd under SCHED_OTHER, whatever the executor's own
// policy: the thread that forks is SCHED_OTHER until the child has its own
// program (os/exec returns from Start only then).
func startCmd(cmd *exec.Cmd) error {
	if !batchSched {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	setPolicy(0, schedOther)
	defer setPolicy(0, schedBatch)
	return cmd.Start()
}
