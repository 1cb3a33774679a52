package executor

import (
	"bytes"
	"context"
	"log/slog"
	"syscall"
	"testing"
	"time"
)

// testServer is a server for calling exec directly; its process groups
// are killed when the test ends.
func testServer(t *testing.T) *server {
	t.Helper()
	s := &server{opts: Options{WorkDir: t.TempDir()}, log: slog.New(slog.DiscardHandler), groups: map[int]bool{},
		running: map[uint64]context.CancelFunc{}, held: map[uint64][]byte{}, shellTurn: make(chan struct{}, 1)}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for pgid := range s.groups {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	return s
}

// slowCapture makes every capture write take d for the rest of the test.
func slowCapture(t *testing.T, d time.Duration) {
	captureWriteDelay = d
	t.Cleanup(func() { captureWriteDelay = 0 })
}

func TestStarvedReaderKeepsOutput(t *testing.T) {
	// The reader is slow and a background process holds stdout and stderr
	// open after the command exits: what the command wrote before it exited
	// must all arrive, and the call must not wait for the holder.
	// A pipe holds 64 KiB and a read takes at most 32 KiB: at least two
	// slow writes remain when the command exits, more than waitDelay.
	slowCapture(t, 400*time.Millisecond)
	s := testServer(t)
	const chunks, chunk = 24, 4096 // 96 KiB on each stream, under the cap
	script := "i=0; while [ $i -lt 24 ]; do head -c 4096 /dev/zero | tr '\\0' o; head -c 4096 /dev/zero | tr '\\0' e >&2; i=$((i+1)); done; sleep 10 &"
	start := time.Now()
	resp := s.exec(t.Context(), request{ID: 1, Argv: []string{"/bin/sh", "-c", script}, MaxOutput: 256 << 10})
	took := time.Since(start)
	if resp.Err != "" || resp.ExitCode != 0 {
		t.Fatalf("exec: exit %d, err %q", resp.ExitCode, resp.Err)
	}
	if want := bytes.Repeat([]byte("o"), chunks*chunk); !bytes.Equal(resp.Stdout, want) || resp.StdoutDropped != 0 {
		t.Errorf("stdout: got %d bytes (%d dropped), want %d", len(resp.Stdout), resp.StdoutDropped, len(want))
	}
	if want := bytes.Repeat([]byte("e"), chunks*chunk); !bytes.Equal(resp.Stderr, want) || resp.StderrDropped != 0 {
		t.Errorf("stderr: got %d bytes (%d dropped), want %d", len(resp.Stderr), resp.StderrDropped, len(want))
	}
	if took > 6*time.Second {
		t.Errorf("exec took %v: it waited for the background holder", took)
	}
	t.Logf("exec took %v", took)
}

func TestBackgroundHolderDoesNotHoldCall(t *testing.T) {
	// A background process keeps the output pipes open: the call returns
	// about waitDelay after the command exits, with the output written
	// before and none of what the holder writes later.
	s := testServer(t)
	start := time.Now()
	resp := s.exec(t.Context(), request{ID: 1, Argv: []string{"/bin/sh", "-c", "echo before; (sleep 2; echo late; echo late >&2) & echo err >&2"}})
	took := time.Since(start)
	if resp.Err != "" || resp.ExitCode != 0 {
		t.Fatalf("exec: exit %d, err %q", resp.ExitCode, resp.Err)
	}
	if string(resp.Stdout) != "before\n" || string(resp.Stderr) != "err\n" {
		t.Errorf("stdout %q, stderr %q", resp.Stdout, resp.Stderr)
	}
	if took < waitDelay || took > waitDelay+time.Second {
		t.Errorf("exec took %v, want about waitDelay (%v)", took, waitDelay)
	}
}

func TestShellExitKeepsOutput(t *testing.T) {
	// A command that ends the persistent shell (`exit`): what it wrote
	// before must all arrive, slow consumer or not, with the shell's status.
	slowCapture(t, 100*time.Millisecond)
	s := testServer(t)
	t.Cleanup(s.closeShell)
	script := "i=0; while [ $i -lt 8 ]; do head -c 4096 /dev/zero | tr '\\0' o; echo e >&2; i=$((i+1)); done; exit 3"
	resp := s.shellExec(t.Context(), request{ID: 1, Argv: []string{script}, Shell: true})
	if resp.Err != "" || resp.ExitCode != 3 {
		t.Fatalf("exec: exit %d, err %q", resp.ExitCode, resp.Err)
	}
	if want := bytes.Repeat([]byte("o"), 8*4096); !bytes.Equal(resp.Stdout, want) {
		t.Errorf("stdout: got %d bytes, want %d", len(resp.Stdout), len(want))
	}
	if want := bytes.Repeat([]byte("e\n"), 8); !bytes.Equal(resp.Stderr, want) {
		t.Errorf("stderr: got %q, want %q", resp.Stderr, want)
	}
}

func TestShellExitWithHolder(t *testing.T) {
	// The command leaves a process holding the shell's pipes and ends the
	// shell: the call returns about waitDelay later with the output and
	// the shell's status, not when the holder ends.
	slowCapture(t, 100*time.Millisecond)
	s := testServer(t)
	t.Cleanup(s.closeShell)
	start := time.Now()
	resp := s.shellExec(t.Context(), request{ID: 1, Argv: []string{"echo a; echo b >&2; sleep 10 & exit 4"}, Shell: true})
	took := time.Since(start)
	if resp.Err != "" || resp.ExitCode != 4 {
		t.Fatalf("exec: exit %d, err %q", resp.ExitCode, resp.Err)
	}
	if string(resp.Stdout) != "a\n" || string(resp.Stderr) != "b\n" {
		t.Errorf("stdout %q, stderr %q", resp.Stdout, resp.Stderr)
	}
	if took > waitDelay+2*time.Second {
		t.Errorf("exec took %v: it waited for the holder", took)
	}
	t.Logf("exec took %v", took)
}
