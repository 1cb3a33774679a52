package docker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

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

// runHostSteps has the first n loops of h step, steps in all, and measures
// the host's busy time (the only measure that covers both kinds of loop:
// host processes of no container, and startContainerLoops' shells).
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

// containerLoopScript is what startContainerLoops runs in each sandbox: the
// loop of hostLoopScript, reading and writing two FIFOs in the sandbox's
// /tmp that the benchmark opens from the host.
const containerLoopScript = `rm -f /tmp/.floor-in /tmp/.floor-out && mkfifo /tmp/.floor-in /tmp/.floor-out && exec </tmp/.floor-in >/tmp/.floor-out && ` + hostLoopScript

// startContainerLoops starts the loop of hostLoops in each of boxes, as
// the agent, in the background (the executor only starts it), and
// connects to it through FIFOs in the sandbox's /tmp, opened from the host
// through /proc/PID/root. A step is then the same command run by a
// resident shell in the same sandbox, cgroups and file system as a step of
// gymserver, with no executor, no client and no transport: what the
// machine's own CPU per step is for sessions in containers. The loops end
// when the benchmark's cleanup closes their FIFOs.
func startContainerLoops(b *testing.B, boxes []sandbox.Sandbox) *hostLoops {
	b.Helper()
	ctx := context.Background()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	h := &hostLoops{}
	for i, sb := range boxes {
		if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", containerLoopScript}, Background: true}); err != nil {
			b.Fatalf("container loop %d: %v", i, err)
		}
		info, err := cli.ContainerInspect(ctx, sb.ID())
		if err != nil {
			b.Fatalf("container loop %d: %v", i, err)
		}
		dir := fmt.Sprintf("/proc/%d/root/tmp/", info.State.Pid)
		// The loop makes its FIFOs after the exec returns, and opens them
		// after that: without O_NONBLOCK, an open for writing would wait
		// for a reader forever if the loop had failed.
		deadline := time.Now().Add(30 * time.Second)
		var in *os.File
		for {
			if in, err = os.OpenFile(dir+".floor-in", os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("container loop %d: no reader of its FIFO after 30s: %v", i, err)
			}
			time.Sleep(time.Millisecond)
		}
		// The loop, reading, opens its output next.
		out, err := os.Open(dir + ".floor-out")
		if err != nil {
			in.Close()
			b.Fatalf("container loop %d: %v", i, err)
		}
		b.Cleanup(func() {
			in.Close()
			out.Close()
		})
		h.in = append(h.in, in)
		h.out = append(h.out, bufio.NewReader(out))
	}
	return h
}
