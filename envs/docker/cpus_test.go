package docker_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/internal/waittest"
)

// TestCPUPinning checks on the real engine that each sandbox is pinned to
// the cores the fewest live sandboxes use, that the agent's commands run
// only there, that a sandbox of 2 CPUs gets 2 cores, that closed sandboxes
// give their cores back, and that FloatCPUs leaves sandboxes unpinned.
func TestCPUPinning(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one core: nothing to pin")
	}
	p, cli := newProvider(t)
	ctx := t.Context()
	n := len(p.CPUPins())
	if n < 2 {
		t.Fatalf("CPUPins %v on a host of %d cores: sandboxes are not pinned", p.CPUPins(), runtime.NumCPU())
	}
	// The first n sandboxes take one core each, every core once; the next
	// shares the core of the first (cores of equal count go in the
	// provider's order).
	var boxes []sandbox.Sandbox
	var first []int
	seen := map[int]bool{}
	for i := range n + 1 {
		sb := baseSandbox(t, p, sandbox.Spec{Resources: sandbox.Resources{CPUs: 1}})
		boxes = append(boxes, sb)
		got := pinnedTo(t, cli, sb)
		if allowed := allowedCores(t, sb); !slices.Equal(allowed, got) {
			t.Errorf("sandbox %d pinned to %v, but an agent command may run on cores %v", i, got, allowed)
		}
		switch {
		case len(got) != 1:
			t.Fatalf("sandbox %d of 1 CPU pinned to %v, want one core", i, got)
		case i == 0:
			first = got
		case i == n && !slices.Equal(got, first):
			t.Errorf("sandbox %d pinned to %v, want %v: every core has one sandbox, and the first's comes first", i, got, first)
		case i < n && seen[got[0]]:
			t.Errorf("sandbox %d pinned to core %d, which has a sandbox already, while others have none", i, got[0])
		}
		seen[got[0]] = true
	}
	// The first sandbox's core has two sandboxes, the others one each: a
	// sandbox of 1.5 CPUs gets two of the others (or both cores of a host
	// of 2).
	wide := baseSandbox(t, p, sandbox.Spec{Resources: sandbox.Resources{CPUs: 1.5}})
	got := pinnedTo(t, cli, wide)
	if allowed := allowedCores(t, wide); !slices.Equal(allowed, got) {
		t.Errorf("the wide sandbox is pinned to %v, but an agent command may run on cores %v", got, allowed)
	}
	if len(got) != 2 || n > 2 && slices.Contains(got, first[0]) {
		t.Errorf("a sandbox of 1.5 CPUs pinned to %v, want 2 cores other than %d", got, first[0])
	}
	usage := p.CPUPins()
	total := 0
	for _, u := range usage {
		total += u
	}
	if total != n+1+2 {
		t.Errorf("CPUPins %v: %d pins, want %d", usage, total, n+1+2)
	}
	for _, sb := range append(boxes, wide) {
		if err := sb.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waittest.For(t, "the closed sandboxes' cores to be given back", time.Minute, func() bool {
		return slices.Max(p.CPUPins()) == 0
	})

	floating, fcli := dockertest.NewWith(t, docker.Options{FloatCPUs: true})
	if u := floating.CPUPins(); u != nil {
		t.Errorf("CPUPins with FloatCPUs: %v, want nil", u)
	}
	sb := baseSandbox(t, floating, sandbox.Spec{})
	if got := pinnedTo(t, fcli, sb); got != nil {
		t.Errorf("with FloatCPUs a sandbox is pinned to %v", got)
	}
}

// TestCPUPinningRefused checks that when the engine refuses a cpuset (here
// cores the host does not have), the sandbox is made without one and the
// provider stops pinning.
func TestCPUPinningRefused(t *testing.T) {
	p, cli := newProvider(t)
	// The least used core is 511.
	docker.SetCores(p, 512, 511)
	sb := baseSandbox(t, p, sandbox.Spec{})
	if got := pinnedTo(t, cli, sb); got != nil {
		t.Errorf("pinned to %v after the engine refused the cpuset", got)
	}
	if u := p.CPUPins(); u != nil {
		t.Errorf("CPUPins %v after the engine refused a cpuset, want nil (pinning off)", u)
	}
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"echo", "hi"}})
	if err != nil || string(r.Stdout) != "hi\n" {
		t.Errorf("exec in the unpinned sandbox: %q %v", r.Stdout, err)
	}
}

// pinnedTo returns the cores in sb's container's cpuset, as the engine
// has it (nil for none).
func pinnedTo(t *testing.T, cli *client.Client, sb sandbox.Sandbox) []int {
	t.Helper()
	info, err := cli.ContainerInspect(context.Background(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	return parseCores(t, info.HostConfig.CpusetCpus)
}

// allowedCores returns the cores an agent command in sb may run on, as
// the kernel reports them to the command.
func allowedCores(t *testing.T, sb sandbox.Sandbox) []int {
	t.Helper()
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"grep", "^Cpus_allowed_list:", "/proc/self/status"}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("reading the allowed cores: %v %q %q", err, r.Stdout, r.Stderr)
	}
	f := strings.Fields(string(r.Stdout))
	return parseCores(t, f[len(f)-1])
}

// parseCores parses a kernel or engine CPU list such as "0-2,5".
func parseCores(t *testing.T, list string) []int {
	t.Helper()
	var out []int
	for part := range strings.SplitSeq(list, ",") {
		if part == "" {
			continue
		}
		lo, hi, found := strings.Cut(part, "-")
		if !found {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil {
			t.Fatalf("not a CPU list: %q", list)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out
}

// TestCPUPinningPool checks that a reset served by a recycled sandbox gets
// the one whose core serves the fewest sessions, not the one that waited
// longest: on a host of 2 cores, sessions A (core 0), B (core 1) and C
// (core 0) close in the order C, A, B; the next session takes C's
// sandbox, and the one after must take B's (core 1), not A's.
func TestCPUPinningPool(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{Reuse: 3})
	docker.SetCores(p, 2, 0)
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true}
	var abc []sandbox.Sandbox
	for range 3 {
		sb, err := p.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		abc = append(abc, sb)
	}
	for i, want := range []int{0, 1, 0} {
		if got := pinnedTo(t, cli, abc[i]); !slices.Equal(got, []int{want}) {
			t.Fatalf("session %d pinned to %v, want core %d", i, got, want)
		}
	}
	for n, i := range []int{2, 0, 1} {
		if err := abc[i].Close(ctx); err != nil {
			t.Fatal(err)
		}
		waitPooled(t, p, spec, n+1)
	}
	d, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.WithoutCancel(ctx))
	e, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.WithoutCancel(ctx))
	if d.ID() != abc[2].ID() || e.ID() != abc[1].ID() {
		t.Errorf("sessions got the containers of C (core 0) then %s, want C's then B's (core 1, A's is on core 0 with C's)",
			map[string]string{abc[0].ID(): "A's", abc[1].ID(): "B's", abc[2].ID(): "C's"}[e.ID()])
	}
}
