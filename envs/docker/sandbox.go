package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
	// session is the id of its session, minted at its start and on its
	// gymserver.session label.
	session string
	// made is when the container was created, or recycled (see
	// Options.Reuse): what changed after it is the session's. born is when
	// the container was created.
	made, born time.Time
	// image is the image the container runs; files are the paths of the
	// task files put into it (see Spec.Files); workdir is its working
	// directory.
	image   string
	files   []string
	workdir string
	// exec is the client of the executor: on its socket once boot moved
	// it there (see socket.go), else on the attach stream.
	exec *executor.Client
	// attached is the client on the attach stream while exec is the
	// socket's: idle, but its end still ends the executor.
	attached *executor.Client
	// sockDir is the host directory bound at socketMount and sockToken
	// the token of its socket, until boot has used them ("" for none).
	sockDir, sockToken string
	conn               types.HijackedResponse
	// copied ends when the stream demultiplexer stops.
	copied chan struct{}
	// stderr is where the executor's stderr goes, once attached.
	stderr *logLines
	// phases is how long each step of the container's start took.
	phases startPhases
	// poolKey is the warm pool it belongs to (see Options.WarmPool), or
	// "" when the provider keeps none for it.
	poolKey string

	// pristine says the executor keeps the sandbox's state as it started,
	// so that Close may recycle it (see Options.Reuse); recycled is when
	// it was last recycled (zero for none).
	pristine bool
	recycled time.Time

	// gate is held, shared, by every call to the executor or the engine
	// on the session's behalf; retired is set when Close begins. A call
	// after it fails, and Close takes gate whole before it recycles the
	// container, so that no call of a closed session reaches the next.
	gate    sync.RWMutex
	retired atomic.Bool

	closeOnce sync.Once
	// zygote is where the verifier zygote's start is: zygoteNone,
	// zygoteQueued, zygoteStarted or zygoteSkipped (see StartZygote).
	zygote atomic.Int32
	// preloadMu guards preload, the module names its zygote is to
	// preload (see StartZygote).
	preloadMu sync.Mutex
	preload   []string
}

// The states of a sandbox's verifier zygote start.
const (
	zygoteNone int32 = iota
	zygoteQueued
	zygoteStarted
	zygoteSkipped
)

var _ sandbox.Sandbox = (*Sandbox)(nil)
var _ sandbox.ZygoteStarter = (*Sandbox)(nil)
var _ sandbox.DirMaker = (*Sandbox)(nil)

// startPhases is how long each step of a cold start took; the benchmark
// of Create reports them.
type startPhases struct {
	// create is the engine's container create, files the copy of the
	// starter files, attach the attach to the executor's stream (before
	// the start), start the engine's start, ready the first round trip
	// to the executor.
	create, files, start, attach, ready time.Duration
}

// Create returns a sandbox for spec: a ready one from the warm pool when
// Options.WarmPool or Options.Reuse is set and one is waiting (fresh or
// recycled), else a container started now. On failure nothing is left
// behind.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := p.createSession(ctx, spec)
	if err == nil {
		p.pins.serve(sb.ID(), true)
	}
	return sb, err
}

// createSession is Create but for counting the session on the sandbox's
// cores.
func (p *Provider) createSession(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if (p.opts.WarmPool <= 0 && p.opts.Reuse <= 0) || p.isSnapshot(spec.Image) {
		// Forks of a snapshot are one-offs: no pool for them.
		return p.create(ctx, spec)
	}
	key := poolKey(spec)
	count := p.countFor(key, spec)
	// Whether or not this call is served from the pool, the pool is
	// topped up for the next one.
	defer p.refill(key, spec)
	cold := func() (sandbox.Sandbox, error) {
		s, err := p.create(ctx, spec)
		if err == nil {
			s.poolKey = key
		}
		return count.cold(s, err)
	}
	if !inWorkDir(spec.WorkDir, spec.Files) {
		// The agent cannot write there: the files go in before start
		// (and the sandbox is not recycled).
		return cold()
	}
	for {
		s := p.takePooled(key)
		if s == nil && p.opts.Reuse > 0 {
			// Started bare and recorded as it started, so that it can
			// be recycled; then its files go in as a pooled one's.
			bare := spec
			bare.Files = nil
			s, err := p.create(ctx, bare)
			if err != nil {
				return nil, err
			}
			s.poolKey = key
			s.takePristine(ctx)
			count.coldN.Add(1)
			if err := s.writeStarter(ctx, spec.WorkDir, spec.Files); err != nil {
				_ = s.Close(context.WithoutCancel(ctx))
				return nil, err
			}
			s.files = filePaths(spec.Files)
			return s, nil
		}
		if s == nil {
			return cold()
		}
		err := s.writeStarter(ctx, spec.WorkDir, spec.Files)
		if err == nil {
			s.files = filePaths(spec.Files)
			count.fromPool.Add(1)
			return s, nil
		}
		// A broken pooled sandbox goes; the next one or a new one serves.
		p.log.Info("pooled sandbox refused the starter files; starting a new one", "container", shortID(s.id), "err", err)
		_ = s.Close(context.WithoutCancel(ctx))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// writeStarter writes a pooled sandbox's starter files as the agent, so
// they and the folders made for them are the agent's.
func (s *Sandbox) writeStarter(ctx context.Context, workdir string, files []sandbox.File) error {
	for _, f := range files {
		err := s.bounded(ctx, "write starter file", opBound, func(ctx context.Context) error {
			return s.exec.WriteFile(ctx, f.Path, f.Data, starterMode(f.Mode))
		})
		if err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
	}
	return nil
}

// inWorkDir reports whether every file lies below workdir.
func inWorkDir(workdir string, files []sandbox.File) bool {
	for _, f := range files {
		if workdir == "" || workdir == "/" || !strings.HasPrefix(path.Clean(f.Path), strings.TrimSuffix(workdir, "/")+"/") {
			return false
		}
	}
	return true
}

// starterMode is the mode a starter file gets: its own, 0644 when unset.
func starterMode(m fs.FileMode) fs.FileMode {
	if m.Perm() == 0 {
		return 0o644
	}
	return m.Perm()
}

// create starts a container from a prepared image, one of the created
// pool when Options.CreatedPool is set and one is waiting, and attaches
// its executor. On failure nothing is left behind.
func (p *Provider) create(ctx context.Context, spec sandbox.Spec) (s *Sandbox, err error) {
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
	if p.opts.CreatedPool > 0 && !p.isSnapshot(spec.Image) {
		key := poolKey(spec)
		defer p.refillCreated(key, spec)
		s = p.takeCreated(key)
	}
	if s != nil {
		err := p.boot(ctx, s, spec)
		if err == nil {
			p.log.Debug("sandbox from the created pool", "container", shortID(s.id))
			return s, nil
		}
		// A broken created container (e.g. removed by hand) goes; a new
		// one serves.
		p.log.Info("created container did not start; creating a new one", "container", shortID(s.id), "err", err)
		_ = s.Close(context.WithoutCancel(ctx))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if s, err = p.makeContainer(ctx, spec); err != nil {
		return nil, err
	}
	if err := p.boot(ctx, s, spec); err != nil {
		_ = s.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// makeContainer creates a container for spec, not started, and adds it to
// the live sandboxes. On failure nothing is left behind.
func (p *Provider) makeContainer(ctx context.Context, spec sandbox.Spec) (*Sandbox, error) {
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
	if res.DiskBytes <= 0 {
		res.DiskBytes = defaultDisk
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
	// The session's id is minted here, for a pooled sandbox too: labels
	// cannot change once the container exists.
	session := sandbox.NewSessionID()
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[sandbox.LabelSession] = session
	// The container's init and its main process, the executor, run as
	// root with the few capabilities the executor needs to act as the agent
	// and to stop it; the agent's commands run as sandboxUser with none
	// (see executor.Cred), so the agent cannot signal, trace or write to
	// them.
	//
	// The executor is the main process and speaks over the container's
	// stdin and stdout, attached before the start: no docker exec (a
	// second process start in the engine) and no round trip after the
	// start but the first ping. Stdin closes when the attach ends
	// (StdinOnce), as when this process dies, so the executor ends and the
	// container with it, and the engine removes it (AutoRemove).
	args := []string{"serve", "--workdir", workdir, "--agent", sandboxUser}
	if !p.opts.KeepRootMode {
		args = append(args, "--close-root-group")
	}
	// A sandbox without a network is a container whose network the engine
	// leaves alone (NetworkDisabled): the runtime still gives it a network
	// namespace of its own with only loopback, as mode "none" does, but
	// the engine skips its network set-up, a hook that runs a copy of the
	// engine's binary, which was half of a container's start (≈ 100 of
	// ≈ 190 ms here). The engine then writes no /etc/hosts; the executor
	// writes mode "none"'s and refuses to serve if it sees any interface
	// but loopback.
	noNetwork := network == "none"
	if noNetwork {
		args = append(args, "--no-network")
	}
	sockDir, sockToken := p.socketFor()
	if sockDir != "" {
		args = append(args, socketArgs()...)
	}
	// Set even without a socket (empty): a snapshot's image, which docker
	// commit makes with its container's environment, holds the token of
	// the sandbox it came from.
	env := append(envList(spec.Env), socketEnv(sockToken))
	cfg := &container.Config{
		Image:           spec.Image,
		Cmd:             p.executorCmd(args...),
		User:            machineUser,
		Env:             env,
		WorkingDir:      workdir,
		Labels:          p.labels(labels),
		NetworkDisabled: noNetwork,
		OpenStdin:       true,
		StdinOnce:       true,
		AttachStdin:     true,
		AttachStdout:    true,
		AttachStderr:    true,
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
		CapAdd:      machineCaps,
		Init:        &init,
		// A container whose executor ended goes.
		AutoRemove: true,
		// The executor's stream is the protocol: the engine need not log it.
		LogConfig: container.LogConfig{Type: "none"},
	}
	if spec.ShareUsr {
		host.Binds = p.usrBinds(ctx, spec.Image)
	}
	if b := p.executorBind(ctx, spec.Image); b != "" {
		host.Binds = append(host.Binds, b)
	}
	if sockDir != "" {
		host.Binds = append(host.Binds, sockDir+":"+socketMount)
	}
	p.limitDisk(host, res)
	var cores []int
	host.CpusetCpus, cores = p.pins.take(res.CPUs)
	t0 := time.Now()
	created, err := p.cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
	// An engine that refuses a disk size or a cpuset is asked again
	// without it, and not asked for it again.
	for range 2 {
		switch {
		case err != nil && host.StorageOpt != nil && p.noQuota(err):
			host.StorageOpt = nil
		case err != nil && cores != nil && p.noCpuset(err):
			p.pins.put(cores)
			host.CpusetCpus, cores = "", nil
		default:
			continue
		}
		created, err = p.cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
	}
	if err != nil {
		p.pins.put(cores)
		if sockDir != "" {
			os.RemoveAll(sockDir)
		}
		return nil, gym.Classify(fmt.Errorf("docker: create container from %s: %w", spec.Image, err), gym.ClassSandbox)
	}
	p.pins.hold(created.ID, cores)
	now := time.Now()
	s := &Sandbox{p: p, id: created.ID, session: session, made: now, born: now, image: spec.Image, workdir: workdir,
		sockDir: sockDir, sockToken: sockToken}
	s.phases.create = time.Since(t0)
	p.mu.Lock()
	p.live[s.id] = s
	p.mu.Unlock()
	return s, nil
}

// boot puts spec's starter files into s's container, attaches to its
// executor, starts it and waits for the executor's first answer.
func (p *Provider) boot(ctx context.Context, s *Sandbox, spec sandbox.Spec) error {
	workdir := s.workdir
	s.files = filePaths(spec.Files)
	t0 := time.Now()
	if len(spec.Files) > 0 {
		archive, err := filesArchive(workdir, spec.Files)
		if err != nil {
			return gym.Classify(fmt.Errorf("docker: starter files: %w", err), gym.ClassSandbox)
		}
		if err := p.cli.CopyToContainer(ctx, s.id, "/", archive, container.CopyToContainerOptions{}); err != nil {
			return gym.Classify(fmt.Errorf("docker: copy starter files into %s: %w", shortID(s.id), err), gym.ClassSandbox)
		}
	}
	s.phases.files = time.Since(t0)
	if err := s.attach(ctx); err != nil {
		return err
	}
	t0 = time.Now()
	if err := p.cli.ContainerStart(ctx, s.id, container.StartOptions{}); err != nil {
		return gym.Classify(fmt.Errorf("docker: start container %s: %w", shortID(s.id), err), gym.ClassSandbox)
	}
	s.phases.start = time.Since(t0)
	t0 = time.Now()
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := s.exec.Ping(pctx); err != nil {
		return gym.Classify(fmt.Errorf("docker: executor in %s does not answer: %w", shortID(s.id), s.diagnose(err)), gym.ClassSandbox)
	}
	s.useSocket(ctx)
	s.phases.ready = time.Since(t0)
	p.log.Debug("sandbox started", "container", shortID(s.id), "image", spec.Image)
	return nil
}

// attach connects a client to the executor through the container's
// stdin, stdout and stderr; the executor's stderr goes to the log.
func (s *Sandbox) attach(ctx context.Context) error {
	p := s.p
	t0 := time.Now()
	conn, err := p.cli.ContainerAttach(ctx, s.id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return gym.Classify(fmt.Errorf("docker: attach to %s: %w", shortID(s.id), err), gym.ClassSandbox)
	}
	s.conn = conn
	s.stderr = &logLines{log: p.log, container: shortID(s.id)}
	pr, pw := io.Pipe()
	s.copied = make(chan struct{})
	stderr, copied := s.stderr, s.copied
	go func() {
		_, err := stdcopy.StdCopy(pw, stderr, conn.Reader)
		if err == nil {
			err = io.EOF
		}
		// copied closes before the client can see the stream's end: a
		// client that fails on it then finds all of the executor's stderr
		// (diagnose). Closed after, a failing client could look first and
		// miss the last message, as TestExecutorStartFailureSaid once did
		// on a loaded machine.
		close(copied)
		pw.CloseWithError(err)
	}()
	s.exec = executor.NewClient(pr, hijackWriter{conn})
	s.phases.attach = time.Since(t0)
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

// SessionID is the id of the sandbox's session, minted when the container
// was made (before the session, for a sandbox of the warm pool) and on its
// gymserver.session label.
func (s *Sandbox) SessionID() string { return s.session }

// diagnose adds what the engine knows about the container to an executor
// failure, so that "stream closed" reads as "container was OOM-killed".
func (s *Sandbox) diagnose(err error) error {
	if gym.ClassOf(err) != gym.ClassSandbox {
		return err
	}
	// What the executor said last, if its stream ended: a refusal to
	// start (e.g. --no-network finding an interface) says why. An
	// executor that ended closes its socket at once, and the attach
	// stream with its stderr as the process goes: that is waited for.
	if s.exec != nil && s.copied != nil {
		select {
		case <-s.exec.Done():
			select {
			case <-s.copied:
			case <-time.After(2 * time.Second):
			}
		default:
		}
	}
	select {
	case <-s.copied:
		if s.stderr.ranOutOfPids() {
			// The executor's own threads are a handful of the pids
			// limit: the agent's processes had taken the rest, and the
			// runtime then ends the process (it keeps spare threads, so
			// this takes more of its requests at once than an episode
			// makes).
			return fmt.Errorf("%w (the executor could not make a thread: the agent's processes held every pid of the sandbox): %w", err, sandbox.ErrAgentCrash)
		}
		if last := s.stderr.lastLine(); last != "" {
			err = fmt.Errorf("%w (its last message: %q)", err, last)
		}
	default:
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
		// The agent's processes are the out-of-memory killer's first
		// choice, so a container that still died of it was exhausted by
		// the agent.
		return fmt.Errorf("%w (the container was killed for running out of memory): %w", err, sandbox.ErrAgentCrash)
	case !info.State.Running:
		return fmt.Errorf("%w (the container exited with code %d)", err, info.State.ExitCode)
	}
	return err
}

// Bounds on executor calls. The agent cannot stop or starve the executor
// (it runs as another user), so an executor that does not answer in time
// is an infrastructure failure, reported as one instead of hanging the
// episode. Every call is bounded: a command by its timeout plus
// execGrace, a command without a timeout by checks that the executor
// still answers (aliveEvery, each within execGrace), anything else by
// opBound.
const (
	// execGrace is added to a command's own timeout.
	execGrace = 15 * time.Second
	// opBound bounds file operations and KillAll.
	opBound = 60 * time.Second
	// aliveEvery is how often the executor is pinged while a command
	// without a timeout runs.
	aliveEvery = 30 * time.Second
)

// bounded runs call under a deadline of d (none when d is 0) and turns an
// expiry of that deadline, not of ctx, into a sandbox error.
func (s *Sandbox) bounded(ctx context.Context, what string, d time.Duration, call func(context.Context) error) error {
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.gate.RUnlock()
	if d <= 0 {
		return s.diagnose(call(ctx))
	}
	bctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := call(bctx)
	if err == nil && s.retired.Load() {
		return gym.Errorf(gym.ClassSandbox, "docker: %s: sandbox %s was closed meanwhile", what, shortID(s.id))
	}
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = gym.Errorf(gym.ClassSandbox, "docker: %s: the executor in %s did not answer within %s", what, shortID(s.id), d)
	}
	return s.diagnose(err)
}

// Exec runs a command through the executor, as the sandbox user. A
// command that may use the verifier zygote while the zygote still waits
// for its turn runs the usual way, and the zygote is not started.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (r sandbox.ExecResult, err error) {
	if req.Zygote {
		s.zygote.CompareAndSwap(zygoteQueued, zygoteSkipped)
	}
	var bound time.Duration
	switch {
	case req.Background:
		bound = opBound
	case req.Timeout > 0:
		bound = req.Timeout + s.p.bounds.grace
	default:
		return s.execWatched(ctx, req)
	}
	err = s.bounded(ctx, "exec", bound, func(ctx context.Context) (err error) {
		r, err = s.exec.Exec(ctx, req)
		return err
	})
	return r, err
}

// execWatched runs a command without a timeout, which may run as long as
// ctx allows: meanwhile a watcher pings the executor, and a ping without
// an answer in time ends the call with a sandbox error.
func (s *Sandbox) execWatched(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if err := s.enter("exec"); err != nil {
		return sandbox.ExecResult{}, err
	}
	defer s.gate.RUnlock()
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		s.watch(wctx, cancel)
	}()
	r, err := s.exec.Exec(wctx, req)
	cancel(nil)
	<-watched
	if err == nil && s.retired.Load() {
		// Its process was killed by the close.
		return sandbox.ExecResult{}, gym.Errorf(gym.ClassSandbox, "docker: exec: sandbox %s was closed while the command ran", shortID(s.id))
	}
	if cause := context.Cause(wctx); err != nil && ctx.Err() == nil && gym.ClassOf(cause) == gym.ClassSandbox {
		err = cause
	}
	return r, s.diagnose(err)
}

// watch pings the executor every bounds.alive until ctx ends; a ping
// without an answer within bounds.grace cancels ctx with a sandbox error.
func (s *Sandbox) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	b := s.p.bounds
	tick := time.NewTicker(b.alive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, stop := context.WithTimeout(ctx, b.grace)
		err := s.exec.Ping(pctx)
		stop()
		if err != nil && ctx.Err() == nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("it did not answer within %s", b.grace)
			}
			cancel(gym.Errorf(gym.ClassSandbox, "docker: exec: the executor in %s failed while the command ran: %v", shortID(s.id), err))
			return
		}
	}
}

// WriteFile writes a file as the sandbox user.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return s.bounded(ctx, "write "+p, opBound, func(ctx context.Context) error {
		return s.exec.WriteFile(ctx, p, data, mode)
	})
}

// ReadFile reads a file as the sandbox user.
func (s *Sandbox) ReadFile(ctx context.Context, p string, maxBytes int64) (b []byte, err error) {
	err = s.bounded(ctx, "read "+p, opBound, func(ctx context.Context) (err error) {
		b, err = s.exec.ReadFile(ctx, p, maxBytes)
		return err
	})
	return b, err
}

// ListDir lists a directory as the sandbox user.
func (s *Sandbox) ListDir(ctx context.Context, p string) (e []sandbox.DirEntry, err error) {
	err = s.bounded(ctx, "list "+p, opBound, func(ctx context.Context) (err error) {
		e, err = s.exec.ListDir(ctx, p)
		return err
	})
	return e, err
}

// Remove deletes a path recursively with the executor's rights.
func (s *Sandbox) Remove(ctx context.Context, p string) error {
	return s.bounded(ctx, "remove "+p, opBound, func(ctx context.Context) error {
		return s.exec.Remove(ctx, p)
	})
}

// StartZygote starts the executor's verifier zygote; see
// sandbox.ZygoteStarter. Without wait it returns at once, and the zygote
// starts when its turn comes: at most Options.ZygoteImports zygotes of the
// provider import at once. Until then an evaluation runs its tests the
// usual way. Started without wait in a sandbox of a warm pool, it also
// makes every sandbox that joins that pool later start its own zygote as
// it joins, with the same modules to preload. The modules to preload of a
// zygote that runs already (a pooled sandbox's) go to it at once.
func (s *Sandbox) StartZygote(ctx context.Context, opts sandbox.ZygoteOptions) (sandbox.ZygoteStatus, error) {
	if err := executor.CheckPreload(opts.Preload); err != nil {
		return sandbox.ZygoteStatus{}, fmt.Errorf("docker: zygote: %v: %w", err, gym.ErrInvalidArgument)
	}
	// The names are stored before the state is read, and the zygote's
	// start reads them after it changed the state: one of the two passes
	// them on.
	s.preloadMu.Lock()
	s.preload = addNames(s.preload, opts.Preload)
	s.preloadMu.Unlock()
	if opts.Wait {
		return s.startZygote(ctx)
	}
	if !s.zygote.CompareAndSwap(zygoteNone, zygoteQueued) {
		// Queued: its start passes the names on; skipped: no zygote.
		if len(opts.Preload) > 0 && s.zygote.Load() == zygoteStarted {
			err := s.bounded(ctx, "preload zygote", opBound, func(ctx context.Context) error {
				return s.exec.PreloadZygote(ctx, opts.Preload)
			})
			return sandbox.ZygoteStatus{}, err
		}
		return sandbox.ZygoteStatus{}, nil
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.poolKey != "" {
		// The next sandboxes of its pool will want one too.
		p.zygotePools[s.poolKey] = slices.Clone(opts.Preload)
	}
	if !p.closed {
		p.bg.Add(1)
		p.zygotesPending.Add(1)
		go s.zygoteInTurn()
	}
	return sandbox.ZygoteStatus{}, nil
}

// zygoteTurnBound bounds one zygote's turn: its start and its imports.
const zygoteTurnBound = time.Minute

// zygoteInTurn starts the zygote when a turn is free, unless the sandbox
// or the provider closes first, and holds the turn until the zygote is
// ready or has failed.
func (s *Sandbox) zygoteInTurn() {
	p := s.p
	defer p.bg.Done()
	defer p.zygotesPending.Add(-1)
	select {
	case p.zygoteTurns <- struct{}{}:
	case <-s.copied: // the sandbox's stream ended: it is closed
		return
	case <-p.bgCtx.Done():
		return
	}
	defer func() { <-p.zygoteTurns }()
	if !s.zygote.CompareAndSwap(zygoteQueued, zygoteStarted) {
		return // an evaluation came first and ran the usual way
	}
	ctx, cancel := context.WithTimeout(p.bgCtx, zygoteTurnBound)
	defer cancel()
	st, err := s.startZygote(ctx)
	switch {
	case err != nil:
		p.log.Debug("verifier zygote did not start", "container", shortID(s.id), "err", err)
	case st.Error != "":
		p.log.Debug("no verifier zygote", "container", shortID(s.id), "reason", st.Error)
	}
}

// startZygote starts the zygote and waits until it is ready or failed.
func (s *Sandbox) startZygote(ctx context.Context) (st sandbox.ZygoteStatus, err error) {
	s.zygote.Store(zygoteStarted)
	s.preloadMu.Lock()
	names := slices.Clone(s.preload)
	s.preloadMu.Unlock()
	err = s.bounded(ctx, "start zygote", zygoteTurnBound, func(ctx context.Context) (err error) {
		st, err = s.exec.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true, Preload: names})
		return err
	})
	return st, err
}

// addNames returns names with those of more it does not hold, up to
// executor.MaxPreload in all.
func addNames(names, more []string) []string {
	for _, n := range more {
		if len(names) < executor.MaxPreload && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// KillAll kills every process of the sandbox user.
func (s *Sandbox) KillAll(ctx context.Context) error {
	return s.bounded(ctx, "kill all", opBound, s.exec.KillAll)
}

// MakeDir makes a directory through the executor; see sandbox.DirMaker.
func (s *Sandbox) MakeDir(ctx context.Context, path string, forAgent bool) error {
	return s.bounded(ctx, "mkdir "+path, opBound, func(ctx context.Context) error {
		return s.exec.MakeDir(ctx, path, forAgent)
	})
}

// CopyIn installs files owned by root, mode 0644, through the executor,
// which runs as root; see sandbox.Sandbox.CopyIn.
func (s *Sandbox) CopyIn(ctx context.Context, files []sandbox.File) error {
	return s.bounded(ctx, "copy in", opBound, func(ctx context.Context) error {
		return s.exec.Install(ctx, files)
	})
}

// Close stops the sandbox's executor and has its container removed. The
// removal runs in the background (see Options.SyncRemove): Close waits
// only while too many removals are pending, and the sandbox counts as
// live until its container is gone; Provider.Close waits for every
// removal. A removal that fails is counted in PoolStats, not returned.
// Close is idempotent and works on a half-created sandbox.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.retired.Store(true)
		s.p.pins.serve(s.id, false)
		if s.p.startRecycle(s) {
			return
		}
		s.p.dispose(s)
	})
	return nil
}

// dispose stops s's executor and has its container removed (see Close).
func (p *Provider) dispose(s *Sandbox) {
	if s.attached != nil {
		s.attached.Close()
	}
	if s.exec != nil {
		s.exec.Close()
	} else if s.conn.Conn != nil {
		s.conn.Close()
	}
	if p.opts.SyncRemove {
		p.mu.Lock()
		p.rm.pending++
		p.mu.Unlock()
		p.removeSandbox(s)
		return
	}
	p.startRemoval(s)
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

// logLines logs the executor's stderr line by line and keeps the last
// line, for an error that its stream ended (see Sandbox.diagnose).
type logLines struct {
	log       interface{ Warn(string, ...any) }
	container string
	buf       []byte

	// mu guards last and noThread.
	mu   sync.Mutex
	last string
	// noThread says the executor's Go runtime could not make a thread for
	// want of a pid (EAGAIN): it then ends the process.
	noThread bool
}

// noThreadLine starts the line the Go runtime writes when it cannot make a
// thread, before it ends the process.
const noThreadLine = "runtime: failed to create new OS thread"

func (l *logLines) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := string(l.buf[:i])
		l.log.Warn("executor: "+line, "container", l.container)
		l.mu.Lock()
		l.last = line
		if strings.HasPrefix(line, noThreadLine) && strings.Contains(line, "errno=11)") {
			l.noThread = true
		}
		l.mu.Unlock()
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

// ranOutOfPids says whether the executor's runtime reported that it could
// not make a thread for want of a pid.
func (l *logLines) ranOutOfPids() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.noThread
}

// lastLine returns the last whole line written, or "".
func (l *logLines) lastLine() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}
