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
	"slices"
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

	// sendMu guards preloaded, the module names sent to it to preload.
	sendMu    sync.Mutex
	preloaded map[string]bool
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

// startZygote starts the zygote and sends it preload, the modules it
// imports after pytest (those it allows); it is ready when its ready
// channel closes with a nil err.
func startZygote(preload []string) (*zygote, error) {
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
	z := &zygote{conn: conn, env: envMap(env), ready: make(chan struct{}), exited: make(chan struct{}), turn: make(chan struct{}, 1),
		preloaded: map[string]bool{}}
	// Not in its arguments: the agent reads every process's command line.
	cmd := exec.Command(python, "-c", zygoteSource)
	cmd.Dir = "/"
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Stderr = &limitedWriter{buf: &z.stderr, max: 4 << 10}
	// Its own group: no kill of a command's group reaches it.
	pidfd := pidfdSlot()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, PidFD: pidfd}
	z.start = time.Now()
	if err := startCmd(cmd); err != nil {
		closePidfd(*pidfd)
		conn.Close()
		return nil, fmt.Errorf("start %s: %w", python, err)
	}
	z.pid = cmd.Process.Pid
	// Its first message, which it waits for before it imports anything.
	z.preload(preload, true)
	_ = os.WriteFile("/proc/"+strconv.Itoa(z.pid)+"/oom_score_adj", []byte(zygoteOOMScore), 0)
	go func() {
		awaitExit(*pidfd) // on the poller: see sysmon.go
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

// MaxPreload bounds the module names a zygote op may pass, and those an
// executor passes on to its zygote; maxModuleName bounds one name.
const (
	MaxPreload    = 256
	maxModuleName = 128
)

// CheckPreload checks module names to preload, as a zygote op does.
func CheckPreload(names []string) error {
	if len(names) > MaxPreload {
		return fmt.Errorf("%d module names to preload, at most %d", len(names), MaxPreload)
	}
	for _, n := range names {
		if !ModuleName(n) {
			return fmt.Errorf("%.200q is not a module name of at most %d bytes", n, maxModuleName)
		}
	}
	return nil
}

// ModuleName reports whether n is an absolute dotted Python module name
// (ASCII) of at most 128 bytes.
func ModuleName(n string) bool {
	if n == "" || len(n) > maxModuleName {
		return false
	}
	for _, part := range strings.Split(n, ".") {
		if part == "" || part[0] >= '0' && part[0] <= '9' {
			return false
		}
		for _, r := range part {
			if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return false
			}
		}
	}
	return true
}

// preload sends the zygote those of names it was not sent yet (with
// first, even none: the zygote's first message). It imports them, among
// those it allows: after pytest and before it says it is ready, for the
// first message; before it forks the next child, for a later one.
func (z *zygote) preload(names []string, first bool) {
	z.sendMu.Lock()
	defer z.sendMu.Unlock()
	fresh := []string{}
	for _, n := range names {
		if !z.preloaded[n] {
			fresh = append(fresh, n)
		}
	}
	if !first && (len(fresh) == 0 || z.dead()) {
		return
	}
	b, err := json.Marshal(map[string][]string{"preload": fresh})
	if err != nil {
		return
	}
	if _, err := z.conn.Write(b); err != nil {
		z.broken.Store(true)
		return
	}
	for _, n := range fresh {
		z.preloaded[n] = true
	}
}

// startZygote starts the zygote unless one was started (or start is
// false), passes it the module names to preload (those of every zygote op
// so far: a zygote started now imports them before it is ready), and
// returns its status; with wait, once it is ready or failed (or ctx ends). Only an executor acting for an agent starts one: the
// zygote's children become the agent.
func (s *server) startZygote(ctx context.Context, wait bool, preload []string, start bool) zygoteStatus {
	if s.opts.Agent == nil {
		return zygoteStatus{Error: "the executor does not act for an agent"}
	}
	s.mu.Lock()
	for _, n := range preload {
		if len(s.preload) < MaxPreload && !slices.Contains(s.preload, n) {
			s.preload = append(s.preload, n)
		}
	}
	names := s.preload
	z := s.zygote
	if start && (z == nil || z.dead()) {
		var err error
		if z, err = startZygote(names); err != nil {
			s.mu.Unlock()
			return zygoteStatus{Error: err.Error()}
		}
		s.zygote = z
	}
	s.mu.Unlock()
	if z == nil {
		return zygoteStatus{}
	}
	z.preload(names, false)
	if wait {
		select {
		case <-z.ready:
		case <-z.exited:
		case <-ctx.Done():
		}
	}
	return z.status()
}
