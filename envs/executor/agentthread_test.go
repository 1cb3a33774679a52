package executor

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// agentIDs is what asAgent's fn sees of its thread: its id and its
// file-system uid and gid.
type agentIDs struct{ tid, fsuid, fsgid int }

// whoAmI returns the ids of the calling thread (setfsuid(-1) and
// setfsgid(-1) only read them).
func whoAmI() agentIDs {
	u, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0)
	g, _, _ := syscall.RawSyscall(syscall.SYS_SETFSGID, ^uintptr(0), 0, 0)
	return agentIDs{syscall.Gettid(), int(u), int(g)}
}

// TestAgentThreadsReused checks that file operations as the agent run on
// threads with the agent's file-system identity and no other, that one
// after the other they run on the same thread (no thread is started and
// ended per operation), that operations at once each get a thread of
// their own, and that threads beyond maxIdleAgentThreads return to the
// runtime's threads with the executor's identity back.
func TestAgentThreadsReused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to take another file-system identity")
	}
	c := &Cred{UID: 1000, GID: 1001}
	var seen []agentIDs
	for range 5 {
		if err := asAgent(c, func() error { seen = append(seen, whoAmI()); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range seen {
		if s.fsuid != 1000 || s.fsgid != 1001 {
			t.Errorf("operation %d ran with fsuid %d fsgid %d, want 1000 1001", i, s.fsuid, s.fsgid)
		}
		if s.tid == syscall.Getpid() {
			t.Errorf("operation %d ran on the main thread", i)
		}
		if s.tid != seen[0].tid {
			t.Errorf("operation %d ran on thread %d, the first on %d: not reused", i, s.tid, seen[0].tid)
		}
	}
	// The executor's own identity is untouched on this goroutine's thread.
	if me := whoAmI(); me.fsuid != 0 || me.fsgid != 0 {
		t.Errorf("caller's thread has fsuid %d fsgid %d", me.fsuid, me.fsgid)
	}

	// Four at once: each waits until all four run, so each needs a
	// thread of its own.
	const n = 4
	var wg sync.WaitGroup
	var all sync.WaitGroup
	all.Add(n)
	tids := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := asAgent(c, func() error {
				tids[i] = whoAmI().tid
				all.Done()
				all.Wait()
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	distinct := map[int]bool{}
	for _, tid := range tids {
		distinct[tid] = true
	}
	if len(distinct) != n {
		t.Fatalf("%d operations at once ran on threads %v, want %d threads", n, tids, n)
	}
	agentThreads.mu.Lock()
	idle := len(agentThreads.idle[[2]int{1000, 1001}])
	agentThreads.mu.Unlock()
	if idle != maxIdleAgentThreads {
		t.Errorf("%d idle threads kept, want %d", idle, maxIdleAgentThreads)
	}
	// The others return to the runtime's threads, with the executor's
	// identity: every one of the four stays alive, and soon only the idle
	// ones keep the agent's.
	deadline := time.Now().Add(5 * time.Second)
	for {
		agentFS, problems := 0, []string{}
		for tid := range distinct {
			st, ok := threadStatus(tid)
			uid := st["Uid"]
			f := strings.Fields(uid)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("thread %d ended: it should be back among the runtime's threads", tid))
			case len(f) != 4 || f[0] != "0" || f[1] != "0" || f[2] != "0":
				problems = append(problems, fmt.Sprintf("thread %d: Uid %q, want real, effective and saved uid root's", tid, uid))
			case f[3] == "1000":
				agentFS++
			case f[3] != "0":
				problems = append(problems, fmt.Sprintf("thread %d: fs uid %s, want 1000 (idle) or 0 (returned)", tid, f[3]))
			}
		}
		if len(problems) > 0 {
			t.Fatal(strings.Join(problems, "; "))
		}
		if agentFS == maxIdleAgentThreads {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s %d of the %d threads keep the agent's fs uid, want %d (the idle ones)", agentFS, n, maxIdleAgentThreads)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A returned thread has root's groups back: fs gid 0 and the groups
	// of a thread that never took the agent's identity.
	want, err := threadGroups()
	if err != nil {
		t.Fatal(err)
	}
	for tid := range distinct {
		st, ok := threadStatus(tid)
		if !ok {
			continue
		}
		gid, groups := st["Gid"], st["Groups"]
		if strings.HasSuffix(gid, " 1001") {
			continue // idle, as the agent
		}
		var wantGroups []string
		for _, g := range want {
			wantGroups = append(wantGroups, strconv.Itoa(int(g)))
		}
		if gid != "0 0 0 0" || groups != strings.Join(wantGroups, " ") {
			t.Errorf("returned thread %d: Gid %q Groups %q, want 0 0 0 0 and %q", tid, gid, groups, strings.Join(wantGroups, " "))
		}
	}
}

// threadStatus returns the fields of thread tid's status file (values with
// their whitespace runs made single spaces), or ok false when the thread is
// gone.
func threadStatus(tid int) (fields map[string]string, ok bool) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return nil, false
	}
	fields = map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		fields[k] = strings.Join(strings.Fields(v), " ")
	}
	return fields, true
}

// TestAsAgentUID checks the thread asAgentUID runs fn on: while fn runs,
// its real and effective uid are the agent's, its saved uid root's, and it
// has no effective capability (so what it signals or removes is what the
// agent could); afterwards it is root again, with its capabilities, and
// still alive (back among the runtime's threads, not ended), and no thread
// of the process is left with another real, effective or saved uid.
func TestAsAgentUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, as the executor in a sandbox has")
	}
	c := &Cred{UID: 65534, GID: 65534}
	var tid int
	var during, capsDuring string
	err := asAgentUID(c, func() error {
		tid = syscall.Gettid()
		st, _ := threadStatus(tid)
		during, capsDuring = st["Uid"], st["CapEff"]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if during != "65534 65534 0 65534" || capsDuring != "0000000000000000" {
		t.Errorf("while fn ran: Uid %q CapEff %q, want real, effective and fs uid 65534, saved 0, no capability", during, capsDuring)
	}
	st, alive := threadStatus(tid)
	uid, caps := st["Uid"], st["CapEff"]
	if !alive {
		t.Fatalf("thread %d ended: it should be back among the runtime's threads", tid)
	}
	if uid != "0 0 0 0" || caps == "0000000000000000" {
		t.Errorf("thread %d afterwards: Uid %q CapEff %q, want root's with its capabilities", tid, uid, caps)
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		id, _ := strconv.Atoi(e.Name())
		// Idle agent threads of other tests keep their fs uid (the last).
		if st, ok := threadStatus(id); ok && !strings.HasPrefix(st["Uid"], "0 0 0 ") {
			t.Errorf("thread %d has Uid %q, want real, effective and saved uid root's", id, st["Uid"])
		}
	}
}
