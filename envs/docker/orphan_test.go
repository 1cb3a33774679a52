package docker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/internal/waittest"
)

// testOrphanAfter is the orphan timeout of these tests' providers.
const testOrphanAfter = 3 * time.Second

// orphanMargin is how long, past the timeout, a container may take to stop
// and be removed on a busy machine.
const orphanMargin = 20 * time.Second

// orphanSandbox prepares the Python image and starts a sandbox on a
// provider with the test orphan timeout.
func orphanSandbox(t *testing.T) (*docker.Provider, *client.Client, sandbox.Sandbox) {
	t.Helper()
	p, cli := dockertest.NewWith(t, docker.Options{OrphanAfter: testOrphanAfter})
	ctx := t.Context()
	img, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	return p, cli, sb
}

// containerState returns whether the container exists and runs.
func containerState(ctx context.Context, cli *client.Client, id string) (exists, running bool, err error) {
	info, err := cli.ContainerInspect(ctx, id)
	if errdefs.IsNotFound(err) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, info.State != nil && info.State.Running, nil
}

// TestOrphanSandboxGoesWhenStreamCut cuts a sandbox's executor stream, as
// a SIGKILL of the provider's process would, and checks that the container
// removes itself: the executor is its main process, and it ends with its
// input, without waiting for the orphan timeout.
func TestOrphanSandboxGoesWhenStreamCut(t *testing.T) {
	_, cli, sb := orphanSandbox(t)
	ctx := t.Context()
	if r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec before the cut: %+v %v", r, err)
	}
	cut := time.Now()
	docker.CutStream(sb)
	waittest.Until(t, "the orphaned container to go", orphanMargin, func() (bool, error) {
		exists, _, err := containerState(ctx, cli, sb.ID())
		return !exists, err
	})
	t.Logf("container gone %s after the cut", time.Since(cut).Round(time.Millisecond))
	_, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "container is gone") {
		t.Errorf("exec in the removed sandbox: %v, want an error saying the container is gone", err)
	}
}

// TestOrphanAttachedSandboxStays checks that a sandbox whose executor stays
// attached outlives the orphan timeout several times over.
func TestOrphanAttachedSandboxStays(t *testing.T) {
	_, cli, sb := orphanSandbox(t)
	ctx := t.Context()
	until := time.Now().Add(4 * testOrphanAfter)
	waittest.Until(t, "four orphan timeouts with the sandbox alive", 4*testOrphanAfter+orphanMargin, func() (bool, error) {
		exists, running, err := containerState(ctx, cli, sb.ID())
		if err == nil && !running {
			err = fmt.Errorf("container exists %v, running %v", exists, running)
		}
		return time.Now().After(until), err
	})
	if r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "hi"}}); err != nil || string(r.Stdout) != "hi\n" {
		t.Errorf("exec after %s: %+v %v", 4*testOrphanAfter, r, err)
	}
}

// TestOrphanPrepareOutlivesTimeout prepares an image whose init command
// runs longer than the orphan timeout: the preparing container must not
// end as an orphan meanwhile.
func TestOrphanPrepareOutlivesTimeout(t *testing.T) {
	p, cli := dockertest.NewWith(t, docker.Options{OrphanAfter: testOrphanAfter})
	ctx := t.Context()
	var b [6]byte
	_, _ = rand.Read(b[:])
	// A marker of its own makes the image new, so that it is built now.
	marker := hex.EncodeToString(b[:])
	img, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace",
		InitCommands: []string{fmt.Sprintf("sleep %d && echo %s > marker", int(2*testOrphanAfter/time.Second), marker)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := cli.ImageRemove(context.Background(), img, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("remove the test's prepared image: %v", err)
		}
	})
	sb, err := p.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if data, err := sb.ReadFile(ctx, "marker", 100); err != nil || strings.TrimSpace(string(data)) != marker {
		t.Errorf("marker written by the init command: %q %v", data, err)
	}
}
