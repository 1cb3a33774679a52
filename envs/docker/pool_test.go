package docker_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/internal/waittest"
)

// TestConformancePooled runs the conformance suite on a provider with a
// warm pool: sandboxes from the pool must behave like fresh ones.
func TestConformancePooled(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{WarmPool: 1})
	sandboxtest.Run(t, sandboxtest.Suite{
		Provider:  p,
		BaseImage: baseimage.Python,
		Processes: true,
		Gone: func(ctx context.Context, id string) (bool, error) {
			_, err := cli.ContainerInspect(ctx, id)
			if errdefs.IsNotFound(err) {
				return true, nil
			}
			return false, err
		},
	})
}

// TestConformanceReused runs the conformance suite on a provider that
// recycles closed sandboxes: the suite's sandboxes, created and closed in
// parallel, are served recycled ones and must behave like fresh ones. A
// closed sandbox's container stays for the next session, so the suite
// does not check that it is gone.
func TestConformanceReused(t *testing.T) {
	p, _ := dockertest.NewWith(t, docker.Options{Reuse: 2})
	// After the suite's parallel subtests (cleanups run last first: this
	// one before the provider's Close).
	t.Cleanup(func() {
		// The suite's Specs differ: a pool each.
		var all sandbox.PoolCounts
		for _, pool := range p.PoolStats().Pools {
			all.Add(pool.PoolCounts)
		}
		if all.Recycled == 0 || all.FromPool == 0 || all.NotRecycled != 0 {
			t.Errorf("pool counts %+v: want recycled sandboxes serving the suite, none refused", all)
		}
	})
	sandboxtest.Run(t, sandboxtest.Suite{Provider: p, BaseImage: baseimage.Python, Processes: true})
}

// ownContainers lists the containers of the provider (each test has its
// own). Pooled containers carry no task label: they serve any task.
func ownContainers(t *testing.T, cli *client.Client, p *docker.Provider) []container.Summary {
	t.Helper()
	list, err := cli.ContainerList(t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", sandbox.LabelOwner+"="+p.Owner()))})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestWarmPool(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{WarmPool: 1})
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	spec := func(task string) sandbox.Spec {
		return sandbox.Spec{Image: image, WorkDir: "/workspace",
			Labels: map[string]string{sandbox.LabelTask: task}}
	}
	// checkSession checks that sb's session id is a fresh one, on its label.
	seen := map[string]bool{}
	checkSession := func(name string, sb sandbox.Sandbox) {
		t.Helper()
		id := sb.SessionID()
		info, err := cli.ContainerInspect(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		if !sessionIDPattern.MatchString(id) || seen[id] || info.Config.Labels[sandbox.LabelSession] != id {
			t.Errorf("%s sandbox: session id %q (seen before: %v), label %q", name, id, seen[id], info.Config.Labels[sandbox.LabelSession])
		}
		seen[id] = true
		// Pooled or not, it speaks to its executor over the socket.
		if !docker.UsesSocket(sb) {
			t.Errorf("%s sandbox does not use its executor's socket", name)
		}
	}
	// The first create starts a container now and the pool fills behind it.
	first, err := p.Create(ctx, spec("first"))
	if err != nil {
		t.Fatal(err)
	}
	checkSession("cold", first)
	waitPooled(t, p, spec("any"), 1)
	if n := len(ownContainers(t, cli, p)); n != 2 {
		t.Errorf("%d containers, want the session's and one pooled", n)
	}

	// The second create takes the pooled one, labelled with its session id
	// when it was made.
	second, err := p.Create(ctx, spec("second"))
	if err != nil {
		t.Fatal(err)
	}
	checkSession("pooled", second)
	if r, err := second.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "pooled"}}); err != nil || string(r.Stdout) != "pooled\n" {
		t.Fatalf("exec in pooled sandbox: %+v %v", r, err)
	}
	waitPooled(t, p, spec("any"), 1) // refilled

	// A pooled sandbox that died is not handed out.
	var pooled string
	for _, c := range ownContainers(t, cli, p) {
		if c.ID != first.ID() && c.ID != second.ID() {
			pooled = c.ID
		}
	}
	if err := cli.ContainerKill(ctx, pooled, "KILL"); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, "the killed pooled container to stop", 30*time.Second, func() (bool, error) {
		info, err := cli.ContainerInspect(ctx, pooled)
		if errdefs.IsNotFound(err) {
			return true, nil
		}
		return err == nil && !info.State.Running, err
	})
	third, err := p.Create(ctx, spec("third"))
	if err != nil {
		t.Fatal(err)
	}
	if third.ID() == pooled {
		t.Fatal("a dead pooled sandbox was handed out")
	}
	if r, err := third.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "ok"}}); err != nil || string(r.Stdout) != "ok\n" {
		t.Fatalf("exec after a dead pooled sandbox: %+v %v", r, err)
	}
	for _, s := range []sandbox.Sandbox{first, second, third} {
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	}
	// dockertest checks that closing the provider removes the pool.
}

// waitPooled waits until the provider holds n idle pooled sandboxes.
func waitPooled(tb testing.TB, p *docker.Provider, spec sandbox.Spec, n int) {
	tb.Helper()
	waittest.For(tb, fmt.Sprintf("the pool to hold %d sandboxes", n), time.Minute, func() bool { return p.Pooled(spec) >= n })
}

// TestCreatedPool checks that with Options.CreatedPool a cold Create starts
// a container created ahead, not started until then, hardened like any
// other, with the caller's starter files (in the working directory and
// outside it) and a fresh session id; and that the pool refills.
func TestCreatedPool(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{CreatedPool: 1})
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Image: image, WorkDir: "/workspace",
		Resources: sandbox.Resources{MemoryBytes: 256 << 20, CPUs: 0.5, PIDs: 100}}
	first, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close(context.Background())
	waitCreated(t, p, spec, 1)
	var waiting string
	for _, c := range ownContainers(t, cli, p) {
		if c.ID != first.ID() {
			waiting = c.ID
			if c.State != "created" {
				t.Errorf("pooled container %s is %s, want created (not started)", c.ID[:12], c.State)
			}
		}
	}
	// The created container's socket directory waits with it, and goes
	// once its executor is connected.
	sockDir := socketBind(t, cli, waiting)
	if _, err := os.Stat(sockDir); sockDir == "" || err != nil {
		t.Errorf("socket directory %q of the created container: %v", sockDir, err)
	}
	withFiles := spec
	withFiles.Files = []sandbox.File{{Path: "/workspace/task.txt", Data: []byte("in")}, {Path: "/opt/task/data.txt", Data: []byte("out")}}
	withFiles.Labels = map[string]string{sandbox.LabelTask: "t"}
	second, err := p.Create(ctx, withFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close(context.Background())
	if second.ID() != waiting {
		t.Errorf("Create started %s, want the created container %s", second.ID(), waiting)
	}
	if _, err := os.Stat(sockDir); !docker.UsesSocket(second) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("started created container: uses its socket %v, socket directory %v (want it gone)", docker.UsesSocket(second), err)
	}
	if second.SessionID() == first.SessionID() || !sessionIDPattern.MatchString(second.SessionID()) {
		t.Errorf("session ids %q and %q", first.SessionID(), second.SessionID())
	}
	for path, want := range map[string]string{"task.txt": "in", "/opt/task/data.txt": "out"} {
		if data, err := second.ReadFile(ctx, path, 100); err != nil || string(data) != want {
			t.Errorf("read %s: %q %v, want %q", path, data, err, want)
		}
	}
	r, err := second.Exec(ctx, sandbox.ExecRequest{Argv: []string{"id", "-u"}})
	if err != nil || string(r.Stdout) != "1000\n" {
		t.Errorf("id -u: %+v %v", r, err)
	}
	info, err := cli.ContainerInspect(ctx, second.ID())
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	if hc.NetworkMode != "none" || hc.Memory != 256<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 100 ||
		len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" || len(hc.SecurityOpt) == 0 || !info.State.Running ||
		info.Config.Labels[sandbox.LabelSession] != second.SessionID() || info.Config.Labels[sandbox.LabelOwner] != p.Owner() {
		t.Errorf("started created container: host config %+v, state %+v, labels %v", hc, info.State, info.Config.Labels)
	}
	waitCreated(t, p, spec, 1) // refilled
}

// TestWarmPoolZygote checks that the sandboxes of a warm pool whose
// sessions start verifier zygotes start theirs as they join the pool, so
// that a session served from it finds its zygote imported; and that a
// pool whose sessions never asked for one starts none.
func TestWarmPoolZygote(t *testing.T) {
	p, _ := dockertest.NewWith(t, docker.Options{WarmPool: 1})
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	create := func(spec sandbox.Spec) sandbox.Sandbox {
		t.Helper()
		sb, err := p.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb
	}
	withZygote := sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true}
	first := create(withZygote)
	if _, err := first.(sandbox.ZygoteStarter).StartZygote(ctx, sandbox.ZygoteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPooled(t, p, withZygote, 1)
	// The pooled sandbox's zygote imports in its turn: wait for it.
	waittest.For(t, "the pooled sandbox's zygote", time.Minute, func() bool {
		sb := create(withZygote)
		if zygoteProcess(t, sb) {
			return true
		}
		waitPooled(t, p, withZygote, 1)
		return false
	})
	// Served from the pool with its zygote ready: asking again starts no
	// second one, and the status says it is ready at once.
	waitPooled(t, p, withZygote, 1)
	waittest.For(t, "a pooled sandbox with a ready zygote", time.Minute, func() bool {
		sb := create(withZygote)
		if !zygoteProcess(t, sb) {
			waitPooled(t, p, withZygote, 1)
			return false
		}
		t0 := time.Now()
		st, err := sb.(sandbox.ZygoteStarter).StartZygote(ctx, sandbox.ZygoteOptions{Wait: true})
		if err != nil || !st.Ready {
			t.Fatalf("zygote: %+v %v", st, err)
		}
		return time.Since(t0) < 50*time.Millisecond
	})

	// Another pool (other limits), whose sessions never start a zygote.
	without := sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true, Resources: sandbox.Resources{PIDs: 200}}
	create(without)
	waitPooled(t, p, without, 1)
	time.Sleep(time.Second) // a zygote would have been queued by now
	if sb := create(without); zygoteProcess(t, sb) {
		t.Error("a pooled sandbox of a pool without zygotes runs one")
	}
}
