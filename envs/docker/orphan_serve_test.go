package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// TestServingSandboxOutlivesOrphanAfter keeps a sandbox with a short
// OrphanAfter busy past it, with commands as the agent (one-off and in
// the persistent shell) and an agent file operation: the idle process must
// keep recognising its serving executor, which such commands make
// unreadable to it (not dumpable), and must not end the container.
func TestServingSandboxOutlivesOrphanAfter(t *testing.T) {
	const orphanAfter = 2 * time.Second
	p, _ := dockertest.NewWith(t, docker.Options{OrphanAfter: orphanAfter})
	ctx := t.Context()
	image, err := p.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	reqs := []sandbox.ExecRequest{
		{Argv: []string{"/bin/sh", "-c", "echo hi"}, Timeout: 30 * time.Second},
		{Argv: []string{"echo hi"}, Shell: true, Timeout: 30 * time.Second},
	}
	end := time.Now().Add(3 * orphanAfter)
	for i := 0; time.Now().Before(end); i++ {
		r, err := sb.Exec(ctx, reqs[i%2])
		if err != nil || string(r.Stdout) != "hi\n" {
			t.Fatalf("step %d, %s after the start: %+v %v", i, time.Since(end.Add(-3*orphanAfter)).Round(time.Millisecond), r, err)
		}
		if err := sb.WriteFile(ctx, "f.txt", []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(orphanAfter / 2)
	}
}
