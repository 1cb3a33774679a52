package docker_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// executorThreads returns the scheduling policy (field 41 of stat) of each
// thread of sandbox sb's executor, read from the host's /proc.
func executorThreads(t *testing.T, cli *client.Client, sb sandbox.Sandbox) map[int]string {
	t.Helper()
	info, err := cli.ContainerInspect(t.Context(), sb.ID())
	if err != nil || info.State == nil {
		t.Fatalf("inspect: %v", err)
	}
	init := info.State.Pid
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", init, init))
	if err != nil {
		t.Fatal(err)
	}
	for _, kid := range strings.Fields(string(kids)) {
		if comm, _ := os.ReadFile("/proc/" + kid + "/comm"); strings.TrimSpace(string(comm)) != "executor" {
			continue // a process the bomb left to init
		}
		tasks, err := os.ReadDir("/proc/" + kid + "/task")
		if err != nil {
			t.Fatal(err)
		}
		policies := map[int]string{}
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + kid + "/task/" + task.Name() + "/stat")
			if err != nil {
				continue // ended since the listing
			}
			s := string(b)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
			tid, _ := strconv.Atoi(task.Name())
			policies[tid] = f[38]
		}
		return policies
	}
	t.Fatalf("no executor among the children %q of the container's init", kids)
	return nil
}

// TestForkBombExecutorThreads is a fork bomb against the executor's
// scheduling. The bomb fills the sandbox's core and its pids limit; the
// command's timeout must still end it on time, and no thread of the
// executor but the runtime's monitor (sysmon) may have the idle priority
// afterwards. A thread sysmon makes inherits that priority; one holding
// the executor's scheduler slot while the bomb ran kept the executor from
// acting on the timeout until the server gave up (TestConformance/ForkBomb
// failed so in CI). Before the executor started spare threads, 11 of 24
// bombs left such a thread; with them, none of 24.
func TestForkBombExecutorThreads(t *testing.T) {
	p, cli := newProvider(t)
	// A bomb in the background fills the pids limit, and the shell keeps
	// the core busy without forking again (a shell that cannot fork ends).
	const bomb = "(b() { b | b & }; b) & while :; do :; done"
	const sandboxes, rounds = 4, 4
	var wg sync.WaitGroup
	for range sandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb := baseSandbox(t, p, sandbox.Spec{Resources: sandbox.Resources{PIDs: 64}})
			for round := range rounds {
				// The last round's processes free their pids once reaped.
				waittest.Until(t, "a command before the bomb", 30*time.Second, func() (bool, error) {
					r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}, Timeout: 5 * time.Second})
					return err == nil && r.ExitCode == 0, nil
				})
				t0 := time.Now()
				r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", bomb}, Timeout: 3 * time.Second})
				if err != nil {
					t.Errorf("round %d: fork bomb: %v", round, err)
					return
				}
				// The timeout ends it (or the shell's first fork failed),
				// long before the server's grace.
				if d := time.Since(t0); d > 8*time.Second || (!r.TimedOut && r.ExitCode == 0) {
					t.Errorf("round %d: fork bomb ended after %v: %+v", round, d, r)
				}
				var idle []int
				for tid, policy := range executorThreads(t, cli, sb) {
					if policy == "5" { // SCHED_IDLE
						idle = append(idle, tid)
					}
				}
				if len(idle) != 1 {
					t.Errorf("round %d: executor threads with SCHED_IDLE after the bomb: %v, want one (sysmon)", round, idle)
				}
				if err := sb.KillAll(t.Context()); err != nil {
					t.Errorf("round %d: kill all: %v", round, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestPidsExhausted takes every pid of a sandbox, as the agent, twice with
// a sweep of the agent's processes between. While every pid is taken, the
// executor cannot make a thread, and a Go runtime that cannot make one it
// needs ends the process: the sandbox would fail, and the episode be
// masked, at the agent's will. File operations and commands must get
// their answers (a command that cannot start is refused), and a sweep
// must not cost the executor a thread: it used to end the thread it sent
// its signal from, and the runtime's next need for a thread then ended the
// executor ("failed to create new OS thread (have 7 already; errno=11)").
func TestPidsExhausted(t *testing.T) {
	p, cli := newProvider(t)
	ctx := t.Context()
	sb := baseSandbox(t, p, sandbox.Spec{Resources: sandbox.Resources{PIDs: 64}})
	for round := range 2 {
		before := len(executorThreads(t, cli, sb))
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", sandboxtest.PidHolder}, Timeout: 30 * time.Second})
		if err != nil || !strings.Contains(string(r.Stdout), "pids exhausted") {
			t.Fatalf("round %d: the pids were not exhausted, so the attack tested nothing: %+v %v", round, r, err)
		}
		for i := range 3 {
			path := fmt.Sprintf("/workspace/note%d.txt", i)
			if err := sb.WriteFile(ctx, path, []byte("every pid is taken"), 0o644); err != nil {
				t.Fatalf("round %d: write while every pid is taken: %v", round, err)
			}
			if b, err := sb.ReadFile(ctx, path, 100); err != nil || string(b) != "every pid is taken" {
				t.Fatalf("round %d: read while every pid is taken: %q %v", round, b, err)
			}
			r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo forked"}, Timeout: 5 * time.Second})
			if gym.ClassOf(err) == gym.ClassSandbox || (err == nil && r.ExitCode == 0 && string(r.Stdout) != "forked\n") {
				t.Fatalf("round %d: a command while every pid is taken: %+v %v", round, r, err)
			}
		}
		if err := sb.KillAll(ctx); err != nil {
			t.Fatalf("round %d: kill all: %v", round, err)
		}
		if after := len(executorThreads(t, cli, sb)); after < before {
			t.Errorf("round %d: the executor had %d threads before and %d after the sweep", round, before, after)
		}
		// The sweep's processes free their pids once reaped.
		waittest.Until(t, "a command after the sweep", 30*time.Second, func() (bool, error) {
			r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "alive"}, Timeout: 5 * time.Second})
			if gym.ClassOf(err) == gym.ClassSandbox {
				return false, err
			}
			return err == nil && string(r.Stdout) == "alive\n", nil
		})
	}
}

// TestExecutorOutOfPidsIsAgentCrash: with every pid of the sandbox taken
// by the agent, a burst of the server's own requests at once (more than an
// episode makes: its tool calls run one after the other) needs more
// threads than the executor keeps spare, and its runtime, unable to make
// one, ends the process. The sandbox's failure must then say that the
// agent brought it down (sandbox.ErrAgentCrash, scored 0, not masked), from
// the runtime's last words on the executor's stderr.
func TestExecutorOutOfPidsIsAgentCrash(t *testing.T) {
	p, _ := newProvider(t)
	ctx := t.Context()
	for attempt := range 5 {
		sb := baseSandbox(t, p, sandbox.Spec{Resources: sandbox.Resources{PIDs: 64}})
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", sandboxtest.PidHolder}, Timeout: 30 * time.Second})
		if err != nil || !strings.Contains(string(r.Stdout), "pids exhausted") {
			t.Fatalf("the pids were not exhausted: %+v %v", r, err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 60)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = sb.WriteFile(ctx, fmt.Sprintf("/workspace/n%d", i), make([]byte, 1<<20), 0o644)
			}()
		}
		wg.Wait()
		failed := 0
		for _, err := range errs {
			if err == nil {
				continue
			}
			failed++
			if !errors.Is(err, sandbox.ErrAgentCrash) || gym.ClassOf(err) != gym.ClassSandbox {
				t.Errorf("a request to an executor that ran out of pids: %v, want a sandbox error wrapping ErrAgentCrash", err)
			}
		}
		if failed > 0 {
			t.Logf("attempt %d: %d of %d requests failed, each as the agent's crash", attempt, failed, len(errs))
			return
		}
	}
	t.Skip("no burst ended the executor in 5 attempts: nothing to classify")
}
