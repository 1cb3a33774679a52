package executor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Cred is the identity the agent's commands and file operations run as
// when the executor itself runs as root (privilege separation): the agent
// cannot signal, trace or write to the executor, and the executor can still
// kill everything the agent started.
type Cred struct {
	UID, GID int
	// Home is the agent's home directory, from /etc/passwd ("/" when the
	// uid has no entry).
	Home string
	// Name is the agent's user name ("" when the uid has no entry).
	Name string
}

// ParseCred parses "UID:GID" and looks the uid up in /etc/passwd.
func ParseCred(s string) (*Cred, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return nil, fmt.Errorf("agent %q: want UID:GID, both above 0", s)
	}
	c := &Cred{UID: uid, GID: gid, Home: "/"}
	if f, err := os.Open("/etc/passwd"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) >= 6 && fields[2] == u {
				c.Name, c.Home = fields[0], fields[5]
				break
			}
		}
	}
	return c, nil
}

// env returns base with the agent's HOME, USER and LOGNAME, so that tools
// that look at them (pip, git, shells) see the agent's account rather than
// the executor's.
func (c *Cred) env(base []string) []string {
	out := make([]string, 0, len(base)+3)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || k == "USER" || k == "LOGNAME" {
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "HOME="+c.Home)
	if c.Name != "" {
		out = append(out, "USER="+c.Name, "LOGNAME="+c.Name)
	}
	return out
}

// sysCred is the credential of a child process that runs as the agent.
func (c *Cred) sysCred() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(c.UID), Gid: uint32(c.GID), Groups: []uint32{}}
}

// asAgent runs fn on an OS thread whose file-system identity is the
// agent's (setfsuid, setfsgid, no supplementary groups): files fn creates
// belong to the agent, and fn can open only what the agent could. The
// kernel drops the file-system capabilities of a thread whose fsuid is not
// 0, so fn has no more file access than the agent. Credentials are per
// thread in Linux; the thread is given back to the Go scheduler only with
// the executor's identity restored (see agentThread), so no other goroutine
// runs with them.
func asAgent(c *Cred, fn func() error) error {
	if c == nil {
		return fn()
	}
	t, err := takeAgentThread(c)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	t.work <- func() { done <- fn() }
	err = <-done
	putAgentThread(c, t)
	return err
}

// agentThread is a goroutine locked to a spare OS thread (onSpareThread)
// whose file-system identity is an agent's; it runs the functions sent on
// work, one after the other, and when work is closed ends, its thread back
// with the executor's identity (or, if that fails, ending too).
// Only the file-system ids change: the thread's real, effective and saved
// uid stay the executor's, so the agent can neither signal nor trace it.
// Idle ones are kept (agentThreads), so that a file operation as the agent
// does not start a thread and end it: the clone and the exit were half of
// a read_file's time in the executor.
type agentThread struct {
	work chan func()
}

// maxIdleAgentThreads is how many idle threads wait per identity; one
// given back beyond them returns to the runtime's threads. Operations at
// once beyond it take threads of their own.
const maxIdleAgentThreads = 2

// agentThreads holds the idle agent threads by identity.
var agentThreads struct {
	mu   sync.Mutex
	idle map[[2]int][]*agentThread
}

// takeAgentThread returns an idle thread with c's identity, or starts one.
func takeAgentThread(c *Cred) (*agentThread, error) {
	key := [2]int{c.UID, c.GID}
	agentThreads.mu.Lock()
	if n := len(agentThreads.idle[key]); n > 0 {
		t := agentThreads.idle[key][n-1]
		agentThreads.idle[key] = agentThreads.idle[key][:n-1]
		agentThreads.mu.Unlock()
		return t, nil
	}
	agentThreads.mu.Unlock()
	t := &agentThread{work: make(chan func())}
	ready := make(chan error, 1)
	onSpareThread(func() {
		groups, err := threadGroups()
		if err != nil {
			ready <- err
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			ready <- fmt.Errorf("setgroups: %w", e)
			return
		}
		syscall.RawSyscall(syscall.SYS_SETFSGID, uintptr(c.GID), 0, 0)
		syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(c.UID), 0, 0)
		// setfsuid reports the previous value, never an error: read the
		// new one back to be sure it took.
		if cur, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0); int(cur) != c.UID {
			ready <- fmt.Errorf("setfsuid %d did not take (fsuid %d)", c.UID, cur)
			return
		}
		ready <- nil
		for fn := range t.work {
			fn()
		}
		// More threads wait than are kept: this one takes the executor's
		// identity back and returns to the runtime's threads (see
		// asAgentUID for why it should not end), or ends if it cannot.
		if executorIdentity(groups) {
			runtime.UnlockOSThread()
		}
	})
	if err := <-ready; err != nil {
		return nil, err
	}
	return t, nil
}

// threadGroups returns the calling thread's supplementary groups.
func threadGroups() ([]uint32, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_GETGROUPS, 0, 0, 0)
	if e != 0 {
		return nil, fmt.Errorf("getgroups: %w", e)
	}
	groups := make([]uint32, n)
	if n == 0 {
		return groups, nil
	}
	m, _, e := syscall.RawSyscall(syscall.SYS_GETGROUPS, n, uintptr(unsafe.Pointer(&groups[0])), 0)
	if e != 0 || m != n {
		return nil, fmt.Errorf("getgroups: %d of %d groups: %v", m, n, e)
	}
	return groups, nil
}

// executorIdentity gives the calling agent thread the executor's file-system
// uid and gid (root's) and its supplementary groups back, and says whether
// they all read back so.
func executorIdentity(groups []uint32) bool {
	syscall.RawSyscall(syscall.SYS_SETFSUID, 0, 0, 0)
	syscall.RawSyscall(syscall.SYS_SETFSGID, 0, 0, 0)
	var p uintptr
	if len(groups) > 0 {
		p = uintptr(unsafe.Pointer(&groups[0]))
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(groups)), p, 0); e != 0 {
		return false
	}
	// setfsuid and setfsgid report the previous value: -1 only reads.
	uid, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0)
	gid, _, _ := syscall.RawSyscall(syscall.SYS_SETFSGID, ^uintptr(0), 0, 0)
	now, err := threadGroups()
	return uid == 0 && gid == 0 && err == nil && slices.Equal(now, groups)
}

// putAgentThread gives t back to the idle threads of c's identity, or,
// when enough wait already, to the runtime's threads.
func putAgentThread(c *Cred, t *agentThread) {
	key := [2]int{c.UID, c.GID}
	agentThreads.mu.Lock()
	defer agentThreads.mu.Unlock()
	if len(agentThreads.idle[key]) >= maxIdleAgentThreads {
		close(t.work)
		return
	}
	if agentThreads.idle == nil {
		agentThreads.idle = map[[2]int][]*agentThread{}
	}
	agentThreads.idle[key] = append(agentThreads.idle[key], t)
}

// onSpareThread runs fn in a new goroutine locked to an OS thread that is
// not the process's main thread, and never gives the thread back (it ends
// with the goroutine) unless fn unlocks it. fn may change the thread's
// credentials, and unlocks it only with the executor's own back. The main
// thread is excluded because Go keeps it alive, blocked, when its locked
// goroutine exits, and the kernel checks signals and ptrace against the
// main thread's credentials: a main thread left with the agent's uid would
// let the agent signal the executor.
func onSpareThread(fn func()) {
	var run func(onThread chan<- struct{})
	run = func(onThread chan<- struct{}) {
		runtime.LockOSThread()
		normalThread()
		if syscall.Gettid() == syscall.Getpid() {
			// Try again elsewhere. This goroutine keeps the main thread
			// until the new one has a thread of its own: unlocking at
			// once would let the scheduler run the new goroutine on this
			// same thread, and with GOMAXPROCS=1 (the executor's) it
			// always did, round after round, starving every other
			// goroutine of the executor.
			next := make(chan struct{})
			go run(next)
			<-next
			runtime.UnlockOSThread()
			return
		}
		if onThread != nil {
			close(onThread)
		}
		// No UnlockOSThread: the thread ends with this goroutine.
		fn()
	}
	go run(nil)
}

// sweepTimeout bounds killAgent.
const sweepTimeout = 10 * time.Second

// killAgent kills every process of the agent's uid, however it was started
// and whatever its parent, until none is left. Each round is one
// kill(-1, SIGKILL) sent from a thread whose real and effective uid are the
// agent's: the kernel delivers it to every process that uid may signal,
// which is exactly the agent's processes, while holding the task list
// lock, so a process cannot fork its way out between the listing and the
// kill. A process with a pending SIGKILL cannot fork either. Rounds repeat
// until /proc shows no live process of the uid.
func killAgent(c *Cred) error {
	deadline := time.Now().Add(sweepTimeout)
	for {
		if err := killAsAgent(c); err != nil {
			return err
		}
		left := agentProcs(c.UID)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes of uid %d survive SIGKILL (pids %v)", len(left), c.UID, left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killAsAgent sends SIGKILL to -1 from a thread whose real and effective
// uid are the agent's (asAgentUID): the signal reaches only what the
// agent's uid may signal.
func killAsAgent(c *Cred) error {
	return asAgentUID(c, func() error {
		err := syscall.Kill(-1, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			err = nil // nothing to kill
		}
		return err
	})
}

// asAgentUID runs fn on a spare thread whose real and effective uid are
// c's, for what the kernel checks against those (signals, System V IPC
// objects). The thread's saved uid stays root's: while its effective uid
// is not root the kernel clears its effective capabilities, so fn has the
// agent's rights and no more, and afterwards the thread takes root back
// and returns to the runtime's threads. Ended instead, as it was before,
// each call cost the runtime a thread, made again at its next need: while
// the agent holds every pid of the sandbox that fails, and a Go runtime
// that cannot make a thread it needs ends the process (TestPidsExhausted).
// A thread that cannot take root back ends.
func asAgentUID(c *Cred, fn func() error) error {
	done := make(chan error, 1)
	onSpareThread(func() {
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(c.UID), uintptr(c.UID), 0); e != 0 {
			done <- fmt.Errorf("setresuid %d: %w", c.UID, e)
			return
		}
		err := fn()
		if rootAgain() {
			runtime.UnlockOSThread()
		}
		done <- err
	})
	return <-done
}

// rootAgain makes the calling thread's real, effective and saved uid root's
// again (its saved uid still is), and says whether they all are.
func rootAgain() bool {
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, 0, 0, 0); e != 0 {
		return false
	}
	var r, e, s uint32
	_, _, errno := syscall.RawSyscall(syscall.SYS_GETRESUID, uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&e)), uintptr(unsafe.Pointer(&s)))
	return errno == 0 && r == 0 && e == 0 && s == 0
}

// agentProcs lists the live (not zombie) processes whose real uid is uid.
func agentProcs(uid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	want := strconv.Itoa(uid)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var state, realUID string
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(line, "State:"):
				state = strings.TrimSpace(strings.TrimPrefix(line, "State:"))
			case strings.HasPrefix(line, "Uid:"):
				if f := strings.Fields(strings.TrimPrefix(line, "Uid:")); len(f) > 0 {
					realUID = f[0]
				}
			}
		}
		if realUID == want && !strings.HasPrefix(state, "Z") && !strings.HasPrefix(state, "X") {
			out = append(out, pid)
		}
	}
	return out
}

// lowerPriority makes pid the first choice of the out-of-memory killer, so
// that an agent that exhausts the sandbox's memory loses its own processes
// rather than the executor or the container's init. Its children inherit
// the score. It writes with bare system calls: os.WriteFile would also try
// to put the file on the runtime's poller, five more calls per command.
func lowerPriority(pid int) {
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_, _ = syscall.Write(fd, []byte("1000"))
	syscall.Close(fd)
}
