package docker_test

import (
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// TestCommandPolicyFromIdleThreads is the twin, in a real sandbox, of the
// executor's TestStartCmdNormalPolicy (which runs as root on the host, where
// every change of policy is allowed): the host gives every thread of a
// sandbox's executor SCHED_IDLE, as a thread that sysmon made has it, and a
// command started then must still run with the normal policy. The executor
// gives its thread the normal policy back before it starts a command; the
// kernel allows a move out of SCHED_IDLE only with CAP_SYS_NICE or an
// RLIMIT_NICE of 20, and a container has neither unless asked for. Without
// SYS_NICE among the machinery's capabilities the command inherited
// SCHED_IDLE, and at the end of the sandbox the runtime's monitor thread,
// still idle, held the container's init in a busy wait in the kernel
// (reaping the executor waits for the idle thread to finish its exit), up
// to hundreds of milliseconds of CPU per sandbox on a busy host.
func TestCommandPolicyFromIdleThreads(t *testing.T) {
	p, cli := newProvider(t)
	sb := baseSandbox(t, p, sandbox.Spec{})
	idle := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	threads := executorThreads(t, cli, sb)
	for tid := range threads {
		if err := unix.SchedSetAttr(tid, &idle, 0); err != nil && err != unix.ESRCH {
			t.Fatalf("give executor thread %d SCHED_IDLE from the host: %v", tid, err)
		}
	}
	var stillIdle int
	for _, policy := range executorThreads(t, cli, sb) {
		if policy == "5" {
			stillIdle++
		}
	}
	if stillIdle < len(threads)-1 {
		t.Fatalf("only %d of the executor's %d threads have SCHED_IDLE: the test would prove nothing", stillIdle, len(threads))
	}
	for i := range 3 {
		r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"cat", "/proc/self/stat"}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("command %d: %+v %v", i, r, err)
		}
		s := string(r.Stdout)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 39 {
			t.Fatalf("command %d: stat %q", i, s)
		}
		if policy, _ := strconv.Atoi(f[38]); policy != unix.SCHED_NORMAL {
			t.Errorf("command %d started while the executor's threads had SCHED_IDLE runs with policy %d, want %d (normal)", i, policy, unix.SCHED_NORMAL)
		}
	}
}
