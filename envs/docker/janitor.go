package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// Defaults of JanitorOptions.
const (
	DefaultJanitorGrace    = 2 * time.Second
	DefaultJanitorRetryFor = time.Minute
)

// janitorBye is the byte a provider writes to its janitor when it closes
// cleanly, before it closes the pipe.
const janitorBye = 'b'

// janitorAttempt bounds one pass of the janitor over the engine: listing
// and removing what its owner left.
const janitorAttempt = 2 * time.Minute

// janitorStop bounds how long Provider.Close waits for its janitor to exit.
const janitorStop = removeTimeout

// JanitorOptions configure RunJanitor.
type JanitorOptions struct {
	// Owner is the owner id of the provider watched (Provider.Owner):
	// the containers and snapshot images labelled with it are removed.
	// Required.
	Owner string
	// Watch is the read end of a pipe whose write end only the provider
	// holds. Required. It should be pollable (os.Pipe, or a descriptor
	// set non-blocking before os.NewFile), so that cancelling ctx ends
	// the wait.
	Watch *os.File
	// Client is the Docker client; nil makes one from the environment
	// ($DOCKER_HOST), and closes it on return.
	Client *client.Client
	// Grace is how long the janitor waits, after the provider is gone
	// without closing, before it removes anything, so that requests the
	// provider had in flight at the engine can settle (default
	// DefaultJanitorGrace).
	Grace time.Duration
	// RetryFor is how long the janitor keeps retrying while the engine is
	// unreachable or a removal fails (default DefaultJanitorRetryFor).
	RetryFor time.Duration
	// Logger receives a record per removal; nil discards them.
	Logger *slog.Logger
}

// RunJanitor waits until the provider that holds the write end of
// opts.Watch is gone, then removes that provider's containers and
// snapshot images, and returns. The provider is gone when the pipe reaches
// end of file: every holder of its write end has exited or closed it,
// including a process killed with SIGKILL. A provider that closes
// cleanly writes a bye byte first; the janitor then skips the grace
// period but still removes whatever remains, which is normally nothing.
//
// It removes only containers labelled with opts.Owner and images that
// carry both the snapshot label and opts.Owner, never prepared images
// (a cache shared by all providers). Every engine call is bounded: after
// opts.RetryFor of failures it returns the last error. Cancelling ctx
// while it waits or before it removes anything returns nil and removes
// nothing, since the provider may still be alive (a service manager
// stopping everything at once).
func RunJanitor(ctx context.Context, opts JanitorOptions) error {
	if opts.Owner == "" {
		return errors.New("docker: janitor: no owner")
	}
	if opts.Watch == nil {
		return errors.New("docker: janitor: no pipe to watch")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("owner", opts.Owner)
	grace := opts.Grace
	if grace <= 0 {
		grace = DefaultJanitorGrace
	}
	retryFor := opts.RetryFor
	if retryFor <= 0 {
		retryFor = DefaultJanitorRetryFor
	}

	bye, err := waitGone(ctx, opts.Watch)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("docker: janitor: watch provider: %w", err)
	}
	if bye {
		log.Info("provider closed")
	} else {
		log.Warn("provider gone without closing; removing its containers and snapshot images", "grace", grace)
		t := time.NewTimer(grace)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}

	cli := opts.Client
	if cli == nil {
		cli, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return fmt.Errorf("docker: janitor: client: %w", err)
		}
		defer cli.Close()
	}
	deadline := time.Now().Add(retryFor)
	backoff := 500 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, janitorAttempt)
		reaped, err := reapOwner(actx, cli, opts.Owner, log)
		cancel()
		if err == nil {
			log.Info("janitor done", "removed", len(reaped))
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if !time.Now().Add(backoff).Before(deadline) {
			return fmt.Errorf("docker: janitor: gave up after %s: %w", retryFor, err)
		}
		log.Warn("janitor: retrying", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// waitGone blocks until the pipe's writers are all gone and reports
// whether the provider said bye first. Cancelling ctx ends the wait with
// a read error.
func waitGone(ctx context.Context, watch *os.File) (bye bool, err error) {
	stop := context.AfterFunc(ctx, func() { _ = watch.SetReadDeadline(time.Now()) })
	defer stop()
	var b [1]byte
	for {
		n, err := watch.Read(b[:])
		if n == 1 && b[0] == janitorBye {
			bye = true
		}
		switch {
		case errors.Is(err, io.EOF):
			return bye, nil
		case err != nil:
			return bye, err
		}
	}
}

// reapOwner removes the containers, then the snapshot images, labelled
// with owner, and returns what it removed; something already gone counts
// as removed.
func reapOwner(ctx context.Context, cli *client.Client, owner string, log *slog.Logger) ([]Reaped, error) {
	ownerLabel := sandbox.LabelOwner + "=" + owner
	containers, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: labelFilter(sandbox.LabelOwner, []string{ownerLabel})})
	if err != nil {
		return nil, fmt.Errorf("docker: list containers: %w", err)
	}
	var out []Reaped
	var errs []error
	for _, c := range containers {
		if err := removeContainer(ctx, cli, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("janitor removed container", "container", shortID(c.ID))
		out = append(out, Reaped{Kind: "container", ID: c.ID, Owner: owner, Reason: ReasonOwnerGone})
	}
	images, err := listSnapshots(ctx, cli, ownerLabel)
	if err != nil {
		return out, errors.Join(append(errs, err)...)
	}
	for _, img := range images {
		r := Reaped{Kind: "image", ID: img.ID, Owner: owner, Reason: ReasonOwnerGone}
		if len(img.RepoTags) > 0 {
			r.Ref = img.RepoTags[0]
		}
		if err := removeImage(ctx, cli, img.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("janitor removed snapshot image", "image", r.Ref, "id", shortID(img.ID))
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// janitor is a provider's running janitor process.
type janitor struct {
	cmd *exec.Cmd
	// pipe is the write end of the pipe the janitor watches; the
	// provider holds it open for its whole life.
	pipe *os.File
	// stopping is set once the provider closes, so an exit after that is
	// expected.
	stopping atomic.Bool
	// done is closed once the process has been waited for; err is its
	// exit error, valid after done.
	done chan struct{}
	err  error
}

// startJanitor starts Options.Janitor, if set, as a process of its own
// session that watches a pipe the provider holds (see RunJanitor). The
// pipe's read end is the janitor's descriptor 3; the write end is
// close-on-exec, so no other child of this process keeps it open.
func (p *Provider) startJanitor() error {
	if len(p.opts.Janitor) == 0 {
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("docker: janitor pipe: %w", err)
	}
	args := append(slices.Clone(p.opts.Janitor[1:]), "--owner", p.owner)
	cmd := exec.Command(p.opts.Janitor[0], args...)
	// The janitor talks to the provider's engine; stdin, stdout and
	// stderr are /dev/null, so it holds no pipe of ours open.
	cmd.Env = append(append(os.Environ(), "DOCKER_HOST="+p.cli.DaemonHost()), p.opts.JanitorEnv...)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{r}
	// Its own session: a terminal's Ctrl-C, meant for us, does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return fmt.Errorf("docker: start janitor: %w", err)
	}
	j := &janitor{cmd: cmd, pipe: w, done: make(chan struct{})}
	go func() {
		defer close(j.done)
		j.err = cmd.Wait()
		if !j.stopping.Load() {
			p.log.Warn("janitor exited while the provider runs; a kill of this process now leaves snapshot images until the next reap", "err", j.err)
		}
	}()
	p.janitor = j
	p.log.Debug("janitor started", "pid", cmd.Process.Pid)
	return nil
}

// stopJanitor tells the janitor that the provider closed cleanly, closes
// the pipe and waits, within janitorStop, for the janitor to exit.
func (p *Provider) stopJanitor() error {
	j := p.janitor
	if j == nil {
		return nil
	}
	j.stopping.Store(true)
	// A janitor already gone makes the write fail; its exit status says
	// why.
	_, _ = j.pipe.Write([]byte{janitorBye})
	j.pipe.Close()
	t := time.NewTimer(janitorStop)
	defer t.Stop()
	select {
	case <-j.done:
	case <-t.C:
		return fmt.Errorf("docker: janitor (pid %d) did not exit within %s", j.cmd.Process.Pid, janitorStop)
	}
	if j.err != nil {
		return fmt.Errorf("docker: janitor: %w", j.err)
	}
	return nil
}
