package executor_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/internal/procstat"
)

// BenchmarkExecutorCost measures what the executor process itself spends
// (its own CPU and the context switches of its threads, children not
// included) per `/bin/sh -c "echo hi"` it runs as the agent (uid 1000),
// and per read_file and write_file of a small file as the agent, driven
// over pipes and pinned to one core with its commands, as in a sandbox,
// and the mean round trip of each. Two paces: back to back (a
// busy session), and with a pause between requests (a session among many,
// whose executor goes idle between steps). With $GYMSERVER_BASE_EXECUTOR
// naming a baseline binary (e.g. built from an earlier commit), both
// binaries run, alternating in rounds, and the baseline's figures are
// printed beside ours (NAME=PATH,NAME=PATH compares several). It must run
// as root (to act as the agent); otherwise it skips.
//
// Run: GYMSERVER_BASE_EXECUTOR=/tmp/base-gymexec go test -run '^$' -bench ExecutorCost -benchtime 400x ./envs/executor/
func BenchmarkExecutorCost(b *testing.B) {
	if os.Getuid() != 0 {
		b.Skip("needs root to run commands as the agent")
	}
	type arm struct{ name, bin string }
	var arms []arm
	// A list of NAME=PATH, comma-separated, compares several; a bare
	// path is named "base".
	for _, v := range strings.Split(os.Getenv("GYMSERVER_BASE_EXECUTOR"), ",") {
		if v == "" {
			continue
		}
		name, path, ok := strings.Cut(v, "=")
		if !ok {
			name, path = "base", v
		}
		arms = append(arms, arm{name, path})
	}
	arms = append(arms, arm{"ours", gymexecBinary(b)})
	for _, op := range []string{"exec", "read_file", "write_file"} {
		for _, pace := range []time.Duration{0, 20 * time.Millisecond} {
			b.Run(fmt.Sprintf("%s/pause=%s", op, pace), func(b *testing.B) {
				if b.N == 1 { // the benchmark's first, unreported run
					return
				}
				cpu := map[string][]float64{}
				sw := map[string][]float64{}
				lat := map[string][]float64{}
				const rounds = 3
				for round := 0; round < rounds; round++ {
					for _, a := range arms {
						c, s, l := executorCost(b, a.bin, op, b.N, pace)
						cpu[a.name] = append(cpu[a.name], c)
						sw[a.name] = append(sw[a.name], s)
						lat[a.name] = append(lat[a.name], l)
					}
				}
				var line []string
				for _, a := range arms {
					c, s, l := middle(cpu[a.name]), middle(sw[a.name]), middle(lat[a.name])
					b.ReportMetric(c, a.name+"_cpu_us/op")
					b.ReportMetric(s, a.name+"_switches/op")
					b.ReportMetric(l, a.name+"_round_trip_us")
					line = append(line, fmt.Sprintf("%s: executor CPU %.0f µs/%s (rounds %.0f), %.1f context switches (rounds %.1f), round trip %.0f µs (rounds %.0f)",
						a.name, c, op, cpu[a.name], s, sw[a.name], l, lat[a.name]))
				}
				fmt.Printf("BenchmarkExecutorCost/%s: %d per round, pause %s, median of %d rounds; %s; %s\n", op, b.N, pace, rounds, strings.Join(line, "; "), loadavg())
			})
		}
	}
}

// executorCost starts binary bin as an executor acting as uid 1000, has
// it serve n requests of op ("exec", "read_file" or "write_file"), one after the other
// with pause between them, and returns its own CPU time (µs) and context
// switches per request, and the mean round trip (µs, pauses not counted).
func executorCost(b *testing.B, bin, op string, n int, pause time.Duration) (cpuUS, switches, roundTripUS float64) {
	b.Helper()
	// Not b.TempDir: its parent is closed to the agent.
	work, err := os.MkdirTemp("", "executor-cost-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o777); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--workdir", work, "--agent", "1000:1000")
	// The executor's runtime is as in a sandbox: no GOMAXPROCS from here.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") && !strings.HasPrefix(kv, "GOGC=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := startPinned(cmd); err != nil {
		b.Fatal(err)
	}
	c := executor.NewClient(stdout, stdin)
	defer func() {
		c.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	ctx := context.Background()
	req := sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo hi"}, Timeout: time.Minute}
	run := func() {
		r, err := c.Exec(ctx, req)
		if err != nil || r.ExitCode != 0 || string(r.Stdout) != "hi\n" {
			b.Fatalf("exec: %v, exit %d, stdout %q, stderr %q", err, r.ExitCode, r.Stdout, r.Stderr)
		}
	}
	switch op {
	case "write_file":
		run = func() {
			if err := c.WriteFile(ctx, "out.txt", []byte("hi\n"), 0o644); err != nil {
				b.Fatalf("write_file: %v", err)
			}
		}
	case "read_file":
		if err := c.WriteFile(ctx, "hi.txt", []byte("hi\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		run = func() {
			data, err := c.ReadFile(ctx, "hi.txt", 100)
			if err != nil || string(data) != "hi\n" {
				b.Fatalf("read_file: %q %v", data, err)
			}
		}
	}
	run() // the executor is started and warm
	pid := cmd.Process.Pid
	cpu0, sw0 := procstat.CPU(pid), procstat.Switches(pid)
	var busy time.Duration
	for range n {
		if pause > 0 {
			time.Sleep(pause)
		}
		t0 := time.Now()
		run()
		busy += time.Since(t0)
	}
	cpu1, sw1 := procstat.CPU(pid), procstat.Switches(pid)
	return float64((cpu1 - cpu0).Microseconds()) / float64(n), float64(sw1-sw0) / float64(n), float64(busy.Microseconds()) / float64(n)
}

// startPinned starts cmd pinned to the machine's last core, as a sandbox's
// executor is pinned to its core, with the commands it runs: cmd inherits
// the CPU affinity of the thread that forks it, set for the moment.
func startPinned(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return err
	}
	one.Set(runtime.NumCPU() - 1)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &all)
	return cmd.Start()
}

// middle is the median of xs.
func middle(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// loadavg is the host's load average, for the benchmark log.
func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "load average unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}
