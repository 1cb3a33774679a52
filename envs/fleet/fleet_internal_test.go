package fleet

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/gym"
)

// TestPlacement checks the placement policy on engines that need no
// Docker (reserve only counts): least live/capacity among the engines up
// and below capacity, ties to the first listed, snapshots pinned.
func TestPlacement(t *testing.T) {
	a := &engine{name: "a", capacity: 2, up: true}
	b := &engine{name: "b", capacity: 4, up: true}
	c := &engine{name: "c", capacity: 2, up: true}
	f := &Fleet{engines: []*engine{a, b, c}, snapshots: map[string]*engine{"snap": c}}
	place := func() string {
		t.Helper()
		e, pinned, err := f.reserve("img", nil)
		if err != nil || pinned {
			t.Fatalf("reserve: %v (pinned %v)", err, pinned)
		}
		return e.name
	}
	// 0/2 0/4 0/2: a; 1/2 0/4 0/2: b; 1/2 1/4 0/2: c; 1/2 1/4 1/2: b
	// (1/4 is least); 1/2 2/4 1/2: a (tie, first listed); then b, c, b.
	var got []string
	for range 8 {
		got = append(got, place())
	}
	if want := "a b c b a b c b"; strings.Join(got, " ") != want {
		t.Fatalf("placements %v, want %s", got, want)
	}
	// All full: resource exhausted.
	if _, _, err := f.reserve("img", nil); gym.ClassOf(err) != gym.ClassResourceExhausted {
		t.Fatalf("reserve when full: %v", err)
	}
	// A snapshot goes to its engine even when full.
	if e, pinned, err := f.reserve("snap", nil); err != nil || !pinned || e != c {
		t.Fatalf("reserve of a snapshot: %v %v %v", e, pinned, err)
	}
	f.release(c)
	// Releases free places; an engine that is down or skipped is not used.
	f.release(a)
	f.release(b)
	a.up = false
	if got := place(); got != "b" {
		t.Fatalf("with a down and free: placed on %s, want b", got)
	}
	f.release(c)
	if e, _, err := f.reserve("img", map[*engine]bool{c: true}); err == nil {
		t.Fatalf("reserve skipping c with a down and b full: got %s", e.name)
	}
	c.up = false
	if _, _, err := f.reserve("snap", nil); gym.ClassOf(err) != gym.ClassSandbox {
		t.Fatalf("reserve of a snapshot whose engine is down: %v, want sandbox_error", err)
	}
	b.up = false
	if _, _, err := f.reserve("img", nil); gym.ClassOf(err) != gym.ClassSandbox {
		t.Fatalf("reserve with every engine down: %v, want sandbox_error", err)
	}
}

// TestConcurrentCopiesShareOneTransfer copies the base image from the
// host's engine to a new engine from several goroutines at once: one
// transfer serves them all, the image arrives with the same id, and an
// image whose id the engine already has is tagged, not transferred.
func TestConcurrentCopiesShareOneTransfer(t *testing.T) {
	x := dockertest.StartEngine(t, "copy")
	main := os.Getenv("DOCKER_HOST")
	if main == "" {
		main = client.DefaultDockerHost
	}
	ref := baseimage.Refs()[0]
	f, err := New(t.Context(), Options{
		Endpoints: []Endpoint{{Name: "main", Host: main}, {Name: "x", Host: x.Host()}},
		Docker:    docker.Options{ExecutorBinary: sandboxtest.ExecutorBinary(t), ImageCacheLabels: []string{dockertest.NoPruneLabel}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	home, dst := f.engines[0], f.engines[1]
	src, err := home.cli.ImageInspect(t.Context(), ref)
	if client.IsErrNotFound(err) {
		if err := baseimage.Build(t.Context(), home.cli, ref, os.Stderr); err != nil {
			t.Fatal(err)
		}
		src, err = home.cli.ImageInspect(t.Context(), ref)
	}
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.copyImages(t.Context(), dst, []string{ref})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("copy %d: %v", i, err)
		}
	}
	if n := dst.transfers.Load(); n != 1 {
		t.Fatalf("%d transfers for four concurrent copies, want 1", n)
	}
	got, err := x.Client().ImageInspect(t.Context(), ref)
	if err != nil || got.ID != src.ID {
		t.Fatalf("image on x: %v %v, want id %s", got.ID, err, src.ID)
	}
	// Same id under a lost name: tagged again, no transfer.
	if err := x.Client().ImageTag(t.Context(), ref, "gymserver-test-alias:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Client().ImageRemove(t.Context(), ref, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.copyImages(t.Context(), dst, []string{ref}); err != nil {
		t.Fatal(err)
	}
	if got, err := x.Client().ImageInspect(t.Context(), ref); err != nil || got.ID != src.ID || dst.transfers.Load() != 1 {
		t.Fatalf("after re-tag: %v %v, %d transfers", got.ID, err, dst.transfers.Load())
	}
	// An image no engine has is an error that says so.
	if err := f.copyImages(t.Context(), dst, []string{"gymserver-test-absent:1"}); err == nil || !strings.Contains(err.Error(), errNoSource.Error()) {
		t.Fatalf("copy of an image no engine has: %v", err)
	}
}

// TestSandboxesEndWhenTheirEngineWentDown marks the host's engine down
// and up again, as health checks would after a network blip, while a
// sandbox on it lives on: the sandbox fails from the down on, even once
// the engine is back, and a new sandbox works.
func TestSandboxesEndWhenTheirEngineWentDown(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker; skipped with -short")
	}
	main := os.Getenv("DOCKER_HOST")
	if main == "" {
		main = client.DefaultDockerHost
	}
	f, err := New(t.Context(), Options{
		Endpoints:   []Endpoint{{Name: "main", Host: main}},
		Docker:      docker.Options{ExecutorBinary: sandboxtest.ExecutorBinary(t), ImageCacheLabels: []string{dockertest.NoPruneLabel}},
		HealthEvery: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := f.engines[0]
	t.Cleanup(func() {
		owner := e.p.Owner()
		if err := f.Close(context.Background()); err != nil {
			t.Error(err)
		}
		cli, err := client.NewClientWithOpts(client.WithHost(main), client.WithAPIVersionNegotiation())
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if n, err := dockertest.Leftovers(context.Background(), cli, owner); err != nil || n != 0 {
			t.Errorf("%d containers left (%v)", n, err)
		}
	})
	ctx := t.Context()
	img, err := f.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	echo := func(sb sandbox.Sandbox) error {
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "ok"}})
		if err == nil && !strings.Contains(string(r.Stdout), "ok") {
			t.Fatalf("exec: %+v", r)
		}
		return err
	}
	old, err := f.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	if err := echo(old); err != nil {
		t.Fatal(err)
	}
	f.setHealth(e, errors.New("blip"))
	if err := echo(old); gym.ClassOf(err) != gym.ClassSandbox {
		t.Fatalf("exec while the engine is down: %v, want sandbox_error", err)
	}
	if _, err := f.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"}); gym.ClassOf(err) != gym.ClassSandbox {
		t.Fatalf("create with every engine down: %v, want sandbox_error", err)
	}
	f.setHealth(e, nil)
	if err := echo(old); gym.ClassOf(err) != gym.ClassSandbox {
		t.Fatalf("exec on a sandbox whose engine went down and came back: %v, want sandbox_error", err)
	}
	fresh, err := f.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close(context.Background())
	if err := echo(fresh); err != nil {
		t.Fatalf("exec on a sandbox started after the engine came back: %v", err)
	}
	if in := f.Engines()[0]; !in.Up || in.Downs != 1 || in.Sessions != 2 {
		t.Fatalf("engine: %+v, want up, one down, two sessions", in)
	}
}
