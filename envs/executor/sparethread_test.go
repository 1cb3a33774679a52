package executor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Locking the main goroutine in init keeps it on the main thread, so that
// TestMain starts there (see TestSpareThreadWithOneProc).
func init() { runtime.LockOSThread() }

// spareThreadCheck is set in the environment of the child process of
// TestSpareThreadWithOneProc.
const spareThreadCheck = "GYMSERVER_TEST_SPARE_THREAD"

func TestMain(m *testing.M) {
	if os.Getenv(spareThreadCheck) != "" {
		os.Exit(checkSpareThread())
	}
	os.Exit(m.Run())
}

// checkSpareThread calls onSpareThread from the main thread, unlocked,
// with one P, as the executor does (serve sets GOMAXPROCS=1): each call
// must run fn on another thread, promptly. It returns the exit status.
func checkSpareThread() int {
	runtime.GOMAXPROCS(1)
	runtime.UnlockOSThread()
	if syscall.Gettid() != syscall.Getpid() {
		fmt.Fprintln(os.Stderr, "TestMain is not on the main thread")
		return 4
	}
	for i := range 200 {
		tid := make(chan int, 1)
		onSpareThread(func() { tid <- syscall.Gettid() })
		select {
		case t := <-tid:
			if t == syscall.Getpid() {
				fmt.Fprintf(os.Stderr, "call %d ran on the main thread\n", i)
				return 2
			}
		case <-time.After(5 * time.Second):
			fmt.Fprintf(os.Stderr, "call %d: fn did not run within 5s\n", i)
			return 3
		}
	}
	return 0
}

// TestSpareThreadWithOneProc runs checkSpareThread in a child process
// (it needs the main thread and GOMAXPROCS=1 from the start). With one P,
// a goroutine that left the main thread to a new goroutine at once had
// that goroutine run on the main thread again, forever: every file
// operation as the agent and every KillAll hung the executor.
func TestSpareThreadWithOneProc(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), spareThreadCheck+"=1")
	done := make(chan error, 1)
	var out []byte
	go func() {
		var err error
		out, err = cmd.CombinedOutput()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("onSpareThread with GOMAXPROCS=1: %v\n%s", err, out)
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("onSpareThread with GOMAXPROCS=1: the check did not end within 2 minutes")
	}
}
