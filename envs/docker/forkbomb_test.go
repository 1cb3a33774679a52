package docker_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/sandbox"
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
	// Bombs in the background fill the pids limit, and the shell keeps
	// the core busy without forking (a shell that cannot fork ends).
	const bomb = "for i in 1 2 3 4; do (b() { b | b & }; b) & done; while :; do :; done"
	const sandboxes, rounds = 4, 4
	var wg sync.WaitGroup
	for range sandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb := baseSandbox(t, p, sandbox.Spec{Resources: sandbox.Resources{PIDs: 64}})
			for round := range rounds {
				t0 := time.Now()
				r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", bomb}, Timeout: 3 * time.Second})
				if err != nil {
					t.Errorf("round %d: fork bomb: %v", round, err)
					return
				}
				// The timeout ends it, long before the server's grace.
				if d := time.Since(t0); d > 8*time.Second || !r.TimedOut {
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
