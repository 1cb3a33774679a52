package executor

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// childPolicy starts `cat /proc/self/stat` with start from the calling
// thread, which has SCHED_IDLE, and returns the child's policy (field 41).
func childPolicy(t *testing.T, start func(*exec.Cmd) error) string {
	t.Helper()
	cmd := exec.Command("cat", "/proc/self/stat")
	var out strings.Builder
	cmd.Stdout = &out
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[38]
}

// TestStartCmdNormalPolicy starts commands from a thread with SCHED_IDLE,
// as a thread sysmon made has: started plainly, the command inherits the
// policy (the kernel keeps SCHED_IDLE across fork, even with
// SCHED_RESET_ON_FORK); started by startCmd, it runs with the normal policy,
// and so does the thread afterwards.
func TestStartCmdNormalPolicy(t *testing.T) {
	defer sysmonTID.Store(sysmonTID.Load())
	sysmonTID.Store(-1)    // no thread of the test is sysmon
	runtime.LockOSThread() // the thread ends with the test: not unlocked
	idle := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	if err := unix.SchedSetAttr(0, &idle, 0); err != nil {
		t.Fatal(err)
	}
	if p := childPolicy(t, (*exec.Cmd).Start); p != "5" {
		t.Fatalf("a plain start from an idle thread: the child's policy is %s, want 5 (inherited)", p)
	}
	if p := childPolicy(t, startCmd); p != "0" {
		t.Errorf("startCmd from an idle thread: the child's policy is %s, want 0", p)
	}
	if attr, err := unix.SchedGetAttr(0, 0); err != nil || attr.Policy != unix.SCHED_NORMAL {
		t.Errorf("the thread after startCmd: %+v %v, want SCHED_NORMAL", attr, err)
	}
}

// setAllThreads gives every thread of the process policy.
func setAllThreads(t *testing.T, policy uint32) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: policy}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			// A thread of another test may have ended since the listing.
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && err != unix.ESRCH {
				t.Fatal(err)
			}
		}
	}
}

// TestSpareThreadNormalPolicy: with every thread of the process at idle
// priority (so that whichever thread the spare goroutine gets, or makes,
// has it), a spare thread (the agent's file operations) runs with the
// normal policy.
func TestSpareThreadNormalPolicy(t *testing.T) {
	defer sysmonTID.Store(sysmonTID.Load())
	sysmonTID.Store(-1) // no thread of the test is sysmon
	setAllThreads(t, unix.SCHED_IDLE)
	defer setAllThreads(t, unix.SCHED_NORMAL)
	got := make(chan uint32, 1)
	onSpareThread(func() {
		attr, err := unix.SchedGetAttr(0, 0)
		if err != nil {
			got <- 99
			return
		}
		got <- attr.Policy
	})
	if p := <-got; p != unix.SCHED_NORMAL {
		t.Errorf("a spare thread's policy: %d, want %d", p, unix.SCHED_NORMAL)
	}
}

// TestNormalThreads: with every thread of the process at idle priority,
// normalThreads gives the normal policy back to all of them but sysmon's
// (here the test's own thread stands for it).
func TestNormalThreads(t *testing.T) {
	runtime.LockOSThread() // the thread ends with the test: not unlocked
	defer sysmonTID.Store(sysmonTID.Load())
	sysmonTID.Store(int64(unix.Gettid()))
	setAllThreads(t, unix.SCHED_IDLE)
	defer setAllThreads(t, unix.SCHED_NORMAL)
	threadsSeen.n.Store(0) // as if threads were made since the last look
	// Threads made after the look inherit the idle policy from their
	// maker: only the threads of before it count.
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	normalThreads()
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue // gone
		}
		want := uint32(unix.SCHED_NORMAL)
		if tid == unix.Gettid() {
			want = unix.SCHED_IDLE
		}
		if attr.Policy != want {
			t.Errorf("thread %d: policy %d, want %d", tid, attr.Policy, want)
		}
	}
}
