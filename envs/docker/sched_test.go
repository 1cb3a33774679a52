package docker_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// policyLine is the scheduling policy in a /proc/.../sched file's text.
var policyLine = regexp.MustCompile(`(?m)^policy\s*:\s*(\d+)$`)

// TestSandboxScheduling checks, in a real sandbox, the scheduling the
// executor sets up (envs/executor/sched.go): the executor's threads run
// SCHED_BATCH (3), seen from the host, while a command it runs for the
// agent, and that command's own child, run SCHED_OTHER (0).
func TestSandboxScheduling(t *testing.T) {
	p, cli := newProvider(t)
	sb := baseSandbox(t, p, sandbox.Spec{})
	code, out := run(t, sb, false, "grep ^policy /proc/self/sched; sh -c 'grep ^policy /proc/self/sched'")
	got := policyLine.FindAllStringSubmatch(out, -1)
	if code != 0 || len(got) != 2 {
		t.Fatalf("policy of a command and its child: exit %d, %q", code, out)
	}
	for _, m := range got {
		if m[1] != "0" {
			t.Errorf("a command runs under policy %s, want SCHED_OTHER (0): %q", m[1], out)
		}
	}
	info, err := cli.ContainerInspect(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	init := info.State.Pid
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", init, init))
	if err != nil || len(strings.Fields(string(kids))) != 1 {
		t.Fatalf("children of the container's init: %q %v", kids, err)
	}
	executor := strings.TrimSpace(string(kids))
	sched, err := os.ReadFile("/proc/" + executor + "/sched")
	if err != nil {
		t.Fatal(err)
	}
	if m := policyLine.FindStringSubmatch(string(sched)); m == nil || m[1] != "3" {
		t.Errorf("the executor's main thread: want policy SCHED_BATCH (3), got %q", m)
	}
}
