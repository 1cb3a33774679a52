package docker_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// TestDirectCommandTwin runs command lines that the executor starts
// without the shell, and the same lines with a trailing ";", which makes
// them go through /bin/sh -c as before (dash forks even for a lone
// command, so the shell does the same with and without it), and checks
// that each pair ends alike: exit code, signal, stdout and stderr (the
// environment compared as a set: the shell exports it in an order of its
// own). It also checks that the first lines did start without the shell:
// their parent is the executor.
func TestDirectCommandTwin(t *testing.T) {
	p, _ := newProvider(t)
	sb := baseSandbox(t, p, sandbox.Spec{ShareUsr: true})
	ctx := t.Context()
	for name, body := range map[string]string{
		"segv.sh": "kill -SEGV $$\n", "term.sh": "echo before >&2; kill -TERM $$\n", "pipe.sh": "kill -PIPE $$\n",
		"int.sh": "kill -INT $$\n", "kill9.sh": "kill -KILL $$\n", "usr1.sh": "kill -USR1 $$\n",
		"noshebang": "echo from-script $0\n",
	} {
		if err := sb.WriteFile(ctx, name, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	type run struct {
		line string
		dir  string
		env  []string
	}
	for _, c := range []run{
		{line: "env"},
		{line: "env", env: []string{"PWD=/workspace/"}},
		{line: "env", env: []string{"PWD=/tmp"}},
		{line: "env", dir: "/tmp"},
		{line: "id"},
		{line: "/bin/echo a  b\tc"},
		{line: "cat /proc/self/cmdline"},
		{line: "grep -e Uid -e Gid -e Groups -e Cap -e NoNewPrivs -e Seccomp -e Sig /proc/self/status"},
		{line: "ls /proc/self/fd"},
		{line: "cat /proc/self/limits"},
		{line: "readlink /proc/self/cwd"},
		{line: "sh segv.sh"},
		{line: "sh term.sh"},
		{line: "sh pipe.sh"},
		{line: "sh int.sh"},
		{line: "sh kill9.sh"},
		{line: "sh usr1.sh"},
		{line: "/workspace/noshebang"},
		{line: "nosuchprogram --flag"},
		{line: "/usr/bin/false"},
		{line: "ls nonexistent-file"},
		{line: "python3 -c pass"},
	} {
		exec := func(line string) sandbox.ExecResult {
			r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", line}, Dir: c.dir, Env: c.env, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return r
		}
		direct, shell := exec(c.line), exec(c.line+";")
		out := func(r sandbox.ExecResult) string {
			if c.line == "env" {
				lines := strings.Split(string(r.Stdout), "\n")
				slices.Sort(lines)
				return strings.Join(lines, "\n")
			}
			return string(r.Stdout)
		}
		if direct.ExitCode != shell.ExitCode || direct.Signal != shell.Signal || out(direct) != out(shell) || string(direct.Stderr) != string(shell.Stderr) {
			t.Errorf("%q (dir %q, env %v):\n without the shell: exit %d signal %q stdout %q stderr %q\n through the shell: exit %d signal %q stdout %q stderr %q",
				c.line, c.dir, c.env, direct.ExitCode, direct.Signal, out(direct), direct.Stderr, shell.ExitCode, shell.Signal, out(shell), shell.Stderr)
		}
	}
	// The parent of a plain line's process is the executor; with the
	// ";" it is the shell, gone by the time its parent is looked at.
	parent := func(line string) string {
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", line}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%q: %+v %v", line, r, err)
		}
		f := strings.Fields(string(r.Stdout))
		if len(f) < 4 {
			t.Fatalf("%q: %q", line, r.Stdout)
		}
		comm, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"cat", "/proc/" + f[3] + "/comm"}, Priv: true})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(comm.Stdout))
	}
	if got := parent("cat /proc/self/stat"); got != "executor" {
		t.Errorf("a plain line's parent is %q, want the executor", got)
	}
	if got := parent("cat /proc/self/stat;"); got == "executor" {
		t.Errorf("a line with ; has the executor as its parent, want the shell")
	}
}
