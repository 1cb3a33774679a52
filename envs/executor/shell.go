package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The persistent shell. A request with Shell set runs its command line in
// one long-lived shell per executor, as the agent, instead of a new
// /bin/sh: what the command changes in the shell (cd, exported variables,
// functions, aliases) is there for the next one, as in an interactive
// terminal, and a builtin such as `echo hi` starts no process at all.
//
// Each command is written to the shell's stdin as
//
//	cd -- 'DIR' && eval 'COMMAND' </dev/null
//	printf '\n%s %d\n' NONCE "$?"; printf '\n%s\n' NONCE >&2
//
// with both strings single-quoted, so no text of the command can end the
// eval early, and a fresh random NONCE: everything the shell writes to
// stdout up to "\nNONCE" is the command's stdout, what follows is its
// exit status, and the same marker on stderr ends its stderr. Output is
// capped as for any command.
//
// A timeout or a cancel kills every process below the shell (each child's
// process group and descendants); a shell that then does not print its
// marker within shellGrace (it is itself stuck, e.g. in a builtin loop)
// is killed with its whole group and replaced on the next command. So is a
// shell that exited (`exit`, `exec`, KillAll). A replaced shell starts
// afresh in the working directory: its state is gone. The grace only
// delays a shell that is stuck: one that answers ends the wait at once.
// It was 500 ms, and on a loaded machine (CI, every package's tests at
// once) a shell that was not stuck sometimes got no CPU that soon, and
// lost its state (TestPersistentShell failed so in CI).
const shellGrace = 2 * time.Second

// shellChunk is one read from the shell's stdout (stream 1) or stderr (2).
type shellChunk struct {
	stream int
	data   []byte
}

// shell is one running shell process.
type shell struct {
	cmd      *exec.Cmd
	pid      int
	in       *os.File
	out, err *os.File // read ends
	chunks   chan shellChunk
	// exited is closed when the shell process has been waited for; state
	// is then its exit status.
	exited  chan struct{}
	state   *os.ProcessState
	readers sync.WaitGroup
	// readDone is closed when both readers have returned.
	readDone chan struct{}
}

// shellPath is the shell to start: bash where the image has it.
func shellPath() string {
	if _, err := os.Stat("/bin/bash"); err == nil {
		return "/bin/bash"
	}
	return "/bin/sh"
}

// startShell starts a shell as the agent in dir, in its own process group.
func (s *server) startShell(dir string) (*shell, error) {
	path := shellPath()
	argv := []string{path}
	if strings.HasSuffix(path, "bash") {
		argv = append(argv, "--noprofile", "--norc")
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Dir = dir
	env := os.Environ()
	pidfd := pidfdSlot()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, PidFD: pidfd}
	if a := s.opts.Agent; a != nil {
		env = a.env(env)
		cmd.SysProcAttr.Credential = a.sysCred()
	}
	cmd.Env = env
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW, outR, outW)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = startCmd(cmd)
	closeFiles(inR, outW, errW)
	if err != nil {
		closePidfd(*pidfd)
		closeFiles(inW, outR, errR)
		return nil, err
	}
	sh := &shell{cmd: cmd, pid: cmd.Process.Pid, in: inW, out: outR, err: errR,
		chunks: make(chan shellChunk, 64), exited: make(chan struct{}), readDone: make(chan struct{})}
	s.started(sh.pid)
	go func() {
		awaitExit(*pidfd) // on the poller: see sysmon.go
		sh.state, _ = cmd.Process.Wait()
		close(sh.exited)
	}()
	for i, f := range []*os.File{outR, errR} {
		sh.readers.Add(1)
		go func() {
			defer sh.readers.Done()
			sh.read(i+1, f)
		}()
	}
	go func() {
		sh.readers.Wait()
		close(sh.readDone)
	}()
	return sh, nil
}

// read passes what the shell writes to stream to chunks until the stream
// ends or its read end is closed by stop.
func (sh *shell) read(stream int, f *os.File) {
	for {
		buf := make([]byte, 32<<10)
		n, err := f.Read(buf)
		if n > 0 {
			// Blocks while nobody reads: between commands a background
			// writer waits, and stop drains.
			sh.chunks <- shellChunk{stream, buf[:n]}
		}
		if err != nil {
			return
		}
	}
}

// alive reports whether the shell process still runs.
func (sh *shell) alive() bool {
	select {
	case <-sh.exited:
		return false
	default:
		return true
	}
}

// stop kills the shell's group and every process below it, and waits for
// the shell and its readers. Processes that left the group and the tree
// may keep the pipes open; closing the read ends ends the readers anyway.
func (sh *shell) stop() {
	killTree(sh.pid)
	sh.in.Close()
	<-sh.exited
	// Drain while the readers finish, so none blocks on a full channel.
	closed := false
	for {
		select {
		case <-sh.chunks:
			continue
		case <-sh.readDone:
			if !closed {
				closeFiles(sh.out, sh.err)
			}
			return
		case <-time.After(waitDelay):
			if !closed {
				// Something outside the tree holds the pipes.
				closeFiles(sh.out, sh.err)
				closed = true
			}
		}
	}
}

// takeChunks passes to feed every chunk already in the channel.
func (sh *shell) takeChunks(feed func(shellChunk)) {
	for {
		select {
		case c := <-sh.chunks:
			feed(c)
		default:
			return
		}
	}
}

// takeOutput stops the readers of a shell that is being given up and
// passes to feed everything the shell's pipes hold: the chunks read and
// what is still buffered, in order. A process left behind may keep the
// pipes open; what it writes later is nobody's.
func (sh *shell) takeOutput(feed func(shellChunk)) error {
	now := time.Now()
	// A reader ends at its next read, a chunk in hand is sent first.
	err := errors.Join(sh.out.SetReadDeadline(now), sh.err.SetReadDeadline(now))
	for done := false; !done; {
		select {
		case c := <-sh.chunks:
			feed(c)
		case <-sh.readDone:
			done = true
		}
	}
	sh.takeChunks(feed)
	if err != nil {
		return fmt.Errorf("stop shell readers: %w", err)
	}
	for i, f := range []*os.File{sh.out, sh.err} {
		if err := f.SetReadDeadline(time.Time{}); err != nil {
			return fmt.Errorf("clear shell deadline: %w", err)
		}
		stream := i + 1
		if err := drainBuffered(f, func(b []byte) { feed(shellChunk{stream, bytes.Clone(b)}) }); err != nil {
			return err
		}
	}
	return nil
}

// killChildren kills every process below the shell, each child with its
// process group and descendants, and not the shell itself.
func (sh *shell) killChildren() {
	for _, p := range listProcs() {
		if p.ppid == sh.pid {
			killTree(p.pid)
		}
	}
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// markerScan passes a stream through to w until the marker, and keeps
// what follows it (at most 64 bytes).
type markerScan struct {
	marker []byte
	w      *capture
	pend   []byte // bytes held back: they may begin the marker
	found  bool
	rest   []byte
}

func (m *markerScan) feed(p []byte) {
	if m.found {
		if len(m.rest) < 64 {
			m.rest = append(m.rest, p[:min(len(p), 64-len(m.rest))]...)
		}
		return
	}
	buf := append(append([]byte(nil), m.pend...), p...)
	if i := bytes.Index(buf, m.marker); i >= 0 {
		m.w.Write(buf[:i])
		m.found, m.pend = true, nil
		m.feed(buf[i+len(m.marker):])
		return
	}
	keep := min(len(buf), len(m.marker)-1)
	m.w.Write(buf[:len(buf)-keep])
	m.pend = buf[len(buf)-keep:]
}

// flush passes on what was held back (the stream ended without a marker).
func (m *markerScan) flush() {
	if !m.found {
		m.w.Write(m.pend)
		m.pend = nil
	}
}

// quote single-quotes s for the shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellExec runs req.Argv[0] in the persistent shell; see shellGrace.
func (s *server) shellExec(ctx context.Context, req request) response {
	switch {
	case len(req.Argv) != 1:
		return response{ID: req.ID, ErrKind: kindInvalid, Err: "exec in the shell: want one command line"}
	case strings.IndexByte(req.Argv[0], 0) >= 0 || strings.IndexByte(req.Dir, 0) >= 0:
		return response{ID: req.ID, ErrKind: kindInvalid, Err: "exec in the shell: command contains a NUL byte"}
	case req.Background || req.Report || req.Priv || req.Stdin != nil || len(req.Env) > 0:
		return response{ID: req.ID, ErrKind: kindInvalid, Err: "exec in the shell: background, report, priv, stdin and env are not supported"}
	}
	// One command at a time; a waiting one gives up with its context.
	select {
	case s.shellTurn <- struct{}{}:
		defer func() { <-s.shellTurn }()
	case <-ctx.Done():
		return response{ID: req.ID, ErrKind: kindOther, Err: "exec in the shell: " + ctx.Err().Error()}
	}
	if s.sh != nil && !s.sh.alive() {
		s.sh.stop()
		s.sh = nil
	}
	if s.sh == nil {
		sh, err := s.startShell(s.opts.WorkDir)
		if err != nil {
			return response{ID: req.ID, ErrKind: startKind(err), Err: "start shell: " + err.Error()}
		}
		s.sh = sh
	}
	sh := s.sh
	maxOut := req.MaxOutput
	if maxOut <= 0 {
		maxOut = defaultMaxOutput
	}
	cctx, stop := s.commandContext(ctx, req)
	defer stop()

	var nb [12]byte
	_, _ = rand.Read(nb[:])
	nonce := "__gymserver_" + hex.EncodeToString(nb[:])
	stdout, stderr := newCapture(maxOut), newCapture(maxOut)
	outScan := &markerScan{marker: []byte("\n" + nonce + " "), w: stdout}
	errScan := &markerScan{marker: []byte("\n" + nonce + "\n"), w: stderr}
	line := "eval " + quote(req.Argv[0]) + " </dev/null"
	if req.Dir != "" {
		line = "cd -- " + quote(s.abs(req.Dir)) + " && " + line
	}
	script := line + "\nprintf '\\n%s %d\\n' " + nonce + " \"$?\"; printf '\\n%s\\n' " + nonce + " >&2\n"

	// Whatever a background process wrote since the last command is not
	// this command's.
	for drained := false; !drained; {
		select {
		case <-sh.chunks:
		default:
			drained = true
		}
	}
	oomBefore := s.oom.kills()
	start := time.Now()
	resp := response{ID: req.ID, ExitCode: -1}
	if _, err := sh.in.Write([]byte(script)); err != nil && sh.alive() {
		return response{ID: req.ID, ErrKind: kindOther, Err: "write to the shell: " + err.Error()}
	}
	feed := func(c shellChunk) {
		if c.stream == 1 {
			outScan.feed(c.data)
		} else {
			errScan.feed(c.data)
		}
	}
	// givenUp says the shell's readers were stopped (takeOutput): the shell
	// goes even if its markers were among what was left in its pipes.
	var killed, gone, givenUp bool
	var grace <-chan time.Time
	exited := sh.exited
	for !(outScan.found && errScan.found) && !gone {
		select {
		case c := <-sh.chunks:
			feed(c)
		case <-exited:
			// The command ended the shell (exit, exec) or KillAll did:
			// take what it wrote, to the pipes' end or for waitDelay if
			// a process left behind holds them, then report the shell's
			// status.
			exited = nil
			grace = time.After(waitDelay)
		case <-sh.readDone:
			// Both pipes ended: every chunk is in the channel.
			sh.takeChunks(feed)
			gone = true
		case <-grace:
			if err := sh.takeOutput(feed); err != nil {
				s.log.Warn("shell output", "err", err)
			}
			gone, givenUp = true, true
		case <-cctx.Done():
			if !killed {
				killed = true
				sh.killChildren()
				grace = time.After(shellGrace)
			}
		}
	}
	resp.DurationNS = time.Since(start).Nanoseconds()
	outScan.flush()
	errScan.flush()
	if outScan.found {
		status := strings.TrimSpace(string(outScan.rest))
		if i := strings.IndexByte(status, '\n'); i >= 0 {
			status = status[:i]
		}
		if n, err := strconv.Atoi(status); err == nil {
			resp.ExitCode = n
		}
	}
	if !outScan.found || !errScan.found || givenUp {
		// The shell is gone or stuck: it goes, with whatever it ran. One
		// whose markers came only as its readers were stopped goes too:
		// kept, it would have no readers, and the next command would
		// find its pipes' end at once and kill it.
		sh.stop()
		s.sh = nil
		if st := sh.state; st != nil && !killed {
			resp.setStatus(st)
		}
	}
	resp.finish(cctx, killed, oomBefore, s.oom.kills(), stdout, stderr)
	return resp
}

// closeShell stops the persistent shell, if one runs.
func (s *server) closeShell() {
	// Serve calls it after every handler has returned.
	s.shellTurn <- struct{}{}
	defer func() { <-s.shellTurn }()
	if s.sh != nil {
		s.sh.stop()
		s.sh = nil
	}
}
