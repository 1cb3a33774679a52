package docker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	"github.com/gymserver/gymserver/internal/procstat"
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
// cpu_growth measures how CPU per step grows from 8 to 128 sessions, for
// these sandboxes, for sandboxes whose client keeps the attach stream
// (Options.AttachStream), as before executor sockets, for the Docker API
// exec docker-py makes, and for the machine alone (resident shells on the
// host): see cpuGrowth.
//
// At 8 and 32 sessions, exec_floating runs the same steps in sandboxes
// of a provider that does not pin them to cores (Options.FloatCPUs), as
// every sandbox ran before pinning: its p99/p50 beside ours shows what
// pinning does to fairness.
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
	var boxes, floating []sandbox.Sandbox
	defer func() {
		for _, sb := range append(boxes, floating...) {
			sb.Close(ctx)
		}
	}()
	// grower returns a function that makes sandboxes of p until boxes
	// holds n.
	grower := func(p *docker.Provider, boxes *[]sandbox.Sandbox) func(*testing.B, int) {
		return func(b *testing.B, n int) { growSandboxes(b, p, image, boxes, n) }
	}
	grow := grower(p, &boxes)
	// The same steps in sandboxes that are not pinned to cores
	// (Options.FloatCPUs), from a second provider, at 8 and 32 sessions.
	fp, _ := dockertest.NewWith(b, docker.Options{FloatCPUs: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	growFloating := grower(fp, &floating)
	var ceilingBox sandbox.Sandbox
	defer func() {
		if ceilingBox != nil {
			ceilingBox.Close(ctx)
		}
	}()
	ceiling := func(b *testing.B) sandbox.Sandbox {
		if ceilingBox == nil {
			ceilingBox = makeCeilingSandbox(b, p, image)
		}
		return ceilingBox
	}
	// The same steps in sandboxes whose client keeps the attach stream,
	// as before executor sockets (Options.AttachStream), at 8 and 128
	// sessions.
	ap, _ := dockertest.NewWith(b, docker.Options{AttachStream: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	var attached []sandbox.Sandbox
	defer func() {
		for _, sb := range attached {
			sb.Close(ctx)
		}
	}()
	growAttached := grower(ap, &attached)
	for _, n := range []int{8, 32, 128} {
		for _, mode := range []string{"exec", "shell"} {
			req := sandbox.ExecRequest{Argv: stepCommand, Timeout: time.Minute}
			if mode == "shell" {
				req = sandbox.ExecRequest{Argv: []string{"echo hi"}, Shell: true, Timeout: time.Minute}
			}
			var c func(*testing.B) sandbox.Sandbox
			if n == 128 && mode == "exec" {
				c = ceiling
			}
			stepSessions(b, fmt.Sprintf("sessions=%d/%s", n, mode), n, req, grow, &boxes, p, c)
			if mode == "exec" && n <= 32 {
				stepSessions(b, fmt.Sprintf("sessions=%d/exec_floating", n), n, req, growFloating, &floating, fp, nil)
			}
		}
	}
	b.Run("cpu_growth", func(b *testing.B) {
		b.StopTimer()
		grow(b, 128)
		growAttached(b, 128)
		if b.N == 1 { // the benchmark's first, unreported run
			return
		}
		cpuGrowth(b, p, ap, boxes[:128], attached[:128])
	})
	// The sandboxes of the comparison go before the idle phase.
	for _, sb := range attached {
		sb.Close(ctx)
	}
	attached = nil
	b.Run("idle=128", func(b *testing.B) {
		b.StopTimer()
		grow(b, 128)
		idleSandboxes(b, p, boxes[:128])
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
// executors is part of containers; fuse is the fuse-overlayfs daemons of
// the containers' file systems (host processes, one per container); host
// is the busy time of every CPU of the host, whoever spent it (other
// work on the machine included); throttled is how long the containers'
// CPU quota held them back, in throttles periods.
type cpuTimes struct {
	containers, executors, shims, fuse, engine, self time.Duration
	host                                             time.Duration
	throttled                                        time.Duration
	throttles                                        int64
	// execFaults is the executors' page faults.
	execFaults int64
}

func (c cpuTimes) total() time.Duration { return c.containers + c.shims + c.fuse + c.engine + c.self }

// per is c divided by n steps (the counts stay counts).
func (c cpuTimes) per(n int) cpuTimes {
	d := func(t time.Duration) time.Duration { return t / time.Duration(n) }
	return cpuTimes{d(c.containers), d(c.executors), d(c.shims), d(c.fuse), d(c.engine), d(c.self), d(c.host), d(c.throttled), c.throttles, c.execFaults}
}

// parts names the parts of c that cpu_growth reports: the executors, the
// commands (the rest of the containers' time), shims, fuse-overlayfs,
// dockerd+containerd, this process (the client), and the host's busy time
// beyond all of these (the kernel's work outside any of them, and whatever
// else runs on the machine).
func (c cpuTimes) parts() []time.Duration {
	return []time.Duration{c.executors, c.containers - c.executors, c.shims, c.fuse, c.engine, c.self, c.host - c.total()}
}

// partNames are the names of cpuTimes.parts, in order.
var partNames = []string{"executor", "command", "shims", "fuse-overlayfs", "dockerd+containerd", "client", "host other"}

// medianParts is the median of each part (cpuTimes.parts) over rounds.
func medianParts(rounds []cpuTimes) []time.Duration {
	med := make([]time.Duration, len(partNames))
	for i := range med {
		var xs []float64
		for _, r := range rounds {
			xs = append(xs, float64(r.parts()[i]))
		}
		med[i] = time.Duration(medianOf(xs))
	}
	return med
}

// partsGrowth prints each part at 8 and at 128 sessions, and its change.
func partsGrowth(p8, p128 []time.Duration) string {
	var out []string
	for i, name := range partNames {
		out = append(out, fmt.Sprintf("%s %.3f -> %.3f (%+.3f)", name, ms(p8[i]), ms(p128[i]), ms(p128[i]-p8[i])))
	}
	return strings.Join(out, "; ")
}

func (c cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{c.containers - o.containers, c.executors - o.executors, c.shims - o.shims, c.fuse - o.fuse, c.engine - o.engine,
		c.self - o.self, c.host - o.host, c.throttled - o.throttled, c.throttles - o.throttles,
		c.execFaults - o.execFaults}
}

// cpuMeter reads the CPU time of a set of sandboxes, their shims, the
// engine and this process.
type cpuMeter struct {
	cgroups   []string // cpuacct.usage files of the containers
	shims     []int
	executors []int
	fuse      []int // fuse-overlayfs daemons of the containers' root file systems
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
	// A fuse-overlayfs daemon names its mount point, the container's
	// merged directory, on its command line.
	merged := map[string]bool{}
	for _, sb := range boxes {
		info, err := cli.ContainerInspect(context.Background(), sb.ID())
		if err != nil || info.State == nil {
			b.Fatalf("inspect %s: %v", sb.ID(), err)
		}
		pid := info.State.Pid
		m.cgroups = append(m.cgroups, cpuacctFile(b, pid))
		m.shims = append(m.shims, procstat.Parent(pid))
		if d := info.GraphDriver.Data["MergedDir"]; d != "" {
			merged[d] = true
		}
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
		case "fuse-overlayfs":
			args, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			for _, a := range strings.Split(string(args), "\x00") {
				if merged[a] {
					m.fuse = append(m.fuse, pid)
					break
				}
			}
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
		c.shims += procstat.CPU(pid)
	}
	for _, pid := range m.executors {
		c.executors += procstat.CPU(pid)
		c.execFaults += procstat.Faults(pid)
	}
	for _, pid := range m.fuse {
		c.fuse += procstat.CPU(pid)
	}
	for _, pid := range m.engine {
		c.engine += procstat.CPU(pid)
	}
	c.host = procstat.HostBusy()
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

// stepRun is what one phase of n sessions stepping measured.
type stepRun struct {
	n    int
	lats []time.Duration // sorted
	wall time.Duration
	cpu  cpuTimes
	// switches is the number of context switches of the executors'
	// threads (their wake-ups), children not included.
	switches int64
}

func (r stepRun) rate() float64 { return float64(len(r.lats)) / r.wall.Seconds() }

func (r stepRun) quantile(q float64) time.Duration { return r.lats[int(float64(len(r.lats))*q)] }

// perStep is d spread over the run's steps, in milliseconds.
func (r stepRun) perStep(d time.Duration) float64 { return ms(d) / float64(len(r.lats)) }

// report gives the run's figures to b and the log.
func (r stepRun) report(b *testing.B) {
	p50, p99 := r.quantile(0.5), r.quantile(0.99)
	b.ReportMetric(ms(p50), "p50_ms")
	b.ReportMetric(ms(p99), "p99_ms")
	b.ReportMetric(float64(p99)/float64(p50), "p99/p50")
	b.ReportMetric(r.rate(), "steps/s")
	b.ReportMetric(r.perStep(r.cpu.total()), "cpu_ms/step")
	b.ReportMetric(r.perStep(r.cpu.containers), "container_cpu_ms/step")
	b.ReportMetric(r.perStep(r.cpu.executors), "executor_cpu_ms/step")
	b.ReportMetric(r.perStep(r.cpu.shims), "shim_cpu_ms/step")
	b.ReportMetric(r.perStep(r.cpu.fuse), "fuse_cpu_ms/step")
	b.ReportMetric(r.perStep(r.cpu.engine), "engine_cpu_ms/step")
	b.ReportMetric(r.perStep(r.cpu.self), "client_cpu_ms/step")
	b.ReportMetric(float64(r.switches)/float64(len(r.lats)), "executor_switches/step")
	b.Logf("%s", r)
}

func (r stepRun) String() string {
	c := r.cpu
	return fmt.Sprintf("%d sessions, %d steps in %s (%.0f/s): p50 %s p99 %s max %s; cpu/step %.2f ms: containers %.2f ms (executor %.2f ms, %.1f executor context switches/step), shims %.2f ms, fuse-overlayfs %.2f ms, dockerd+containerd %.2f ms, client %.2f ms; host busy %.2f ms/step (all its work); CPU quota throttled %d periods, %s in all; %s",
		r.n, len(r.lats), r.wall.Round(time.Millisecond), r.rate(), r.quantile(0.5), r.quantile(0.99), r.lats[len(r.lats)-1],
		r.perStep(c.total()), r.perStep(c.containers), r.perStep(c.executors), float64(r.switches)/float64(len(r.lats)), r.perStep(c.shims), r.perStep(c.fuse), r.perStep(c.engine),
		r.perStep(c.self), r.perStep(c.host), c.throttles, c.throttled.Round(time.Millisecond), loadavg())
}

// runSteps has the n sessions of boxes step req, steps in all, each
// session one step after the other, and measures it.
func runSteps(b *testing.B, p *docker.Provider, boxes []sandbox.Sandbox, req sandbox.ExecRequest, steps int) stepRun {
	ctx := context.Background()
	return driveSteps(b, newCPUMeter(b, p, boxes), len(boxes), steps, func(i int) error {
		r, err := boxes[i].Exec(ctx, req)
		if err != nil {
			return err
		}
		if string(r.Stdout) != "hi\n" || r.ExitCode != 0 {
			return fmt.Errorf("exec: exit %d stdout %q stderr %q", r.ExitCode, r.Stdout, r.Stderr)
		}
		return nil
	})
}

// driveSteps has n sessions call step (with the session's index), steps
// calls in all, each session one call after the other, and measures it
// with meter.
func driveSteps(b *testing.B, meter *cpuMeter, n, steps int, step func(i int) error) stepRun {
	var left atomic.Int64
	left.Store(int64(steps))
	lats := make([][]time.Duration, n)
	var g errgroup.Group
	switches := func() (n int64) {
		for _, pid := range meter.executors {
			n += procstat.Switches(pid)
		}
		return n
	}
	sw := switches()
	start := time.Now()
	meter.start()
	for i := range n {
		g.Go(func() error {
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				if err := step(i); err != nil {
					return err
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	run := stepRun{n: n, wall: time.Since(start), cpu: meter.stop()}
	run.switches = switches() - sw
	for _, l := range lats {
		run.lats = append(run.lats, l...)
	}
	sort.Slice(run.lats, func(i, j int) bool { return run.lats[i] < run.lats[j] })
	return run
}

// ceilingRounds is how many times the 128-session phase and the ceiling
// alternate.
const ceilingRounds = 3

// runCeiling runs `/bin/sh -c "echo hi"` runs times in a tight loop in
// sandbox sb, one loop per core, and returns the runs per second.
func runCeiling(b *testing.B, sb sandbox.Sandbox, runs int) float64 {
	ctx := context.Background()
	loops := numCPU()
	per := max(runs/loops, 1)
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do /bin/sh -c "echo hi" >/dev/null; i=$((i+1)); done`, per)
	var g errgroup.Group
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
	return float64(per*loops) / time.Since(start).Seconds()
}

// makeCeilingSandbox makes the sandbox the ceiling runs in: one without
// the CPU quota of a session (it would cap the loops at one core), with
// the shared /usr as the sessions have it.
func makeCeilingSandbox(b *testing.B, p *docker.Provider, image string) sandbox.Sandbox {
	sb, err := p.Create(context.Background(), sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true,
		Resources: sandbox.Resources{CPUs: float64(numCPU())}})
	if err != nil {
		b.Fatal(err)
	}
	return sb
}

// medianOf is the middle of xs (the mean of the two middle ones for an even
// count).
func medianOf(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// warmUp runs one untimed step in each sandbox: the persistent shell
// starts on a session's first command.
func warmUp(b *testing.B, boxes []sandbox.Sandbox, req sandbox.ExecRequest) {
	var warm errgroup.Group
	for _, sb := range boxes {
		warm.Go(func() error {
			_, err := sb.Exec(context.Background(), req)
			return err
		})
	}
	if err := warm.Wait(); err != nil {
		b.Fatal(err)
	}
}

// growthRounds is how many times cpuGrowth measures each of its arms,
// after one round it does not count.
const growthRounds = 4

// growthArm is one way of stepping that cpuGrowth measures, at one number
// of sessions.
type growthArm struct {
	name string
	run  func(b *testing.B) stepRun
	// parted says whether the processes of its steps are cpuMeter's
	// parts (sandboxes stepped through gymserver's executor); otherwise
	// only host is a measure of it.
	parted bool
	// cpu is the CPU per step of the parts cpuMeter names, host the
	// host's busy time per step, and parts the parts per step, by round.
	cpu, host []float64
	parts     []cpuTimes
	// faults and switches are the executors' page faults and context
	// switches per step, by round.
	faults, switches []float64
}

// cpuGrowth runs `/bin/sh -c "echo hi"` steps in 8 and in 128 sessions of
// four kinds, in alternating order over growthRounds rounds, so that a
// drift of the machine's speed falls on every arm alike (the first round,
// which finds the sandboxes just made, is not counted):
//   - socket: the sandboxes whose client speaks to the executor's socket,
//     as gymserver runs (b.N steps);
//   - attach: sandboxes whose client keeps the attach stream
//     (Options.AttachStream), as before executor sockets (b.N steps);
//   - docker_api: the socket sandboxes stepped the way the seeds step with
//     docker-py, an exec created, started and inspected per step
//     (runDockerAPISteps; b.N/8 steps, at least 32: each costs tens of
//     milliseconds);
//   - host: resident shells on the host that run the command, with no
//     Docker and no gymserver (hostLoops; b.N steps), which shows how
//     much of the growth is the machine's own;
//   - container: the same resident shells inside the socket sandboxes,
//     driven through FIFOs (startContainerLoops; b.N steps): the same
//     cgroups, pinning and file system as gymserver's steps, with no
//     executor, client or transport, which shows how much of the growth
//     is the machine's own for sessions in containers.
//
// It reports the median CPU per step of each arm, how much it grows from
// 8 to 128 sessions, where the growth is (the parts of the socket and
// attach arms), the socket arm's CPU per step over the attach arm's round
// by round, the host's busy time per step of every arm (the only measure
// the docker_api, host and container arms have: the processes of their
// steps are short-lived, runc's belong to no container, and the container
// arm's sandboxes are the socket arm's), and gymserver's own part: the
// socket arm's host busy time beyond the container arm's.
func cpuGrowth(b *testing.B, sp, ap *docker.Provider, socket, attach []sandbox.Sandbox) {
	req := sandbox.ExecRequest{Argv: stepCommand, Timeout: time.Minute}
	warmUp(b, socket, req)
	warmUp(b, attach, req)
	loops := startHostLoops(b, len(socket))
	inside := startContainerLoops(b, socket)
	apiSteps := max(b.N/8, 32)
	var arms []*growthArm
	for _, n := range []int{8, 128} {
		arms = append(arms,
			&growthArm{name: fmt.Sprintf("socket_%d", n), parted: true, run: func(b *testing.B) stepRun { return runSteps(b, sp, socket[:n], req, b.N) }},
			&growthArm{name: fmt.Sprintf("attach_%d", n), parted: true, run: func(b *testing.B) stepRun { return runSteps(b, ap, attach[:n], req, b.N) }},
			&growthArm{name: fmt.Sprintf("docker_api_%d", n), run: func(b *testing.B) stepRun { return runDockerAPISteps(b, sp, socket[:n], apiSteps) }},
			&growthArm{name: fmt.Sprintf("host_%d", n), run: func(b *testing.B) stepRun { return runHostSteps(b, loops, n, b.N) }},
			&growthArm{name: fmt.Sprintf("container_%d", n), run: func(b *testing.B) stepRun { return runHostSteps(b, inside, n, b.N) }})
	}
	for round := range growthRounds + 1 {
		order := slices.Clone(arms)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, a := range order {
			b.StartTimer()
			run := a.run(b)
			b.StopTimer()
			if round > 0 {
				a.cpu = append(a.cpu, run.perStep(run.cpu.total()))
				a.host = append(a.host, run.perStep(run.cpu.host))
				a.parts = append(a.parts, run.cpu.per(len(run.lats)))
				a.faults = append(a.faults, float64(run.cpu.execFaults)/float64(len(run.lats)))
				a.switches = append(a.switches, float64(run.switches)/float64(len(run.lats)))
			}
		}
	}
	med, host := map[string]float64{}, map[string]float64{}
	for _, a := range arms {
		med[a.name], host[a.name] = medianOf(a.cpu), medianOf(a.host)
		b.ReportMetric(host[a.name], a.name+"_host_ms/step")
		if !a.parted {
			b.Logf("%s: host busy per step by round %s ms", a.name, floatsAs("%.2f", a.host...))
			continue
		}
		b.ReportMetric(med[a.name], a.name+"_cpu_ms/step")
		b.Logf("%s: CPU per step by round %s ms; host busy per step %s ms", a.name, floatsAs("%.2f", a.cpu...), floatsAs("%.2f", a.host...))
	}
	arm := map[string]*growthArm{}
	for _, a := range arms {
		arm[a.name] = a
	}
	// Where the growth is: each part's median per step, at 8 and at 128.
	for _, kind := range []string{"socket", "attach"} {
		fmt.Printf("BenchmarkStepSessions/cpu_growth: %s, median ms per step at 8 -> 128 sessions: %s\n", kind,
			partsGrowth(medianParts(arm[kind+"_8"].parts), medianParts(arm[kind+"_128"].parts)))
		a8, a128 := arm[kind+"_8"], arm[kind+"_128"]
		fmt.Printf("BenchmarkStepSessions/cpu_growth: %s, the executors' page faults per step at 8 -> 128 sessions %.2f -> %.2f, context switches %.2f -> %.2f\n", kind,
			medianOf(a8.faults), medianOf(a128.faults), medianOf(a8.switches), medianOf(a128.switches))
	}
	// paired is the socket arm's CPU per step over the attach arm's, round
	// by round, at n sessions.
	paired := func(n int) []float64 {
		s, a := arm[fmt.Sprintf("socket_%d", n)], arm[fmt.Sprintf("attach_%d", n)]
		var r []float64
		for j := range s.cpu {
			r = append(r, s.cpu[j]/a.cpu[j])
		}
		return r
	}
	at8, at128 := paired(8), paired(128)
	growth := func(m map[string]float64, kind string) float64 { return 100 * (m[kind+"_128"]/m[kind+"_8"] - 1) }
	b.ReportMetric(growth(med, "socket"), "socket_growth_%")
	b.ReportMetric(growth(med, "attach"), "attach_growth_%")
	for _, kind := range []string{"socket", "docker_api", "host", "container"} {
		b.ReportMetric(growth(host, kind), kind+"_host_growth_%")
	}
	// gymserver's own part: the socket arm's host busy time beyond the
	// container arm's, round by round.
	own := func(n int) float64 {
		s, c := arm[fmt.Sprintf("socket_%d", n)], arm[fmt.Sprintf("container_%d", n)]
		var d []float64
		for j := range s.host {
			d = append(d, s.host[j]-c.host[j])
		}
		return medianOf(d)
	}
	own8, own128 := own(8), own(128)
	b.ReportMetric(100*(own128/own8-1), "own_host_growth_%")
	b.ReportMetric(medianOf(at8), "socket/attach_at_8")
	b.ReportMetric(medianOf(at128), "socket/attach_at_128")
	fmt.Printf("BenchmarkStepSessions/cpu_growth: CPU per step from 8 to 128 sessions (median of %d alternating rounds): executor socket %.2f -> %.2f ms (%+.0f %%); attach stream (before) %.2f -> %.2f ms (%+.0f %%); socket over attach by round at 8 %s (median %.2f), at 128 %s (median %.2f)\n",
		growthRounds, med["socket_8"], med["socket_128"], growth(med, "socket"), med["attach_8"], med["attach_128"], growth(med, "attach"),
		floatsAs("%.2f", at8...), medianOf(at8), floatsAs("%.2f", at128...), medianOf(at128))
	fmt.Printf("BenchmarkStepSessions/cpu_growth: host busy per step from 8 to 128 sessions (median of %d alternating rounds): gymserver (executor socket) %.2f -> %.2f ms (%+.0f %%); attach stream %.2f -> %.2f ms (%+.0f %%); baseline, the Docker API as docker-py's exec_run calls it, %.2f -> %.2f ms (%+.0f %%); the machine alone (a resident /bin/sh per session on the host, no Docker) %.3f -> %.3f ms (%+.0f %%); the machine in containers (the same shells in the sandboxes, no gymserver) %.3f -> %.3f ms (%+.0f %%); gymserver's own part (beyond the machine in containers, median by round) %.3f -> %.3f ms (%+.0f %%)\n",
		growthRounds, host["socket_8"], host["socket_128"], growth(host, "socket"), host["attach_8"], host["attach_128"], growth(host, "attach"),
		host["docker_api_8"], host["docker_api_128"], growth(host, "docker_api"), host["host_8"], host["host_128"], growth(host, "host"),
		host["container_8"], host["container_128"], growth(host, "container"), own8, own128, 100*(own128/own8-1))
}

// stepSessions is one sub-benchmark of BenchmarkStepSessions: n sessions
// stepping req at once. With ceiling set, the phase runs ceilingRounds
// times, each followed by the ceiling measured in the same number of runs,
// and the verdict is the median of the rounds' ratios.
func stepSessions(b *testing.B, name string, n int, req sandbox.ExecRequest, grow func(*testing.B, int), made *[]sandbox.Sandbox,
	p *docker.Provider, ceiling func(*testing.B) sandbox.Sandbox) {
	b.Run(name, func(b *testing.B) {
		b.StopTimer()
		grow(b, n)
		boxes := (*made)[:n]
		warmUp(b, boxes, req)
		if ceiling == nil || b.N == 1 {
			// b.N is 1 only in the benchmark's first, unreported run.
			b.StartTimer()
			run := runSteps(b, p, boxes, req, b.N)
			b.StopTimer()
			run.report(b)
			return
		}
		csb := ceiling(b)
		var ratios, ceilings []float64
		var runs []stepRun
		for round := 1; round <= ceilingRounds; round++ {
			b.StartTimer()
			run := runSteps(b, p, boxes, req, b.N)
			b.StopTimer()
			c := runCeiling(b, csb, b.N)
			runs = append(runs, run)
			ratios = append(ratios, run.rate()/c)
			ceilings = append(ceilings, c)
			b.Logf("round %d: ceiling (%d x %d runs in one sandbox) %.0f/s, %.0f %% of it; %s", round, numCPU(), max(b.N/numCPU(), 1), c, 100*run.rate()/c, run)
		}
		// The figures of the median round by ratio stand for the phase.
		mid := medianOf(ratios)
		best := 0
		for i, r := range ratios {
			if abs(r-mid) < abs(ratios[best]-mid) {
				best = i
			}
		}
		runs[best].report(b)
		b.ReportMetric(medianOf(ceilings), "ceiling_runs/s")
		b.ReportMetric(100*mid, "of_ceiling_%")
		var p99s []float64
		for _, r := range runs {
			p99s = append(p99s, ms(r.quantile(0.99)))
		}
		verdict := "NOT MET"
		if 100*mid >= 80 || medianOf(p99s) <= 100 {
			verdict = "met"
		}
		b.Logf("%d sessions: of the ceiling per round %s, median %.0f %%; p99 per round %s ms, median %.0f ms; target (>= 80 %% of the ceiling or p99 <= 100 ms): %s",
			n, percents(ratios), 100*mid, floats(p99s), medianOf(p99s), verdict)
	})
}

func abs(x float64) float64 { return max(x, -x) }

func percents(xs []float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprintf("%.0f %%", 100*x))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func floats(xs []float64) string { return floatsAs("%.0f", xs...) }

// floatsAs formats xs as a bracketed list, each with format.
func floatsAs(format string, xs ...float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprintf(format, x))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// idleWindow is how long idleSandboxes watches.
const idleWindow = 10 * time.Second

// idleSandboxes measures what sandboxes cost while nobody uses them: the
// CPU of their containers (executor and whatever else runs there), shims
// and fuse-overlayfs daemons, and the executors' wake-ups (context
// switches of all their threads), per sandbox and second.
func idleSandboxes(b *testing.B, p *docker.Provider, boxes []sandbox.Sandbox) {
	meter := newCPUMeter(b, p, boxes)
	// Let what the last phase started settle first.
	time.Sleep(2 * time.Second)
	switches := func() (n int64) {
		for _, pid := range meter.executors {
			n += procstat.Switches(pid)
		}
		return n
	}
	sw := switches()
	meter.start()
	time.Sleep(idleWindow)
	c := meter.stop()
	sw = switches() - sw
	per := func(d time.Duration) float64 { return ms(d) / float64(len(boxes)) / idleWindow.Seconds() }
	b.ReportMetric(per(c.containers), "container_cpu_ms/s/sandbox")
	b.ReportMetric(per(c.executors), "executor_cpu_ms/s/sandbox")
	b.ReportMetric(per(c.shims), "shim_cpu_ms/s/sandbox")
	b.ReportMetric(per(c.fuse), "fuse_cpu_ms/s/sandbox")
	b.ReportMetric(float64(sw)/float64(len(boxes))/idleWindow.Seconds(), "executor_wakeups/s/sandbox")
	b.Logf("%d idle sandboxes (%d executors found) for %s: CPU in all %.1f ms/s (containers %.1f, executors %.1f, shims %.1f, fuse-overlayfs %.1f, dockerd+containerd %.1f); executor context switches %d; host busy %.1f ms/s (all its work); %s",
		len(boxes), len(meter.executors), idleWindow, ms(c.total()-c.self)/idleWindow.Seconds(), ms(c.containers)/idleWindow.Seconds(),
		ms(c.executors)/idleWindow.Seconds(), ms(c.shims)/idleWindow.Seconds(), ms(c.fuse)/idleWindow.Seconds(), ms(c.engine)/idleWindow.Seconds(),
		sw, ms(c.host)/idleWindow.Seconds(), loadavg())
}

// BenchmarkStepExecutorAB compares two executor binaries stepping `echo
// hi` in the same run: the baseline named by $GYMSERVER_BASE_EXECUTOR
// (e.g. built from an earlier commit) and the one of this tree, each in
// its own $GYMSERVER_AB_SESSIONS sandboxes (default 128), in alternating
// rounds, so that the noise of a shared machine falls on both alike. It
// reports the medians of both and their ratio. Without the variable it is
// skipped.
//
// Run: GYMSERVER_BASE_EXECUTOR=/tmp/base-gymexec go test -run '^$' -bench StepExecutorAB -benchtime 2000x ./envs/docker/
func BenchmarkStepExecutorAB(b *testing.B) {
	base := os.Getenv("GYMSERVER_BASE_EXECUTOR")
	if base == "" {
		b.Skip("GYMSERVER_BASE_EXECUTOR names no baseline executor binary")
	}
	if b.N == 1 {
		// The first, unreported run of a benchmark: 2 x n sandboxes are
		// made once, for the real one.
		return
	}
	n := 128
	if v := os.Getenv("GYMSERVER_AB_SESSIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("GYMSERVER_AB_SESSIONS=%q: want a positive number", v)
		}
	}
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	type arm struct {
		name  string
		p     *docker.Provider
		boxes []sandbox.Sandbox
		runs  []stepRun
	}
	pBase, _ := dockertest.NewWith(b, docker.Options{Logger: logger, ExecutorBinary: base})
	pOurs, _ := dockertest.New(b, logger)
	arms := []*arm{{name: "base", p: pBase}, {name: "ours", p: pOurs}}
	defer func() {
		for _, a := range arms {
			for _, sb := range a.boxes {
				sb.Close(ctx)
			}
		}
	}()
	req := sandbox.ExecRequest{Argv: stepCommand, Timeout: time.Minute}
	for _, a := range arms {
		image, err := a.p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
		if err != nil {
			b.Fatal(err)
		}
		a.boxes = make([]sandbox.Sandbox, n)
		var g errgroup.Group
		g.SetLimit(8)
		for i := range a.boxes {
			g.Go(func() (err error) {
				a.boxes[i], err = a.p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true})
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		warmUp(b, a.boxes, req)
	}
	b.ResetTimer()
	b.StopTimer()
	for round := 1; round <= ceilingRounds; round++ {
		for _, a := range arms {
			run := runSteps(b, a.p, a.boxes, req, b.N)
			a.runs = append(a.runs, run)
			b.Logf("round %d %s: %s", round, a.name, run)
		}
	}
	med := func(a *arm, f func(stepRun) float64) float64 {
		var xs []float64
		for _, r := range a.runs {
			xs = append(xs, f(r))
		}
		return medianOf(xs)
	}
	cpu := func(r stepRun) float64 { return r.perStep(r.cpu.total()) }
	rate := func(r stepRun) float64 { return r.rate() }
	p99 := func(r stepRun) float64 { return ms(r.quantile(0.99)) }
	exe := func(r stepRun) float64 { return r.perStep(r.cpu.executors) }
	sws := func(r stepRun) float64 { return float64(r.switches) / float64(len(r.lats)) }
	for _, a := range arms {
		b.ReportMetric(med(a, cpu), a.name+"_cpu_ms/step")
		b.ReportMetric(med(a, exe), a.name+"_executor_cpu_ms/step")
		b.ReportMetric(med(a, rate), a.name+"_steps/s")
		b.ReportMetric(med(a, p99), a.name+"_p99_ms")
		b.ReportMetric(med(a, sws), a.name+"_executor_switches/step")
		b.Logf("%s (median of %d rounds, %d sessions): cpu/step %.2f ms (executor %.2f ms, %.1f context switches), %.0f steps/s, p99 %.0f ms",
			a.name, len(a.runs), n, med(a, cpu), med(a, exe), med(a, sws), med(a, rate), med(a, p99))
	}
	b.ReportMetric(med(arms[1], cpu)/med(arms[0], cpu), "cpu_ours/base")
}

// growSandboxes makes sandboxes of image with p, 8 at a time, until boxes
// holds n.
func growSandboxes(b *testing.B, p *docker.Provider, image string, boxes *[]sandbox.Sandbox, n int) {
	ctx := context.Background()
	more := make([]sandbox.Sandbox, n-len(*boxes))
	var g errgroup.Group
	g.SetLimit(8)
	for i := range more {
		g.Go(func() (err error) {
			more[i], err = p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true})
			return err
		})
	}
	err := g.Wait()
	for _, sb := range more {
		if sb != nil {
			*boxes = append(*boxes, sb)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
}
