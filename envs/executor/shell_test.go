package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// inShell runs a command line in the executor's persistent shell.
func inShell(t *testing.T, c *executor.Client, cmd string, timeout time.Duration) sandbox.ExecResult {
	t.Helper()
	r, err := c.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{cmd}, Shell: true, Timeout: timeout})
	if err != nil {
		t.Fatalf("%q: %v", cmd, err)
	}
	return r
}

// TestShellKeepsState runs commands one after the other in the persistent
// shell: the working directory, exported and plain variables and functions
// stay; output, stderr and exit codes are each command's own, byte for
// byte, whatever the command's quoting.
func TestShellKeepsState(t *testing.T) {
	c, work := subprocess(t)
	if err := os.Mkdir(filepath.Join(work, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		cmd            string
		exit           int
		stdout, stderr string
	}{
		{"pwd", 0, work + "\n", ""},
		{"cd sub && export GYM_A='x y' && B=2 && f() { echo \"f:$1\"; }", 0, "", ""},
		{"pwd; echo \"$GYM_A\" $B; f z; sh -c 'echo child:$GYM_A'", 0, work + "/sub\nx y 2\nf:z\nchild:x y\n", ""},
		{"printf 'no newline'", 0, "no newline", ""},
		{"printf 'two\\n\\n'", 0, "two\n\n", ""},
		{"echo out; echo err >&2; false", 1, "out\n", "err\n"},
		{`echo "it's" 'a "quote"' $'\x27'; echo '\'`, 0, "it's a \"quote\" '\n\\\n", ""},
		{"echo 'unterminated", 2, "", ""}, // a syntax error of the command's own
		{"(exit 7)", 7, "", ""},
		{"read x; echo \"read:$x:$?\"", 0, "read::1\n", ""}, // stdin is /dev/null
		{"echo still here; pwd", 0, "still here\n" + work + "/sub\n", ""},
	}
	for _, s := range steps {
		r := inShell(t, c, s.cmd, 10*time.Second)
		stderr := string(r.Stderr)
		if s.cmd == "echo 'unterminated" {
			// The shell's own wording; only that there is one.
			if stderr == "" {
				t.Errorf("%q: no syntax error on stderr", s.cmd)
			}
			stderr = ""
		}
		if r.ExitCode != s.exit || string(r.Stdout) != s.stdout || stderr != s.stderr || r.TimedOut {
			t.Errorf("%q: exit %d stdout %q stderr %q timed out %v; want exit %d stdout %q stderr %q",
				s.cmd, r.ExitCode, r.Stdout, r.Stderr, r.TimedOut, s.exit, s.stdout, s.stderr)
		}
	}
	// An explicit directory is changed to, and stays.
	r, err := c.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"pwd"}, Shell: true, Dir: work})
	if err != nil || string(r.Stdout) != work+"\n" {
		t.Errorf("pwd in %s: %q %v", work, r.Stdout, err)
	}
	if r := inShell(t, c, "pwd", 0); string(r.Stdout) != work+"\n" {
		t.Errorf("pwd after: %q", r.Stdout)
	}
}

// TestShellTimeout checks that a timeout kills the command's processes
// (also one in the background and a grandchild) and keeps the shell with
// its state; that a shell stuck in a builtin loop, or that exits, is
// replaced by a fresh one; and that output is capped.
func TestShellTimeout(t *testing.T) {
	c, work := subprocess(t)
	inShell(t, c, "export GYM_KEEP=1; cd /", 0)
	start := time.Now()
	r := inShell(t, c, "sleep 60 & echo $! > "+work+"/bg; sh -c 'sleep 61' & echo started; sleep 62", 500*time.Millisecond)
	if !r.TimedOut || r.ExitCode != -1 || r.Signal != "SIGKILL" || string(r.Stdout) != "started\n" {
		t.Errorf("timed-out command: %+v", r)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("timeout took %s", el)
	}
	bg, _ := os.ReadFile(filepath.Join(work, "bg"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(bg)))
	if err != nil {
		t.Fatalf("background pid %q", bg)
	}
	waitGone(t, []int{pid})
	if r := inShell(t, c, `echo "$GYM_KEEP" "$PWD"`, 5*time.Second); string(r.Stdout) != "1 /\n" {
		t.Errorf("state after a timeout: %q, want it kept", r.Stdout)
	}

	// A loop of builtins runs in the shell itself: the shell goes.
	r = inShell(t, c, "while :; do :; done", 300*time.Millisecond)
	if !r.TimedOut || r.ExitCode != -1 {
		t.Errorf("builtin loop: %+v", r)
	}
	if r := inShell(t, c, `echo "[$GYM_KEEP]"; pwd`, 5*time.Second); string(r.Stdout) != "[]\n"+work+"\n" {
		t.Errorf("after a stuck shell: %q, want a fresh shell in the workdir", r.Stdout)
	}

	// exit ends the shell with its status; the next command gets a new one.
	if r := inShell(t, c, "echo bye; exit 3", 5*time.Second); r.ExitCode != 3 || string(r.Stdout) != "bye\n" {
		t.Errorf("exit 3: %+v", r)
	}
	if r := inShell(t, c, "echo again", 5*time.Second); string(r.Stdout) != "again\n" || r.ExitCode != 0 {
		t.Errorf("after exit: %+v", r)
	}

	// Output beyond the cap: head and tail, the middle counted.
	r, err = c.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"head -c 100000 /dev/zero | tr '\\0' a; echo; echo end"},
		Shell: true, MaxOutput: 1000})
	if err != nil || len(r.Stdout) != 1000 || r.StdoutDropped != 100005-1000 || !strings.HasSuffix(string(r.Stdout), "a\nend\n") {
		t.Errorf("capped: %d bytes, %d dropped, %v", len(r.Stdout), r.StdoutDropped, err)
	}
}

// TestShellCancel checks that a cancelled call stops its command and that
// requests the shell cannot serve are refused.
func TestShellCancel(t *testing.T) {
	c, work := subprocess(t)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo $$ > " + work + "/pid; exec sleep 60"}, Shell: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled: %v", err)
	}
	// The shell replaced itself by sleep (exec): the cancel kills it.
	if r := inShell(t, c, "echo next", 10*time.Second); string(r.Stdout) != "next\n" {
		t.Errorf("after cancel: %+v", r)
	}
	for _, req := range []sandbox.ExecRequest{
		{Argv: []string{"echo", "hi"}, Shell: true},
		{Argv: []string{"echo hi"}, Shell: true, Background: true},
		{Argv: []string{"echo hi"}, Shell: true, Env: []string{"A=1"}},
		{Argv: []string{"echo \x00"}, Shell: true},
	} {
		if _, err := c.Exec(t.Context(), req); !errors.Is(err, gym.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want invalid argument", req, err)
		}
	}
}

// BenchmarkShellEchoLocal is BenchmarkExecEchoLocal through the
// persistent shell: the builtin echo, and /bin/echo.
func BenchmarkShellEchoLocal(b *testing.B) {
	c, _ := subprocess(b)
	ctx := context.Background()
	for _, cmd := range []string{"echo hi", "/bin/echo hi"} {
		b.Run(strings.ReplaceAll(cmd, " ", "_"), func(b *testing.B) {
			for b.Loop() {
				r, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{cmd}, Shell: true})
				if err != nil || string(r.Stdout) != "hi\n" {
					b.Fatalf("exec: %+v %v", r, err)
				}
			}
		})
	}
}
