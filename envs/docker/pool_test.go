package docker_test

import (
	"context"
	"fmt"
	"sort"
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

// BenchmarkCreate measures Create to a sandbox that answers, without and
// with a warm pool. Run: go test -run '^$' -bench Create ./envs/docker/
func BenchmarkCreate(b *testing.B) {
	for _, pool := range []int{0, 2} {
		name := "cold"
		if pool > 0 {
			name = "warm_pool"
		}
		b.Run(name, func(b *testing.B) {
			p, _ := dockertest.NewWith(b, docker.Options{WarmPool: pool})
			ctx := context.Background()
			image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
			if err != nil {
				b.Fatal(err)
			}
			spec := sandbox.Spec{Image: image, WorkDir: "/workspace"}
			if pool > 0 {
				// Fill the pool before measuring.
				s, err := p.Create(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				s.Close(ctx)
			}
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				if pool > 0 {
					// Steady state: a trainer resets no faster than the
					// pool refills; wait for the refill off the clock.
					b.StopTimer()
					waitPooled(b, p, spec, pool)
					b.StartTimer()
				}
				start := time.Now()
				s, err := p.Create(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				s.Close(ctx)
				b.StartTimer()
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			report(b, lat)
		})
	}
}

// waitPooled waits until the provider holds n idle pooled sandboxes.
func waitPooled(tb testing.TB, p *docker.Provider, spec sandbox.Spec, n int) {
	tb.Helper()
	waittest.For(tb, fmt.Sprintf("the pool to hold %d sandboxes", n), time.Minute, func() bool { return p.Pooled(spec) >= n })
}
