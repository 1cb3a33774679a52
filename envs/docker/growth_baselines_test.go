package docker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"testing"

	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"

	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// hostLoops are resident shells on the host, outside any container, one
// per session: each runs `/bin/sh -c "echo hi"` for every line it reads,
// the command's output going back on the shell's stdout. They are a step
// without Docker, an executor or gymserver: a resident process that wakes,
// starts the command and waits for it. Each is pinned to one core, in
// turn, as sandboxes are. cpuGrowth uses them to show how the machine's
// own CPU per step grows from 8 to 128 sessions.
type hostLoops struct {
	in  []io.WriteCloser
	out []*bufio.Reader
}

// hostLoopScript is what each of hostLoops runs.
const hostLoopScript = `while read -r _; do /bin/sh -c "echo hi"; done`

// startHostLoops starts n host loops; the benchmark's cleanup ends them.
func startHostLoops(b *testing.B, n int) *hostLoops {
	b.Helper()
	h := &hostLoops{}
	for i := range n {
		cmd := exec.Command("/bin/sh", "-c", hostLoopScript)
		in, out := startPiped(b, fmt.Sprintf("host loop %d", i), cmd)
		var set unix.CPUSet
		set.Set(i % numCPU())
		if err := unix.SchedSetaffinity(cmd.Process.Pid, &set); err != nil {
			b.Fatalf("pin host loop %d: %v", i, err)
		}
		h.in = append(h.in, in)
		h.out = append(h.out, bufio.NewReader(out))
	}
	return h
}

// step has loop i run the command once and checks its output.
func (h *hostLoops) step(i int) error {
	if _, err := io.WriteString(h.in[i], "x\n"); err != nil {
		return fmt.Errorf("host loop %d: %w", i, err)
	}
	line, err := h.out[i].ReadString('\n')
	if err != nil {
		return fmt.Errorf("host loop %d: %w", i, err)
	}
	if line != "hi\n" {
		return fmt.Errorf("host loop %d: got %q", i, line)
	}
	return nil
}

// runHostSteps has the first n host loops step, steps in all, and measures
// the host's busy time (the loops are host processes of no container).
func runHostSteps(b *testing.B, h *hostLoops, n, steps int) stepRun {
	return driveSteps(b, &cpuMeter{}, n, steps, h.step)
}

// runDockerAPISteps steps `/bin/sh -c "echo hi"` in boxes the way the
// seeds do with docker-py's exec_run: for each step an exec is created,
// started with its output attached and read to the end, and inspected for
// its exit code (dockerExec). Each step also starts a runc process, which
// no part of cpuMeter counts; the host's busy time does.
func runDockerAPISteps(b *testing.B, p *docker.Provider, boxes []sandbox.Sandbox, steps int) stepRun {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	return driveSteps(b, newCPUMeter(b, p, boxes), len(boxes), steps, func(i int) error {
		out, err := dockerExec(ctx, cli, boxes[i].ID(), stepCommand)
		if err != nil {
			return fmt.Errorf("docker exec: %w", err)
		}
		if out != "hi\n" {
			return fmt.Errorf("docker exec: stdout %q", out)
		}
		return nil
	})
}
