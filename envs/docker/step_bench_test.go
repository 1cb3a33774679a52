package docker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"golang.org/x/sync/errgroup"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// stepCommand is what an execute_command step of `echo hi` runs.
var stepCommand = []string{"/bin/sh", "-c", "echo hi"}

// BenchmarkStepSessions steps `echo hi` (as a step runs it, /bin/sh -c) in
// 8, 32 and 128 sandboxes at once, each session one command after the
// other, and reports the latency quantiles, steps/s and the CPU spent per
// step: in the containers (executor and command), in their containerd
// shims, in dockerd and containerd (shared with whatever else uses the
// engine) and in this process (the client side). The baseline beside it,
// "ceiling", is what the host can do at most: the same command run in a
// tight loop directly inside one sandbox, one loop per core, with no
// transport at all.
//
// b.N is the number of steps of each sub-benchmark, spread over its
// sessions. Run: go test -run '^$' -bench StepSessions -benchtime 2000x ./envs/docker/
func BenchmarkStepSessions(b *testing.B) {
	// The executors' own diagnostics (stderr) go to the benchmark's.
	p, _ := dockertest.New(b, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx := context.Background()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		b.Fatal(err)
	}
	var boxes []sandbox.Sandbox
	defer func() {
		for _, sb := range boxes {
			sb.Close(ctx)
		}
	}()
	// grow makes sandboxes until there are n.
	grow := func(b *testing.B, n int) {
		more := make([]sandbox.Sandbox, n-len(boxes))
		var g errgroup.Group
		g.SetLimit(8)
		for i := range more {
			g.Go(func() (err error) {
				more[i], err = p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace"})
				return err
			})
		}
		err := g.Wait()
		for _, sb := range more {
			if sb != nil {
				boxes = append(boxes, sb)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range []int{8, 32, 128} {
		for _, mode := range []string{"exec", "shell"} {
			req := sandbox.ExecRequest{Argv: stepCommand, Timeout: time.Minute}
			if mode == "shell" {
				req = sandbox.ExecRequest{Argv: []string{"echo hi"}, Shell: true, Timeout: time.Minute}
			}
			stepSessions(b, fmt.Sprintf("sessions=%d/%s", n, mode), n, req, grow, &boxes, p)
		}
	}
	b.Run("ceiling", func(b *testing.B) {
		b.StopTimer()
		// One loop per core, as the agent, in one sandbox without the CPU
		// quota of a session (it would cap the loops at one core).
		sb, err := p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace",
			Resources: sandbox.Resources{CPUs: float64(numCPU())}})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close(ctx)
		loops := numCPU()
		per := max(b.N/loops, 1)
		script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do /bin/sh -c "echo hi" >/dev/null; i=$((i+1)); done`, per)
		var g errgroup.Group
		b.StartTimer()
		start := time.Now()
		for range loops {
			g.Go(func() error {
				r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Timeout: 10 * time.Minute})
				if err == nil && r.ExitCode != 0 {
					err = fmt.Errorf("loop: exit %d: %s", r.ExitCode, r.Stderr)
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start)
		b.StopTimer()
		rate := float64(per*loops) / wall.Seconds()
		b.ReportMetric(rate, "steps/s")
		// Wall time of one run on one busy core: an upper bound of its CPU.
		b.ReportMetric(1000/rate*float64(loops), "core_ms/run")
		b.Logf("ceiling: %d x %d runs of /bin/sh -c \"echo hi\" in one sandbox in %s: %.0f/s; %s", loops, per, wall.Round(time.Millisecond), rate, loadavg())
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// numCPU is the number of cores of the host.
func numCPU() int {
	n := 0
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "processor") {
			n++
		}
	}
	return max(n, 1)
}

// loadavg is the host's load average, for the benchmark log.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}

// cpuTimes is CPU time by where it was spent.
// executors is part of containers; throttled is how long the
// containers' CPU quota held them back, in throttles periods.
type cpuTimes struct {
	containers, executors, shims, engine, self time.Duration
	throttled                                  time.Duration
	throttles                                  int64
}

func (c cpuTimes) total() time.Duration { return c.containers + c.shims + c.engine + c.self }

func (c cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{c.containers - o.containers, c.executors - o.executors, c.shims - o.shims, c.engine - o.engine, c.self - o.self,
		c.throttled - o.throttled, c.throttles - o.throttles}
}

// cpuMeter reads the CPU time of a set of sandboxes, their shims, the
// engine and this process.
type cpuMeter struct {
	cgroups   []string // cpuacct.usage files of the containers
	shims     []int
	executors []int
	engine    []int // dockerd and containerd
	before    cpuTimes
}

func newCPUMeter(b *testing.B, p *docker.Provider, boxes []sandbox.Sandbox) *cpuMeter {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	m := &cpuMeter{}
	for _, sb := range boxes {
		info, err := cli.ContainerInspect(context.Background(), sb.ID())
		if err != nil || info.State == nil {
			b.Fatalf("inspect %s: %v", sb.ID(), err)
		}
		pid := info.State.Pid
		m.cgroups = append(m.cgroups, cpuacctFile(b, pid))
		m.shims = append(m.shims, ppid(pid))
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		switch strings.TrimSpace(string(comm)) {
		case "dockerd", "containerd":
			m.engine = append(m.engine, pid)
		case "executor":
			cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
			for _, sb := range boxes {
				if strings.Contains(string(cg), sb.ID()) {
					m.executors = append(m.executors, pid)
				}
			}
		}
	}
	return m
}

func (m *cpuMeter) read() cpuTimes {
	var c cpuTimes
	for _, f := range m.cgroups {
		b, _ := os.ReadFile(f)
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		c.containers += time.Duration(n)
		st, _ := os.ReadFile(filepath.Join(filepath.Dir(strings.Replace(f, "/cpuacct/", "/cpu/", 1)), "cpu.stat"))
		for _, l := range strings.Split(string(st), "\n") {
			k, v, _ := strings.Cut(l, " ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "nr_throttled":
				c.throttles += n
			case "throttled_time":
				c.throttled += time.Duration(n)
			}
		}
	}
	for _, pid := range m.shims {
		c.shims += procCPU(pid)
	}
	for _, pid := range m.executors {
		c.executors += procCPU(pid)
	}
	for _, pid := range m.engine {
		c.engine += procCPU(pid)
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return c
}

func (m *cpuMeter) start() { m.before = m.read() }

func (m *cpuMeter) stop() cpuTimes { return m.read().sub(m.before) }

// cpuacctFile is the cpuacct.usage file of the cgroup of pid (cgroup v1),
// or, on cgroup v2, its cpu.stat is not read and the benchmark fails.
func cpuacctFile(b *testing.B, pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) == 3 && strings.Contains(f[1], "cpuacct") {
			return filepath.Join("/sys/fs/cgroup/cpuacct", f[2], "cpuacct.usage")
		}
	}
	b.Fatalf("no cpuacct cgroup for pid %d (cgroup v2 is not measured)", pid)
	return ""
}

// ppid is the parent of pid.
func ppid(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// procCPU is the user and system time of pid, children not included.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ
}

// stepSessions is one sub-benchmark of BenchmarkStepSessions: n sessions
// stepping req at once.
func stepSessions(b *testing.B, name string, n int, req sandbox.ExecRequest, grow func(*testing.B, int), made *[]sandbox.Sandbox, p *docker.Provider) {
	ctx := context.Background()
	b.Run(name, func(b *testing.B) {
		b.StopTimer()
		grow(b, n)
		boxes := *made
		// One untimed step each: the persistent shell starts on a
		// session's first command.
		var warm errgroup.Group
		for _, sb := range boxes[:n] {
			warm.Go(func() error {
				_, err := sb.Exec(ctx, req)
				return err
			})
		}
		if err := warm.Wait(); err != nil {
			b.Fatal(err)
		}
		meter := newCPUMeter(b, p, boxes[:n])
		var left atomic.Int64
		left.Store(int64(b.N))
		lats := make([][]time.Duration, n)
		var g errgroup.Group
		b.StartTimer()
		start := time.Now()
		meter.start()
		for i, sb := range boxes[:n] {
			g.Go(func() error {
				for left.Add(-1) >= 0 {
					t0 := time.Now()
					r, err := sb.Exec(ctx, req)
					if err != nil {
						return err
					}
					if string(r.Stdout) != "hi\n" || r.ExitCode != 0 {
						return fmt.Errorf("exec: exit %d stdout %q stderr %q", r.ExitCode, r.Stdout, r.Stderr)
					}
					lats[i] = append(lats[i], time.Since(t0))
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start)
		b.StopTimer()
		cpu := meter.stop()
		var all []time.Duration
		for _, l := range lats {
			all = append(all, l...)
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		p50, p99 := all[len(all)/2], all[len(all)*99/100]
		steps := float64(len(all))
		b.ReportMetric(ms(p50), "p50_ms")
		b.ReportMetric(ms(p99), "p99_ms")
		b.ReportMetric(float64(p99)/float64(p50), "p99/p50")
		b.ReportMetric(steps/wall.Seconds(), "steps/s")
		b.ReportMetric(ms(cpu.total())/steps, "cpu_ms/step")
		b.ReportMetric(ms(cpu.containers)/steps, "container_cpu_ms/step")
		b.ReportMetric(ms(cpu.executors)/steps, "executor_cpu_ms/step")
		b.ReportMetric(ms(cpu.shims)/steps, "shim_cpu_ms/step")
		b.ReportMetric(ms(cpu.engine)/steps, "engine_cpu_ms/step")
		b.ReportMetric(ms(cpu.self)/steps, "client_cpu_ms/step")
		b.Logf("%d sessions, %d steps in %s: p50 %s p99 %s max %s; cpu/step: containers %.2f ms (executor %.2f ms), shims %.2f ms, dockerd+containerd %.2f ms, client %.2f ms; CPU quota throttled %d periods, %s in all; %s",
			n, len(all), wall.Round(time.Millisecond), p50, p99, all[len(all)-1], ms(cpu.containers)/steps, ms(cpu.executors)/steps, ms(cpu.shims)/steps,
			ms(cpu.engine)/steps, ms(cpu.self)/steps, cpu.throttles, cpu.throttled.Round(time.Millisecond), loadavg())
	})
}
