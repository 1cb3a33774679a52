package executor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// defaultMaxOutput is the per-stream output cap when a request gives none.
const defaultMaxOutput = 64 << 10

// waitDelay bounds how long a finished command's output pipes are drained
// when a process it left behind keeps them open (e.g. `server &`).
const waitDelay = 500 * time.Millisecond

// Options configure Serve.
type Options struct {
	// WorkDir resolves relative paths and is the default command directory.
	WorkDir string
	// Agent, when set, is the identity of the agent (privilege
	// separation): the executor runs as root with a few capabilities, every
	// command and every file operation on the agent's behalf runs as Agent,
	// and KillAll kills every process of Agent's uid. Remove and the
	// Priv operations keep the executor's own rights. Only set it inside a
	// sandbox.
	Agent *Cred
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// SocketTokenEnv is the environment variable that gives serve the token
// of its socket (see Main).
const SocketTokenEnv = "GYMSERVER_SOCKET_TOKEN"

// Main is the entry of the executor binary; args[0] is the mode:
//
//	serve [--workdir DIR] [--agent UID:GID] [--close-root-group] [--no-network]
//	      [--socket PATH]
//	                                       answer requests on stdin/stdout,
//	                                       and on one connection to PATH
//	                                       (see listenSocket)
//	idle                                   block until SIGTERM or SIGINT
//
// With --socket, the socket's token comes in the environment variable
// SocketTokenEnv, not on the command line, which every process in the
// sandbox, the agent's too, can read in /proc; serve removes it from its
// environment at once, so no command it starts inherits it.
//
// It returns the process exit code.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "executor: usage: serve [--workdir DIR] [--agent UID:GID] [--close-root-group] [--no-network] [--socket PATH] | idle")
		return 2
	}
	switch args[0] {
	case "idle":
		return runIdle(args)
	case "serve":
		fs := flag.NewFlagSet("executor serve", flag.ContinueOnError)
		workdir := fs.String("workdir", "", "working directory for relative paths and commands")
		agent := fs.String("agent", "", "run commands and file operations as `UID:GID` (the executor must be root)")
		closeRoot := fs.Bool("close-root-group", false, "clear the group bits of / where that changes no one's access (see closeRootGroup)")
		noNetwork := fs.Bool("no-network", false, "check that loopback is the only network interface and write /etc/hosts (see setUpNoNetwork)")
		socketPath := fs.String("socket", "", "also serve one connection to a Unix socket made at `PATH` (see serveSocket)")
		socketToken := os.Getenv(SocketTokenEnv)
		os.Unsetenv(SocketTokenEnv)
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		// A token without --socket is ignored: an image committed from a
		// sandbox that had a socket carries its container's environment.
		if *socketPath != "" && socketToken == "" {
			fmt.Fprintf(os.Stderr, "executor: --socket needs its token in $%s\n", SocketTokenEnv)
			return 2
		}
		var cred *Cred
		if *agent != "" {
			c, err := ParseCred(*agent)
			if err != nil {
				fmt.Fprintln(os.Stderr, "executor:", err)
				return 2
			}
			cred = c
		}
		if *workdir == "" {
			*workdir, _ = os.Getwd()
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if *closeRoot {
			// Only speed depends on it: a failure is logged, not fatal.
			if _, err := closeRootGroup("/", cred); err != nil {
				logger.Warn("close the group bits of /", "err", err)
			}
		}
		if *noNetwork {
			dev, err := os.ReadFile("/proc/net/dev")
			if err == nil {
				err = setUpNoNetwork(dev, "/etc/hosts")
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "executor:", err)
				return 1
			}
		}
		tuneRuntime()
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		opts := Options{WorkDir: *workdir, Agent: cred, Logger: logger}
		if *socketPath != "" {
			// The client falls back to stdin when the socket is not
			// there: a failure is logged, not fatal.
			if l, err := listenSocket(*socketPath); err != nil {
				logger.Warn("executor socket", "err", err)
			} else {
				go serveSocket(ctx, l, socketToken, opts, logger)
			}
		}
		err := Serve(ctx, pollableStdin(), os.Stdout, opts)
		normalSysmon()
		if err != nil {
			logger.Error("executor stopped", "err", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "executor: unknown mode %q\n", args[0])
	return 2
}

// tuneRuntime sets the Go runtime of the executor process for its work:
// one goroutine at a time is enough to move frames and wait for children,
// and with one P no second thread is woken to look for work each time a
// goroutine becomes ready (in a sandbox capped at one CPU, those wake-ups
// are CPU the agent's commands do not get). It leaves GOMAXPROCS alone
// when the environment sets it.
func tuneRuntime() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	idleSysmon()
}

// server is the state of one Serve call.
type server struct {
	opts Options
	log  *slog.Logger

	// wmu guards w.
	wmu sync.Mutex
	w   *bufio.Writer

	// mu guards the fields below.
	mu sync.Mutex
	// groups are the process groups of every command started, background
	// or not, that may still have members.
	groups map[int]bool
	// running cancels in-flight exec requests by request id.
	running map[uint64]context.CancelFunc
	// held are archives taken for a later fetch, by request id.
	held map[uint64][]byte

	// shellTurn is held by the one request using the persistent shell;
	// sh is guarded by holding it.
	shellTurn chan struct{}
	sh        *shell

	// oom counts the sandbox's OOM kills.
	oom oomCounter
	// zygote is the verifier zygote, once a zygote op started it.
	zygote *zygote
	// preload is every module name zygote ops asked to preload, in
	// order, each once: a zygote started later gets them all.
	preload []string

	// pristine is the agent's places as the sandbox started, once a
	// pristine op took them; tainted says why the sandbox can no longer
	// be recycled; installed are the files install ops put outside the
	// agent's places, and madeDirs the directories they made there, for
	// a recycle to remove (see recycle.go).
	pristine  *pristine
	tainted   string
	installed []string
	madeDirs  []string

	// inFlight counts the requests being handled.
	inFlight atomic.Int64

	// devNull is the standard input of commands given none, opened once:
	// os/exec would open /dev/null for each one. Nil lets os/exec do it.
	devNull *os.File

	// links are "/"'s symbolic links, to start programs named through
	// them by the path they lead to (see rootLinks).
	links rootLinks
}

// Serve answers requests read from r, writing responses to w, until r ends
// or ctx is cancelled. It returns nil when r ends cleanly.
func Serve(ctx context.Context, r io.Reader, w io.Writer, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{opts: opts, log: log, w: bufio.NewWriter(w), groups: map[int]bool{}, running: map[uint64]context.CancelFunc{},
		held: map[uint64][]byte{}, shellTurn: make(chan struct{}, 1)}
	// A blocking descriptor, off the poller (see newOutputPipe).
	if fd, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
		s.devNull = os.NewFile(uintptr(fd), os.DevNull)
		defer s.devNull.Close() // after every handler has returned
	}
	if opts.Agent != nil {
		s.links.use(readRootLinks("/"))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.closeShell() // after every handler has returned
	var wg sync.WaitGroup
	defer wg.Wait()
	br := bufio.NewReader(r)
	for {
		var req request
		if err := readFrame(br, &req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read request: %w", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		normalThreads()
		wg.Add(1)
		s.inFlight.Add(1)
		go func() {
			defer wg.Done()
			defer s.inFlight.Add(-1)
			s.reply(s.handle(ctx, req))
		}()
	}
}

func (s *server) reply(resp response) {
	b, err := encodeFrame(resp)
	if err != nil {
		b, _ = encodeFrame(response{ID: resp.ID, ErrKind: kindOther, Err: "encode response: " + err.Error()})
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.w.Write(b); err == nil {
		_ = s.w.Flush()
	}
}

func (s *server) handle(ctx context.Context, req request) response {
	if req.Priv && (req.Op == opExec || req.Op == opWrite) {
		s.taint("%s with the machinery's rights", req.Op)
		s.links.drop()
	}
	switch req.Op {
	case opPing:
		return response{ID: req.ID}
	case opExec:
		if req.Shell {
			return s.shellExec(ctx, req)
		}
		return s.exec(ctx, req)
	case opCancel:
		s.mu.Lock()
		if c := s.running[req.Target]; c != nil {
			c()
		}
		s.mu.Unlock()
		return response{ID: req.ID}
	case opWrite:
		return errResponse(req.ID, s.as(req, func() error { return s.write(req) }))
	case opRead:
		var data []byte
		err := s.as(req, func() (err error) {
			data, err = s.read(req)
			return err
		})
		resp := errResponse(req.ID, err)
		resp.Data = data
		return resp
	case opList:
		var ents []entry
		err := s.as(req, func() (err error) {
			ents, err = s.list(req)
			return err
		})
		resp := errResponse(req.ID, err)
		resp.Entries = ents
		return resp
	case opRemove:
		// Removal is the machinery's: it clears hidden-test directories
		// whatever their owner.
		if req.Path == "" {
			return response{ID: req.ID, ErrKind: kindInvalid, Err: "remove: empty path"}
		}
		p := s.abs(req.Path)
		s.noteRemove(p)
		return errResponse(req.ID, os.RemoveAll(p))
	case opKillAll:
		return errResponse(req.ID, s.killAll())
	case opZygote:
		if err := CheckPreload(req.Preload); err != nil {
			return response{ID: req.ID, ErrKind: kindInvalid, Err: "zygote: " + err.Error()}
		}
		st := s.startZygote(ctx, req.Wait, req.Preload, !req.NoStart)
		return response{ID: req.ID, Zygote: &st}
	case opInstall:
		return errResponse(req.ID, s.install(req.Files))
	case opRoots:
		roots, err := s.roots()
		resp := errResponse(req.ID, err)
		resp.Roots = roots
		return resp
	case opArchive:
		// As the agent: the archive holds only what it can read.
		var data []byte
		err := asAgent(s.opts.Agent, func() (err error) {
			data, err = s.archive(req.Roots, req.MaxBytes, req.Since)
			return err
		})
		resp := errResponse(req.ID, err)
		if err == nil && req.Hold {
			s.mu.Lock()
			s.held[req.ID] = data
			s.mu.Unlock()
			resp.Size = int64(len(data))
			return resp
		}
		resp.Data = data
		return resp
	case opFetch:
		s.mu.Lock()
		data, ok := s.held[req.Target]
		delete(s.held, req.Target)
		s.mu.Unlock()
		if !ok {
			return response{ID: req.ID, ErrKind: kindNotExist, Err: fmt.Sprintf("fetch: no archive held for request %d", req.Target)}
		}
		return response{ID: req.ID, Data: data}
	case opPristine:
		size, err := s.takePristine(req.Roots)
		resp := errResponse(req.ID, err)
		resp.Size = size
		return resp
	case opMakeDir:
		return errResponse(req.ID, s.makeDir(req.Path, req.ForAgent))
	case opRecycle:
		return errResponse(req.ID, s.recycle())
	case opRestore:
		// As the agent: nothing is restored that it could not write.
		return errResponse(req.ID, asAgent(s.opts.Agent, func() error { return s.restore(req.Roots, req.Data) }))
	}
	return response{ID: req.ID, ErrKind: kindInvalid, Err: fmt.Sprintf("unknown op %q", req.Op)}
}

// as runs a file operation with the agent's file-system identity, unless
// the request asks for the executor's own (Priv).
func (s *server) as(req request, fn func() error) error {
	if req.Priv {
		return fn()
	}
	return asAgent(s.opts.Agent, fn)
}

// abs resolves p against the working directory.
func (s *server) abs(p string) string {
	if p == "" {
		return s.opts.WorkDir
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(s.opts.WorkDir, p)
}

func (s *server) exec(ctx context.Context, req request) response {
	if len(req.Argv) == 0 {
		return response{ID: req.ID, ErrKind: kindInvalid, Err: "exec: empty argv"}
	}
	maxOut := req.MaxOutput
	if maxOut <= 0 {
		maxOut = defaultMaxOutput
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	if filepath.IsAbs(req.Argv[0]) {
		cmd.Path = s.links.execPath(cmd.Path)
	}
	cmd.Dir = s.abs(req.Dir)
	env := os.Environ()
	pidfd := pidfdSlot()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, PidFD: pidfd}
	if a := s.opts.Agent; a != nil && !req.Priv {
		env = a.env(env)
		cmd.SysProcAttr.Credential = a.sysCred()
	}
	cmd.Env = append(env, req.Env...)
	if req.Background {
		// Output is discarded (nil means /dev/null).
		if err := startCmd(cmd); err != nil {
			closePidfd(*pidfd)
			return response{ID: req.ID, ErrKind: startKind(err), Err: err.Error()}
		}
		pid := cmd.Process.Pid
		s.started(pid)
		go func() { // reap it; KillAll ends it
			awaitExit(*pidfd)
			_ = cmd.Wait()
		}()
		return response{ID: req.ID, PID: pid, ExitCode: -1}
	}
	stdout, stderr := newCapture(maxOut), newCapture(maxOut)
	if req.Stdin != nil {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	} else if s.devNull != nil {
		cmd.Stdin = s.devNull
	}
	// Bounds only the stdin copy now: the output pipes are ours.
	cmd.WaitDelay = waitDelay

	// The timeout starts with the process, after any wait for the zygote;
	// a cancel op ends the wait too.
	untimed := req
	untimed.TimeoutMS = 0
	cctx, stop := s.commandContext(ctx, untimed)
	defer stop()
	var zplan struct {
		z       *zygote
		req     zygoteReq
		waited  time.Duration
		why     string
		running bool
	}
	if req.Zygote {
		zplan.z, zplan.req, zplan.waited, zplan.why = s.zygotePlan(cctx, req, cmd.Env, cmd.Dir)
	}
	if req.TimeoutMS > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, time.Duration(req.TimeoutMS)*time.Millisecond)
		defer cancel()
	}

	var rep *reportPipe
	if req.Report {
		var err error
		if rep, err = newReportPipe(s.opts.Agent, req.ReportMax); err != nil {
			return response{ID: req.ID, ErrKind: kindOther, Err: "report pipe: " + err.Error()}
		}
		defer rep.close()
		cmd.ExtraFiles = []*os.File{rep.w}
	}

	outPipe, err := newOutputPipe(stdout)
	if err != nil {
		return response{ID: req.ID, ErrKind: kindOther, Err: err.Error()}
	}
	errPipe, err := newOutputPipe(stderr)
	if err != nil {
		outPipe.close()
		return response{ID: req.ID, ErrKind: kindOther, Err: err.Error()}
	}
	cmd.Stdout, cmd.Stderr = outPipe.w, errPipe.w

	oomBefore := s.oom.kills()
	start := time.Now()
	var pid int
	var wait func() (syscall.WaitStatus, error)
	if z := zplan.z; z != nil {
		// One command at a time; another one runs the usual way.
		select {
		case z.turn <- struct{}{}:
			defer func() { <-z.turn }()
			var repW *os.File
			if rep != nil {
				repW = rep.w
			}
			child, err := z.fork(zplan.req, outPipe.w, errPipe.w, repW)
			if err != nil {
				zplan.why = err.Error()
				break
			}
			pid, wait, zplan.running = child.pid, child.wait, true
		default:
			zplan.why = "the zygote is busy"
		}
	}
	// direct says the program runs without the shell (see direct.go).
	var direct bool
	if !zplan.running {
		if d := directCmd(req, cmd, &s.links); d != nil {
			if err := startCmd(d); err == nil {
				cmd, direct = d, true
			} else {
				// Nothing of the program ran: the shell runs it, or says
				// why it cannot.
				closePidfd(*pidfd)
				*pidfd = -1
			}
		}
	}
	if !zplan.running && !direct {
		if err := startCmd(cmd); err != nil {
			closePidfd(*pidfd)
			outPipe.close()
			errPipe.close()
			return response{ID: req.ID, ErrKind: startKind(err), Err: err.Error()}
		}
	}
	if !zplan.running {
		pid = cmd.Process.Pid
		wait = func() (syscall.WaitStatus, error) {
			awaitExit(*pidfd)
			_ = cmd.Wait()
			var ws syscall.WaitStatus
			if cmd.ProcessState != nil {
				ws, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
			}
			return ws, nil
		}
	}
	s.started(pid)
	// A thread sysmon made while the command started has its idle
	// priority (see normalThreads).
	normalThreads()
	outPipe.start()
	errPipe.start()
	if rep != nil {
		rep.started()
	}
	type waited struct {
		ws  syscall.WaitStatus
		err error
	}
	done := make(chan waited, 1)
	go func() {
		ws, err := wait()
		done <- waited{ws, err}
	}()
	var killed bool
	var w waited
	select {
	case w = <-done:
	case <-cctx.Done():
		killed = true
		normalThreads()
		killTree(pid)
		w = <-done
	}
	dur := time.Since(start)
	if w.err != nil {
		// The zygote died while its child ran: nothing of the command
		// may outlive the call. Out of memory, the child (the killer's
		// first choice) went first, as the usual way's test process
		// would have: the shell would report 128+SIGKILL. Otherwise the
		// command's end is unknown, a failure of the machinery.
		killTree(pid)
		if oomBefore < 0 || s.oom.kills() <= oomBefore {
			outPipe.finish(time.Now().Add(waitDelay))
			errPipe.finish(time.Now().Add(waitDelay))
			return response{ID: req.ID, ErrKind: kindOther, Err: w.err.Error()}
		}
		w.ws = syscall.WaitStatus((128 + int(syscall.SIGKILL)) << 8)
	}
	// Output written before the exit is all in the pipes by now; a process
	// left behind (`server &`) may hold them open: it is given waitDelay.
	limit := time.Now().Add(waitDelay)
	var pipeErrs []error
	for _, p := range []struct {
		name string
		pipe *outputPipe
	}{{"stdout", outPipe}, {"stderr", errPipe}} {
		cut, err := p.pipe.finish(limit)
		if err != nil {
			pipeErrs = append(pipeErrs, fmt.Errorf("read %s: %w", p.name, err))
		}
		if cut {
			s.log.Debug("output pipe still held after the command exited", "stream", p.name, "argv0", req.Argv[0])
		}
	}
	if err := errors.Join(pipeErrs...); err != nil {
		return response{ID: req.ID, ErrKind: kindOther, Err: err.Error()}
	}
	if direct && !killed && w.ws.Signaled() {
		var msg string
		w.ws, msg = shellSignalEnd(w.ws)
		stderr.Write([]byte(msg))
	}
	resp := response{ID: req.ID, DurationNS: dur.Nanoseconds(), ExitCode: -1}
	resp.setWaitStatus(w.ws)
	resp.finish(cctx, killed, oomBefore, s.oom.kills(), stdout, stderr)
	if req.Zygote {
		resp.ViaZygote, resp.ZygoteWaitNS = zplan.running, zplan.waited.Nanoseconds()
		if !zplan.running {
			resp.ZygoteMiss = zplan.why
		}
	}
	if rep != nil {
		// Whatever the command left behind could still write to the
		// report: everything goes before the report is read to its end.
		if err := s.killAll(); err != nil {
			return response{ID: req.ID, ErrKind: kindOther, Err: "stop processes before reading the report: " + err.Error()}
		}
		data, dropped, err := rep.finish()
		if err != nil {
			return response{ID: req.ID, ErrKind: kindOther, Err: "read report: " + err.Error()}
		}
		resp.Report, resp.ReportDropped = data, dropped
	}
	return resp
}

// setStatus records how a process ended: its exit code, or the signal
// that ended it.
func (r *response) setStatus(st *os.ProcessState) {
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok {
		return
	}
	r.setWaitStatus(ws)
}

// setWaitStatus records how a process ended from its wait status.
func (r *response) setWaitStatus(ws syscall.WaitStatus) {
	switch {
	case ws.Exited():
		r.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		r.Signal = signalName(ws.Signal())
	}
}

// finish completes the response of a command: killed says the command
// was killed for its context cctx (timeout or cancel), oomBefore and
// oomAfter are the OOM kill counts read before it started and after it
// ended, and stdout and stderr hold its output.
func (r *response) finish(cctx context.Context, killed bool, oomBefore, oomAfter int64, stdout, stderr *capture) {
	if killed {
		r.ExitCode = -1
		if r.Signal == "" {
			r.Signal = signalName(syscall.SIGKILL)
		}
		r.TimedOut = errors.Is(cctx.Err(), context.DeadlineExceeded)
	}
	if oomBefore >= 0 && oomAfter > oomBefore {
		r.OOMKilled = true
	}
	r.Stdout, r.StdoutDropped = stdout.bytes()
	r.Stderr, r.StderrDropped = stderr.bytes()
}

// commandContext is the context of exec request req: it ends with ctx,
// with the request's timeout and with a cancel op naming the request.
// stop releases it.
func (s *server) commandContext(ctx context.Context, req request) (cctx context.Context, stop func()) {
	cctx, cancel := context.WithCancel(ctx)
	release := cancel
	if req.TimeoutMS > 0 {
		var cancelTimeout context.CancelFunc
		cctx, cancelTimeout = context.WithTimeout(cctx, time.Duration(req.TimeoutMS)*time.Millisecond)
		release = func() { cancelTimeout(); cancel() }
	}
	s.mu.Lock()
	s.running[req.ID] = cancel
	s.mu.Unlock()
	return cctx, func() {
		s.mu.Lock()
		delete(s.running, req.ID)
		s.mu.Unlock()
		release()
	}
}

// started remembers a new process group for KillAll and makes it the
// out-of-memory killer's first choice.
func (s *server) started(pgid int) {
	s.mu.Lock()
	s.groups[pgid] = true
	s.mu.Unlock()
	if s.opts.Agent != nil {
		lowerPriority(pgid)
	}
}

// killAll kills every tracked process group and the descendants of this
// executor, and with an Agent every process of the agent's uid, until none
// is left.
func (s *server) killAll() error {
	s.mu.Lock()
	groups := s.groups
	s.groups = map[int]bool{}
	for pgid := range groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	zpid := 0
	if z := s.zygote; z != nil {
		zpid = z.pid
	}
	s.mu.Unlock()
	for _, p := range descendants(os.Getpid()) {
		// The zygote is the machinery's (root); what it forked is the
		// agent's and dies below.
		if p != zpid {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	if s.opts.Agent == nil {
		return nil
	}
	return killAgent(s.opts.Agent)
}

func (s *server) write(req request) error {
	if req.Path == "" {
		return &kindError{kindInvalid, "write: empty path"}
	}
	p := s.abs(req.Path)
	mode := fs.FileMode(req.Mode).Perm()
	if mode == 0 {
		mode = 0o644
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return &kindError{kindIsDir, p + ": is a directory"}
	}
	f, err := os.CreateTemp(dir, ".gymserver-write-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(req.Data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, mode)); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (s *server) read(req request) ([]byte, error) {
	p := s.abs(req.Path)
	// Opened without blocking and checked on the open file: a FIFO or a
	// device at p must not hold the executor (or a racing rename swap in
	// one between a check and the open).
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, &kindError{kindIsDir, p + ": is a directory"}
	}
	if !fi.Mode().IsRegular() {
		return nil, &kindError{kindInvalid, p + ": not a regular file (" + fi.Mode().Type().String() + ")"}
	}
	max := req.MaxBytes
	if max <= 0 {
		max = MaxFrame / 2
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return data[:max], &kindError{kindTooLarge, fmt.Sprintf("%s: larger than %d bytes", p, max)}
	}
	return data, nil
}

func (s *server) list(req request) ([]entry, error) {
	ents, err := os.ReadDir(s.abs(req.Path))
	if err != nil {
		return nil, err
	}
	out := make([]entry, 0, len(ents))
	for _, e := range ents {
		ent := entry{Name: e.Name(), IsDir: e.IsDir()}
		if fi, err := e.Info(); err == nil {
			ent.Size = fi.Size()
			ent.Mode = uint32(fi.Mode())
		}
		out = append(out, ent)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// kindError is an error with a wire kind.
type kindError struct {
	kind, msg string
}

func (e *kindError) Error() string { return e.msg }

// errResponse turns err into a response with its wire kind.
func errResponse(id uint64, err error) response {
	if err == nil {
		return response{ID: id}
	}
	var ke *kindError
	switch {
	case errors.As(err, &ke):
		return response{ID: id, ErrKind: ke.kind, Err: ke.msg}
	case errors.Is(err, fs.ErrNotExist):
		return response{ID: id, ErrKind: kindNotExist, Err: err.Error()}
	case errors.Is(err, syscall.ENOTDIR):
		return response{ID: id, ErrKind: kindNotDir, Err: err.Error()}
	case errors.Is(err, syscall.EISDIR):
		return response{ID: id, ErrKind: kindIsDir, Err: err.Error()}
	}
	return response{ID: id, ErrKind: kindOther, Err: err.Error()}
}

// startKind classifies a failure to start a command.
func startKind(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return kindNotExist
	}
	return kindOther
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	}
	return "signal " + strconv.Itoa(int(sig))
}
