package executor_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// schedPolicy is the scheduling policy in a /proc/.../sched file's text.
var schedPolicy = regexp.MustCompile(`(?m)^policy\s*:\s*(\d+)$`)

func policyOf(t *testing.T, sched []byte) int {
	t.Helper()
	m := schedPolicy.FindSubmatch(sched)
	if m == nil {
		t.Fatalf("no policy line in:\n%s", sched)
	}
	p, _ := strconv.Atoi(string(m[1]))
	return p
}

// TestSchedBatch checks the executor's scheduling (sched.go): its threads
// run SCHED_BATCH (3), and the commands it starts, and what they start,
// run SCHED_OTHER (0), as anywhere else.
func TestSchedBatch(t *testing.T) {
	c, cmd, _ := startExecutor(t)
	ctx := t.Context()
	// The command and a child of its own.
	for _, argv := range [][]string{{"/bin/cat", "/proc/self/sched"}, sh("cat /proc/self/sched; true")} {
		r, err := c.Exec(ctx, sandbox.ExecRequest{Argv: argv, Timeout: time.Minute})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%v: %v, exit %d, stderr %q", argv, err, r.ExitCode, r.Stderr)
		}
		if p := policyOf(t, r.Stdout); p != 0 {
			t.Errorf("%v runs under policy %d, want SCHED_OTHER (0)", argv, p)
		}
	}
	pid := cmd.Process.Pid
	main, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/sched")
	if err != nil {
		t.Fatal(err)
	}
	if p := policyOf(t, main); p != 3 {
		t.Errorf("the executor's main thread runs under policy %d, want SCHED_BATCH (3)", p)
	}
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/sched")
	batch := 0
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && policyOf(t, b) == 3 {
			batch++
		}
	}
	t.Logf("%d of the executor's %d threads are SCHED_BATCH", batch, len(tasks))
}
