package executor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// procInfo is what /proc says about one process.
type procInfo struct {
	pid, ppid int
	// state is the one-letter state (R, S, D, Z, ...).
	state byte
}

// listProcs reads every process visible in /proc.
func listProcs() []procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name is in parentheses and may contain spaces, so
		// fields are counted after the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out = append(out, procInfo{pid: pid, ppid: ppid, state: f[0][0]})
	}
	return out
}

// descendants returns every process below root.
func descendants(root int) []int {
	children := map[int][]int{}
	for _, p := range listProcs() {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// killTree kills the process group pgid and every descendant of pid, so
// that children that moved to another group or session die too. The tree
// is read first, because killing the parent reparents its children.
func killTree(pid int) {
	kids := descendants(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
}

// oomCounter reads the memory cgroup's count of OOM kills. Every command
// reads it twice, so the counter's file stays open and a read is one pread
// from offset 0 (which makes the kernel render the file afresh) instead of
// a path walk, an open and a close. It is a bare descriptor, never closed:
// an *os.File of a cgroup file, which the kernel can poll, would be on the
// runtime's poller, and each Fd would make it blocking again.
type oomCounter struct {
	// mu guards the fields below.
	mu     sync.Mutex
	opened bool
	fd     int // -1 when no counter is readable
	buf    []byte
}

// oomFiles are where the count may be: cgroup v2, then v1.
var oomFiles = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}

// kills returns the count, or -1 when no counter is readable.
func (o *oomCounter) kills() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.opened {
		o.opened = true
		o.fd = -1
		for _, name := range oomFiles {
			if fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
				o.fd = fd
				break
			}
		}
		o.buf = make([]byte, 4096)
	}
	if o.fd < 0 {
		return -1
	}
	// One pread takes it whole (it is far shorter than buf); os.File's
	// ReadAt would make a second one to see the end of the file.
	n, err := syscall.Pread(o.fd, o.buf, 0)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(o.buf[:n]), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == "oom_kill" {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// selfExe is the path of the running executor binary.
func selfExe() string {
	p, _ := os.Readlink("/proc/self/exe")
	return p
}
