package executor

import (
	"os"
	"strconv"
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
// their own, and that threads beyond maxIdleAgentThreads end.
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
	// The others end: of the four threads, only the idle ones stay.
	deadline := time.Now().Add(5 * time.Second)
	for {
		alive := 0
		for tid := range distinct {
			if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); err == nil {
				alive++
			}
		}
		if alive == maxIdleAgentThreads {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d threads still alive after 5 s, want %d", alive, n, maxIdleAgentThreads)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
