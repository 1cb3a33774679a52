package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// pingTimeout bounds the first round trip to a new executor.
const pingTimeout = 20 * time.Second

// Sandbox is one container with its attached executor.
type Sandbox struct {
	p  *Provider
	id string
	// session is the container's gymserver.session label.
	session string
	// made is when the container started.
	made time.Time
	exec *executor.Client
	conn types.HijackedResponse
	// copied ends when the stream demultiplexer stops.
	copied chan struct{}

	closeOnce sync.Once
	closeErr  error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Create returns a sandbox for spec: a ready one from the warm pool when
// Options.WarmPool is set and one is waiting (its session id is then its
// own; see SessionID), else a container started now. On failure nothing is
// left behind.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if p.opts.WarmPool <= 0 || p.isSnapshot(spec.Image) {
		// Forks of a snapshot are one-offs: no pool for them.
		return p.create(ctx, spec)
	}
	key := poolKey(spec)
	// Whether or not this call is served from the pool, the pool is
	// topped up for the next one.
	defer p.refill(key, spec)
	if s := p.takePooled(key); s != nil {
		return s, nil
	}
	return p.create(ctx, spec)
}

// create starts a container from a prepared image and attaches its
// executor. On failure nothing is left behind.
func (p *Provider) create(ctx context.Context, spec sandbox.Spec) (_ *Sandbox, err error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, gym.Errorf(gym.ClassUnavailable, "docker: provider closed")
	}
	select {
	case p.starts <- struct{}{}:
		defer func() { <-p.starts }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}

	res := spec.Resources
	if res.MemoryBytes <= 0 {
		res.MemoryBytes = defaultMemory
	}
	if res.CPUs <= 0 {
		res.CPUs = defaultCPUs
	}
	if res.PIDs <= 0 {
		res.PIDs = defaultPIDs
	}
	network := spec.Network
	if network == "" {
		network = "none"
	}
	workdir := spec.WorkDir
	if workdir == "" {
		workdir = "/"
	}
	init := true
	cfg := &container.Config{
		Image:      spec.Image,
		Cmd:        p.idleCmd(),
		User:       sandboxUser,
		Env:        envList(spec.Env),
		WorkingDir: workdir,
		Labels:     p.labels(spec.Labels),
	}
	host := &container.HostConfig{
		NetworkMode: container.NetworkMode(network),
		Resources: container.Resources{
			Memory:     res.MemoryBytes,
			MemorySwap: res.MemoryBytes,
			NanoCPUs:   int64(res.CPUs * 1e9),
			PidsLimit:  &res.PIDs,
		},
		SecurityOpt: []string{"no-new-privileges"},
		CapDrop:     []string{"ALL"},
		Init:        &init,
		// The idle process ends an orphaned container; the engine removes it.
		AutoRemove: true,
	}
	created, err := p.cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
	if err != nil {
		return nil, gym.Classify(fmt.Errorf("docker: create container from %s: %w", spec.Image, err), gym.ClassSandbox)
	}
	s := &Sandbox{p: p, id: created.ID, session: spec.Labels[sandbox.LabelSession], made: time.Now()}
	defer func() {
		if err != nil {
			s.Close(context.WithoutCancel(ctx))
		}
	}()
	p.mu.Lock()
	p.live[s.id] = s
	p.mu.Unlock()
	if err := p.cli.ContainerStart(ctx, s.id, container.StartOptions{}); err != nil {
		return nil, gym.Classify(fmt.Errorf("docker: start container %s: %w", shortID(s.id), err), gym.ClassSandbox)
	}
	if err := s.attach(ctx, workdir, spec.Env); err != nil {
		return nil, err
	}
	p.log.Debug("sandbox started", "container", shortID(s.id), "image", spec.Image)
	return s, nil
}

// attach starts the executor in the container and connects a client to it.
func (s *Sandbox) attach(ctx context.Context, workdir string, env map[string]string) error {
	p := s.p
	ex, err := p.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User:         sandboxUser,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Env:          envList(env),
		WorkingDir:   workdir,
		Cmd:          p.executorCmd("serve", "--workdir", workdir, "--container"),
	})
	if err != nil {
		return gym.Classify(fmt.Errorf("docker: create executor in %s: %w", shortID(s.id), err), gym.ClassSandbox)
	}
	conn, err := p.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return gym.Classify(fmt.Errorf("docker: attach executor in %s: %w", shortID(s.id), err), gym.ClassSandbox)
	}
	s.conn = conn
	pr, pw := io.Pipe()
	s.copied = make(chan struct{})
	go func() {
		defer close(s.copied)
		stderr := &logLines{log: p.log, container: shortID(s.id)}
		_, err := stdcopy.StdCopy(pw, stderr, conn.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	s.exec = executor.NewClient(pr, hijackWriter{conn})
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := s.exec.Ping(pctx); err != nil {
		return gym.Classify(fmt.Errorf("docker: executor in %s does not answer: %w", shortID(s.id), s.diagnose(err)), gym.ClassSandbox)
	}
	return nil
}

// hijackWriter writes to a hijacked connection; Close half-closes it so
// the executor sees end of input.
type hijackWriter struct{ conn types.HijackedResponse }

func (w hijackWriter) Write(p []byte) (int, error) { return w.conn.Conn.Write(p) }

func (w hijackWriter) Close() error {
	err := w.conn.CloseWrite()
	w.conn.Close()
	return err
}

// ID is the container id.
func (s *Sandbox) ID() string { return s.id }

// SessionID is the container's gymserver.session label: the id the caller
// asked for, or, for a sandbox from the warm pool, the id it was started
// with. The environment uses it as the session's id.
func (s *Sandbox) SessionID() string { return s.session }

var _ sandbox.Named = (*Sandbox)(nil)

// diagnose adds what the engine knows about the container to an executor
// failure, so that "stream closed" reads as "container was OOM-killed".
func (s *Sandbox) diagnose(err error) error {
	if gym.ClassOf(err) != gym.ClassSandbox {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, ierr := s.p.cli.ContainerInspect(ctx, s.id)
	switch {
	case isNotFound(ierr):
		return fmt.Errorf("%w (the container is gone: it stopped, e.g. out of memory or orphaned, and was removed)", err)
	case ierr != nil:
		return fmt.Errorf("%w (inspect: %v)", err, ierr)
	case info.State == nil:
		return err
	case info.State.OOMKilled:
		return fmt.Errorf("%w (the container was killed for running out of memory)", err)
	case !info.State.Running:
		return fmt.Errorf("%w (the container exited with code %d)", err, info.State.ExitCode)
	}
	return err
}

// Exec runs a command through the executor.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	r, err := s.exec.Exec(ctx, req)
	return r, s.diagnose(err)
}

// WriteFile writes a file as the sandbox user.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return s.diagnose(s.exec.WriteFile(ctx, p, data, mode))
}

// ReadFile reads a file.
func (s *Sandbox) ReadFile(ctx context.Context, p string, maxBytes int64) ([]byte, error) {
	b, err := s.exec.ReadFile(ctx, p, maxBytes)
	return b, s.diagnose(err)
}

// ListDir lists a directory.
func (s *Sandbox) ListDir(ctx context.Context, p string) ([]sandbox.DirEntry, error) {
	e, err := s.exec.ListDir(ctx, p)
	return e, s.diagnose(err)
}

// Remove deletes a path recursively.
func (s *Sandbox) Remove(ctx context.Context, p string) error {
	return s.diagnose(s.exec.Remove(ctx, p))
}

// KillAll kills every process in the container but its own machinery.
func (s *Sandbox) KillAll(ctx context.Context) error {
	return s.diagnose(s.exec.KillAll(ctx))
}

// CopyIn installs files owned by root, mode 0644, through the Docker API,
// after removing whatever is at their paths. Missing parent directories are
// created owned by root.
func (s *Sandbox) CopyIn(ctx context.Context, files []sandbox.File) error {
	dirs := map[string]bool{}
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return fmt.Errorf("copy in %s: path is not absolute: %w", f.Path, gym.ErrInvalidArgument)
		}
		if err := s.Remove(ctx, f.Path); err != nil {
			return fmt.Errorf("copy in %s: %w", f.Path, err)
		}
		for d := path.Dir(f.Path); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = false
		}
	}
	// Only directories that do not exist yet get an entry: an entry would
	// change the owner of an existing one (the working directory).
	var newDirs []string
	for d := range dirs {
		if _, err := s.exec.ListDir(ctx, d); errors.Is(err, sandbox.ErrNotExist) {
			newDirs = append(newDirs, d)
		} else if err != nil && !errors.Is(err, sandbox.ErrNotDir) {
			return s.diagnose(err)
		}
	}
	sort.Strings(newDirs)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, d := range newDirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: now}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path[1:], Mode: 0o644, Size: int64(len(f.Data)), ModTime: now}); err != nil {
			return err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := s.p.cli.CopyToContainer(ctx, s.id, "/", &buf, container.CopyToContainerOptions{}); err != nil {
		return gym.Classify(fmt.Errorf("docker: copy into %s: %w", shortID(s.id), err), gym.ClassSandbox)
	}
	return nil
}

// Close removes the container. It is idempotent and works on a
// half-created sandbox.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		if s.exec != nil {
			s.exec.Close()
		} else if s.conn.Conn != nil {
			s.conn.Close()
		}
		if s.copied != nil {
			<-s.copied
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		s.closeErr = s.p.remove(rctx, s.id)
		s.p.mu.Lock()
		delete(s.p.live, s.id)
		pending := len(s.p.dropped) > 0
		s.p.mu.Unlock()
		if pending {
			// This may have been the last sandbox of a dropped snapshot.
			if err := s.p.removeDropped(rctx); err != nil {
				s.p.log.Warn("removing dropped snapshots", "err", err)
			}
		}
	})
	return s.closeErr
}

// envList turns a map into sorted KEY=VALUE entries.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// logLines logs the executor's stderr line by line.
type logLines struct {
	log       interface{ Warn(string, ...any) }
	container string
	buf       []byte
}

func (l *logLines) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.log.Warn("executor: "+string(l.buf[:i]), "container", l.container)
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}
