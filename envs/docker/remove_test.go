package docker_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/internal/waittest"
)

// removeGate stands between a Docker client and the real Engine: it holds
// container removals (DELETE /containers/...) while held, or answers them
// with a server error while refusing; every other request passes.
type removeGate struct {
	next http.RoundTripper
	// refuse makes the gate answer removals with 500.
	refuse atomic.Bool
	// refused counts the removals refused.
	refused atomic.Int64

	// mu guards the fields below.
	mu      sync.Mutex
	held    chan struct{} // closed to let held removals through; nil: none held
	waiting int           // removals held now
}

func (g *removeGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodDelete || !strings.Contains(r.URL.Path, "/containers/") {
		return g.next.RoundTrip(r)
	}
	if g.refuse.Load() {
		g.refused.Add(1)
		return &http.Response{
			StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   readCloser(`{"message":"removal refused by the test"}`), Request: r,
		}, nil
	}
	g.mu.Lock()
	held := g.held
	if held != nil {
		g.waiting++
	}
	g.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-r.Context().Done():
		}
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
	}
	return g.next.RoundTrip(r)
}

// hold holds the removals from now on; release lets them through.
func (g *removeGate) hold() {
	g.mu.Lock()
	g.held = make(chan struct{})
	g.mu.Unlock()
}

func (g *removeGate) release() {
	g.mu.Lock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
	g.mu.Unlock()
}

// holding returns how many removals the gate holds now.
func (g *removeGate) holding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

func readCloser(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

// gatedProvider returns a provider whose Docker client goes through a
// removeGate, the gate, and a plain client of the test's own. The provider
// is closed when the test ends and no container of it may remain.
func gatedProvider(t *testing.T) (*docker.Provider, *removeGate, *client.Client) {
	t.Helper()
	plain, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	g := &removeGate{next: plain.HTTPClient().Transport}
	gated, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation(),
		client.WithHTTPClient(&http.Client{Transport: g}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gated.Close() })
	// Cleanups run last first: the gate opens before the provider closes.
	p, cli := dockertest.NewWith(t, docker.Options{Client: gated})
	t.Cleanup(func() { g.refuse.Store(false); g.release() })
	return p, g, cli
}

// startBoxes starts n sandboxes on p.
func startBoxes(t *testing.T, p *docker.Provider, n int) []sandbox.Sandbox {
	t.Helper()
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]sandbox.Sandbox, n)
	for i := range out {
		if out[i], err = p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace"}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// exists reports whether the container id exists.
func exists(ctx context.Context, cli *client.Client, id string) (bool, error) {
	_, err := cli.ContainerInspect(ctx, id)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// TestCloseRemovesInBackground closes sandboxes while the Engine's
// removals are held: every Close returns, the containers are still there
// and count as removing, and once the removals go through the provider's
// Close leaves nothing behind.
func TestCloseRemovesInBackground(t *testing.T) {
	p, g, cli := gatedProvider(t)
	ctx := t.Context()
	boxes := startBoxes(t, p, 3)
	g.hold()
	for _, sb := range boxes {
		if err := sb.Close(ctx); err != nil {
			t.Fatalf("close %s: %v", sb.ID(), err)
		}
	}
	waittest.For(t, "3 removals held at the engine", time.Minute, func() bool { return g.holding() == 3 })
	if n := p.PoolStats().Removing; n != 3 {
		t.Errorf("removing = %d, want 3", n)
	}
	// The containers themselves may already be going: a sandbox's main
	// process ends with its stream and the engine then removes it
	// (AutoRemove); the provider's removal makes sure.
	g.release()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sb := range boxes {
		if ok, err := exists(ctx, cli, sb.ID()); err != nil || ok {
			t.Errorf("container %s after provider close: exists=%v err=%v, want gone", sb.ID(), ok, err)
		}
	}
	if st := p.PoolStats(); st.Removing != 0 || st.RemoveErrors != 0 {
		t.Errorf("after provider close: removing %d, errors %d; want 0, 0", st.Removing, st.RemoveErrors)
	}
}

// TestCloseWaitsWhenTooManyRemovalsPending checks the bound on pending
// removals: with the bound at 2 and two removals held, a third Close
// waits until one ends.
func TestCloseWaitsWhenTooManyRemovalsPending(t *testing.T) {
	p, g, _ := gatedProvider(t)
	docker.SetMaxPendingRemovals(p, 2)
	ctx := t.Context()
	boxes := startBoxes(t, p, 3)
	g.hold()
	for _, sb := range boxes[:2] {
		if err := sb.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waittest.For(t, "2 removals held at the engine", time.Minute, func() bool { return g.holding() == 2 })
	third := make(chan error, 1)
	go func() { third <- boxes[2].Close(ctx) }()
	// A negative can only be watched for a while: a Close that did not
	// wait returns within microseconds.
	select {
	case err := <-third:
		t.Fatalf("third close returned (%v) while 2 removals were pending, the bound", err)
	case <-time.After(2 * time.Second):
	}
	g.release()
	select {
	case err := <-third:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("third close still waiting a minute after the removals went through")
	}
}

// TestFailedRemovalIsCountedNotReturned has the engine refuse removals:
// Close still succeeds, and the removal is tried twice and counted as
// failed. (The container goes anyway here: its main process ended with
// the stream, and the engine removes it; otherwise the provider's Close,
// the janitor or a reaper would.)
func TestFailedRemovalIsCountedNotReturned(t *testing.T) {
	p, g, cli := gatedProvider(t)
	ctx := t.Context()
	boxes := startBoxes(t, p, 1)
	g.refuse.Store(true)
	if err := boxes[0].Close(ctx); err != nil {
		t.Fatalf("close with the engine refusing the removal: %v, want nil", err)
	}
	waittest.For(t, "the failed removal counted", time.Minute, func() bool {
		st := p.PoolStats()
		return st.RemoveErrors == 1 && st.Removing == 0
	})
	if n := g.refused.Load(); n != 2 {
		t.Errorf("removals refused = %d, want 2 (one retry)", n)
	}
	g.refuse.Store(false)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := exists(ctx, cli, boxes[0].ID()); err != nil || ok {
		t.Errorf("container after provider close: exists=%v err=%v, want gone", ok, err)
	}
}

// TestCloseOfARemovedContainer removes the container behind the
// provider's back: Close succeeds and counts no failure.
func TestCloseOfARemovedContainer(t *testing.T) {
	p, _, cli := gatedProvider(t)
	ctx := t.Context()
	boxes := startBoxes(t, p, 1)
	if err := docker.RemoveOwned(ctx, cli, p.Owner()); err != nil {
		t.Fatal(err)
	}
	if err := boxes[0].Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	waittest.For(t, "no removal pending", time.Minute, func() bool { return p.PoolStats().Removing == 0 })
	if n := p.PoolStats().RemoveErrors; n != 0 {
		t.Errorf("remove errors = %d, want 0 for a container already gone", n)
	}
}
