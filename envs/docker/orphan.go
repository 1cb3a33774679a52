package docker

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/gym"
)

// DefaultOrphanAfter is the default of Options.OrphanAfter.
const DefaultOrphanAfter = 2 * time.Minute

// idleCmd returns the argv of the main process of a container that
// prepares an image: the executor in idle mode, which ends the container
// once no executor has served in it for Options.OrphanAfter.
//
// The idle process only counts executors that run under its own uid, so
// every container must run its serving executor as the user of its main
// process, or it stops after OrphanAfter.
func (p *Provider) idleCmd() []string {
	d := p.opts.OrphanAfter
	if d == 0 {
		d = DefaultOrphanAfter
	}
	if d < 0 {
		return p.executorCmd("idle")
	}
	return p.executorCmd("idle", "--orphan-after", d.String())
}

// holdExecutor starts an executor in serve mode in container id, as user,
// and keeps its stream open until release is called. It stands for the
// controller of containers that are driven by plain docker execs (image
// preparation): while it holds, the container stays; if this process dies,
// the stream closes and the container goes after Options.OrphanAfter.
func (p *Provider) holdExecutor(ctx context.Context, id, user string) (release func(), err error) {
	ex, err := p.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		User:         user,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   "/",
		Cmd:          p.executorCmd("serve", "--workdir", "/"),
	})
	if err != nil {
		return nil, gym.Classify(fmt.Errorf("docker: create executor in %s: %w", shortID(id), err), gym.ClassSandbox)
	}
	conn, err := p.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, gym.Classify(fmt.Errorf("docker: attach executor in %s: %w", shortID(id), err), gym.ClassSandbox)
	}
	pr, pw := io.Pipe()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, err := stdcopy.StdCopy(pw, &logLines{log: p.log, container: shortID(id)}, conn.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	c := executor.NewClient(pr, hijackWriter{conn})
	release = func() {
		c.Close()
		<-copied
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := c.Ping(pctx); err != nil {
		release()
		return nil, gym.Classify(fmt.Errorf("docker: executor in %s does not answer: %w", shortID(id), err), gym.ClassSandbox)
	}
	return release, nil
}
