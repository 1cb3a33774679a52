package executor_test

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// orphanAfter is the idle timeout of these tests.
const orphanAfter = time.Second

// idleProc is a running `gymexec idle`; done is closed when it has exited
// with err.
type idleProc struct {
	done chan struct{}
	err  error
}

// startIdle starts `gymexec idle --orphan-after 1s`.
func startIdle(t *testing.T) (*idleProc, time.Time) {
	t.Helper()
	cmd := exec.Command(gymexecBinary(t), "idle", "--orphan-after", orphanAfter.String())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	p := &idleProc{done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p, started
}

// startServe starts `gymexec serve` on the host and returns the writer of
// its stdin; closing it ends the executor.
func startServe(t *testing.T) io.WriteCloser {
	t.Helper()
	cmd := exec.Command(gymexecBinary(t), "serve", "--workdir", t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	return stdin
}

// exitWithin waits up to d for idle to exit and fails unless it exited 0.
func exitWithin(t *testing.T, p *idleProc, d time.Duration) {
	t.Helper()
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("idle exited: %v", p.err)
		}
	case <-time.After(d):
		t.Fatalf("idle still running after %s", d)
	}
}

// runningFor fails unless idle is still running after d.
func runningFor(t *testing.T, p *idleProc, d time.Duration) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("idle exited (%v) although an executor serves", p.err)
	case <-time.After(d):
	}
}

func TestIdleOrphanExitsWithoutExecutor(t *testing.T) {
	done, started := startIdle(t)
	exitWithin(t, done, orphanAfter+5*time.Second)
	if took := time.Since(started); took < orphanAfter {
		t.Errorf("idle exited after %s, before its grace of %s", took, orphanAfter)
	}
}

func TestIdleOrphanWaitsForExecutor(t *testing.T) {
	stdin := startServe(t)
	done, _ := startIdle(t)
	runningFor(t, done, 3*orphanAfter)
	// The controller goes: the executor sees the end of its input.
	stdin.Close()
	exitWithin(t, done, orphanAfter+5*time.Second)
}

// TestIdleOrphanIgnoresImpostors checks that a process of another
// executable whose command line reads like the executor's does not keep
// idle alive.
func TestIdleOrphanIgnoresImpostors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "serve"), []byte("sleep 60\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// argv is ["/bin/sh", "serve"]: "serve" where idle expects the mode.
	fake := exec.Command("/bin/sh", "serve")
	fake.Dir = dir
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fake.Process.Kill()
		_ = fake.Wait()
	})
	done, _ := startIdle(t)
	exitWithin(t, done, orphanAfter+5*time.Second)
}

func TestIdleUsage(t *testing.T) {
	err := exec.Command(gymexecBinary(t), "idle", "--orphan-after", "soon").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("bad duration: %v, want exit status 2", err)
	}
}
