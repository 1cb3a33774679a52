package executor_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// serveWith starts the executor command cmd with start and returns its
// client; the test's cleanup stops it.
func serveWith(t testing.TB, cmd *exec.Cmd, start func(*exec.Cmd) error) (*executor.Client, *exec.Cmd) {
	t.Helper()
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	c := executor.NewClient(stdout, stdin)
	t.Cleanup(func() {
		c.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return c, cmd
}

// agentWorkDir makes a working directory the agent (uid 1000) may use,
// removed by the test's cleanup. t.TempDir's parent is closed to the agent.
func agentWorkDir(t *testing.T, prefix string) string {
	t.Helper()
	work, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o777); err != nil {
		t.Fatal(err)
	}
	return work
}

// threadField is field n (1-based, as proc(5) numbers them) of the stat
// file of thread tid of process pid.
func threadField(t *testing.T, pid, tid, n int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(tid), "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[n-3]
}

// threads lists the thread ids of process pid.
func threads(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// inSyscall is the number of the system call thread tid of pid is in, or
// -1 when it is running or gone.
func inSyscall(pid, tid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(tid), "syscall"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.Fields(string(b) + " x")[0])
	if err != nil {
		return -1
	}
	return n
}

// TestSysmonIdle checks the executor's threads while it runs commands, a
// persistent shell and a verifier zygote: exactly one thread, the runtime's
// monitor (sysmon), has the SCHED_IDLE policy; it is the only thread ever
// seen sleeping in nanosleep (the runtime's usleep, which only sysmon
// calls in a process with one P); the commands run with the normal policy;
// and once the executor is idle no thread waits in a blocking wait for a
// child (the shell and the zygote are waited for on the poller: a thread
// blocked there would hold the executor's only scheduler slot until an
// idle-priority sysmon took it back).
func TestSysmonIdle(t *testing.T) {
	// As in a sandbox: an agent to act for (the zygote needs one).
	work := agentWorkDir(t, "sysmon-")
	cmd := exec.Command(gymexecBinary(t), "serve", "--workdir", work, "--agent", "1000:1000")
	// Debian's python3, which has pytest (.ci/setup installs it), for the
	// zygote.
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin")
	c, cmd := serveWith(t, cmd, (*exec.Cmd).Start)
	ctx := t.Context()
	pid := cmd.Process.Pid
	if st, err := c.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true}); err != nil || !st.Ready {
		t.Fatalf("zygote: %+v %v", st, err)
	}
	if r, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo started"}, Shell: true}); err != nil || string(r.Stdout) != "started\n" {
		t.Fatalf("shell: %+v %v", r, err)
	}
	// Commands in a loop while the threads are sampled.
	stop := make(chan struct{})
	loopErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				loopErr <- nil
				return
			default:
			}
			r, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo hi"}})
			if err == nil && string(r.Stdout) != "hi\n" {
				err = context.Canceled
			}
			if err != nil {
				loopErr <- err
				return
			}
		}
	}()
	sleepers := map[int]int{}
	for range 3000 {
		for _, tid := range threads(t, pid) {
			if inSyscall(pid, tid) == unix.SYS_NANOSLEEP {
				sleepers[tid]++
			}
		}
	}
	close(stop)
	if err := <-loopErr; err != nil {
		t.Fatalf("commands: %v", err)
	}

	// A thread sysmon made inherits its policy until the executor's next
	// request gives it the normal one back: the threads of before a
	// request are looked at after it.
	before := threads(t, pid)
	if _, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	var idle []int
	for _, tid := range before {
		if threadField(t, pid, tid, 41) == "5" { // SCHED_IDLE
			idle = append(idle, tid)
		}
	}
	if len(idle) != 1 || idle[0] == pid {
		t.Fatalf("threads with SCHED_IDLE: %v (main thread %d); want one, not the main thread", idle, pid)
	}
	if sleepers[idle[0]] == 0 || len(sleepers) != 1 {
		t.Errorf("threads seen in nanosleep (tid: samples): %v; want only the idle thread %d", sleepers, idle[0])
	}
	r, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"cat", "/proc/self/stat"}})
	if err != nil {
		t.Fatal(err)
	}
	s := string(r.Stdout)
	if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) < 39 || f[38] != "0" {
		t.Errorf("a command's scheduling policy: %q, want 0 (SCHED_NORMAL)", f[38])
	}

	// Idle now: nothing may wait in a blocking wait.
	for range 20 {
		for _, tid := range threads(t, pid) {
			if n := inSyscall(pid, tid); n == unix.SYS_WAITID || n == unix.SYS_WAIT4 {
				t.Fatalf("thread %d of the idle executor is in a blocking wait (system call %d)", tid, n)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBusyCoreDoesNotStallExecutor is the agent's attack on the idle
// sysmon: it fills the executor's core with busy loops, so that a thread
// of idle priority rarely runs there. The executor, its persistent shell
// and its commands must still answer promptly: nothing of theirs may wait
// for sysmon.
func TestBusyCoreDoesNotStallExecutor(t *testing.T) {
	// The executor and everything it starts share one core, as in a
	// sandbox.
	c, _ := serveWith(t, exec.Command(gymexecBinary(t), "serve", "--workdir", t.TempDir()), startPinned)
	ctx := t.Context()
	const hogs = 8
	for range hogs {
		if _, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "while :; do :; done"}, Background: true}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c.KillAll(context.Background()) })
	time.Sleep(200 * time.Millisecond) // the loops have the core
	// A stall waits for sysmon, which at idle priority against eight busy
	// loops ran after 3.6 to 5.6 s when the persistent shell was waited
	// for in a blocking call; a step here took at most 32 ms.
	const bound = time.Second
	for i := range 20 {
		for _, req := range []sandbox.ExecRequest{
			{Argv: []string{"echo shell"}, Shell: true},
			{Argv: []string{"/bin/sh", "-c", "echo shell"}},
		} {
			t0 := time.Now()
			r, err := c.Exec(ctx, req)
			if err != nil || string(r.Stdout) != "shell\n" {
				t.Fatalf("step %d (%v): %+v %v", i, req.Argv, r, err)
			}
			if d := time.Since(t0); d > bound {
				t.Fatalf("step %d (%v) took %v on a busy core (bound %v)", i, req.Argv, d, bound)
			}
		}
		if _, err := c.ReadFile(ctx, "missing", 10); err == nil {
			t.Fatal("read of a missing file: no error")
		}
	}
}
