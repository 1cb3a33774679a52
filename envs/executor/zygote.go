package executor

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The verifier zygote is a Python process the executor starts, as root
// and never as the agent, that imports pytest once, early, at the lowest
// CPU priority, and then forks the process of each plain pytest test
// command (`pytest ARGS`, `python3 -m pytest ARGS`) on the executor's
// request: the child becomes what the executor would have started (the
// agent's uid and gid with no groups and no capabilities, its own process
// group, the out-of-memory killer's first choice, the command's directory,
// environment and stdout, stderr and report pipe) and runs pytest's
// console entry point, so the test run does not pay for starting Python
// and importing pytest. The executor tracks, times out and kills the child
// exactly as its own commands, and the zygote reports its wait status.
//
// The zygote runs with the test run's hardened Python settings (no user
// site, safe path, no bytecode writes) and only the system's directories
// on sys.path, so nothing the agent wrote is imported into it. The agent
// cannot signal, trace or read it (another uid), nor reach its channel (a
// socket pair only the executor holds the other end of). Anything that
// does not fit exactly runs the usual way.

//go:embed zygote.py
var zygoteSource string

// zygoteReadyWait bounds how long a command waits for a zygote still
// importing pytest before it runs the usual way. Waiting pays: what the
// zygote has left is less than a new process's whole start, and its low
// priority yields only to the sandbox's own processes, which are gone at
// evaluation (CPU weights apply within the container's cgroup). The bound
// is for a zygote that is stuck; it stays well below the grace the client
// adds to a command's timeout, which starts after the wait.
const zygoteReadyWait = 5 * time.Second

// zygoteOOMScore makes the zygote the out-of-memory killer's choice after
// the agent's processes (1000) and before the executor (0).
const zygoteOOMScore = "500"

// zygoteInfo is the zygote's first message.
type zygoteInfo struct {
	Ready   bool   `json:"ready"`
	Python  string `json:"python"`
	Pytest  string `json:"pytest"`
	Main    string `json:"main"`
	Version string `json:"version"`
	// Environ is the zygote's environment once Python started: with what
	// the interpreter added (LC_CTYPE when it coerces the C locale).
	Environ map[string]string `json:"environ"`
	Error   string            `json:"error"`
}

// zygoteMsg is a message of the zygote about one command.
type zygoteMsg struct {
	PID    int    `json:"pid"`
	Status *int   `json:"status"`
	Error  string `json:"error"`
}

// zygoteReq asks the zygote for a child.
type zygoteReq struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	UID  int      `json:"uid"`
	GID  int      `json:"gid"`
}

// zygote is one running verifier zygote.
type zygote struct {
	pid   int
	conn  *net.UnixConn
	start time.Time
	// env is the environment the zygote started with.
	env map[string]string

	// ready is closed once info and err are set.
	ready chan struct{}
	info  zygoteInfo
	err   error
	// readyIn is how long the zygote took to be ready.
	readyIn time.Duration

	// exited is closed when the process has ended; broken is set when its
	// channel failed (it may not have been reaped yet).
	exited chan struct{}
	broken atomic.Bool
	stderr bytes.Buffer

	// turn is held by the one command using the zygote.
	turn chan struct{}
}

// zygoteStatus is what the executor knows about its zygote (the wire form
// of sandbox.ZygoteStatus).
type zygoteStatus struct {
	// Started says a zygote was started; Ready that it imported pytest.
	Started bool `msgpack:"started"`
	Ready   bool `msgpack:"ready"`
	// Error says why the zygote is not usable, if it is not.
	Error string `msgpack:"error,omitempty"`
	// PID is the zygote's process id inside the sandbox.
	PID int `msgpack:"pid,omitempty"`
	// ReadyIn is how long the zygote took to import pytest.
	ReadyIn time.Duration `msgpack:"ready_in,omitempty"`
	// RSS is the zygote's resident memory, in bytes.
	RSS int64 `msgpack:"rss,omitempty"`
	// PytestVersion is the version of the pytest it imported.
	PytestVersion string `msgpack:"pytest_version,omitempty"`
}

// zygoteEnv returns the environment the zygote starts with: the
// executor's, with the hardened settings of a test run and no PYTHONPATH,
// which may name directories the agent writes.
func zygoteEnv(base []string) []string {
	var out []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONDONTWRITEBYTECODE":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PYTHONNOUSERSITE=1", "PYTHONSAFEPATH=1", "PYTHONDONTWRITEBYTECODE=1")
}

// envMap turns a list of KEY=VALUE into a map, the last value of a key
// winning, as os/exec passes it on.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// dedupEnv returns env with one entry per key, the last value winning, in
// the order of each key's last entry.
func dedupEnv(env []string) []string {
	last := map[string]int{}
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		last[k] = i
	}
	var out []string
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if last[k] == i {
			out = append(out, kv)
		}
	}
	return out
}

// trustedFile reports whether p is a regular file that only root can
// change: owned by root, writable by no one else, in directories with the
// same property (or the sticky bit) all the way up.
func trustedFile(p string) bool {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.Mode().IsRegular() || !rootOnly(fi) {
		return false
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		di, err := os.Stat(d)
		if err != nil || !rootOnly(di) {
			return false
		}
		if d == "/" {
			return true
		}
	}
}

// rootOnly reports whether only root can change fi.
func rootOnly(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0 && fi.Mode().Perm()&0o022 == 0
}

// findPython finds python3 on the executor's PATH, if only root can
// change it.
func findPython() string {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, "python3")
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if trustedFile(p) {
			return p
		}
		return ""
	}
	return ""
}

// startZygote starts the zygote; it is ready when its ready channel
// closes with a nil err.
func startZygote() (*zygote, error) {
	python := findPython()
	if python == "" {
		return nil, errors.New("no python3 on PATH that only root can change")
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket pair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "zygote"), os.NewFile(uintptr(fds[1]), "zygote channel")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("socket pair: %w", err)
	}
	conn := fc.(*net.UnixConn)
	env := zygoteEnv(os.Environ())
	z := &zygote{conn: conn, env: envMap(env), ready: make(chan struct{}), exited: make(chan struct{}), turn: make(chan struct{}, 1)}
	cmd := exec.Command(python, "-c", zygoteSource)
	cmd.Dir = "/"
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Stderr = &limitedWriter{buf: &z.stderr, max: 4 << 10}
	// Its own group: no kill of a command's group reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	z.start = time.Now()
	if err := cmd.Start(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("start %s: %w", python, err)
	}
	z.pid = cmd.Process.Pid
	_ = os.WriteFile("/proc/"+strconv.Itoa(z.pid)+"/oom_score_adj", []byte(zygoteOOMScore), 0)
	go func() {
		_ = cmd.Wait()
		close(z.exited)
	}()
	go func() {
		defer close(z.ready)
		var info zygoteInfo
		if err := z.read(&info); err != nil {
			<-z.exited
			z.err = fmt.Errorf("zygote: %w (%s)", err, strings.TrimSpace(z.stderr.String()))
			return
		}
		if !info.Ready {
			z.err = fmt.Errorf("zygote: %s", info.Error)
			return
		}
		z.info, z.readyIn = info, time.Since(z.start)
	}()
	return z, nil
}

// read reads one message of the zygote into v.
func (z *zygote) read(v any) error {
	buf := make([]byte, 64<<10)
	n, err := z.conn.Read(buf)
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("the zygote closed its channel")
	}
	return json.Unmarshal(buf[:n], v)
}

// await waits up to max for the zygote to be ready; it returns why it is
// not, or "".
func (z *zygote) await(ctx context.Context, max time.Duration) string {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-z.ready:
	case <-t.C:
		return "the zygote was not ready in time"
	case <-ctx.Done():
		return "cancelled while waiting for the zygote"
	}
	switch {
	case z.err != nil:
		return z.err.Error()
	case z.dead():
		return "the zygote exited"
	}
	return ""
}

func (z *zygote) dead() bool {
	if z.broken.Load() {
		return true
	}
	select {
	case <-z.exited:
		return true
	default:
		return false
	}
}

// status describes the zygote.
func (z *zygote) status() zygoteStatus {
	st := zygoteStatus{Started: true, PID: z.pid}
	select {
	case <-z.ready:
		st.Ready = z.err == nil
		if z.err != nil {
			st.Error = z.err.Error()
		}
		st.ReadyIn, st.PytestVersion = z.readyIn, z.info.Version
	default:
	}
	if z.dead() {
		st.Ready = false
		if st.Error == "" {
			st.Error = "the zygote exited"
		}
	}
	st.RSS = procRSS(z.pid)
	return st
}

// procRSS reads a process's resident memory from /proc, 0 if unknown.
func procRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// zygoteChild is a command forked by the zygote.
type zygoteChild struct {
	z   *zygote
	pid int
}

// fork asks the zygote for the child described by zr, with stdout,
// stderr and report (nil for none) as its fds 1, 2 and 3. The caller holds
// z.turn.
func (z *zygote) fork(zr zygoteReq, stdout, stderr, report *os.File) (*zygoteChild, error) {
	b, err := json.Marshal(zr)
	if err != nil {
		return nil, err
	}
	fds := []int{int(stdout.Fd()), int(stderr.Fd())}
	if report != nil {
		fds = append(fds, int(report.Fd()))
	}
	if _, _, err := z.conn.WriteMsgUnix(b, syscall.UnixRights(fds...), nil); err != nil {
		z.broken.Store(true)
		return nil, fmt.Errorf("zygote: send: %w", err)
	}
	var m zygoteMsg
	if err := z.read(&m); err != nil {
		z.broken.Store(true)
		return nil, fmt.Errorf("zygote: %w", err)
	}
	if m.Error != "" || m.PID <= 0 {
		return nil, fmt.Errorf("zygote: %s", m.Error)
	}
	return &zygoteChild{z: z, pid: m.PID}, nil
}

// wait returns the child's wait status, as the zygote reports it.
func (c *zygoteChild) wait() (syscall.WaitStatus, error) {
	var m zygoteMsg
	if err := c.z.read(&m); err != nil {
		c.z.broken.Store(true)
		return 0, fmt.Errorf("zygote: waiting for pid %d: %w", c.pid, err)
	}
	if m.Status == nil || m.PID != c.pid {
		c.z.broken.Store(true)
		return 0, fmt.Errorf("zygote: unexpected message %+v waiting for pid %d", m, c.pid)
	}
	ws := syscall.WaitStatus(*m.Status)
	if ws.Signaled() {
		// The shell that runs a test command otherwise reports a
		// signal that ended its child as exit status 128+N.
		ws = syscall.WaitStatus((128 + int(ws.Signal())) << 8)
	}
	return ws, nil
}

// limitedWriter keeps the first max bytes written to it.
type limitedWriter struct {
	mu  sync.Mutex
	buf *bytes.Buffer
	max int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// plainPytest parses a test command line that is a plain pytest
// invocation: `pytest ARGS`, `python3 -m pytest ARGS` or
// `python -m pytest ARGS`, words separated by spaces or tabs, every word
// made only of characters the shell takes literally. It returns the
// program to look up on PATH ("pytest", "python3" or "python"), whether it
// runs pytest as a module, and pytest's arguments; ok is false for
// anything else (quotes, variables, globs, redirections, several commands,
// assignments, ...), which runs through the shell as usual.
func plainPytest(line string) (prog string, module bool, args []string, ok bool) {
	words := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(words) == 0 {
		return "", false, nil, false
	}
	for _, w := range words {
		for _, r := range w {
			if !literalRune(r) {
				return "", false, nil, false
			}
		}
	}
	switch {
	case words[0] == "pytest":
		return "pytest", false, words[1:], true
	case (words[0] == "python3" || words[0] == "python") && len(words) >= 3 && words[1] == "-m" && words[2] == "pytest":
		return words[0], true, words[3:], true
	}
	return "", false, nil, false
}

// literalRune reports whether the shell takes r literally anywhere in a
// word.
func literalRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("_-./:=,+@%", r)
}

// zygotePlan decides whether exec request req, whose process would get
// environment env (before de-duplication) and run in dir, runs through
// the zygote, and returns the zygote, its request and the time spent
// waiting for it (until ctx ends at most); otherwise why not.
func (s *server) zygotePlan(ctx context.Context, req request, env []string, dir string) (*zygote, zygoteReq, time.Duration, string) {
	var zr zygoteReq
	a := s.opts.Agent
	switch {
	case a == nil:
		return nil, zr, 0, "no agent identity"
	case req.Priv || req.Background || req.Shell || req.Stdin != nil:
		return nil, zr, 0, "not a plain command"
	case len(req.Argv) != 3 || req.Argv[0] != "/bin/sh" || req.Argv[1] != "-c":
		return nil, zr, 0, "not a /bin/sh -c command"
	}
	prog, module, args, ok := plainPytest(req.Argv[2])
	if !ok {
		return nil, zr, 0, "not a plain pytest command"
	}
	s.mu.Lock()
	z := s.zygote
	s.mu.Unlock()
	if z == nil {
		return nil, zr, 0, "no zygote started"
	}
	t0 := time.Now()
	why := z.await(ctx, zygoteReadyWait)
	waited := time.Since(t0)
	if why != "" {
		return nil, zr, waited, why
	}
	env = dedupEnv(env)
	m := envMap(env)
	// What Python fixes when it starts must be what the zygote started
	// with.
	for _, kv := range append(append([]string(nil), env...), mapEnv(z.env)...) {
		k, _, _ := strings.Cut(kv, "=")
		if startupVar(k) {
			zv, zok := z.env[k]
			v, ok := m[k]
			if zv != v || zok != ok {
				return nil, zr, waited, "the Python start-up variable " + k + " differs from the zygote's"
			}
		}
	}
	if pp, ok := m["PYTHONPATH"]; ok && (!filepath.IsAbs(pp) || strings.Contains(pp, ":")) {
		return nil, zr, waited, "PYTHONPATH is not one absolute directory"
	}
	// What the interpreter added to its own environment when it
	// started, a fresh one would add too.
	for k, v := range z.info.Environ {
		if _, set := z.env[k]; !set {
			if _, ok := m[k]; !ok {
				env = append(env, k+"="+v)
			}
		}
	}
	want := z.info.Python
	if !module {
		want = z.info.Pytest
	}
	if want == "" {
		return nil, zr, waited, "the zygote found no system pytest script"
	}
	var path string
	err := asAgent(a, func() error {
		path, why = lookPathSame(prog, m["PATH"], want)
		if why != "" {
			return nil
		}
		why = enterable(dir, a)
		return nil
	})
	if err != nil {
		return nil, zr, waited, err.Error()
	}
	if why != "" {
		return nil, zr, waited, why
	}
	argv0 := path
	if module {
		argv0 = z.info.Main
	}
	zr = zygoteReq{Argv: append([]string{argv0}, args...), Env: env, Dir: dir, UID: a.UID, GID: a.GID}
	return z, zr, waited, ""
}

// startupVar reports whether Python reads variable k when it starts
// (rather than when a program asks for it).
func startupVar(k string) bool {
	if k == "PYTHONPATH" {
		return false // the child sets sys.path from it
	}
	return strings.HasPrefix(k, "PYTHON") || k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_") || k == "TZ"
}

func mapEnv(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// lookPathSame finds name on pathVar as the shell would (the first
// directory that has it) and returns the path if it is the file want;
// otherwise why not. It runs with the agent's file-system identity.
func lookPathSame(name, pathVar, want string) (string, string) {
	wi, err := os.Stat(want)
	if err != nil {
		return "", "stat " + want + ": " + err.Error()
	}
	for _, d := range strings.Split(pathVar, ":") {
		if !filepath.IsAbs(d) {
			return "", "PATH has a relative directory before " + name
		}
		p := strings.TrimSuffix(d, "/") + "/" + name
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if !os.SameFile(fi, wi) {
			return "", p + " is not the zygote's " + want
		}
		return p, ""
	}
	return "", name + " is not on PATH"
}

// enterable says why the agent cannot make dir its working directory, ""
// when it can (with no supplementary groups).
func enterable(dir string, a *Cred) string {
	fi, err := os.Stat(dir)
	if err != nil {
		return err.Error()
	}
	if !fi.IsDir() {
		return dir + " is not a directory"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "stat " + dir
	}
	perm := fi.Mode().Perm()
	var x fs.FileMode
	switch {
	case int(st.Uid) == a.UID:
		x = perm & 0o100
	case int(st.Gid) == a.GID:
		x = perm & 0o010
	default:
		x = perm & 0o001
	}
	if x == 0 {
		return dir + " is not searchable by the agent"
	}
	return ""
}

// startZygote starts the zygote unless one was started, and returns its
// status; with wait, once it is ready or failed (or ctx ends). Only an
// executor acting for an agent starts one: the zygote's children become
// the agent.
func (s *server) startZygote(ctx context.Context, wait bool) zygoteStatus {
	if s.opts.Agent == nil {
		return zygoteStatus{Error: "the executor does not act for an agent"}
	}
	s.mu.Lock()
	z := s.zygote
	if z == nil || z.dead() {
		var err error
		if z, err = startZygote(); err != nil {
			s.mu.Unlock()
			return zygoteStatus{Error: err.Error()}
		}
		s.zygote = z
	}
	s.mu.Unlock()
	if wait {
		select {
		case <-z.ready:
		case <-z.exited:
		case <-ctx.Done():
		}
	}
	return z.status()
}
